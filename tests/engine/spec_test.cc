// Unit tests of speculative decoding's pure parts: n-gram prompt lookup, the adaptive policy
// (acceptance estimate, step-cost model, the plan, probing) with fake costs, rejection sampling (statistical, small vocabulary) and the draft/target
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
  // k clips the proposal.
  EXPECT_EQ(ngram_propose(t, {.ngram_min = 1, .ngram_max = 3}, 2, out), 2);
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8}));
  // Past the end of the tokens the copy runs on through itself: 7 8 9 6 1 2 3, then 7 8 9 again.
  EXPECT_EQ(ngram_propose(t, {.ngram_min = 1, .ngram_max = 3}, 10, out), 10);
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 9, 6, 1, 2, 3, 7, 8, 9}));
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
  // A periodic sequence proposes its own continuation, as long as asked (period 2, and a run).
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{1, 2, 1, 2}, {.ngram_min = 1, .ngram_max = 2}, 4, out), 4);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 1, 2}));
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{4, 5, 5}, {.ngram_min = 1, .ngram_max = 2}, 3, out), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{5, 5, 5}));
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

TEST(SpecAdapt, AcceptanceEstimateFollowsVerification) {
  SpecAdaptState st;
  EXPECT_DOUBLE_EQ(st.alpha(), 0.5);  // prior
  for (int i = 0; i < 10; ++i) spec_update(st, 4, 4);
  EXPECT_GT(st.alpha(), 0.9);
  for (int i = 0; i < 40; ++i) spec_update(st, 4, 0);
  EXPECT_LT(st.alpha(), 0.1);  // a draft that is never right is believed to be so
  spec_update(st, 0, 0);  // nothing drafted: nothing learnt
  EXPECT_LT(st.alpha(), 0.2);
  EXPECT_FALSE(parse_spec_mode("fast").ok());
  EXPECT_EQ(parse_spec_mode("draft").value(), SpecMode::kDraft);
}

// The plan with a fake, known step cost (no clock): 2 ms per step + 0.1 ms per drafted token.
TEST(SpecAdapt, PlanDraftsWhenCheapAndKFollowsAcceptance) {
  const SpecStepCost cheap{.plain_ms = 2.0, .per_draft_ms = 0.1, .num_emitting = 1};
  const SpecCandidate hi{.alpha = 0.9, .max_k = 8}, mid{.alpha = 0.5, .max_k = 8};
  SpecPlan p = spec_plan(cheap, std::vector<SpecCandidate>{hi});
  // The j-th draft is worth 0.9^j tokens; all 8 beat the step's tokens per ms (at most
  // (1 + 0.9 + ... ) / (2 + 0.1 j) ~ 2 tokens/ms at j = 8; 0.9^8 / 0.1 = 4.3).
  EXPECT_EQ(p.k[0], 8);
  EXPECT_GT(p.tokens_per_ms, 2.5 * p.plain_tokens_per_ms);
  p = spec_plan(cheap, std::vector<SpecCandidate>{mid});
  // 0.5^j / 0.1 > E/T: j = 1 (5 > 0.5), 2 (2.5 > 0.71), 3 (1.25 > 0.81), 4 (0.625 < 0.85).
  EXPECT_EQ(p.k[0], 3);
  p = spec_plan(cheap, std::vector<SpecCandidate>{{.alpha = 0.9, .max_k = 2}});
  EXPECT_EQ(p.k[0], 2);  // never past the candidate's cap
  // Two candidates: the better one drafts deeper.
  p = spec_plan({.plain_ms = 2.0, .per_draft_ms = 0.1, .num_emitting = 2}, std::vector<SpecCandidate>{hi, mid});
  EXPECT_GT(p.k[0], p.k[1]);
  EXPECT_GT(p.k[1], 0);
}

