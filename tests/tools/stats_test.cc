#include "tools/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace ts::tools {
namespace {

TEST(Stats, PercentileInterpolatesBetweenRanks) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  std::shuffle(v.begin(), v.end(), std::mt19937(3));
  // rank = p/100 * 99: P50 -> 49.5 -> between 50 and 51; P95 -> 94.05; P99 -> 98.01.
  EXPECT_DOUBLE_EQ(percentile(v, 50), 50.5);
  EXPECT_NEAR(percentile(v, 95), 95.05, 1e-9);
  EXPECT_NEAR(percentile(v, 99), 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 100);
  EXPECT_DOUBLE_EQ(percentile(v, 150), 100);  // clamped
}

TEST(Stats, PercentileSmallSets) {
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 50), 15);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 95), 19.5);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2, 4}, 50), 2.5);
}

TEST(Stats, SummaryOfKnownData) {
  // 90 fast requests at 10 ms and 10 slow ones at 1000 ms: the tail shows only from P95 up.
  std::vector<double> v(90, 10.0);
  v.insert(v.end(), 10, 1000.0);
  Summary s = summarize(v);
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.mean, (90 * 10.0 + 10 * 1000.0) / 100);
  EXPECT_DOUBLE_EQ(s.min, 10);
  EXPECT_DOUBLE_EQ(s.max, 1000);
  EXPECT_DOUBLE_EQ(s.p50, 10);
  EXPECT_DOUBLE_EQ(s.p95, 1000);
  EXPECT_DOUBLE_EQ(s.p99, 1000);
  // rank 0.90*99 = 89.1: 10% of the way from 10 (index 89) to 1000 (index 90).
  EXPECT_NEAR(percentile(v, 90), 10 + 0.1 * 990, 1e-9);
}

TEST(Stats, EmptySummaryIsZero) {
  Summary s = summarize({});
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.mean, 0);
  EXPECT_EQ(s.p99, 0);
}

}  // namespace
}  // namespace ts::tools
