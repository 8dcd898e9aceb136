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

// ---------------------------------------------------------------- kernels
//
// GCC/Clang vector extensions: 4 x float lowers to SSE2 on every x86-64 (and to NEON elsewhere),
// so this needs no runtime dispatch and is the same code on every ISA path.
namespace {

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

inline v4f load4(const float* p) {
  v4f v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
inline void store4(float* p, v4f v) { __builtin_memcpy(p, &v, sizeof(v)); }
inline v4f splat(float x) { return v4f{x, x, x, x}; }

constexpr float kExpMin = -87.3f;  // below: the result would be denormal; give 0

// exp by range reduction x = n ln2 + r, |r| <= ln2 / 2, and a degree-6 polynomial for e^r
// (Cephes expf coefficients), scaled by 2^n through the exponent bits.
inline v4f exp4(v4f x) {
  const v4f lo = splat(kExpMin);
  const v4i under = x < lo;
  v4f xc = under ? lo : x;
  xc = xc > splat(88.0f) ? splat(88.0f) : xc;
  const v4f magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const v4f n = (xc * splat(1.44269504088896341f) + magic) - magic;
  const v4f r = (xc - n * splat(0.693359375f)) - n * splat(-2.12194440e-4f);
  v4f p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * r * r + r + splat(1.0f);
  const v4i bits = (__builtin_convertvector(n, v4i) + 127) << 23;
  v4f scale;
  __builtin_memcpy(&scale, &bits, sizeof(scale));
  const v4f res = p * scale;
  return under ? splat(0.0f) : res;
}

inline float exp1(float x) {
  float in[4] = {x, 0, 0, 0}, out[4];
  store4(out, exp4(load4(in)));
  return out[0];
}

}  // namespace

double exp_shifted(const float* x, int32_t n, float scale, float shift, float* out, float* block_sums) {
  const v4f vs = splat(scale), vsh = splat(shift);
  double total = 0.0;
  for (int32_t b = 0; b < n; b += kExpBlock) {
    const int32_t e = std::min(n, b + kExpBlock);
    float bsum = 0.0f;
    int32_t i = b;
    if (e - b == kExpBlock) {
      v4f a0 = splat(0.0f), a1 = splat(0.0f);
      for (; i < e; i += 8) {
        const v4f y0 = exp4(load4(x + i) * vs - vsh);
        const v4f y1 = exp4(load4(x + i + 4) * vs - vsh);
        if (out != nullptr) {
          store4(out + i, y0);
          store4(out + i + 4, y1);
        }
        a0 += y0;
        a1 += y1;
      }
      const v4f a = a0 + a1;
      bsum = (a[0] + a[1]) + (a[2] + a[3]);
    } else {
      for (; i < e; ++i) {
        const float y = exp1(x[i] * scale - shift);
        if (out != nullptr) out[i] = y;
        bsum += y;
      }
    }
    if (block_sums != nullptr) block_sums[b / kExpBlock] = bsum;
    total += bsum;
  }
  return total;
}

double exp_shifted_reference(const float* x, int32_t n, float scale, float shift, float* out) {
  double total = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    const float a = x[i] * scale - shift;
    out[i] = a < kExpMin ? 0.0f : std::exp(a);
    total += out[i];
  }
  return total;
}

