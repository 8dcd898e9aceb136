// Tokenizer behaviour on real vocabularies (special tokens, BOS/EOS defaults, EOG, decoding)
// and on small synthetic GGUFs built in memory (merge order, byte fallback, errors).
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "tok_test_util.h"

namespace ts::tokenizer {
namespace {

using gguf::Value;
using Ids = std::vector<int32_t>;

constexpr const char* kVocabDir = "models/llama.cpp-vocab/";

std::string vocab(const char* name) { return std::string(kVocabDir) + "ggml-vocab-" + name + ".gguf"; }

// A tokenizer from metadata only (no tensors).
Result<std::unique_ptr<Tokenizer>> build(std::vector<std::pair<std::string, Value>> kv,
                                          std::unique_ptr<gguf::GgufFile>* keep) {
  gguf::GgufWriter w;
  for (auto& [k, v] : kv) w.set(k, std::move(v));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = gguf::GgufFile::from_bytes(bytes);
  if (!f.ok()) return f.status();
  *keep = std::move(f).value();
  return Tokenizer::from_gguf(**keep);
}

// --- Special tokens --------------------------------------------------------------------------

TEST(Tokenizer, ParseSpecialSplitsControlTokens) {
  TS_LOAD_TOKENIZER(tok, vocab("qwen2"));
  const int32_t im_start = tok->find_piece("<|im_start|>").value();
  const int32_t im_end = tok->find_piece("<|im_end|>").value();
  EXPECT_EQ(im_start, 151644);
  EXPECT_EQ(im_end, 151645);

  const std::string text = "<|im_start|>user\nHi there<|im_end|>";
  const Ids ids = tok->encode(text, false, /*parse_special=*/true);
  Ids expected{im_start};
  const Ids middle = tok->encode("user\nHi there", false, false);
  expected.insert(expected.end(), middle.begin(), middle.end());
  expected.push_back(im_end);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tok->decode(ids), text);

  // As plain text the markers are ordinary characters.
  const Ids plain = tok->encode(text, false, /*parse_special=*/false);
  for (int32_t id : plain) {
    EXPECT_NE(id, im_start);
    EXPECT_NE(id, im_end);
    EXPECT_FALSE(tok->is_control(id));
  }
  EXPECT_GT(plain.size(), ids.size());
  EXPECT_EQ(tok->decode(plain), text);
}

TEST(Tokenizer, LongestSpecialTokenWins) {
  TS_LOAD_TOKENIZER(tok, vocab("refact"));
  // "<fim_prefix>" and "<fim_pad>" share a prefix; each is matched whole.
  const int32_t prefix = tok->find_piece("<fim_prefix>").value();
  const int32_t pad = tok->find_piece("<fim_pad>").value();
  const Ids ids = tok->encode("<fim_prefix><fim_pad>x<fim_prefix>", false, true);
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0], prefix);
  EXPECT_EQ(ids[1], pad);
  EXPECT_EQ(ids[3], prefix);
}

TEST(Tokenizer, UserDefinedTokensMatchEvenWithoutParseSpecial) {
  // MPT's vocabulary has user-defined runs of spaces; llama.cpp (like Hugging Face's added
  // tokens) matches them before the pre-tokenizer, whatever parse_special says.
  TS_LOAD_TOKENIZER(tok, vocab("mpt"));
  const int32_t spaces24 = tok->find_piece(std::string(24, ' ')).value();
  EXPECT_EQ(tok->encode(std::string(24, ' '), false, false), Ids{spaces24});
  const Ids ids = tok->encode("a" + std::string(24, ' ') + "b", false, false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], spaces24);
}

