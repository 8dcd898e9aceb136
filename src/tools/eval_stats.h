// Statistics behind `tokenserve eval`: confidence intervals of a layer's score, a paired
// significance test between a baseline run and a candidate over the same cases, and the
// n-gram repetition rate of an output. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ts::tools {

struct Interval {
  double low = 0;
  double high = 0;
};

// Wilson score interval of a binomial proportion `successes / n` at normal quantile z (1.96 for
// 95%). n == 0 gives [0, 1].
Interval wilson_interval(int64_t successes, int64_t n, double z = 1.96);

// Percentile bootstrap interval of the mean of `scores` (any values) with `iters` resamples
// and a fixed seed (reproducible). Empty input gives [0, 1]; one value gives [v, v].
Interval bootstrap_mean_ci(std::span<const double> scores, int iters = 2000, uint64_t seed = 1,
                           double confidence = 0.95);

// Exact two-sided McNemar (binomial sign) test on the discordant pairs of two paired binary
// runs: b = base passed and candidate failed, c = base failed and candidate passed.
// p = min(1, 2 * P[X <= min(b, c)]) for X ~ Binomial(b + c, 1/2); 1 when b + c == 0.
double mcnemar_exact_p(int64_t b, int64_t c);

struct PairedTest {
  std::string test;       // "mcnemar_exact" (all scores 0/1) or "paired_bootstrap"
  int64_t n = 0;          // pairs
  double base_mean = 0;
  double cand_mean = 0;
  double delta = 0;       // cand_mean - base_mean
  double p_value = 1;     // two-sided, H0: no difference
  int64_t base_only = 0;  // binary: base passed, candidate failed (regressed cases)
  int64_t cand_only = 0;  // binary: base failed, candidate passed (fixed cases)
};

// Paired test of candidate vs base scores (same length, same cases in the same order).
// Binary scores use McNemar's exact test; others a paired bootstrap of the mean difference
// (centred resampling, `iters` resamples, fixed seed). Mismatched lengths or empty input give
// n = 0 and p = 1.
PairedTest paired_test(std::span<const double> base, std::span<const double> cand,
                       int iters = 5000, uint64_t seed = 1);

// Share of the word n-grams of `text` (lower-cased, split on whitespace and punctuation) that
// repeat an earlier n-gram of the same text: 1 - unique / total. 0 when text has fewer than n
// words. "the cat the cat the cat" with n = 2 -> 5 bigrams, 2 unique -> 0.6.
double repetition_rate(std::string_view text, int n = 3);

}  // namespace ts::tools
