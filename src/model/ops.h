// Element-wise and per-row pieces of the forward pass, as pure functions over float spans,
// written to round the way ggml's CPU backend does where that is visible in the logits
// (RoPE angles by repeated multiplication, GELU through an fp16 table).
// Thread-safety: all functions are pure.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"

namespace ts::model {

// out = x / sqrt(mean(x^2) + eps) * w, for one row of n values (x and out may alias).
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps);

// One RoPE variant: theta_i(pos) = pos * freq_scale * base^(-2i/head_dim) / factors[i], and
// cos/sin multiplied by mscale (LongRoPE / YaRN attention factor).
struct RopeParams {
  int32_t head_dim = 0;
  float base = 10000.f;
  float freq_scale = 1.f;                 // 1 / linear scaling factor
  std::span<const float> factors;         // [head_dim/2] divisors, or empty
  float mscale = 1.f;
};
// cos/sin for one position into cos_out/sin_out[head_dim/2].
void rope_angles(const RopeParams& p, int32_t pos, float* cos_out, float* sin_out);
// Rotates n_heads vectors of head_dim at x in place (neox: pairs (i, i+d/2), else (2i, 2i+1)).
void apply_rope(float* x, int n_heads, int head_dim, bool neox, const float* cs, const float* sn);

// SwiGLU in place: a[i] = silu(a[i]) * b[i].
void swiglu(float* a, const float* b, int64_t n);
// GeGLU in place with ggml's tanh GELU evaluated through its fp16 lookup table:
// a[i] = fp16(gelu(fp16(a[i]))) * b[i] for |a| < 10, a[i] * b[i] above, 0 below.
void geglu_ggml(float* a, const float* b, int64_t n);
// Reference GELU (tanh approximation) in float, used by the table and tests.
float gelu_tanh(float x);

// x[i] = cap * tanh(x[i] / cap).
void softcap(float* x, int64_t n, float cap);

// Batched forms over T rows of n values, split over `pool` (may be null) when the batch is
// large enough to pay for a dispatch. Per element they compute exactly what the single-row
// functions above do (bit-identical results whatever the split); the vector paths follow
// tensor::active_isa().
void rms_norm_rows(const float* x, const float* w, float* out, int64_t T, int64_t n, float eps, ThreadPool* pool);
// The residual add fused with the next norm: x += h, then out = rms_norm(x) * w, row by row
// (out may alias h; one pass over the rows instead of two).
void add_rms_norm_rows(float* x, const float* h, const float* w, float* out, int64_t T, int64_t n, float eps,
                       ThreadPool* pool);
// x[i] += h[i] for i < n.
void add_inplace(float* x, const float* h, int64_t n, ThreadPool* pool);
// swiglu / geglu_ggml above over n values, split over the pool.
void swiglu(float* a, const float* b, int64_t n, ThreadPool* pool);
void geglu_ggml(float* a, const float* b, int64_t n, ThreadPool* pool);

}  // namespace ts::model
