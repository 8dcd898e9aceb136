// Unit tests of speculative decoding's pure parts: n-gram prompt lookup, the adaptive K
// controller, rejection sampling (statistical, small vocabulary) and the draft/target
// vocabulary check on real models.
#include "engine/spec_decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::engine {
namespace {

TEST(SpecNgram, CopiesWhatFollowedTheLatestMatch) {
  std::vector<int32_t> out;
  // ... 1 2 3 [7 8 9] ... 1 2 3  -> 7 8 9
  const std::vector<int32_t> t{5, 1, 2, 3, 7, 8, 9, 6, 1, 2, 3};
  EXPECT_EQ(ngram_propose(t, {.ngram_min = 1, .ngram_max = 3}, 3, out), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 9}));
  // k clips the proposal; the continuation stops at the end of the tokens.
  EXPECT_EQ(ngram_propose(t, {.ngram_min = 1, .ngram_max = 3}, 2, out), 2);
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8}));
}

TEST(SpecNgram, LongestKeyWinsOverMoreRecentShortMatch) {
  std::vector<int32_t> out;
  // "2 3" occurs twice: followed by 7 after "1 2 3" and by 4 after "9 2 3" (more recent).
  const std::vector<int32_t> t{1, 2, 3, 7, 9, 2, 3, 4, 1, 2, 3};
  EXPECT_EQ(ngram_propose(t, {.ngram_min = 1, .ngram_max = 3}, 1, out), 1);
  EXPECT_EQ(out[0], 7);  // 3-gram match
  EXPECT_EQ(ngram_propose(t, {.ngram_min = 1, .ngram_max = 2}, 1, out), 1);
  EXPECT_EQ(out[0], 4);  // 2-gram: the most recent occurrence
}

TEST(SpecNgram, NothingWithoutMatchOrRoom) {
  std::vector<int32_t> out{42};
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{1, 2, 3, 4}, {.ngram_min = 1, .ngram_max = 3}, 4, out), 0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{1}, {.ngram_min = 1, .ngram_max = 3}, 4, out), 0);
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{1, 1}, {.ngram_min = 1, .ngram_max = 3}, 0, out), 0);
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{3, 1, 2}, {.ngram_min = 2, .ngram_max = 3}, 4, out), 0);
  // A periodic sequence proposes its own continuation.
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{1, 2, 1, 2}, {.ngram_min = 1, .ngram_max = 2}, 4, out), 2);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2}));
}

TEST(SpecNgram, ScanWindowBoundsTheSearch) {
  std::vector<int32_t> t{7, 8};
  for (int i = 0; i < 100; ++i) t.push_back(1000 + i);
  t.push_back(7);
  std::vector<int32_t> out;
  EXPECT_EQ(ngram_propose(t, {.ngram_min = 1, .ngram_max = 1, .max_scan = 1000}, 1, out), 1);
  EXPECT_EQ(out[0], 8);
  EXPECT_EQ(ngram_propose(t, {.ngram_min = 1, .ngram_max = 1, .max_scan = 50}, 1, out), 0);
}

TEST(SpecAdapt, KFollowsAcceptanceAndBreakEven) {
  SpecAdaptState st;
  EXPECT_EQ(spec_next_k(st, 4, 0.0), 4);    // free drafts: always the maximum
  EXPECT_EQ(spec_next_k(st, 4, 0.2), 2);    // prior alpha 1/2: 0.5, 0.25 > 0.2 > 0.125
  for (int i = 0; i < 10; ++i) spec_update(st, 4, 4);
  EXPECT_GT(st.alpha(), 0.9);
  EXPECT_EQ(spec_next_k(st, 4, 0.5), 4);    // high acceptance pays even on a costly step
  EXPECT_EQ(spec_next_k(st, 8, 0.5), 8);
  for (int i = 0; i < 20; ++i) spec_update(st, 4, 0);
  EXPECT_LT(st.alpha(), 0.2);
  // Even one draft does not pay: pause 2, 4, 8 ... steps, each ending in a one-draft probe.
  EXPECT_EQ(spec_next_k(st, 4, 0.3), 0);
  EXPECT_EQ(spec_next_k(st, 4, 0.3), 0);
  EXPECT_EQ(spec_next_k(st, 4, 0.3), 1);    // the pause of 2 ends with a probe
  for (int i = 0; i < 3; ++i) EXPECT_EQ(spec_next_k(st, 4, 0.3), 0);  // next pause: 4 steps
  EXPECT_EQ(spec_next_k(st, 4, 0.3), 0);
  EXPECT_EQ(spec_next_k(st, 4, 0.3), 1);
  int zeros = 0;
  for (int i = 0; i < 100; ++i) zeros += spec_next_k(st, 4, 0.3) == 0;
  EXPECT_GT(zeros, 90);
  EXPECT_FALSE(parse_spec_mode("fast").ok());
  EXPECT_EQ(parse_spec_mode("draft").value(), SpecMode::kDraft);
}

