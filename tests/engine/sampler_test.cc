#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
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


TEST(SamplerKernels, ExpShiftedMatchesStdExpWithExactZerosBelowRange) {
  for (int32_t n : {1, 7, 63, 64, 65, 200, 1031}) {
    Rng gen(static_cast<uint64_t>(n));
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = static_cast<float>(gen.uniform() * 120.0 - 100.0);  // [-100, 20)
    if (n > 1) x[0] = -std::numeric_limits<float>::infinity();
    std::vector<float> out(x.size()), ref(x.size());
    std::vector<float> blocks(static_cast<size_t>((n + kExpBlock - 1) / kExpBlock));
    const double sum = exp_shifted(x.data(), n, 0.8f, 4.0f, out.data(), blocks.data());
    const double ref_sum = exp_shifted_reference(x.data(), n, 0.8f, 4.0f, ref.data());
    for (int32_t i = 0; i < n; ++i) {
      if (ref[i] == 0.0f) {
        EXPECT_EQ(out[i], 0.0f) << "n " << n << " i " << i << " x " << x[i];
      } else {
        EXPECT_NEAR(out[i] / ref[i], 1.0, 4e-7) << "n " << n << " i " << i << " x " << x[i];
      }
    }
    EXPECT_NEAR(sum / ref_sum, 1.0, 1e-6);
    double bsum = 0.0;
    for (float b : blocks) bsum += b;
    EXPECT_NEAR(bsum / ref_sum, 1.0, 1e-6);
    EXPECT_NEAR(exp_shifted(x.data(), n, 0.8f, 4.0f, nullptr, nullptr), sum, 1e-9 * sum);
  }
}

TEST(SamplerKernels, MaxAndTopKMatchAFullSort) {
  for (int32_t n : {1, 5, 8, 9, 100, 4099, 152064}) {
    Rng gen(static_cast<uint64_t>(n) + 3);
    std::vector<float> x(static_cast<size_t>(n));
    // Few distinct values: many ties, which must go to the lower id.
    for (auto& v : x) v = static_cast<float>(gen.next() % 50) - 25.0f;
    if (n > 3) x[3] = -std::numeric_limits<float>::infinity();
    std::vector<std::pair<float, int32_t>> all;
    for (int32_t i = 0; i < n; ++i)
      if (x[i] > -std::numeric_limits<float>::infinity()) all.emplace_back(x[i], i);
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    EXPECT_EQ(max_value(x.data(), n), all.front().first);
    for (int32_t k : {1, 2, 40, 300, 20000, n + 5}) {
      std::vector<std::pair<float, int32_t>> got;
      select_top_k(x.data(), n, k, got);
      const size_t want = std::min(all.size(), static_cast<size_t>(k));
      ASSERT_EQ(got.size(), want) << "n " << n << " k " << k;
      for (size_t i = 0; i < want; ++i) {
        ASSERT_EQ(got[i], all[i]) << "n " << n << " k " << k << " rank " << i;
      }
    }
  }
}

TEST(Sampler, GreedyOnAFullVocabularyIsTheFirstMaximum) {
  const int32_t V = 152064;
  Sampler s(V);
  Rng gen(5);
  std::vector<float> logits(V);
  for (auto& v : logits) v = static_cast<float>(gen.uniform() * 10.0);
  logits[70001] = 11.0f;
  logits[90000] = 11.0f;
  Rng rng(1);
  EXPECT_EQ(s.sample(logits, greedy(), {}, {}, rng, nullptr), 70001);
  SamplingParams k1;
  k1.top_k = 1;
  EXPECT_EQ(s.sample(logits, k1, {}, {}, rng, nullptr), 70001);
}

TEST(Sampler, PeakedTopPAndTopKDrawOnlyTheirSetsInProportion) {
  // A real-looking row: a Gaussian floor and a few strong tokens. Reference sets and
  // probabilities by a full sort in double.
  const int32_t V = 152064;
  Sampler s(V);
  Rng gen(11);
  std::vector<float> logits(V);
  for (auto& v : logits) v = static_cast<float>(gen.uniform() * 4.0 - 2.0);
  const std::vector<std::pair<int32_t, float>> peaks = {{17, 14.0f}, {90000, 13.5f}, {123, 13.0f}, {150000, 12.0f},
                                                        {5000, 11.0f}};
  for (auto [id, v] : peaks) logits[id] = v;
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double mx = logits[ids[0]] / 0.8;
  double z = 0.0;
  for (float v : logits) z += std::exp(v / 0.8 - mx);
  std::vector<int32_t> nucleus;
  double cum = 0.0;
  for (int32_t id : ids) {
    nucleus.push_back(id);
    cum += std::exp(logits[id] / 0.8 - mx) / z;
    if (cum >= 0.9) break;
  }
  ASSERT_GE(nucleus.size(), 2u);
  ASSERT_LE(nucleus.size(), 5u);
  double zn = 0.0;
  for (int32_t id : nucleus) zn += std::exp(logits[id] / 0.8 - mx);
  Rng rng(21);
  std::map<int32_t, int> h;
  const int draws = 1200;
  for (int i = 0; i < draws; ++i) ++h[s.sample(logits, p, {}, {}, rng, nullptr)];
  for (const auto& [id, c] : h) ASSERT_NE(std::find(nucleus.begin(), nucleus.end(), id), nucleus.end()) << id;
  for (int32_t id : nucleus) EXPECT_NEAR(h[id] / double(draws), std::exp(logits[id] / 0.8 - mx) / zn, 0.045) << id;
  // top_k 3 keeps exactly the three best.
  p.top_p = 1.0f;
  p.top_k = 3;
  h.clear();
  for (int i = 0; i < 300; ++i) ++h[s.sample(logits, p, {}, {}, rng, nullptr)];
  EXPECT_EQ(h.size(), 3u);
  EXPECT_GT(h[17], 0);
  EXPECT_GT(h[90000], 0);
  EXPECT_GT(h[123], 0);
}

}  // namespace
}  // namespace ts::engine