TEST(Tokenizer, SpmSpacePrefixAfterSpecialToken) {
  TS_LOAD_TOKENIZER(tok, vocab("llama-spm"));
  // "Hello world" is 15043 3186 in llama.cpp's test vectors ('▁Hello', '▁world').
  EXPECT_EQ(tok->encode("Hello world", false, false), (Ids{15043, 3186}));
  // Text after a special token gets the space prefix again, as in llama.cpp.
  EXPECT_EQ(tok->encode("Hello<s>world", false, true), (Ids{15043, 1, 3186}));
  EXPECT_EQ(tok->encode("Hello world", true, false), (Ids{1, 15043, 3186}));
  // Plain-text "<s>" never becomes the control token.
  const Ids plain = tok->encode("<s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok->decode(plain), "<s>");
  EXPECT_TRUE(tok->encode("", true, true) == Ids{1});
  EXPECT_TRUE(tok->encode("", false, false).empty());
}

TEST(Tokenizer, Phi3SpecialTokensSwallowFollowingWhitespace) {
  // llama.cpp marks Phi-3's special tokens rstrip (by general.name): the newline after
  // "<|user|>" disappears, and the text after it gets the SentencePiece space prefix.
  TS_LOAD_TOKENIZER(tok, vocab("phi-3"));
  const int32_t user = tok->find_piece("<|user|>").value();
  const int32_t end = tok->find_piece("<|end|>").value();
  const int32_t assistant = tok->find_piece("<|assistant|>").value();
  Ids expected{user};
  const Ids hi = tok->encode("Hi", false, false);
  expected.insert(expected.end(), hi.begin(), hi.end());
  expected.push_back(end);
  expected.push_back(assistant);
  EXPECT_EQ(tok->encode("<|user|>\nHi<|end|>\n<|assistant|>\n", false, true), expected);
  // Other vocabularies keep the whitespace.
  TS_LOAD_TOKENIZER(qwen, vocab("qwen2"));
  const Ids q = qwen->encode("<|im_start|>\nHi", false, true);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(qwen->token_bytes(q[1]), "\n");
}

// --- BOS/EOS defaults and EOG ------------------------------------------------------------------

TEST(Tokenizer, AddBosDefaultsFollowLlamaCpp) {
  struct Case {
    const char* name;
    bool add_bos;
    int32_t bos;
  };
  const Case cases[] = {
      {"llama-spm", true, 1},           // SentencePiece: BOS by default (and by key)
      {"llama-bpe", true, 128000},      // llama3 pre-tokenizer: BOS without a key
      {"qwen2", false, 151643},         // gpt2 BPE without a key: no BOS
      {"gpt-2", false, 50256},          //
      {"deepseek-llm", true, 100000},   // gpt2 BPE with add_bos_token = true
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TS_LOAD_TOKENIZER(tok, vocab(c.name));
    EXPECT_EQ(tok->add_bos(), c.add_bos);
    EXPECT_FALSE(tok->add_eos());
    EXPECT_EQ(tok->bos_id(), c.bos);
    const Ids ids = tok->encode("Hi", /*add_special=*/true, false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front() == c.bos, c.add_bos);
  }
}

TEST(Tokenizer, EndOfGeneration) {
  {
    TS_LOAD_TOKENIZER(tok, vocab("qwen2"));
    EXPECT_TRUE(tok->is_eog(151643));   // <|endoftext|> (eos)
    EXPECT_TRUE(tok->is_eog(151645));   // <|im_end|>
    EXPECT_FALSE(tok->is_eog(151644));  // <|im_start|>
    EXPECT_TRUE(tok->is_control(151644));
    EXPECT_FALSE(tok->is_eog(872));
    EXPECT_FALSE(tok->is_eog(-1));
    EXPECT_FALSE(tok->is_eog(tok->n_vocab()));
  }
  {
    TS_LOAD_TOKENIZER(tok, vocab("llama-bpe"));
    EXPECT_TRUE(tok->is_eog(tok->find_piece("<|eot_id|>").value()));
    EXPECT_TRUE(tok->is_eog(tok->find_piece("<|end_of_text|>").value()));
    EXPECT_TRUE(tok->is_eog(tok->eos_id()));
    EXPECT_FALSE(tok->is_eog(tok->bos_id()));
    EXPECT_FALSE(tok->is_eog(tok->find_piece("<|start_header_id|>").value()));
  }
  {
    TS_LOAD_TOKENIZER(tok, vocab("phi-3"));
    EXPECT_TRUE(tok->is_eog(tok->find_piece("<|end|>").value()));
    EXPECT_TRUE(tok->is_eog(32000));  // eos <|endoftext|>
    EXPECT_FALSE(tok->is_eog(tok->find_piece("<|user|>").value()));
  }
}

// --- Decoding --------------------------------------------------------------------------------

TEST(Tokenizer, TokenBytesAndPieces) {
  {
    TS_LOAD_TOKENIZER(tok, "models/stories260K/stories260K-f32.gguf");
    const int32_t byte_a = tok->find_piece("<0x41>").value();
    EXPECT_EQ(tok->token_bytes(byte_a), "A");
    EXPECT_EQ(tok->piece(byte_a), "<0x41>");
    EXPECT_EQ(tok->token_bytes(3 + 0xE4), "\xE4");
    EXPECT_EQ(tok->token_bytes(1), "<s>");  // control tokens render as their text
    EXPECT_EQ(tok->token_bytes(-5), "");
    EXPECT_EQ(tok->piece(100000), "");
  }
  {
    TS_LOAD_TOKENIZER(tok, vocab("llama-spm"));
    EXPECT_EQ(tok->piece(15043), "\xE2\x96\x81Hello");
    EXPECT_EQ(tok->token_bytes(15043), " Hello");
  }
  {
    TS_LOAD_TOKENIZER(tok, vocab("gpt-2"));
    const int32_t the = tok->find_piece("\xC4\xA0the").value();  // "Ġthe"
    EXPECT_EQ(tok->token_bytes(the), " the");
    const int32_t nl = tok->find_piece("\xC4\x8A").value();      // "Ċ"
    EXPECT_EQ(tok->token_bytes(nl), "\n");
    EXPECT_EQ(tok->token_bytes(50256), "<|endoftext|>");
    EXPECT_EQ(tok->model_type(), "gpt2");
    EXPECT_EQ(tok->pre_type(), "gpt-2");
  }
}

TEST(Tokenizer, SpmDecodeStripsOnlyTheTextStartSpace) {
  TS_LOAD_TOKENIZER(tok, vocab("llama-spm"));
  EXPECT_TRUE(tok->add_space_prefix());
  EXPECT_EQ(tok->decode(Ids{15043, 3186}), "Hello world");
  EXPECT_EQ(tok->decode(Ids{1, 15043, 3186}), "<s>Hello world");
  EXPECT_EQ(tok->decode(Ids{3186, 15043}), "world Hello");
  // ' Hello' encodes as '▁' '▁Hello'; only the added prefix space goes.
  EXPECT_EQ(tok->decode(Ids{29871, 15043}), " Hello");
  EXPECT_EQ(tok->decode(tok->encode("  Hello  world ", true, false)), "<s>  Hello  world ");
  // Invalid ids are skipped.
  EXPECT_EQ(tok->decode(Ids{-1, 15043, 999999}), "Hello");
}

TEST(Tokenizer, RoundTripsArbitraryBytes) {
  // Invalid UTF-8 must survive: byte fallback (SPM) and byte-level BPE keep every byte.
  // (Not deepseek: its vocabulary has user-defined tokens for the bytes that never occur in
  // UTF-8, e.g. "ÿ" for 0xFF, and those render as their text, as in llama.cpp. Not falcon or
  // starcoder: they have no piece at all for some of those bytes, which llama.cpp drops too.)
  const std::string head = "ok \xFF\xFE bad \xE4\xB8 cut \xF0\x9F\xA6";
  const std::string text = head + "\x80 end" + std::string(1, '\0') + "x\xC0\xAF";
  for (const char* name : {"llama-spm", "qwen2", "llama-bpe", "gpt-2"}) {
    SCOPED_TRACE(name);
    TS_LOAD_TOKENIZER(tok, vocab(name));
    EXPECT_EQ(tok->decode(tok->encode(text, false, false)), text);
  }
}

TEST(Tokenizer, LongInputsStayFast) {
  // One 200k-byte "word" and 200k bytes of mixed text: quadratic merging would not finish here.
  TS_LOAD_TOKENIZER(tok, vocab("qwen2"));
  const std::string word(200000, 'a');
  const Ids ids = tok->encode(word, false, false);
  EXPECT_LT(ids.size(), word.size() / 4);
  EXPECT_EQ(tok->decode(ids), word);

  TS_LOAD_TOKENIZER(spm, vocab("llama-spm"));
  std::string mixed;
  while (mixed.size() < 200000) mixed += "Hello, y'all! 我想在apple工作1314151天～ 🦙 ";
  const Ids spm_ids = spm->encode(mixed, false, false);
  EXPECT_EQ(spm->decode(spm_ids), mixed);
}

TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
  TS_LOAD_TOKENIZER(tok, vocab("llama-bpe"));
  const std::vector<std::string> texts = {"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
                                          "<|begin_of_text|>  code:\n\tint x = 42;",
                                          std::string(5000, 'z') + " end"};
  std::vector<Ids> serial;
  for (const auto& t : texts) serial.push_back(tok->encode(t, true, true));
  std::vector<std::thread> threads;
  std::vector<int> num_bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (tok->encode(texts[i], true, true) != serial[i]) ++num_bad[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int bad : num_bad) EXPECT_EQ(bad, 0);
}

