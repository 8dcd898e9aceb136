// Descriptive statistics for benchmark samples: percentiles and a summary (count, mean, min,
// max, P50/P95/P99). Pure functions over values; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ts::tools {

struct Summary {
  int64_t count = 0;  // number of samples
  double mean = 0;    // arithmetic mean; 0 when count == 0
  double min = 0;
  double max = 0;
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
};

// The p-th percentile (p in [0, 100]) of ascending-sorted values, interpolating linearly
// between the two closest ranks (rank = p/100 * (n-1); numpy's default "linear" method).
// Returns 0 for an empty span. p outside [0, 100] is clamped.
double percentile_sorted(std::span<const double> sorted, double p);

// Sorts a copy and returns percentile_sorted.
double percentile(std::vector<double> values, double p);

// Summary of the values (any order); all zero when empty.
Summary summarize(std::vector<double> values);

}  // namespace ts::tools