TEST(SpecAdapt, StepCostModelFitsAndBreakEvenGrowsWithBatch) {
  SpecCostModel m;
  EXPECT_EQ(spec_break_even(m, 0, 1, 1), 0.4);  // no data yet: cautious probing
  for (int i = 0; i < 50; ++i) {
    const int32_t n = 1 + (i % 5) * 4;
    m.observe(n, 2.0 + 0.1 * n);  // 2 ms per step + 0.1 ms per token
  }
  ASSERT_TRUE(m.ready());
  EXPECT_NEAR(m.fixed_ms(), 2.0, 1e-6);
  EXPECT_NEAR(m.per_token_ms(), 0.1, 1e-6);
  // One decode: an emitted token costs 2.1 ms, a draft 0.1 ms -> break-even ~0.048.
  EXPECT_NEAR(spec_break_even(m, 0, 1, 1), 0.1 / 2.1, 1e-6);
  // 64 decodes: 8.4 ms / 64 per emitted token; drafting must be accepted 76% of the time.
  EXPECT_NEAR(spec_break_even(m, 0, 64, 64), 0.1 / (8.4 / 64), 1e-6);
  EXPECT_GT(spec_break_even(m, 0.05, 1, 1), spec_break_even(m, 0, 1, 1));  // a draft model costs
  SpecCostModel flat;
  for (int i = 0; i < 50; ++i) flat.observe(8, 3.0);
  EXPECT_FALSE(flat.ready());  // constant token counts cannot separate the terms
}

// Chi-square of observed counts against expected probabilities.
double chi2(const std::vector<int64_t>& counts, const std::vector<float>& p, int64_t n) {
  double x = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    if (e > 0) x += (counts[i] - e) * (counts[i] - e) / e;
    else EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
  }
  return x;
}

int32_t draw(const std::vector<float>& q, Rng& rng) {
  double u = rng.uniform();
  for (size_t i = 0; i < q.size(); ++i) {
    if (u < q[i]) return static_cast<int32_t>(i);
    u -= q[i];
  }
  return static_cast<int32_t>(q.size() - 1);
}

TEST(SpecRejection, KeepsTheTargetDistribution) {
  const std::vector<float> p{0.05f, 0.40f, 0.25f, 0.0f, 0.30f};
  const std::vector<float> q{0.30f, 0.10f, 0.20f, 0.25f, 0.15f};
  Rng rng(99);
  const int64_t n = 200000;
  std::vector<int64_t> counts(p.size(), 0);
  int64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool a = false;
    ++counts[static_cast<size_t>(rejection_sample(p, q, draw(q, rng), rng, &a))];
    acc += a;
  }
  // 4 degrees of freedom (one zero cell): chi2 < 18.5 at p = 0.001.
  EXPECT_LT(chi2(counts, p, n), 18.5);
  // Acceptance rate is sum_i min(p_i, q_i) = 0.05 + 0.10 + 0.20 + 0 + 0.15 = 0.5.
  EXPECT_NEAR(static_cast<double>(acc) / n, 0.5, 0.01);
  // A distribution that is not p must fail the same check (the test can fail).
  EXPECT_GT(chi2(counts, q, n), 1000.0);
}

TEST(SpecRejection, PointMassProposalIsSampleAndCompare) {
  // The engine's drafts are deterministic (q = delta(d)): accepting with p(d) and otherwise
  // drawing from p without d gives p exactly, the same as sampling p and comparing with d.
  const std::vector<float> p{0.1f, 0.6f, 0.3f};
  const std::vector<float> q{0.0f, 1.0f, 0.0f};
  Rng rng(5);
  const int64_t n = 100000;
  std::vector<int64_t> counts(3, 0);
  int64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool a = false;
    ++counts[static_cast<size_t>(rejection_sample(p, q, 1, rng, &a))];
    acc += a;
  }
  EXPECT_LT(chi2(counts, p, n), 13.8);  // 2 dof, p = 0.001
  EXPECT_NEAR(static_cast<double>(acc) / n, 0.6, 0.01);
}

model::Model* load(const std::string& path) {
  static std::map<std::string, std::unique_ptr<model::Model>> models;
  auto& m = models[path];
  if (!m) {
    auto r = model::Model::load(path);
    if (!r.ok()) {
      ADD_FAILURE() << r.status().to_string();
      return nullptr;
    }
    m = std::move(r).value();
  }
  return m.get();
}

TEST(SpecVocab, MatchingVocabulariesPassMismatchNamesTheToken) {
  TS_REQUIRE_SHARED(f32, "models/stories260K/stories260K-f32.gguf");
  TS_REQUIRE_SHARED(f16, "models/stories260K/stories260K-f16.gguf");
  TS_REQUIRE_SHARED(qwen, "golden/models/tiny-qwen2-q8_0.gguf");
  model::Model* a = load(f32);
  model::Model* b = load(f16);
  model::Model* c = load(qwen);
  ASSERT_TRUE(a && b && c);
  EXPECT_TRUE(check_vocab_match(a->tokenizer(), b->tokenizer()).ok());
  const Status st = check_vocab_match(a->tokenizer(), c->tokenizer());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  int32_t first = 0;
  while (a->tokenizer().piece(first) == c->tokenizer().piece(first)) ++first;
  EXPECT_NE(st.message().find("at token " + std::to_string(first) + ":"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'" + c->tokenizer().piece(first) + "'"), std::string::npos) << st.message();

  SpecOptions o{.mode = SpecMode::kDraft, .draft_model = c};
  EXPECT_FALSE(validate_spec_options(o, *a).ok());
  o.draft_model = b;
  EXPECT_TRUE(validate_spec_options(o, *a).ok());
  o.draft_model = nullptr;
  EXPECT_FALSE(validate_spec_options(o, *a).ok());
  SpecOptions bad{.mode = SpecMode::kNgram, .draft_tokens = 0};
  EXPECT_FALSE(validate_spec_options(bad, *a).ok());
  bad = {.mode = SpecMode::kNgram, .ngram = {.ngram_min = 3, .ngram_max = 2}};
  EXPECT_FALSE(validate_spec_options(bad, *a).ok());
}

}  // namespace
}  // namespace ts::engine
