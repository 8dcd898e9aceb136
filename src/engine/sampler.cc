#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace ts::engine {
namespace {

inline uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Higher value first; equal values: lower id first.
inline bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint64_t choice_seed(uint64_t request_seed, int32_t index) {
  uint64_t x = request_seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(index + 1));
  return splitmix(x);
}

Sampler::Sampler(int32_t n_vocab)
    : n_vocab_(n_vocab), work_(n_vocab), stamp_(n_vocab, 0), count_(n_vocab, 0) {
  TS_CHECK(n_vocab > 0, "sampler needs a vocabulary");
  cand_.reserve(n_vocab);
}

void Sampler::logprobs(std::span<const float> logits, int32_t token, int32_t n, LogprobEntry* out) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  out->sampled = {token, static_cast<float>(logits[token] - lse)};
  out->top.clear();
  if (n <= 0) return;
  // Small sorted list of the n best (n <= 20): one pass over the vocabulary.
  std::vector<std::pair<float, int32_t>> best;
  best.reserve(static_cast<size_t>(n) + 1);
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
    std::pair<float, int32_t> c{logits[i], i};
    if (static_cast<int32_t>(best.size()) == n && !better(c, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), c, better), c);
    if (static_cast<int32_t>(best.size()) > n) best.pop_back();
  }
  for (const auto& [v, id] : best) out->top.push_back({id, static_cast<float>(v - lse)});
}