TEST(Tokenizer, WordPieceBert) {
  TS_LOAD_TOKENIZER(tok, vocab("bert-bge"));
  EXPECT_EQ(tok->model_type(), "bert");
  // [CLS] hello world [SEP]; case and accents are normalised away.
  EXPECT_EQ(tok->encode("Hello world", true, false), (Ids{101, 7592, 2088, 102}));
  EXPECT_EQ(tok->encode("  HÉLLO\tworld ", false, false), (Ids{7592, 2088}));
  EXPECT_EQ(tok->decode(Ids{7592, 2088}), "hello world");
  EXPECT_EQ(tok->decode(Ids{101, 7592, 102}), "[CLS]hello[SEP]");
  // A word that cannot be cut into pieces is one [UNK].
  EXPECT_EQ(tok->encode("\xE1\x9E\x80\xE1\x9E\xB6", false, false), (Ids{100}));
  EXPECT_EQ(tok->encode("[MASK]", false, true), (Ids{103}));
}

// --- Synthetic vocabularies ------------------------------------------------------------------

std::vector<std::pair<std::string, Value>> bpe_kv(std::vector<std::string> merges) {
  return {
      {"tokenizer.ggml.model", Value::make_string("gpt2")},
      {"tokenizer.ggml.pre", Value::make_string("gpt-2")},
      {"tokenizer.ggml.tokens",
       Value::make_string_array({"a", "b", "ab", "bb", "<|end|>", "abb"})},
      {"tokenizer.ggml.token_type", Value::make_i32_array({1, 1, 1, 1, 3, 1})},
      {"tokenizer.ggml.merges", Value::make_string_array(std::move(merges))},
  };
}

