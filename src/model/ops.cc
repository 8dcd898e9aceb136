#include "model/ops.h"

#include <algorithm>
#include <cmath>

#include "model/attention_kernels.h"
#include "tensor/fp16.h"
#include "tensor/matrix.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ts::model {

namespace {

// Sum of squares in four interleaved double sums (lane j: the elements i = j mod 4 below
// n & ~3; the tail in lane 0), combined as (l0 + l1) + (l2 + l3). This order is the reference
// on every ISA tier (the vector form below keeps it: one lane per double of a ymm), so every
// tier gives the same bits. With h, x += h first (in float), written back.
double sumsq_scalar(float* x, const float* h, int64_t n) {
  double s4[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) {
      if (h != nullptr) x[i + j] += h[i + j];
      s4[j] += static_cast<double>(x[i + j]) * x[i + j];
    }
  }
  for (; i < n; ++i) {
    if (h != nullptr) x[i] += h[i];
    s4[0] += static_cast<double>(x[i]) * x[i];
  }
  return (s4[0] + s4[1]) + (s4[2] + s4[3]);
}

void scale_scalar(const float* x, const float* w, float* out, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

#if defined(__x86_64__)
// The same four lanes as sumsq_scalar, one per double of a ymm. The square of a float is exact
// in double, so fma(d, d, acc) rounds once, like the scalar d * d + acc. The chain of dependent
// adds (one per 4 values) bounds it at ~1 value per cycle, against ~4-5 cycles a value for the
// scalar form compiled for the x86-64 baseline.
__attribute__((target("avx2,fma"))) double sumsq_avx2(float* x, const float* h, int64_t n) {
  __m256d acc = _mm256_setzero_pd();
  int64_t i = 0;
  if (h != nullptr) {
    for (; i + 4 <= n; i += 4) {
      const __m128 v = _mm_add_ps(_mm_loadu_ps(x + i), _mm_loadu_ps(h + i));
      _mm_storeu_ps(x + i, v);
      const __m256d d = _mm256_cvtps_pd(v);
      acc = _mm256_fmadd_pd(d, d, acc);
    }
  } else {
    for (; i + 4 <= n; i += 4) {
      const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
      acc = _mm256_fmadd_pd(d, d, acc);
    }
  }
  alignas(32) double s4[4];
  _mm256_store_pd(s4, acc);
  for (; i < n; ++i) {
    if (h != nullptr) x[i] += h[i];
    s4[0] += static_cast<double>(x[i]) * x[i];
  }
  return (s4[0] + s4[1]) + (s4[2] + s4[3]);
}

// out = (x * scale) * w, as scale_scalar rounds it.
__attribute__((target("avx2,fma"))) void scale_avx2(const float* x, const float* w, float* out, int64_t n,
                                                     float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * scale * w[i];
}
#endif

bool use_avx2() {
#if defined(__x86_64__)
  return tensor::active_isa() >= tensor::Isa::kAvx2;
#else
  return false;
#endif
}

// With h: x += h, then out = rms_norm(x) * w; without: out = rms_norm(x) * w (x is not written).
void add_rms_norm_row(float* x, const float* h, const float* w, float* out, int64_t n, float eps, bool avx2) {
#if defined(__x86_64__)
  const double sum = avx2 ? sumsq_avx2(x, h, n) : sumsq_scalar(x, h, n);
#else
  (void)avx2;
  const double sum = sumsq_scalar(x, h, n);
#endif
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
#if defined(__x86_64__)
  if (avx2) {
    scale_avx2(x, w, out, n, scale);
    return;
  }
#endif
  scale_scalar(x, w, out, n, scale);
}

}  // namespace

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  // x is only read when h is null.
  add_rms_norm_row(const_cast<float*>(x), nullptr, w, out, n, eps, use_avx2());
}

void rope_angles(const RopeParams& p, int32_t pos, float* cos_out, float* sin_out) {
  const int half = p.head_dim / 2;
  const float theta_scale = std::pow(p.base, -2.0f / static_cast<float>(p.head_dim));
  float theta = static_cast<float>(pos);
  for (int i = 0; i < half; ++i) {
    float t = theta;
    if (!p.factors.empty()) t /= p.factors[i];
    t *= p.freq_scale;
    cos_out[i] = std::cos(t) * p.mscale;
    sin_out[i] = std::sin(t) * p.mscale;
    theta *= theta_scale;
  }
}

#if defined(__x86_64__)
namespace {
// apply_rope for half a multiple of 8, 8 pairs a step with the scalar's operations (two
// products, then one subtract or add, no fma), so the bits are the same. The scalar form
// compiled for the baseline stayed scalar (x, cs, sn may alias): ~2 % of a prompt's time.
__attribute__((target("avx2,fma"))) void rope_avx2(float* x, int n_heads, int head_dim, bool neox, const float* cs,
                                                   const float* sn) {
  const int half = head_dim / 2;
  if (neox) {
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < half; i += 8) {
        const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
        const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
        // Each product rounded on its own: GCC would otherwise fuse a product and the add
        // into an fma (C++ builds contract by default), and the bits would differ.
        __m256 ac = _mm256_mul_ps(a, c), bs = _mm256_mul_ps(b, s), as = _mm256_mul_ps(a, s), bc = _mm256_mul_ps(b, c);
        __asm__("" : "+x"(ac), "+x"(bs), "+x"(as), "+x"(bc));
        _mm256_storeu_ps(v + i, _mm256_sub_ps(ac, bs));
        _mm256_storeu_ps(v + i + half, _mm256_add_ps(as, bc));
      }
    }
    return;
  }
  // Adjacent pairs: lanes (a0 b0 a1 b1 ..) against the angles duplicated per pair (built once
  // for all heads); addsub subtracts in even lanes (a c - b s) and adds in odd ones
  // (b c + a s = a s + b c).
  constexpr int kMaxHead = 512;
  if (head_dim > kMaxHead) {
    for (int h = 0; h < n_heads; ++h) rope_avx2(x + static_cast<int64_t>(h) * head_dim, 1, head_dim, neox, cs, sn);
    return;
  }
  alignas(32) float cd[kMaxHead], sd[kMaxHead];
  const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  for (int i = 0; i < half; i += 4) {
    _mm256_store_ps(cd + 2 * i, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + i)), dup));
    _mm256_store_ps(sd + 2 * i, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sn + i)), dup));
  }
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int d = 0; d < head_dim; d += 8) {
      const __m256 xv = _mm256_loadu_ps(v + d);
      const __m256 sw = _mm256_permute_ps(xv, 0xB1);  // (b0 a0 b1 a1 ..)
      __m256 xc = _mm256_mul_ps(xv, _mm256_load_ps(cd + d)), ss = _mm256_mul_ps(sw, _mm256_load_ps(sd + d));
      __asm__("" : "+x"(xc), "+x"(ss));  // no fused multiply-addsub either
      _mm256_storeu_ps(v + d, _mm256_addsub_ps(xc, ss));
    }
  }
}
}  // namespace
#endif