void Sampler::apply_penalties(const SamplingParams& p, std::span<const int32_t> prompt,
                              std::span<const int32_t> output) {
  const bool rep = p.repetition_penalty != 1.0f;
  const bool freq = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (!rep && !freq) return;
  if (++gen_ == 0) {  // wrapped: reset stamps
    std::fill(stamp_.begin(), stamp_.end(), 0);
    gen_ = 1;
  }
  if (rep) {
    // Each distinct token of prompt + output once (CTRL / HF style).
    auto penalize = [&](int32_t t) {
      if (t < 0 || t >= n_vocab_ || stamp_[t] == gen_) return;
      stamp_[t] = gen_;
      float& v = work_[t];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    };
    for (int32_t t : prompt) penalize(t);
    for (int32_t t : output) penalize(t);
    if (++gen_ == 0) {
      std::fill(stamp_.begin(), stamp_.end(), 0);
      gen_ = 1;
    }
  }
  if (freq) {
    for (int32_t t : output) {
      if (t < 0 || t >= n_vocab_) continue;
      if (stamp_[t] != gen_) {
        stamp_[t] = gen_;
        count_[t] = 0;
      }
      ++count_[t];
    }
    for (int32_t t : output) {
      if (t < 0 || t >= n_vocab_ || count_[t] == 0) continue;
      work_[t] -= p.frequency_penalty * static_cast<float>(count_[t]) + p.presence_penalty;
      count_[t] = 0;  // apply once per distinct token
    }
  }
}

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& p,
                        std::span<const int32_t> prompt, std::span<const int32_t> output, Rng& rng,
                        LogprobEntry* lp, std::span<const uint64_t> allowed) {
  TS_CHECK(static_cast<int32_t>(logits.size()) == n_vocab_, "logits size != vocabulary");
  std::copy(logits.begin(), logits.end(), work_.begin());
  const bool masked = !allowed.empty();
  int32_t first_allowed = 0;
  if (masked) {
    // Constrained decoding: disallowed tokens get -inf before anything else sees them.
    TS_CHECK(static_cast<int64_t>(allowed.size()) * 64 >= n_vocab_, "mask shorter than the vocabulary");
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    first_allowed = -1;
    for (int32_t w = 0; w * 64 < n_vocab_; ++w) {
      const uint64_t bits = allowed[static_cast<size_t>(w)];
      const int32_t base = w * 64, lim = std::min(64, n_vocab_ - base);
      if (bits == ~uint64_t{0} && lim == 64) {
        if (first_allowed < 0) first_allowed = base;
        continue;
      }
      for (int32_t b = 0; b < lim; ++b) {
        if ((bits >> b) & 1) {
          if (first_allowed < 0) first_allowed = base + b;
        } else {
          work_[base + b] = kNegInf;
        }
      }
    }
    TS_CHECK(first_allowed >= 0, "sampling with an empty token mask");
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < n_vocab_) work_[id] += bias;
  }
  apply_penalties(p, prompt, output);

  int32_t token = 0;
  const int32_t V = n_vocab_;
  if (p.temperature <= 0.0f || p.top_k == 1) {
    token = first_allowed;
    for (int32_t i = first_allowed + 1; i < V; ++i) {
      if (work_[i] > work_[token]) token = i;
    }
  } else {
    const float inv_t = 1.0f / p.temperature;
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < V; ++i) {
      work_[i] *= inv_t;
      mx = std::max(mx, work_[i]);
    }
    const bool use_top_p = p.top_p > 0.0f && p.top_p < 1.0f;
    if ((p.top_k <= 0 || p.top_k >= V) && !use_top_p && masked) {
      // The same draw over the allowed tokens only (sparse masks are the common case).
      const double thr = p.min_p > 0.0f ? static_cast<double>(p.min_p) : 0.0;
      ids_.clear();
      for (int32_t w = 0; w * 64 < V; ++w) {
        for (uint64_t bits = allowed[static_cast<size_t>(w)]; bits != 0; bits &= bits - 1) {
          const int32_t id = w * 64 + std::countr_zero(bits);
          if (id < V) ids_.push_back(id);
        }
      }
      double total = 0.0;
      for (int32_t id : ids_) {
        const double e = std::exp(static_cast<double>(work_[id]) - mx);
        if (e >= thr) total += e;
      }
      double u = rng.uniform() * total;
      token = -1;
      int32_t last = first_allowed;
      for (int32_t id : ids_) {
        const double e = std::exp(static_cast<double>(work_[id]) - mx);
        if (e < thr) continue;
        last = id;
        u -= e;
        if (u < 0) {
          token = id;
          break;
        }
      }
      if (token < 0) token = last;
    } else if ((p.top_k <= 0 || p.top_k >= V) && !use_top_p) {
      // No ordering needed: min_p against the max (prob 1 before normalization), then draw.
      const double thr = p.min_p > 0.0f ? static_cast<double>(p.min_p) : 0.0;
      double total = 0.0;
      for (int32_t i = 0; i < V; ++i) {
        const double e = std::exp(static_cast<double>(work_[i]) - mx);
        if (e >= thr) total += e;
      }
      double u = rng.uniform() * total;
      token = -1;
      int32_t last = first_allowed;
      for (int32_t i = 0; i < V; ++i) {
        const double e = std::exp(static_cast<double>(work_[i]) - mx);
        if (e < thr || (masked && work_[i] == -std::numeric_limits<float>::infinity())) continue;
        last = i;
        u -= e;
        if (u < 0) {
          token = i;
          break;
        }
      }
      if (token < 0) token = last;  // rounding at the very end
    } else {
      cand_.clear();
      for (int32_t i = 0; i < V; ++i) {
        if (masked && work_[i] == -std::numeric_limits<float>::infinity()) continue;  // not allowed
        cand_.emplace_back(work_[i], i);
      }
      const int32_t C = static_cast<int32_t>(cand_.size());  // candidates (V when unmasked)
      const int32_t k = p.top_k > 0 ? std::min(p.top_k, C) : C;
      double z_all = 0.0;
      if (k == C) {
        for (const auto& c : cand_) z_all += std::exp(static_cast<double>(c.first) - mx);
      }
      int32_t m = k < C ? k : std::min(C, 256);
      int32_t keep = 0;
      for (;;) {
        if (m < C) std::nth_element(cand_.begin(), cand_.begin() + m, cand_.end(), better);
        std::sort(cand_.begin(), cand_.begin() + m, better);
        double z = z_all;
        if (k < C) {
          z = 0.0;
          for (int32_t i = 0; i < k; ++i) z += std::exp(static_cast<double>(cand_[i].first) - mx);
        }
        if (!use_top_p) {
          keep = m;
          break;
        }
        double cum = 0.0;
        keep = 0;
        for (int32_t i = 0; i < m; ++i) {
          cum += std::exp(static_cast<double>(cand_[i].first) - mx) / z;
          if (cum >= p.top_p) {
            keep = i + 1;
            break;
          }
        }
        if (keep > 0) break;
        if (m >= k) {
          keep = m;  // rounding: everything
          break;
        }
        m = std::min(k, m * 4);
      }
      if (p.min_p > 0.0f) {
        const double thr = std::log(static_cast<double>(p.min_p)) + cand_[0].first;
        int32_t j = 1;
        while (j < keep && cand_[j].first >= thr) ++j;
        keep = j;
      }
      double total = 0.0;
      for (int32_t i = 0; i < keep; ++i) total += std::exp(static_cast<double>(cand_[i].first) - mx);
      double u = rng.uniform() * total;
      token = cand_[keep - 1].second;
      for (int32_t i = 0; i < keep; ++i) {
        u -= std::exp(static_cast<double>(cand_[i].first) - mx);
        if (u < 0) {
          token = cand_[i].second;
          break;
        }
      }
    }
  }
  if (lp != nullptr) logprobs(logits, token, p.logprobs ? p.top_logprobs : 0, lp);
  return token;
}

}  // namespace ts::engine
