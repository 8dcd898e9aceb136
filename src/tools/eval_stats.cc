#include "tools/eval_stats.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>
#include <unordered_set>
#include <vector>

namespace ts::tools {

Interval wilson_interval(int64_t successes, int64_t n, double z) {
  if (n <= 0) return {0, 1};
  const double nn = static_cast<double>(n);
  const double p = static_cast<double>(successes) / nn;
  const double z2 = z * z;
  const double denom = 1 + z2 / nn;
  const double centre = (p + z2 / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

Interval bootstrap_mean_ci(std::span<const double> scores, int iters, uint64_t seed,
                           double confidence) {
  if (scores.empty()) return {0, 1};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, scores.size() - 1);
  std::vector<double> means(static_cast<size_t>(std::max(1, iters)));
  for (double& m : means) {
    double s = 0;
    for (size_t i = 0; i < scores.size(); ++i) s += scores[pick(rng)];
    m = s / static_cast<double>(scores.size());
  }
  std::sort(means.begin(), means.end());
  const double alpha = (1 - confidence) / 2;
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(std::floor(q * static_cast<double>(means.size() - 1) + 0.5));
    return means[std::min(i, means.size() - 1)];
  };
  return {at(alpha), at(1 - alpha)};
}

double mcnemar_exact_p(int64_t b, int64_t c) {
  const int64_t n = b + c;
  if (n <= 0) return 1;
  const int64_t k = std::min(b, c);
  // P[X <= k] for X ~ Binomial(n, 1/2), summed in log space.
  const double ln_half_n = static_cast<double>(n) * std::log(0.5);
  const double ln_nf = std::lgamma(static_cast<double>(n) + 1);
  double tail = 0;
  for (int64_t i = 0; i <= k; ++i) {
    const double ln_c = ln_nf - std::lgamma(static_cast<double>(i) + 1) -
                        std::lgamma(static_cast<double>(n - i) + 1);
    tail += std::exp(ln_c + ln_half_n);
  }
  return std::min(1.0, 2 * tail);
}

PairedTest paired_test(std::span<const double> base, std::span<const double> cand, int iters,
                       uint64_t seed) {
  PairedTest t;
  if (base.size() != cand.size() || base.empty()) {
    t.test = "none";
    return t;
  }
  const size_t n = base.size();
  t.n = static_cast<int64_t>(n);
  bool binary = true;
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) {
    t.base_mean += base[i];
    t.cand_mean += cand[i];
    d[i] = cand[i] - base[i];
    for (double v : {base[i], cand[i]}) binary = binary && (v == 0 || v == 1);
    if (base[i] > cand[i]) ++t.base_only;
    if (cand[i] > base[i]) ++t.cand_only;
  }
  t.base_mean /= static_cast<double>(n);
  t.cand_mean /= static_cast<double>(n);
  t.delta = t.cand_mean - t.base_mean;
  if (binary) {
    t.test = "mcnemar_exact";
    t.p_value = mcnemar_exact_p(t.base_only, t.cand_only);
    return t;
  }
  t.test = "paired_bootstrap";
  // Resample the differences centred on zero (the null) and count means at least as extreme.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  const double obs = std::fabs(t.delta);
  if (obs == 0) return t;  // p = 1
  int64_t extreme = 0;
  const int total = std::max(1, iters);
  for (int it = 0; it < total; ++it) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += d[pick(rng)] - t.delta;
    if (std::fabs(s / static_cast<double>(n)) >= obs - 1e-12) ++extreme;
  }
  t.p_value = (static_cast<double>(extreme) + 1) / (static_cast<double>(total) + 1);
  return t;
}

double repetition_rate(std::string_view text, int n) {
  std::vector<std::string> words;
  std::string cur;
  for (char ch : text) {
    unsigned char u = static_cast<unsigned char>(ch);
    if (std::isalnum(u) || u >= 0x80 || ch == '\'') {
      cur += static_cast<char>(std::tolower(u));
    } else if (!cur.empty()) {
      words.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  if (n < 1 || static_cast<int64_t>(words.size()) < n) return 0;
  const size_t total = words.size() - static_cast<size_t>(n) + 1;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < total; ++i) {
    std::string g;
    for (int k = 0; k < n; ++k) {
      g += words[i + static_cast<size_t>(k)];
      g += '\x1f';
    }
    seen.insert(std::move(g));
  }
  return 1.0 - static_cast<double>(seen.size()) / static_cast<double>(total);
}

}  // namespace ts::tools