void apply_rope(float* x, int n_heads, int head_dim, bool neox, const float* cs, const float* sn) {
  const int half = head_dim / 2;
#if defined(__x86_64__)
  if (half % 8 == 0 && use_avx2()) {
    rope_avx2(x, n_heads, head_dim, neox, cs, sn);
    return;
  }
#endif
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (neox) {
      for (int i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = a * sn[i] + b * cs[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cs[i] - b * sn[i];
        v[2 * i + 1] = a * sn[i] + b * cs[i];
      }
    }
  }
}

void swiglu(float* a, const float* b, int64_t n) {
  // g / (1 + exp(-g)) * b with glibc's expf evaluated lane-wise (attn::exp_ref == std::exp).
  attn::active_kernels().swiglu(a, b, n);
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoef * x * x)));
}

namespace {

// gelu of every fp16 value, rounded to fp16 (ggml_table_gelu_f16), built once.
const uint16_t* gelu_table() {
  static const uint16_t* table = [] {
    auto* t = new uint16_t[1 << 16];
    for (uint32_t i = 0; i < (1u << 16); ++i) {
      t[i] = tensor::fp32_to_fp16(gelu_tanh(tensor::fp16_to_fp32(static_cast<uint16_t>(i))));
    }
    return t;
  }();
  return table;
}

}  // namespace

void geglu_ggml(float* a, const float* b, int64_t n) {
  const uint16_t* table = gelu_table();
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i];
    if (x <= -10.0f) {
      a[i] = 0.0f;
    } else if (x >= 10.0f) {
      a[i] = x * b[i];
    } else {
      a[i] = tensor::fp16_to_fp32(table[tensor::fp32_to_fp16(x)]) * b[i];
    }
  }
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

namespace {

// Elements per chunk handed to a thread: big enough that a dispatch (~1-5 us) is a small part.
constexpr int64_t kGrainElems = 16384;
// Below this many elements a batch runs on the calling thread: a decode step's rows (8 x 896,
// ~0.7 us a row vectorized) split in two measured slower than on one thread (kernels_bench
// BM_AddRmsNorm/896/8/2 vs /1, loaded host: 0.89-2.06 vs 0.68-1.03 us a row) -- the job, and
// half the rows moving to the other core's cache.
constexpr int64_t kMinSplitElems = kGrainElems + 1;

// Runs fn(b, e) over [0, rows) in chunks of whole rows, on the pool from kMinSplitElems elements
// on: chunks of ~kGrainElems, and no more rows per chunk than an equal share per thread.
template <typename F>
void for_rows(int64_t rows, int64_t row_elems, ThreadPool* pool, F&& fn) {
  if (rows <= 0) return;
  if (!pool || pool->num_threads() == 1 || rows < 2 || rows * row_elems < kMinSplitElems) {
    fn(int64_t{0}, rows);
    return;
  }
  const int64_t share = (rows + pool->num_threads() - 1) / pool->num_threads();
  const int64_t grain = std::min(std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, row_elems)), share);
  pool->parallel_chunks(rows, grain, fn);
}

}  // namespace

void rms_norm_rows(const float* x, const float* w, float* out, int64_t T, int64_t n, float eps, ThreadPool* pool) {
  const bool avx2 = use_avx2();
  for_rows(T, n, pool, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) add_rms_norm_row(const_cast<float*>(x + t * n), nullptr, w, out + t * n, n, eps, avx2);
  });
}

void add_rms_norm_rows(float* x, const float* h, const float* w, float* out, int64_t T, int64_t n, float eps,
                       ThreadPool* pool) {
  const bool avx2 = use_avx2();
  for_rows(T, n, pool, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) add_rms_norm_row(x + t * n, h + t * n, w, out + t * n, n, eps, avx2);
  });
}

void add_inplace(float* x, const float* h, int64_t n, ThreadPool* pool) {
  for_rows(n, 1, pool, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] += h[i];
  });
}

void swiglu(float* a, const float* b, int64_t n, ThreadPool* pool) {
  for_rows(n, 1, pool, [&](int64_t lo, int64_t hi) { swiglu(a + lo, b + lo, hi - lo); });
}

void geglu_ggml(float* a, const float* b, int64_t n, ThreadPool* pool) {
  for_rows(n, 1, pool, [&](int64_t lo, int64_t hi) { geglu_ggml(a + lo, b + lo, hi - lo); });
}

}  // namespace ts::model