TEST(SpecAdapt, PlanChoosesOffWhenThePredictedGainIsBelowOne) {
  const std::vector<SpecCandidate> c{{.alpha = 0.6, .max_k = 8}};
  // A draft costs as much as a whole plain step (a compute-bound model): no draft pays.
  SpecPlan p = spec_plan({.plain_ms = 1.0, .per_draft_ms = 1.0, .num_emitting = 1}, c);
  EXPECT_EQ(p.k[0], 0);
  EXPECT_DOUBLE_EQ(p.tokens_per_ms, p.plain_tokens_per_ms);
  // Compute-bound batch: 32 decodes emit 32 tokens in 4 ms (0.125 ms each); a 0.1 ms draft
  // accepted 60% of the time is worth less than that.
  std::vector<SpecCandidate> many(32, SpecCandidate{.alpha = 0.6, .max_k = 8});
  p = spec_plan({.plain_ms = 4.0, .per_draft_ms = 0.1, .num_emitting = 32}, many);
  for (int32_t k : p.k) EXPECT_EQ(k, 0);
  // Same batch, acceptance 0.99: drafts now beat 8 tokens/ms (9.9, 9.8, ... > 8) and the step's
  // predicted gain clears the default 1.1 margin.
  for (auto& x : many) x.alpha = 0.99;
  p = spec_plan({.plain_ms = 4.0, .per_draft_ms = 0.1, .num_emitting = 32}, many);
  EXPECT_GT(p.k[0], 0);
  // A gain the plan predicts but below min_gain is not taken (model error margin): one draft
  // at alpha 0.5 costing 0.4 of a 1 ms step gives (1.5 / 1.4) = 1.07x.
  const std::vector<SpecCandidate> one{{.alpha = 0.5, .max_k = 1}};
  EXPECT_EQ(spec_plan({.plain_ms = 1.0, .per_draft_ms = 0.4, .num_emitting = 1, .min_gain = 1.0}, one).k[0], 1);
  EXPECT_EQ(spec_plan({.plain_ms = 1.0, .per_draft_ms = 0.4, .num_emitting = 1, .min_gain = 1.1}, one).k[0], 0);
  // Nothing known about the step: no plan.
  EXPECT_EQ(spec_plan({.plain_ms = 0, .per_draft_ms = 0.1, .num_emitting = 1}, c).k[0], 0);
}

TEST(SpecAdapt, DraftModelForwardsArePricedPerPosition) {
  const std::vector<SpecCandidate> c{{.alpha = 0.9, .max_k = 8}};
  // Each drafted position costs a draft forward of 0.5 ms on top of 0.05 ms verification: the
  // deep drafts no longer pay, the first ones still do.
  const SpecPlan costly = spec_plan({.plain_ms = 1.0, .per_draft_ms = 0.05, .draft_pos_ms = 0.5, .num_emitting = 1}, c);
  const SpecPlan free = spec_plan({.plain_ms = 1.0, .per_draft_ms = 0.05, .num_emitting = 1}, c);
  EXPECT_EQ(free.k[0], 8);
  EXPECT_GT(costly.k[0], 0);
  EXPECT_LT(costly.k[0], free.k[0]);
  // A draft as costly as the target (the target as its own draft): never.
  EXPECT_EQ(spec_plan({.plain_ms = 1.0, .per_draft_ms = 0.05, .draft_pos_ms = 1.0, .num_emitting = 1},
                      std::vector<SpecCandidate>{{.alpha = 1.0, .max_k = 8}}).k[0],
            0);
  // Two such sequences (twice the step) share a draft forward per position: together they
  // draft at least as deep as one alone.
  const SpecPlan two = spec_plan({.plain_ms = 2.0, .per_draft_ms = 0.05, .draft_pos_ms = 0.5, .num_emitting = 2},
                                 std::vector<SpecCandidate>{c[0], c[0]});
  EXPECT_GE(two.k[0], costly.k[0]);
  EXPECT_EQ(two.k[0], two.k[1]);
  // A sequence whose draft KV lags far behind pays the catch-up first: with a 5 ms setup no
  // draft pays, the same sequence caught up drafts, and of two the caught-up one is chosen.
  const SpecStepCost shallow{.plain_ms = 1.0, .per_draft_ms = 0.05, .draft_pos_ms = 0.1, .num_emitting = 1};
  EXPECT_EQ(spec_plan(shallow, std::vector<SpecCandidate>{{.alpha = 0.9, .max_k = 8, .setup_ms = 5.0}}).k[0], 0);
  EXPECT_GT(spec_plan(shallow, std::vector<SpecCandidate>{{.alpha = 0.9, .max_k = 8, .setup_ms = 0.0}}).k[0], 0);
  const SpecPlan mixed = spec_plan({.plain_ms = 2.0, .per_draft_ms = 0.05, .draft_pos_ms = 0.1, .num_emitting = 2},
                                   std::vector<SpecCandidate>{{.alpha = 0.9, .max_k = 8, .setup_ms = 5.0},
                                                              {.alpha = 0.9, .max_k = 8, .setup_ms = 0.0}});
  EXPECT_EQ(mixed.k[0], 0);
  EXPECT_GT(mixed.k[1], 0);
}

