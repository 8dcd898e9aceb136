// Inner kernels of the tiled attention (attention.cc), one table per ISA (scalar reference,
// AVX2 + FMA + F16C, AVX-512). Internal to src/model; pure functions over raw float buffers.
//
// A key tile holds kKeyTile consecutive positions of one KV head, converted once from the
// cache: K transposed to [head_dim][kKeyTile] (lane i = key i) so scores for all keys of the
// tile come out of one pass without horizontal sums, V as [kKeyTile][head_dim]. Lanes past the
// tile's key count are zero and their scores are ignored by the caller.
//
// Bit-exactness: every table computes, per key and per output element, the same sequence of
// IEEE operations as the scalar reference (explicit fused multiply-adds, the same summation
// tree), so all ISAs give identical results; tests/model/attention_test.cc checks it.
#pragma once

#include <cstdint>

namespace ts::model::attn {

inline constexpr int32_t kKeyTile = 16;

struct Kernels {
  const char* name;
  // out[i] = dot_ggml(q, K[:, i]) * scale for the kKeyTile lanes. dot_ggml is ggml_vec_dot_f16
  // as built for AVX2 + F16C: per 32 values, accumulators sum[j][l] (j < 4, l < 8) fed by
  // fma(q[32c + 8j + l], k[32c + 8j + l], sum[j][l]); r[l] = (sum0 + sum2) + (sum1 + sum3);
  // t[l] = r[l] + r[l + 4]; result (t0 + t1) + (t2 + t3); a tail past the last multiple of 32
  // is added in double. Used for every KV type (its 32 independent sums vectorize well).
  void (*scores_ggml)(const float* q, const float* kt, int32_t hd, float scale, float* out);
  // The fp16 output accumulator of ggml's CPU flash attention, keys i0..i1-1 in order:
  //   if ms[i] != 1: acc[d] = fp16(acc[d] * ms[i]);  acc[d] = fp16(fma(v[i][d], w[i], acc[d])).
  // (A rescale by exactly 1 is a no-op on fp16-representable values, so the test is exact.)
  void (*acc_f16)(float* acc, const float* v, const float* w, const float* ms, int32_t i0, int32_t i1, int32_t hd);
  // acc[d] = acc[d] * rescale + sum over i in [i0, i1) of p[i] * v[i][d] (fma, keys in order).
  void (*acc_f32)(float* acc, const float* v, const float* p, int32_t i0, int32_t i1, int32_t hd, float rescale);
};

const Kernels& scalar_kernels();
const Kernels& avx2_kernels();    // requires AVX2 + FMA + F16C
const Kernels& avx512_kernels();  // requires AVX-512 F

}  // namespace ts::model::attn
