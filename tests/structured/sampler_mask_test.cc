// The sampler's allowed-token mask (constrained decoding): only allowed tokens are drawn, under
// every parameter, and among them the draw follows the unmasked distribution renormalized.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/sampler.h"

namespace ts::engine {
namespace {

std::vector<uint64_t> mask_of(int32_t V, const std::vector<int32_t>& ids) {
  std::vector<uint64_t> m(static_cast<size_t>((V + 63) / 64), 0);
  for (int32_t id : ids) m[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  return m;
}

TEST(SamplerMask, OnlyAllowedTokensUnderEveryParameter) {
  const int32_t V = 300;
  std::vector<float> logits(V);
  for (int32_t i = 0; i < V; ++i) logits[i] = static_cast<float>((i * 37) % 11) - (i == 5 ? -20.0f : 0.0f);
  const std::vector<int32_t> ids{3, 64, 65, 130, 299};
  const auto m = mask_of(V, ids);
  std::vector<SamplingParams> ps(8);
  ps[0].temperature = 0.0f;
  ps[1].top_k = 2;
  ps[2].top_p = 0.5f;
  ps[3].min_p = 0.3f;
  ps[4].repetition_penalty = 1.5f;
  ps[5].frequency_penalty = 1.0f;
  ps[6].logit_bias = {{5, 100.0f}, {7, 50.0f}};  // strongly favoured but not allowed
  ps[7].temperature = 2.0f;
  Sampler s(V);
  const std::vector<int32_t> out{3, 3, 64};
  for (size_t k = 0; k < ps.size(); ++k) {
    Rng rng(k + 1);
    for (int i = 0; i < 200; ++i) {
      const int32_t t = s.sample(logits, ps[k], {}, out, rng, nullptr, m);
      EXPECT_TRUE(std::find(ids.begin(), ids.end(), t) != ids.end()) << "params " << k << " drew " << t;
    }
  }
  // Greedy picks the best allowed token even when disallowed ones are higher (token 5 is at +20).
  Rng rng(1);
  SamplingParams g;
  g.temperature = 0.0f;
  int32_t best = ids[0];
  for (int32_t id : ids) if (logits[id] > logits[best]) best = id;
  EXPECT_EQ(s.sample(logits, g, {}, {}, rng, nullptr, m), best);
}

TEST(SamplerMask, DrawFollowsTheRenormalizedDistribution) {
  const int32_t V = 200;
  std::vector<float> logits(V, 0.0f);
  logits[10] = 0.0f;
  logits[70] = std::log(2.0f);
  logits[150] = std::log(5.0f);
  logits[3] = 10.0f;  // disallowed
  const auto m = mask_of(V, {10, 70, 150});
  Sampler s(V);
  Rng rng(99);
  SamplingParams p;
  int counts[3] = {0, 0, 0};
  const int N = 16000;
  for (int i = 0; i < N; ++i) {
    const int32_t t = s.sample(logits, p, {}, {}, rng, nullptr, m);
    counts[t == 10 ? 0 : t == 70 ? 1 : 2] += (t == 10 || t == 70 || t == 150);
    ASSERT_TRUE(t == 10 || t == 70 || t == 150) << t;
  }
  // Expected 1:2:5 of 8.
  EXPECT_NEAR(counts[0] / double(N), 1.0 / 8, 0.015);
  EXPECT_NEAR(counts[1] / double(N), 2.0 / 8, 0.02);
  EXPECT_NEAR(counts[2] / double(N), 5.0 / 8, 0.02);
}

}  // namespace
}  // namespace ts::engine
