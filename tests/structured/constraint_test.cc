// ConstraintState over real vocabularies: the trie-walk mask equals a brute-force check of every
// token, start_after (reasoning first) semantics, reset/replay, and the compile cache.
#include <gtest/gtest.h>

#include <cctype>
#include <map>

#include "gguf/gguf.h"
#include "structured/constraint.h"
#include "structured/grammar.h"
#include "structured/matcher.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::structured {
namespace {

const tokenizer::Tokenizer* vocab(const std::string& rel) {
  static std::map<std::string, std::pair<std::unique_ptr<gguf::GgufFile>, std::unique_ptr<tokenizer::Tokenizer>>> cache;
  auto it = cache.find(rel);
  if (it != cache.end()) return it->second.second.get();
  const std::string path = ::ts::testing::shared_path(rel);
  if (path.empty()) return nullptr;
  auto f = gguf::GgufFile::open(path);
  if (!f.ok()) { ADD_FAILURE() << f.status().to_string(); return nullptr; }
  auto t = tokenizer::Tokenizer::from_gguf(**f);
  if (!t.ok()) { ADD_FAILURE() << t.status().to_string(); return nullptr; }
  auto& slot = cache[rel];
  slot.first = std::move(f).value();
  slot.second = std::move(t).value();
  return slot.second.get();
}

bool bit(std::span<const uint64_t> m, int32_t t) { return (m[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1; }

// Brute force: token t is allowed iff its bytes run through the grammar from the current text.
void expect_mask_matches_brute_force(const Constraint& c, const std::string& prefix, std::span<const uint64_t> m) {
  Runtime rt(c.grammar(), nullptr);
  const int32_t at = rt.run(rt.initial(), prefix);
  ASSERT_NE(at, Runtime::kDead);
  const TokenIndex& idx = c.index();
  int32_t allowed = 0;
  for (int32_t t = 0; t < idx.n_vocab(); ++t) {
    const bool eog = std::find(idx.eog_tokens().begin(), idx.eog_tokens().end(), t) != idx.eog_tokens().end();
    bool want;
    if (eog) want = rt.accepting(at);
    else want = !idx.token_bytes(t).empty() && rt.run(at, idx.token_bytes(t)) != Runtime::kDead;
    ASSERT_EQ(bit(m, t), want) << "token " << t << " '" << idx.token_text(t) << "' after '" << prefix << "'";
    allowed += want;
  }
  EXPECT_GT(allowed, 0);
}

class Vocabs : public ::testing::TestWithParam<const char*> {};

TEST_P(Vocabs, TrieMaskEqualsBruteForce) {
  const tokenizer::Tokenizer* tok = vocab(GetParam());
  if (!tok) GTEST_SKIP() << "shared vocabulary not found: " << GetParam();
  auto idx = TokenIndex::for_tokenizer(*tok);
  EXPECT_EQ(idx.get(), TokenIndex::for_tokenizer(*tok).get());  // built once per tokenizer
  auto c = compile({.kind = ConstraintKind::kJsonSchema,
                    .source = R"({"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string"},"é":{"enum":["日本","x"]}},"required":["n","s","é"]})"},
                   idx);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ConstraintState st(*c);
  std::string text;
  // Walk a valid text token by token (greedy longest allowed token that keeps us on the text),
  // checking the mask at every step.
  const std::string target = "{\"n\": -12, \"s\": \"a\\\"b ü\", \"é\": \"日本\"}";
  int steps = 0;
  while (text != target) {
    auto m = st.mask();
    expect_mask_matches_brute_force(**c, text, m);
    if (::testing::Test::HasFatalFailure()) return;
    int32_t best = -1;
    for (int32_t t = 0; t < idx->n_vocab(); ++t) {
      const std::string& b = idx->token_bytes(t);
      if (b.empty() || !bit(m, t) || target.compare(text.size(), b.size(), b) != 0) continue;
      if (best < 0 || b.size() > idx->token_bytes(best).size()) best = t;
    }
    ASSERT_GE(best, 0) << "no token continues '" << text << "'";
    ASSERT_TRUE(st.accept(best).ok());
    text += idx->token_bytes(best);
    ++steps;
  }
  EXPECT_TRUE(st.is_complete());
  EXPECT_TRUE(st.can_end());
  auto m = st.mask();
  for (int32_t e : idx->eog_tokens()) EXPECT_TRUE(bit(m, e));
  // A refused token leaves the state unchanged.
  ConstraintState fresh(*c);
  const int32_t close = tok->encode("}", false, false).back();
  EXPECT_FALSE(fresh.accept(close).ok());
  EXPECT_FALSE(fresh.can_end());
  // reset() replays generated tokens (preemption / resume).
  // (SentencePiece's encode() adds a leading space the grammar refuses: replay is checked with BPE.)
  if (tok->add_space_prefix()) return;
  std::vector<int32_t> ids = tok->encode("{\"n\":1,", false, false);
  ASSERT_TRUE(fresh.reset(ids).ok());
  EXPECT_FALSE(fresh.is_complete());
  ASSERT_TRUE(fresh.reset(tok->encode("{\"n\":1,\"s\":\"\",\"é\":\"x\"}", false, false)).ok());
  EXPECT_TRUE(fresh.is_complete());
  EXPECT_FALSE(fresh.reset(tok->encode("{\"m\"", false, false)).ok());
}

INSTANTIATE_TEST_SUITE_P(Shared, Vocabs,
                         ::testing::Values("models/llama.cpp-vocab/ggml-vocab-qwen2.gguf",
                                           "models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"),
                         [](const auto& info) { return std::string(info.param).find("qwen2") != std::string::npos ? "Qwen2Bpe" : "LlamaSpm"; });

TEST(StartAfter, UnconstrainedUntilTheTriggerThenTheGrammar) {
  const tokenizer::Tokenizer* tok = vocab("models/llama.cpp-vocab/ggml-vocab-qwen2.gguf");
  if (!tok) GTEST_SKIP() << "shared vocabulary not found";
  auto idx = TokenIndex::for_tokenizer(*tok);
  auto c = compile({.kind = ConstraintKind::kRegex, .source = "[0-9]+", .start_after = "</think>"}, idx);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ConstraintState st(*c);
  EXPECT_FALSE(st.constraining());
  auto m = st.mask();
  const int32_t word = tok->encode("hello", false, false).at(0);
  const int32_t eos = idx->eog_tokens().at(0);
  EXPECT_TRUE(bit(m, word));   // free text while thinking
  EXPECT_FALSE(bit(m, eos));   // but it may not end before the value
  EXPECT_FALSE(st.can_end());
  for (int32_t t : tok->encode("Let me think. </think", false, false)) ASSERT_TRUE(st.accept(t).ok());
  EXPECT_FALSE(st.constraining());
  // Now ">" completes the trigger: a token that completes it and goes on with a letter is
  // refused, one that completes it and stops there is allowed.
  m = st.mask();
  const auto gt = tok->encode(">", false, false);
  ASSERT_EQ(gt.size(), 1u);
  EXPECT_TRUE(bit(m, gt[0]));
  int checked = 0;
  for (int32_t t = 0; t < idx->n_vocab(); ++t) {
    const std::string& b = idx->token_text(t);
    if (b.size() >= 2 && b[0] == '>' && std::isalpha(static_cast<unsigned char>(b[1]))) {
      EXPECT_FALSE(bit(m, t)) << b;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  const int32_t ink0 = gt[0];
  ASSERT_TRUE(st.accept(ink0).ok());
  EXPECT_TRUE(st.constraining());
  m = st.mask();
  EXPECT_FALSE(bit(m, word));
  EXPECT_FALSE(bit(m, eos));  // nothing yet: "+" needs a digit
  ASSERT_TRUE(st.accept(tok->encode("42", false, false).at(0)).ok());
  EXPECT_TRUE(st.can_end());
  EXPECT_TRUE(bit(st.mask(), eos));
  EXPECT_FALSE(st.is_complete());  // more digits could follow
}

TEST(ConstraintStateTest, MemoTablesResetAndReplayOnLongOutputs) {
  const tokenizer::Tokenizer* tok = vocab("models/llama.cpp-vocab/ggml-vocab-qwen2.gguf");
  if (!tok) GTEST_SKIP() << "shared vocabulary not found";
  auto idx = TokenIndex::for_tokenizer(*tok);
  // Every position of the counted repetitions is its own automaton state: more than the memo
  // bound (Runtime::kMaxStates), so the tables are cleared and the state is replayed.
  auto c = compile({.kind = ConstraintKind::kRegex, .source = "[a-z]{0,9000}[0-9]{1,9000}"}, idx);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ConstraintState st(*c);
  const int32_t a = tok->encode("a", false, false).at(0);
  const int32_t one = tok->encode("1", false, false).at(0);
  for (int i = 0; i < 9000; ++i) ASSERT_TRUE(st.accept(a).ok()) << i;
  EXPECT_FALSE(st.accept(a).ok());  // the 9001st letter is refused
  for (int i = 0; i < 8500; ++i) ASSERT_TRUE(st.accept(one).ok()) << i;
  EXPECT_GT((*c)->runtime().generation(), 1u) << "the memo tables were never cleared";
  EXPECT_FALSE(st.accept(a).ok());
  EXPECT_TRUE(st.can_end());
  EXPECT_FALSE(st.is_complete());
  auto m = st.mask();
  EXPECT_TRUE(bit(m, one));
  EXPECT_FALSE(bit(m, a));
}

TEST(CompileCache, SameSourceSameConstraint) {
  const tokenizer::Tokenizer* tok = vocab("models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
  if (!tok) GTEST_SKIP() << "shared vocabulary not found";
  auto idx = TokenIndex::for_tokenizer(*tok);
  ConstraintSpec a{.kind = ConstraintKind::kRegex, .source = "a+b"};
  auto c1 = compile_cached(a, idx);
  auto c2 = compile_cached(a, idx);
  ASSERT_TRUE(c1.ok() && c2.ok());
  EXPECT_EQ(c1->get(), c2->get());
  a.source = "a+c";
  auto c3 = compile_cached(a, idx);
  ASSERT_TRUE(c3.ok());
  EXPECT_NE(c1->get(), c3->get());
  auto bad = compile_cached({.kind = ConstraintKind::kGrammar, .source = "root ::= ("}, idx);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ts::structured
