// The Gemma 4 tokenizer (SentencePiece-style BPE, tokenizer.ggml.model = "gemma4") and the
// special-token rule llama.cpp applies to every vocabulary: only tokens that stay user-defined
// are matched in plain text; control tokens (including the ones llama.cpp promotes to control
// because they end generation, such as Phi-3's "</s>") only with parse_special.
// llama.cpp's own test vectors for Gemma 4 are checked in vocab_files_test.cc; the cases here
// cover what those vectors do not (Japanese, code, byte fallback, special tokens) by structure:
// expected ids are derived from the vocabulary, not copied from a reference run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tok_test_util.h"

namespace ts::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

constexpr const char* kGemma4 = "models/llama.cpp-vocab/ggml-vocab-gemma-4.gguf";
constexpr const char* kPhi3 = "models/llama.cpp-vocab/ggml-vocab-phi-3.gguf";

int32_t id_of(const Tokenizer& tok, const std::string& piece) {
  auto id = tok.find_piece(piece);
  EXPECT_TRUE(id.has_value()) << "no piece " << piece;
  return id.value_or(-1);
}

TEST(Gemma4Tokenizer, LoadsAsSentencePieceStyleBpe) {
  TS_LOAD_TOKENIZER(tok, kGemma4);
  EXPECT_EQ(tok->model_type(), "gemma4");
  EXPECT_EQ(tok->pre_type(), "gemma4");
  EXPECT_EQ(tok->n_vocab(), 262144);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_FALSE(tok->add_space_prefix());
  EXPECT_EQ(tok->bos_id(), 2);
  EXPECT_EQ(tok->eos_id(), 1);
  const Ids ids = tok->encode("Hello", /*add_special=*/true, false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), 2);
}

TEST(Gemma4Tokenizer, SpacesAreEscapedAndMergedLikeSentencePiece) {
  TS_LOAD_TOKENIZER(tok, kGemma4);
  // No space prefix: "def" alone is the bare piece, " def" the '▁'-prefixed one.
  EXPECT_EQ(tok->encode("def", false, false), Ids{id_of(*tok, "def")});
  EXPECT_EQ(tok->encode(" def", false, false), Ids{id_of(*tok, "\xE2\x96\x81" "def")});
  // Four spaces of indentation merge into one piece (a byte-level BPE would not know '▁').
  const std::string four = "\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81";
  const Ids indented = tok->encode("    return", false, false);
  ASSERT_FALSE(indented.empty());
  EXPECT_EQ(tok->piece(indented[0]).substr(0, four.size()), four) << tok->piece(indented[0]);
  // A run of newlines that is itself a piece is taken whole.
  EXPECT_EQ(tok->encode("\n\n\n", false, false), Ids{id_of(*tok, "\n\n\n")});
  EXPECT_EQ(tok->encode("\n", false, false), Ids{id_of(*tok, "\n")});
}

TEST(Gemma4Tokenizer, JapaneseChineseAndCodeRoundTripWithoutByteFallback) {
  TS_LOAD_TOKENIZER(tok, kGemma4);
  const std::string texts[] = {
      "こんにちは、世界。日本語のテキストです。",
      "我想在北京工作",
      "def add(a, b):\n    return a + b  # sum\n",
      "for (int i = 0; i < n; ++i) { total += v[i]; }",
      "emoji \xF0\x9F\x98\x81 and \xF0\x9F\x9A\x80",  // 😁 🚀 (🦙 has no piece: see below)
  };
  for (const std::string& s : texts) {
    SCOPED_TRACE(s);
    const Ids ids = tok->encode(s, false, false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(tok->decode(ids), s);
    for (int32_t id : ids) {
      // Byte tokens are ids 238..493 (<0x00>..<0xFF>); all of these texts are in the vocabulary.
      EXPECT_FALSE(id >= 238 && id < 238 + 256) << "byte fallback for id " << id;
    }
  }
  // A whole common word is one piece.
  EXPECT_EQ(tok->encode("こんにちは", false, false), Ids{id_of(*tok, "こんにちは")});
  EXPECT_EQ(tok->encode("日本", false, false), Ids{id_of(*tok, "日本")});
}

TEST(Gemma4Tokenizer, UnknownCharactersFallBackToByteTokens) {
  TS_LOAD_TOKENIZER(tok, kGemma4);
  // U+10FFFD (plane-16 private use) has no piece: its four UTF-8 bytes become <0xNN> tokens.
  const std::string s = "\xF4\x8F\xBF\xBD";
  const Ids ids = tok->encode(s, false, false);
  ASSERT_EQ(ids.size(), 4u);
  const uint8_t bytes[] = {0xF4, 0x8F, 0xBF, 0xBD};
  for (size_t i = 0; i < 4; ++i) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", bytes[i]);
    EXPECT_EQ(ids[i], id_of(*tok, name));
  }
  EXPECT_EQ(tok->decode(ids), s);
  // A byte that is not UTF-8 is its own byte token (and round-trips).
  EXPECT_EQ(tok->encode("a\xFF", false, false), (Ids{id_of(*tok, "a"), id_of(*tok, "<0xFF>")}));
  // 🦙 has no piece either: its bytes F0 9F A6 99 are byte tokens too.
  const Ids llama = tok->encode("\xF0\x9F\xA6\x99", false, false);
  EXPECT_EQ(llama, (Ids{id_of(*tok, "<0xF0>"), id_of(*tok, "<0x9F>"), id_of(*tok, "<0xA6>"),
                        id_of(*tok, "<0x99>")}));
}