TEST(SpecAdapt, ProbesAreSpacedAndBudgeted) {
  SpecAdaptState st;
  int probes = 0, steps = 0;
  std::vector<int> at;
  for (; steps < 8 + 16 + 32 + 64; ++steps)
    if (spec_probe_due(st, false)) at.push_back(steps);
  EXPECT_EQ(at, (std::vector<int>{7, 23, 55, 119}));  // intervals 8, 16, 32, 64
  for (int i = 0; i < 1000; ++i) probes += spec_probe_due(st, false);
  EXPECT_LE(probes, 1000 / 128 + 1);  // capped at one per 128 steps
  EXPECT_FALSE(spec_probe_due(st, true));  // the plan drafts: intervals start over
  EXPECT_EQ(st.probe_interval, 8);

  SpecProbeBudget b(0.02);
  EXPECT_TRUE(b.allow());
  b.spend(1.0);                    // a probe cost 1 ms more than its plain step
  EXPECT_FALSE(b.allow());
  for (int i = 0; i < 49; ++i) b.earn(1.0);  // 49 ms of steps earn 0.98 ms
  EXPECT_FALSE(b.allow());
  b.earn(1.0);
  EXPECT_TRUE(b.allow());
  EXPECT_FALSE(b.allow(0.5));  // a probe predicted to cost 0.5 ms waits for that much credit
  for (int i = 0; i < 25; ++i) b.earn(1.0);
  EXPECT_TRUE(b.allow(0.5));
  for (int i = 0; i < 100000; ++i) b.earn(10.0);  // idle credit is capped
  EXPECT_LE(b.credit_ms(), 50.0);
}

TEST(SpecAdapt, StepCostModelPricesDraftsApartFromDecodes) {
  SpecCostModel m;
  for (int i = 0; i < 10; ++i) m.observe(8, 0, 3.0);
  EXPECT_FALSE(m.ready());  // no drafts seen: a draft's price is unknown
  // 1 ms per step + 0.25 ms per decode token + 0.05 ms per drafted token, batch 4..8.
  for (int i = 0; i < 200; ++i) {
    const int32_t real = 4 + (i % 5), drafts = (i * 7) % 9;
    m.observe(real, drafts, 1.0 + 0.25 * real + 0.05 * drafts);
  }
  ASSERT_TRUE(m.ready());
  EXPECT_NEAR(m.fixed_ms(), 1.0, 0.05);
  EXPECT_NEAR(m.per_token_ms(), 0.25, 0.01);
  EXPECT_NEAR(m.per_draft_ms(), 0.05, 0.01);
  EXPECT_NEAR(m.predict_ms(8, 4), 1.0 + 2.0 + 0.2, 0.05);
  // A stall (another process took the core) is clipped, not believed.
  const double before = m.per_draft_ms();
  m.observe(8, 8, 500.0);
  EXPECT_LT(m.per_draft_ms(), before + 0.5);
  // Constant batch: the ridge keeps the fit defined and drafts still get their price.
  SpecCostModel c;
  for (int i = 0; i < 200; ++i) c.observe(1, i % 3, 0.2 + 0.1 * (i % 3));
  ASSERT_TRUE(c.ready());
  EXPECT_NEAR(c.per_draft_ms(), 0.1, 0.01);
  EXPECT_NEAR(c.predict_ms(1, 0), 0.2, 0.01);
}