TEST(Tokenizer, BpeMergesByRank) {
  std::unique_ptr<gguf::GgufFile> f1, f2, f3;
  auto bb_first = build(bpe_kv({"b b", "a b"}), &f1);
  ASSERT_TRUE(bb_first.ok()) << bb_first.status().to_string();
  EXPECT_EQ((*bb_first)->encode("abb", false, false), (Ids{0, 3}));  // a + bb
  auto ab_first = build(bpe_kv({"a b", "b b"}), &f2);
  ASSERT_TRUE(ab_first.ok());
  EXPECT_EQ((*ab_first)->encode("abb", false, false), (Ids{2, 1}));  // ab + b
  auto full = build(bpe_kv({"a b", "ab b"}), &f3);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ((*full)->encode("abb", false, false), (Ids{5}));
  // Equal-rank ties: leftmost first ("b b" applies to the first pair of "bbb").
  EXPECT_EQ((*bb_first)->encode("bbb", false, false), (Ids{3, 1}));
  // "<|end|>" is EOG by text and is matched as a control token only with parse_special.
  EXPECT_TRUE((*full)->is_eog(4));
  EXPECT_EQ((*full)->encode("ab<|end|>", false, true), (Ids{2, 4}));
  EXPECT_EQ((*full)->bos_id(), -1);
}