TEST(Gemma4Tokenizer, SpecialTokens) {
  TS_LOAD_TOKENIZER(tok, kGemma4);
  const int32_t turn = id_of(*tok, "<|turn>");              // control
  const int32_t tool_call = id_of(*tok, "<|tool_call>");    // user-defined
  const int32_t tool_resp = id_of(*tok, "<|tool_response>");  // user-defined, but ends generation
  // Control tokens are text unless parse_special.
  EXPECT_EQ(tok->encode("<|turn>user", false, true).front(), turn);
  const Ids plain = tok->encode("<|turn>user", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), turn), 0);
  EXPECT_EQ(tok->decode(plain), "<|turn>user");
  // User-defined tokens are always matched...
  EXPECT_EQ(tok->encode("<|tool_call>", false, false), Ids{tool_call});
  // ...except those llama.cpp promotes to control as end-of-generation tokens.
  EXPECT_TRUE(tok->is_eog(tool_resp));
  EXPECT_TRUE(tok->is_control(tool_resp));
  EXPECT_NE(tok->encode("<|tool_response>", false, false), Ids{tool_resp});
  EXPECT_EQ(tok->encode("<|tool_response>", false, true), Ids{tool_resp});
  // End of generation: <eos>, <turn|>; "</s>" is ordinary text in this vocabulary.
  EXPECT_TRUE(tok->is_eog(1));
  EXPECT_TRUE(tok->is_eog(id_of(*tok, "<turn|>")));
  EXPECT_FALSE(tok->is_eog(turn));
  const int32_t s_close = id_of(*tok, "</s>");
  EXPECT_FALSE(tok->is_eog(s_close));
  EXPECT_FALSE(tok->is_control(s_close));
}

TEST(SpecialTokenRule, Phi3EndOfSentenceIsPlainTextUnlessParseSpecial) {
  // Phi-3 stores "</s>" (id 2) as user-defined; llama.cpp promotes it to control because it
  // ends generation, so plain text never turns into id 2.
  TS_LOAD_TOKENIZER(tok, kPhi3);
  ASSERT_EQ(tok->piece(2), "</s>");
  const Ids plain = tok->encode("Hello </s> world", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(tok->decode(plain), "Hello </s> world");
  const Ids special = tok->encode("Hello </s> world", false, true);
  EXPECT_EQ(std::count(special.begin(), special.end(), 2), 1);
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_TRUE(tok->is_control(2));
}

TEST(SpecialTokenRule, FillInTheMiddleTokensArePromotedToControl) {
  // DeepSeek-Coder stores its FIM markers as user-defined; llama.cpp finds them by text and
  // makes them control, so they are plain text unless parse_special.
  TS_LOAD_TOKENIZER(tok, "models/llama.cpp-vocab/ggml-vocab-deepseek-coder.gguf");
  const std::string begin = "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>";  // <｜fim▁begin｜>
  const int32_t id = id_of(*tok, begin);
  EXPECT_EQ(id, 32016);
  EXPECT_TRUE(tok->is_control(id));
  EXPECT_NE(tok->encode(begin, false, false), Ids{id});
  EXPECT_EQ(tok->encode(begin, false, true), Ids{id});
  // FIM pad/repo/separator tokens also end generation (StarCoder's <fim_pad>).
  TS_LOAD_TOKENIZER(star, "models/llama.cpp-vocab/ggml-vocab-starcoder.gguf");
  EXPECT_TRUE(star->is_eog(id_of(*star, "<fim_pad>")));
  EXPECT_FALSE(star->is_eog(id_of(*star, "<fim_prefix>")));
}

}  // namespace
}  // namespace ts::tokenizer
