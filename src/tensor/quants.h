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
void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_row_q2_k(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_row_q3_k(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n);
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n);

// ggml's Q8_1 block sums for one token row (Q4_1/Q5_1 weights): the Q8_1 values and scale are
// the Q8_0 ones (quantize_act_q8_0); s[b] = fp16-rounded (amax/127 * sum[b]) with the scale
// NOT rounded first, as ggml's quantize_row_q8_1 does. sum: [n/32] from quantize_act_q8_0.
void quantize_act_q8_1_sums(const float* x, int64_t n, const int32_t* sum, float* s);

// The 16 values a 4-bit IQ4_NL / IQ4_XS index selects (ggml's kvalues_iq4nl).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Q3_K: the 16 signed 6-bit sub-block scales (already minus 32) from the 12 packed bytes.
inline void q3k_scales(const uint8_t* packed, int8_t* out) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

// IQ4_XS: signed scale (ls - 32) of 32-value sub-block ib (0..7).
inline int iq4xs_scale(const BlockIQ4_XS& b, int ib) {
  const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
  return ls - 32;
}

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