TEST(SpecAdapt, DraftPriceSurvivesStepsWithoutDrafts) {
  // Drafts priced at 0.2 ms each (as costly as a decode token: a compute-bound step), then the
  // plan stops drafting: 2000 steps without a draft must not make drafts look cheaper.
  SpecCostModel m;
  for (int i = 0; i < 100; ++i) m.observe(8, i % 3, 0.3 + 0.2 * 8 + 0.2 * (i % 3));
  ASSERT_TRUE(m.ready());
  ASSERT_NEAR(m.per_draft_ms(), 0.2, 0.01);
  for (int i = 0; i < 2000; ++i) m.observe(8, 0, 0.3 + 0.2 * 8);
  EXPECT_NEAR(m.per_draft_ms(), 0.2, 0.02);
  EXPECT_NEAR(m.predict_ms(8, 0), 1.9, 0.02);
  // A few noisy steps where drafting looked faster than not drafting: a negative slope is not
  // believed, drafts never become free.
  for (int i = 0; i < 5; ++i) m.observe(8, 3, 1.0);
  EXPECT_GT(m.per_draft_ms(), 0.1);
  // New evidence still moves it: drafts became cheap.
  for (int i = 0; i < 300; ++i) m.observe(8, i % 3, 1.9 + 0.01 * (i % 3));
  EXPECT_NEAR(m.per_draft_ms(), 0.01, 0.01);
  // ... and dear again: 40 drafts at 0.2 ms each take 5x the predicted step (the stall clip
  // must not hide that): the price recovers within a few steps.
  for (int i = 0; i < 6; ++i) m.observe(8, i % 2 ? 40 : 0, 1.9 + (i % 2 ? 0.2 * 40 : 0.0));
  EXPECT_NEAR(m.per_draft_ms(), 0.2, 0.03);
}

TEST(SpecAdapt, CeilingSaysWhetherPerfectDraftsCouldPay) {
  // 8 decodes in 2 ms (0.25 ms a token); a draft costs 0.24 ms: even an always-accepted draft
  // adds 1 token per 0.24 ms, below the 1.1x the plan asks for.
  const SpecStepCost busy{.plain_ms = 2.0, .per_draft_ms = 0.24, .num_emitting = 8};
  std::vector<SpecCandidate> cands(8, SpecCandidate{.alpha = 0.1, .max_k = 8});
  EXPECT_FALSE(spec_ceiling_pays(busy, cands));
  // Batch 1, drafts at a tenth of a decode: perfect drafts would pay, so probing acceptance is
  // worth it even though alpha = 0.1 makes the plan itself draft nothing.
  const SpecStepCost cheap{.plain_ms = 1.0, .per_draft_ms = 0.1, .num_emitting = 1};
  const std::vector<SpecCandidate> one{{.alpha = 0.1, .max_k = 8}};
  EXPECT_TRUE(spec_ceiling_pays(cheap, one));
  EXPECT_EQ(spec_plan(cheap, one).k[0], 0);
  // A one-token proposal at batch 1 when a draft costs 95% of a decode: 2 tokens in 1.95x the
  // time is no gain.
  const SpecStepCost dear{.plain_ms = 1.0, .per_draft_ms = 0.95, .num_emitting = 1};
  EXPECT_FALSE(spec_ceiling_pays(dear, std::vector<SpecCandidate>{{.alpha = 1.0, .max_k = 1}}));
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
