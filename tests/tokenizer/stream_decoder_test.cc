// StreamDecoder: incremental detokenization never emits broken UTF-8 and adds up to decode().
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tok_test_util.h"
#include "tokenizer/unicode.h"

namespace ts::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

const std::string kText =
    "我想在apple工作1314151天～ 🦙🚀 😶\u200d🌫️ Füße, нещо на Български, "
    "កាន់តែពិសេស and ✅ done";

bool is_valid_utf8(const std::string& s) { return internal::utf8_sanitize(s) == s; }

// Pushes every id; checks each chunk is valid UTF-8; returns the concatenation.
std::string stream(const Tokenizer& tok, const Ids& ids, StreamDecoder::Options opts,
                   size_t* num_held = nullptr) {
  StreamDecoder dec(tok, opts);
  std::string all;
  size_t held = 0;
  for (int32_t id : ids) {
    const std::string chunk = dec.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk)) << "broken UTF-8 after id " << id;
    if (chunk.size() < tok.token_bytes(id).size()) ++held;
    all += chunk;
  }
  const std::string tail = dec.finish();
  EXPECT_TRUE(is_valid_utf8(tail));
  all += tail;
  if (num_held != nullptr) *num_held = held;
  return all;
}

TEST(StreamDecoder, ByteLevelBpeSplitsCharactersAcrossTokens) {
  for (const char* name : {"qwen2", "llama-bpe", "gpt-2"}) {
    SCOPED_TRACE(name);
    TS_LOAD_TOKENIZER(tok, std::string("models/llama.cpp-vocab/ggml-vocab-") + name + ".gguf");
    const Ids ids = tok->encode(kText, false, false);
    // The test only means something if some token ends inside a character.
    size_t num_partial = 0;
    for (int32_t id : ids) num_partial += is_valid_utf8(tok->token_bytes(id)) ? 0 : 1;
    EXPECT_GT(num_partial, 0u);

    size_t held = 0;
    EXPECT_EQ(stream(*tok, ids, {}, &held), tok->decode(ids));
    EXPECT_GT(held, 0u);
    EXPECT_EQ(stream(*tok, ids, {.text_start = true}), kText);
  }
}

TEST(StreamDecoder, SentencePieceByteFallback) {
  TS_LOAD_TOKENIZER(tok, "models/stories260K/stories260K-f32.gguf");
  const Ids ids = tok->encode(kText, false, false);
  // stories260K has only 512 pieces: Chinese and emoji become <0xNN> byte tokens.
  size_t num_bytes = 0;
  for (int32_t id : ids) num_bytes += tok->piece(id).starts_with("<0x") ? 1 : 0;
  EXPECT_GT(num_bytes, 40u);

  // At the start of a text the SentencePiece prefix space goes, exactly as decode() does.
  EXPECT_EQ(stream(*tok, ids, {.text_start = true}), tok->decode(ids));
  EXPECT_EQ(tok->decode(ids), kText);
  // As a continuation the leading space is part of the generated text.
  EXPECT_EQ(stream(*tok, ids, {}), " " + kText);

  // A BOS first: its text, then the first piece still loses its prefix space.
  Ids with_bos = tok->encode(kText, true, false);
  ASSERT_EQ(with_bos.front(), tok->bos_id());
  EXPECT_EQ(stream(*tok, with_bos, {.text_start = true}), tok->decode(with_bos));
}

TEST(StreamDecoder, HoldsBackThenReplacesBrokenSequences) {
  TS_LOAD_TOKENIZER(tok, "models/stories260K/stories260K-f32.gguf");
  auto byte = [&](int b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    return tok->find_piece(buf).value();
  };
  StreamDecoder dec(*tok);
  // "中" = E4 B8 AD, fed one byte at a time.
  EXPECT_EQ(dec.push(byte(0xE4)), "");
  EXPECT_EQ(dec.push(byte(0xB8)), "");
  EXPECT_EQ(dec.push(byte(0xAD)), "中");
  // E4 B8 followed by 'A': the broken prefix is replaced as soon as 'A' shows it cannot finish.
  EXPECT_EQ(dec.push(byte(0xE4)), "");
  EXPECT_EQ(dec.push(byte(0xB8)), "");
  EXPECT_EQ(dec.push(byte('A')), "\xEF\xBF\xBD" "A");
  // A stray continuation byte is replaced at once.
  EXPECT_EQ(dec.push(byte(0x80)), "\xEF\xBF\xBD");
  // An incomplete 4-byte emoji at the end is flushed by finish() as one U+FFFD.
  EXPECT_EQ(dec.push(byte(0xF0)), "");
  EXPECT_EQ(dec.push(byte(0x9F)), "");
  EXPECT_EQ(dec.finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.finish(), "");
  // After finish() the decoder is reusable.
  EXPECT_EQ(dec.push(byte('z')), "z");
}

}  // namespace
}  // namespace ts::tokenizer