float max_value(const float* x, int32_t n) {
  TS_CHECK(n > 0, "max of nothing");
  float m = x[0];
  int32_t i = 0;
  if (n >= 8) {
    v4f m0 = load4(x), m1 = load4(x + 4);
    for (i = 8; i + 8 <= n; i += 8) {
      const v4f a = load4(x + i), b = load4(x + i + 4);
      m0 = a > m0 ? a : m0;
      m1 = b > m1 ? b : m1;
    }
    const v4f mm = m0 > m1 ? m0 : m1;
    m = std::max(std::max(mm[0], mm[1]), std::max(mm[2], mm[3]));
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

void select_top_k(const float* x, int32_t n, int32_t k, std::vector<std::pair<float, int32_t>>& out) {
  TS_CHECK(k > 0, "top_k needs k > 0");
  // Threshold filter: values not above the k-th best kept so far cannot enter (a later equal
  // value has a higher id, so it is worse). The buffer is compacted to the best k when full.
  const size_t cap = static_cast<size_t>(std::max(2 * k, k + 256));
  out.clear();
  out.reserve(std::min(cap + 8, static_cast<size_t>(n)));
  float thr = -std::numeric_limits<float>::infinity();
  auto compact = [&] {
    std::nth_element(out.begin(), out.begin() + (k - 1), out.end(), better);
    out.resize(static_cast<size_t>(k));
    thr = out[static_cast<size_t>(k) - 1].first;  // the k-th best: the worst kept
  };
  if (static_cast<int64_t>(k) * 8 >= n) {
    // A large share of the values: one partial sort of them all beats repeated compaction.
    for (int32_t i = 0; i < n; ++i) {
      if (x[i] > thr) out.emplace_back(x[i], i);
    }
    if (static_cast<int32_t>(out.size()) > k) compact();
    std::sort(out.begin(), out.end(), better);
    return;
  }
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v4f a = load4(x + i), b = load4(x + i + 4);
    const v4f m = a > b ? a : b;
    if (!(m[0] > thr || m[1] > thr || m[2] > thr || m[3] > thr)) continue;
    for (int32_t j = i; j < i + 8; ++j) {
      if (x[j] > thr) out.emplace_back(x[j], j);
    }
    if (out.size() >= cap) compact();
  }
  for (; i < n; ++i) {
    if (x[i] > thr) out.emplace_back(x[i], i);
  }
  if (static_cast<int32_t>(out.size()) > k) compact();
  std::sort(out.begin(), out.end(), better);
}

// ---------------------------------------------------------------- Sampler

Sampler::Sampler(int32_t n_vocab)
    : n_vocab_(n_vocab),
      work_(n_vocab),
      stamp_(n_vocab, 0),
      count_(n_vocab, 0),
      prob_(n_vocab),
      block_sums_((n_vocab + kExpBlock - 1) / kExpBlock) {
  TS_CHECK(n_vocab > 0, "sampler needs a vocabulary");
  cand_.reserve(1024);
}

void Sampler::logprobs(std::span<const float> logits, int32_t token, int32_t n, LogprobEntry* out) {
  const int32_t V = static_cast<int32_t>(logits.size());
  const float mx = max_value(logits.data(), V);
  // Log-sum-exp: float exps, summed per block in float and across blocks in double.
  const double sum = exp_shifted(logits.data(), V, 1.0f, mx, nullptr, nullptr);
  const double lse = mx + std::log(sum);
  out->sampled = {token, static_cast<float>(logits[token] - lse)};
  out->top.clear();
  if (n <= 0) return;
  std::vector<std::pair<float, int32_t>> best;
  select_top_k(logits.data(), V, n, best);
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
  const int32_t V = n_vocab_;
  const bool masked = !allowed.empty();
  const bool penalized = p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  // The logits as processed (mask, bias, penalties); the raw row when nothing changes them.
  const float* x = logits.data();
  if (masked || penalized || !p.logit_bias.empty()) {
    std::copy(logits.begin(), logits.end(), work_.begin());
    x = work_.data();
  }
  if (masked) {
    // Constrained decoding: disallowed tokens get -inf before anything else sees them.
    TS_CHECK(static_cast<int64_t>(allowed.size()) * 64 >= n_vocab_, "mask shorter than the vocabulary");
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    bool any = false;
    for (int32_t w = 0; w * 64 < n_vocab_; ++w) {
      const uint64_t bits = allowed[static_cast<size_t>(w)];
      const int32_t base = w * 64, lim = std::min(64, n_vocab_ - base);
      const uint64_t valid = lim == 64 ? ~uint64_t{0} : ((uint64_t{1} << lim) - 1);
      if ((bits & valid) != 0) any = true;
      if ((bits & valid) == valid) continue;
      for (int32_t b = 0; b < lim; ++b) {
        if (((bits >> b) & 1) == 0) work_[base + b] = kNegInf;
      }
    }
    TS_CHECK(any, "sampling with an empty token mask");
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < n_vocab_) work_[id] += bias;
  }
  apply_penalties(p, prompt, output);

  int32_t token = 0;
  if (p.temperature <= 0.0f || p.top_k == 1) {
    // Argmax, lowest id on ties: the first index holding the maximum.
    const float mx = max_value(x, V);
    token = 0;
    while (x[token] != mx) ++token;
  } else {
    // Selection works on the unscaled values (a positive scale keeps the order); only the kept
    // candidates are scaled by 1 / temperature.
    const float inv_t = 1.0f / p.temperature;
    const bool use_top_p = p.top_p > 0.0f && p.top_p < 1.0f;
    const bool use_top_k = p.top_k > 0 && p.top_k < V;
    if (!use_top_k && !use_top_p) {
      // The whole distribution: one exp pass, min_p against the max (prob 1), block-wise draw.
      const float mx = max_value(x, V);
      const int32_t num_blocks = static_cast<int32_t>(block_sums_.size());
      double total = exp_shifted(x, V, inv_t, mx * inv_t, prob_.data(), block_sums_.data());
      if (p.min_p > 0.0f) {
        const float thr = p.min_p;
        total = 0.0;
        for (int32_t b = 0; b < num_blocks; ++b) {
          float bs = 0.0f;
          for (int32_t i = b * kExpBlock, e = std::min(V, i + kExpBlock); i < e; ++i) {
            if (prob_[i] < thr) prob_[i] = 0.0f;
            bs += prob_[i];
          }
          block_sums_[b] = bs;
          total += bs;
        }
      }
      double u = rng.uniform() * total;
      token = -1;
      int32_t last = -1;
      for (int32_t b = 0; b < num_blocks && token < 0; ++b) {
        if (block_sums_[b] <= 0.0f) continue;
        if (u >= block_sums_[b]) {
          u -= block_sums_[b];
          for (int32_t i = std::min(V, (b + 1) * kExpBlock) - 1; i >= b * kExpBlock; --i) {
            if (prob_[i] > 0.0f) {
              last = i;
              break;
            }
          }
          continue;
        }
        for (int32_t i = b * kExpBlock, e = std::min(V, i + kExpBlock); i < e; ++i) {
          if (prob_[i] <= 0.0f) continue;
          last = i;
          u -= prob_[i];
          if (u < 0) {
            token = i;
            break;
          }
        }
      }
      if (token < 0) token = last;  // rounding at the very end
      TS_CHECK(token >= 0, "no token has probability");
    } else if (use_top_k) {
      // top_k (then top_p on the top-k renormalized): select, scale, cut, draw.
      select_top_k(x, V, p.top_k, cand_);
      for (auto& c : cand_) c.first *= inv_t;
      const double mx = cand_[0].first;
      const int32_t m = static_cast<int32_t>(cand_.size());
      int32_t keep = m;
      if (use_top_p) {
        double z = 0.0;
        for (const auto& c : cand_) z += std::exp(static_cast<double>(c.first) - mx);
        double cum = 0.0;
        for (int32_t i = 0; i < m; ++i) {
          cum += std::exp(static_cast<double>(cand_[i].first) - mx) / z;
          if (cum >= p.top_p) {
            keep = i + 1;
            break;
          }
        }
      }
      if (p.min_p > 0.0f) {
        const double thr = std::log(static_cast<double>(p.min_p)) + mx;
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
    } else {
      // top_p alone: the normalizer needs every token (one float exp-and-sum pass, nothing
      // stored); the nucleus is then looked for among the best m tokens (select_top_k),
      // m = 64, 256, 1024 ... until their mass reaches top_p.
      const float mx = max_value(x, V);
      const float shift = mx * inv_t;
      const double z = exp_shifted(x, V, inv_t, shift, nullptr, nullptr);
      const double target = static_cast<double>(p.top_p) * z;
      int32_t keep = 0;
      double cum = 0.0;
      for (int32_t m : {64, 256}) {  // small nuclei (the common case): filter passes
        select_top_k(x, V, std::min(m, V), cand_);
        cum = 0.0;
        const int32_t c = static_cast<int32_t>(cand_.size());
        for (int32_t i = 0; i < c && keep == 0; ++i) {
          prob_[i] = exp1(cand_[i].first * inv_t - shift);  // the same exp as the normalizer
          cum += prob_[i];
          if (cum >= target) keep = i + 1;
        }
        if (keep > 0) break;
        if (c < m) keep = c;  // every token with a probability (rounding)
        if (keep > 0) break;
      }
      if (keep == 0) {
        // A flat distribution: every candidate, sorted in growing prefixes. The best `done`
        // are sorted at the front and the rest are all worse, so each round partitions and
        // sorts only what follows them.
        const int32_t done0 = static_cast<int32_t>(cand_.size());
        const std::pair<float, int32_t> last = cand_.back();
        for (int32_t i = 0; i < V; ++i) {
          const std::pair<float, int32_t> c{x[i], i};
          if (x[i] > -std::numeric_limits<float>::infinity() && better(last, c)) cand_.push_back(c);
        }
        const int32_t C = static_cast<int32_t>(cand_.size());
        int32_t done = done0;
        for (int32_t m = std::min(C, done0 * 4); keep == 0; m = std::min(C, m * 4)) {
          if (m < C) std::nth_element(cand_.begin() + done, cand_.begin() + m, cand_.end(), better);
          std::sort(cand_.begin() + done, cand_.begin() + m, better);
          for (int32_t i = done; i < m && keep == 0; ++i) {
            prob_[i] = exp1(cand_[i].first * inv_t - shift);
            cum += prob_[i];
            if (cum >= target) keep = i + 1;
          }
          if (keep == 0 && m == C) keep = C;  // rounding: everything
          done = m;
        }
      }
      TS_CHECK(keep > 0, "top_p kept no token");
      if (p.min_p > 0.0f) {
        const float thr = p.min_p * prob_[0];
        int32_t j = 1;
        while (j < keep && prob_[j] >= thr) ++j;
        keep = j;
      }
      double total = 0.0;
      for (int32_t i = 0; i < keep; ++i) total += prob_[i];
      double u = rng.uniform() * total;
      token = cand_[keep - 1].second;
      for (int32_t i = 0; i < keep; ++i) {
        u -= prob_[i];
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
