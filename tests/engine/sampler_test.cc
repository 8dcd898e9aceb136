#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

namespace ts::engine {
namespace {

std::vector<float> log_probs(std::vector<double> p) {
  std::vector<float> v;
  for (double x : p) v.push_back(static_cast<float>(std::log(x)));
  return v;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s(5);
  Rng rng(1);
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  EXPECT_EQ(s.sample(logits, greedy(), {}, {}, rng, nullptr), 1);
}

TEST(Sampler, LogitBiasChangesTheChoice) {
  Sampler s(4);
  Rng rng(1);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  SamplingParams p = greedy();
  p.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(s.sample(logits, p, {}, {}, rng, nullptr), 2);
  p.logit_bias = {{3, 5.0f}};
  EXPECT_EQ(s.sample(logits, p, {}, {}, rng, nullptr), 3);
}

TEST(Sampler, RepetitionPenaltyCoversPromptAndOutput) {
  Sampler s(4);
  Rng rng(1);
  std::vector<float> logits = {2.0f, 1.5f, 1.2f, -3.0f};
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;  // 2.0 -> 1.0 (in prompt), 1.5 -> 0.75 (in output)
  std::vector<int32_t> prompt = {0, 0, 3}, output = {1};
  EXPECT_EQ(s.sample(logits, p, prompt, output, rng, nullptr), 2);
}

TEST(Sampler, FrequencyAndPresencePenaltiesUseOutputCounts) {
  Sampler s(3);
  Rng rng(1);
  std::vector<float> logits = {3.0f, 2.5f, 0.0f};
  SamplingParams p = greedy();
  p.frequency_penalty = 0.2f;
  std::vector<int32_t> out = {0, 0};  // 3.0 - 0.4 = 2.6 > 2.5
  EXPECT_EQ(s.sample(logits, p, {}, out, rng, nullptr), 0);
  out = {0, 0, 0};                    // 3.0 - 0.6 = 2.4 < 2.5
  EXPECT_EQ(s.sample(logits, p, {}, out, rng, nullptr), 1);
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.6f;          // once, whatever the count
  out = {0};
  EXPECT_EQ(s.sample(logits, p, {}, out, rng, nullptr), 1);
  // Prompt tokens are not penalized by frequency/presence.
  EXPECT_EQ(s.sample(logits, p, out, {}, rng, nullptr), 0);
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits,
                                 const SamplingParams& p, int draws, uint64_t seed) {
  Rng rng(seed);
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.sample(logits, p, {}, {}, rng, nullptr)];
  return h;
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
  Sampler s(4);
  auto logits = log_probs({0.5, 0.3, 0.15, 0.05});
  SamplingParams p;
  auto h = histogram(s, logits, p, 20000, 7);
  EXPECT_NEAR(h[0] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(h[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(h[2] / 20000.0, 0.15, 0.02);
  EXPECT_NEAR(h[3] / 20000.0, 0.05, 0.01);
}

TEST(Sampler, TopKTopPMinPRestrictCandidates) {
  Sampler s(4);
  auto logits = log_probs({0.5, 0.3, 0.15, 0.05});
  SamplingParams p;
  p.top_k = 2;
  auto h = histogram(s, logits, p, 8000, 3);
  EXPECT_EQ(h.count(2) + h.count(3), 0u);
  EXPECT_NEAR(h[0] / 8000.0, 0.5 / 0.8, 0.03);  // renormalized over the top 2
  p.top_k = 0;
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: tokens 0 and 1
  h = histogram(s, logits, p, 4000, 4);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[1], 0);
  p.top_p = 1.0f;
  p.min_p = 0.2f;  // drops p < 0.1: token 3 only
  h = histogram(s, logits, p, 4000, 5);
  EXPECT_EQ(h.count(3), 0u);
  EXPECT_GT(h[2], 0);
  p.min_p = 0.5f;  // with top_k too: keeps p >= 0.25 of the top 3
  p.top_k = 3;
  h = histogram(s, logits, p, 4000, 6);
  EXPECT_EQ(h.size(), 2u);
}

TEST(Sampler, TopPOnLargeVocabularyMatchesFullSortReference) {
  const int32_t V = 150000;
  Sampler s(V);
  Rng gen(42);
  std::vector<float> logits(V);
  for (auto& v : logits) v = static_cast<float>(gen.uniform() * 6.0);  // flat-ish: nucleus is big
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_p = 0.5f;
  // Reference nucleus by a full sort.
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  double mx = logits[ids[0]] / 0.7, z = 0.0;
  for (float v : logits) z += std::exp(v / 0.7 - mx);
  std::set<int32_t> nucleus;
  double cum = 0.0;
  for (int32_t id : ids) {
    nucleus.insert(id);
    cum += std::exp(logits[id] / 0.7 - mx) / z;
    if (cum >= 0.5) break;
  }
  ASSERT_GT(nucleus.size(), 1000u);  // forces several rounds of the growing partial sort
  Rng rng(9);
  for (int i = 0; i < 100; ++i) {
    const int32_t t = s.sample(logits, p, {}, {}, rng, nullptr);
    ASSERT_TRUE(nucleus.count(t)) << "token " << t << " outside the nucleus";
  }
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  Sampler s(64);
  std::vector<float> logits(64);
  for (int i = 0; i < 64; ++i) logits[i] = static_cast<float>(std::sin(i * 1.3));
  SamplingParams p;
  p.temperature = 1.2f;
  auto draw = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(logits, p, {}, {}, rng, nullptr));
    return out;
  };
  EXPECT_EQ(draw(123), draw(123));
  EXPECT_NE(draw(123), draw(124));
  EXPECT_NE(choice_seed(5, 0), choice_seed(5, 1));
}

TEST(Sampler, LogprobsAreLogSoftmaxOfRawLogitsWithSortedTop) {
  Sampler s(5);
  Rng rng(1);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  SamplingParams p = greedy();
  p.logprobs = true;
  p.top_logprobs = 3;
  p.logit_bias = {{4, 100.0f}};  // bias changes the choice, not the reported logprobs
  LogprobEntry lp;
  const int32_t t = s.sample(logits, p, {}, {}, rng, &lp);
  EXPECT_EQ(t, 4);
  double z = 0.0;
  for (float v : logits) z += std::exp(v);
  EXPECT_NEAR(lp.sampled.logprob, -1.0 - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 1);
  EXPECT_EQ(lp.top[1].token, 3);
  EXPECT_EQ(lp.top[2].token, 2);
  EXPECT_NEAR(lp.top[0].logprob, 3.0 - std::log(z), 1e-5);
}

}  // namespace
}  // namespace ts::engine
