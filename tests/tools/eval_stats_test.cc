// Significance and intervals of tokenserve eval on crafted data.
#include "tools/eval_stats.h"

#include <gtest/gtest.h>

#include <vector>

namespace ts::tools {
namespace {

TEST(EvalStats, WilsonIntervalKnownValues) {
  // 8/10 at 95%: [0.4902, 0.9433] (Wilson 1927; matches statsmodels proportion_confint).
  Interval w = wilson_interval(8, 10);
  EXPECT_NEAR(w.low, 0.4902, 1e-3);
  EXPECT_NEAR(w.high, 0.9433, 1e-3);
  Interval all = wilson_interval(8, 8);
  EXPECT_NEAR(all.low, 0.6756, 1e-3);
  EXPECT_DOUBLE_EQ(all.high, 1.0);
  Interval none = wilson_interval(0, 0);
  EXPECT_EQ(none.low, 0);
  EXPECT_EQ(none.high, 1);
  // Wider with fewer samples.
  EXPECT_GT(wilson_interval(5, 10).high - wilson_interval(5, 10).low,
            wilson_interval(50, 100).high - wilson_interval(50, 100).low);
}

TEST(EvalStats, McNemarExact) {
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 0), 1.0);
  EXPECT_NEAR(mcnemar_exact_p(6, 0), 2.0 / 64, 1e-12);     // 2 * 0.5^6
  EXPECT_NEAR(mcnemar_exact_p(0, 6), 2.0 / 64, 1e-12);     // symmetric
  EXPECT_NEAR(mcnemar_exact_p(5, 0), 2.0 / 32, 1e-12);     // 0.0625: not significant at 5%
  EXPECT_NEAR(mcnemar_exact_p(10, 2), 0.03857, 1e-4);      // 2 * P[X <= 2], X ~ B(12, .5)
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(3, 3), 1.0);
  EXPECT_GT(mcnemar_exact_p(200, 180), 0.05);
  EXPECT_LT(mcnemar_exact_p(300, 200), 1e-4);
}

TEST(EvalStats, PairedTestBinaryUsesMcNemarOnDiscordantPairs) {
  // 20 cases: 12 both pass, 7 regress (1 -> 0), 1 fixed (0 -> 1).
  std::vector<double> base, cand;
  for (int i = 0; i < 12; ++i) base.push_back(1), cand.push_back(1);
  for (int i = 0; i < 7; ++i) base.push_back(1), cand.push_back(0);
  base.push_back(0), cand.push_back(1);
  PairedTest t = paired_test(base, cand);
  EXPECT_EQ(t.test, "mcnemar_exact");
  EXPECT_EQ(t.n, 20);
  EXPECT_EQ(t.base_only, 7);
  EXPECT_EQ(t.cand_only, 1);
  EXPECT_NEAR(t.delta, -6.0 / 20, 1e-12);
  EXPECT_NEAR(t.p_value, mcnemar_exact_p(7, 1), 1e-12);
  EXPECT_LT(t.p_value, 0.08);
  // Same mean change spread evenly (as many fixed as broken): nothing significant.
  std::vector<double> b2 = {1, 1, 1, 1, 0, 0, 0, 0}, c2 = {0, 0, 1, 1, 1, 1, 0, 0};
  PairedTest t2 = paired_test(b2, c2);
  EXPECT_EQ(t2.delta, 0);
  EXPECT_DOUBLE_EQ(t2.p_value, 1.0);
}

TEST(EvalStats, PairedBootstrapOnGradedScores) {
  std::vector<double> base, shifted, noisy;
  for (int i = 0; i < 40; ++i) {
    base.push_back(0.5 + 0.01 * (i % 7));
    shifted.push_back(base.back() - 0.2);                   // a consistent drop
    noisy.push_back(base.back() + ((i % 2) ? 0.05 : -0.05));  // zero-mean jitter
  }
  PairedTest drop = paired_test(base, shifted);
  EXPECT_EQ(drop.test, "paired_bootstrap");
  EXPECT_NEAR(drop.delta, -0.2, 1e-9);
  EXPECT_LT(drop.p_value, 0.01);
  PairedTest jitter = paired_test(base, noisy);
  EXPECT_NEAR(jitter.delta, 0, 1e-9);
  EXPECT_GT(jitter.p_value, 0.5);
  // Reproducible with the fixed seed.
  EXPECT_EQ(paired_test(base, shifted).p_value, drop.p_value);
  // Mismatched inputs: no test.
  EXPECT_EQ(paired_test(base, std::vector<double>{1.0}).n, 0);
}

TEST(EvalStats, BootstrapMeanCiCoversTheMean) {
  std::vector<double> v;
  for (int i = 0; i < 100; ++i) v.push_back((i % 4) / 4.0);  // mean 0.375
  Interval ci = bootstrap_mean_ci(v);
  EXPECT_LT(ci.low, 0.375);
  EXPECT_GT(ci.high, 0.375);
  EXPECT_GT(ci.low, 0.3);
  EXPECT_LT(ci.high, 0.45);
  std::vector<double> one = {0.7};
  EXPECT_DOUBLE_EQ(bootstrap_mean_ci(one).low, 0.7);
}

TEST(EvalStats, RepetitionRate) {
  EXPECT_NEAR(repetition_rate("the cat the cat the cat", 2), 0.6, 1e-12);
  EXPECT_EQ(repetition_rate("a b c d e f", 3), 0);
  EXPECT_EQ(repetition_rate("too short", 3), 0);
  EXPECT_NEAR(repetition_rate("Go, go, go! GO go", 1), 0.8, 1e-12);  // case and punctuation ignored
  EXPECT_GT(repetition_rate("He liked to play. He liked to play. He liked to play."), 0.5);
}

}  // namespace
}  // namespace ts::tools
