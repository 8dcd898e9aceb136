#include "model/ops.h"

#include <algorithm>
#include <cmath>

#include "model/attention_kernels.h"
#include "tensor/fp16.h"

namespace ts::model {

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  // Four interleaved double sums (fixed order, the same on every ISA tier), then combined: one
  // sequential chain of n dependent double adds (~4 cycles each) made this loop ~0.7 us per
  // 576-wide row, ~2 % of an 8-sequence SmolLM2 step.
  double s4[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) s4[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  for (; i < n; ++i) s4[0] += static_cast<double>(x[i]) * x[i];
  const double sum = (s4[0] + s4[1]) + (s4[2] + s4[3]);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
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

void apply_rope(float* x, int n_heads, int head_dim, bool neox, const float* cs, const float* sn) {
  const int half = head_dim / 2;
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

// Runs fn(b, e) over [0, rows) in chunks of whole rows, on the pool when there is enough work.
template <typename F>
void for_rows(int64_t rows, int64_t row_elems, ThreadPool* pool, F&& fn) {
  if (rows <= 0) return;
  const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, row_elems));
  if (!pool || pool->num_threads() == 1 || rows <= grain) {
    fn(int64_t{0}, rows);
    return;
  }
  pool->parallel_chunks(rows, grain, fn);
}

}  // namespace

void rms_norm_rows(const float* x, const float* w, float* out, int64_t T, int64_t n, float eps, ThreadPool* pool) {
  for_rows(T, n, pool, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) rms_norm(x + t * n, w, out + t * n, n, eps);
  });
}

void add_rms_norm_rows(float* x, const float* h, const float* w, float* out, int64_t T, int64_t n, float eps,
                       ThreadPool* pool) {
  for_rows(T, n, pool, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* xt = x + t * n;
      const float* ht = h + t * n;
      for (int64_t i = 0; i < n; ++i) xt[i] += ht[i];
      rms_norm(xt, w, out + t * n, n, eps);
    }
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