TEST(Tokenizer, SpmMergesByScoreWithByteFallback) {
  std::vector<std::pair<std::string, Value>> kv = {
      {"tokenizer.ggml.model", Value::make_string("llama")},
      {"tokenizer.ggml.tokens",
       Value::make_string_array({"<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "\xE2\x96\x81", "a",
                                 "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab"})},
      {"tokenizer.ggml.scores",
       Value::make_f32_array({0, 0, 0, 0, 0, -1, -1, -1, -3, -2, -1.5})},
      {"tokenizer.ggml.token_type", Value::make_i32_array({2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1})},
      {"tokenizer.ggml.bos_token_id", Value::make_u32(1)},
      {"tokenizer.ggml.eos_token_id", Value::make_u32(2)},
  };
  std::unique_ptr<gguf::GgufFile> f;
  auto tok = build(kv, &f);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // "▁ab": "ab" (-2) beats "▁a" (-3), then "▁ab" (-1.5).
  EXPECT_EQ((*tok)->encode("ab", false, false), (Ids{10}));
  // "é" is not a piece: byte fallback.
  EXPECT_EQ((*tok)->encode("b\xC3\xA9", false, false), (Ids{5, 7, 3, 4}));
  EXPECT_EQ((*tok)->decode((*tok)->encode("b\xC3\xA9", false, false)), "b\xC3\xA9");
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_EQ((*tok)->encode("ab", true, false), (Ids{1, 10}));
}

TEST(Tokenizer, RefusesUnsupportedOrCorruptVocabularies) {
  std::unique_ptr<gguf::GgufFile> f;
  auto kv = bpe_kv({"a b"});
  kv[1].second = Value::make_string("no-such-pre");
  auto bad_pre = build(kv, &f);
  ASSERT_FALSE(bad_pre.ok());
  EXPECT_EQ(bad_pre.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(bad_pre.status().message().find("no-such-pre"), std::string::npos);

  kv = bpe_kv({"a b"});
  kv[0].second = Value::make_string("rwkv");
  auto bad_model = build(kv, &f);
  ASSERT_FALSE(bad_model.ok());
  EXPECT_EQ(bad_model.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(bad_model.status().message().find("rwkv"), std::string::npos);

  kv = bpe_kv({"a b"});
  kv[3].second = Value::make_i32_array({1, 1});  // token_type shorter than tokens
  auto bad_types = build(kv, &f);
  ASSERT_FALSE(bad_types.ok());
  EXPECT_EQ(bad_types.status().code(), StatusCode::kDataLoss);

  kv = bpe_kv({"ab"});  // a merge without a separator
  auto bad_merge = build(kv, &f);
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_EQ(bad_merge.status().code(), StatusCode::kDataLoss);

  kv = bpe_kv({"a b"});
  kv.erase(kv.begin() + 2);  // no tokens
  auto no_tokens = build(kv, &f);
  ASSERT_FALSE(no_tokens.ok());
  EXPECT_EQ(no_tokens.status().code(), StatusCode::kDataLoss);

  kv = bpe_kv({"a b"});
  kv.erase(kv.begin() + 4);  // gpt2 without merges
  auto no_merges = build(kv, &f);
  ASSERT_FALSE(no_merges.ok());
  EXPECT_EQ(no_merges.status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ts::tokenizer
