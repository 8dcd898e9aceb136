#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ts::tokenizer::internal {
namespace {

std::vector<std::string> split(std::string_view pre, std::string_view text) {
  auto cfg = pre_config(pre);
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  if (!cfg.ok()) return {};
  auto p = PreTokenizer::create(cfg->patterns);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return {};
  std::vector<std::pair<size_t, size_t>> pieces;
  (*p)->split(text, &pieces);
  std::vector<std::string> out;
  size_t expect_off = 0;
  for (auto [off, len] : pieces) {
    EXPECT_EQ(off, expect_off) << "pieces must tile the text";
    EXPECT_GT(len, 0u);
    expect_off = off + len;
    out.emplace_back(text.substr(off, len));
  }
  EXPECT_EQ(expect_off, text.size());
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world's 123  x!!"),
            (V{"Hello", " world", "'s", " 123", " ", " x", "!!"}));
  EXPECT_EQ(split("gpt-2", ""), V{});
}

TEST(PreTokenizer, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(split("llama-bpe", "12345 I'VE\n\n  x"),
            (V{"123", "45", " I", "'VE", "\n\n", " ", " x"}));
  EXPECT_TRUE(pre_config("llama-bpe")->ignore_merges);
  EXPECT_TRUE(pre_config("llama-bpe")->add_bos);
}

TEST(PreTokenizer, Qwen2SplitsDigitsOneByOne) {
  EXPECT_EQ(split("qwen2", "ab123"), (V{"ab", "1", "2", "3"}));
  EXPECT_FALSE(pre_config("qwen2")->add_bos);
}

TEST(PreTokenizer, Qwen35KeepsCombiningMarksWithLetters) {
  // "e" + U+0301 (combining acute): one word for qwen35; for qwen2 the mark is not a letter and
  // starts the next word as its optional non-letter prefix.
  EXPECT_EQ(split("qwen35", " re\xCC\x81sume"), (V{" re\xCC\x81sume"}));
  EXPECT_EQ(split("qwen2", " re\xCC\x81sume"), (V{" re", "\xCC\x81sume"}));
}

TEST(PreTokenizer, SequentialRegexesKeepGaps) {
  // starcoder: digits isolated first, then the GPT-2 regex inside every piece.
  EXPECT_EQ(split("starcoder", "a12 b"), (V{"a", "1", "2", " b"}));
  // falcon: punctuation runs first, then GPT-2, then digit triples.
  EXPECT_EQ(split("falcon", "x=1234"), (V{"x", "=", "123", "4"}));
  // deepseek-llm: "\s+$" sees the end of each piece, not only the end of the text.
  EXPECT_EQ(split("deepseek-llm", "ab  \ncd"), (V{"ab", "  ", "\n", "cd"}));
}

TEST(PreTokenizer, InvalidUtf8IsKept) {
  const std::string text = "ab\xFF\xFE cd \xE4\xB8";
  const V pieces = split("llama-bpe", text);
  std::string joined;
  for (const auto& p : pieces) joined += p;
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, UnknownNamesAreRefused) {
  auto cfg = pre_config("no-such-pre");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(pre_config("")->canonical, "default");
  for (const char* name : {"default", "gpt-2", "llama3", "llama-bpe", "qwen2", "qwen35",
                           "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "refact",
                           "mpt", "smollm", "dbrx", "command-r", "olmo"}) {
    auto c = pre_config(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(PreTokenizer::create(c->patterns).ok()) << name;
  }
}

}  // namespace
}  // namespace ts::tokenizer::internal
