// Scalar reference quantization: row (de)quantizers for the GGUF block types and the
// activation quantizers ggml's CPU backend applies before integer dot products.
// Pure functions over spans; thread-safe. Internal to src/tensor (the public entry points are
// dequantize_row/quantize_row in matrix.h).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace ts::tensor {

// Q8_0-style activations for one token row of n values (n % 32 == 0), ggml x86 semantics:
// per 32 values d = amax/127 rounded to fp16 (stored back as float), q = round-half-even(x *
// 127/amax). qs: [n] int8; d: [n/32] float; sum: [n/32] int32 = sum of the block's qs.
void quantize_act_q8_0(const float* x, int64_t n, int8_t* qs, float* d, int32_t* sum);

// Q8_K activations (n % 256 == 0) exactly as ggml's quantize_row_q8_K_ref: signed max m of
// largest magnitude, iscale = -127/m, q = min(127, nearest(iscale*x)), d = 1/iscale, bsums
// over 16 values. An all-zero block gets d = 0, q = 0.
void quantize_act_q8_k(const float* x, int64_t n, BlockQ8_K* y);

// Row (de)quantizers. n must be a multiple of the type's block size.
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n);
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n);

// Q4_K 6-bit (scale, min) pair j (0..7) from the 12 packed scale bytes.
inline void q4k_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

}  // namespace ts::tensor
