#include "engine/batch_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace ts::engine {
namespace {

// Rows with an inf or NaN anywhere (first value, inside a later block of the finiteness scan,
// the last value) come back not ready; every finite row gets the token a serial Sampler draws.
TEST(BatchSampler, NonFiniteRowsAreLeftToTheCallerFiniteRowsMatchSerial) {
  constexpr int32_t kV = 10007;  // not a multiple of the scan's block
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.f, 2.f);
  const float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  struct Bad {
    int32_t at;
    float value;
  };
  const std::vector<Bad> bad = {{-1, 0.f}, {0, kNaN}, {5000, kInf}, {kV - 1, -kInf}, {-1, 0.f}, {9000, kNaN}};
  std::vector<std::vector<float>> logits;
  for (const Bad& b : bad) {
    std::vector<float> row(kV);
    for (float& x : row) x = nd(gen);
    if (b.at >= 0) row[static_cast<size_t>(b.at)] = b.value;
    logits.push_back(std::move(row));
  }
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 50;
  std::vector<Rng> rngs, serial_rngs;
  for (size_t i = 0; i < bad.size(); ++i) {
    rngs.emplace_back(11 + i);
    serial_rngs.emplace_back(11 + i);
  }
  std::vector<SampleRow> rows(bad.size());
  for (size_t i = 0; i < bad.size(); ++i) rows[i] = {.logits = logits[i].data(), .params = &p, .rng = &rngs[i]};
  ThreadPool pool(2);
  BatchSampler bs(kV);
  bs.sample(pool, rows);
  Sampler serial(kV);
  for (size_t i = 0; i < bad.size(); ++i) {
    if (bad[i].at >= 0) {
      EXPECT_FALSE(rows[i].ready) << "row " << i;
      continue;
    }
    ASSERT_TRUE(rows[i].ready) << "row " << i;
    EXPECT_EQ(rows[i].token, serial.sample(logits[i], p, {}, {}, serial_rngs[i], nullptr)) << "row " << i;
  }
}

}  // namespace
}  // namespace ts::engine
