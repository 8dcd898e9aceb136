// Reference weight quantizers, byte-compatible with llama.cpp's (ggml's quantize_row_*_ref and,
// for IQ4_NL / IQ4_XS, its search routine without an importance matrix), and reference
// dequantizers for every block type they produce. Used by `tokenserve quantize`.
//
// Byte compatibility relies on evaluating the same float expressions in the same order as
// ggml's C code, without FMA contraction (this file is built for baseline x86-64 like the rest
// of the project, so GCC never fuses a*b+c here; do not add -mfma to it).
//
// Everything here is a pure function over caller-owned buffers: thread-safe, no allocation.
// dequantize_rows decodes with tensor/matrix.h's dequantize_row, the decoders the model uses.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "tensor/dtype.h"

namespace ts::tensor {

// True when quantize_rows can produce `type`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS.
bool can_quantize_to(uint32_t type);
// True when dequantize_rows can read `type` (the same set).
bool can_dequantize_from(uint32_t type);

// Quantizes nrows rows of n_per_row floats (row-major) into `type`; dst must hold
// nrows * row_bytes(type, n_per_row) bytes. Rows are independent, so callers may split rows
// over threads. Errors: kUnimplemented for a type outside can_quantize_to, kInvalidArgument when
// n_per_row is not a multiple of the type's block size; dst is untouched then.
Status quantize_rows(uint32_t type, const float* src, void* dst, int64_t nrows, int64_t n_per_row);

// The inverse: nrows rows of `type` into floats. Same errors.
Status dequantize_rows(uint32_t type, const void* src, float* dst, int64_t nrows, int64_t n_per_row);

// llama.cpp's check of quantized data (ggml_validate_row_data): every fp16 scale / min, and every
// F16 or BF16 value, must be finite. Returns the first row that fails, or -1. Weights too large
// for fp16 scales (|x| beyond ~65504 times the type's level range) fail here.
int64_t first_invalid_row(uint32_t type, const void* data, int64_t nrows, int64_t n_per_row);

// Per-type reference quantizers (n: element count, a multiple of the block size).
void quantize_ref_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_ref_q4_1(const float* x, BlockQ4_1* y, int64_t n);
void quantize_ref_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_ref_q5_1(const float* x, BlockQ5_1* y, int64_t n);
void quantize_ref_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_ref_q2_k(const float* x, BlockQ2_K* y, int64_t n);
void quantize_ref_q3_k(const float* x, BlockQ3_K* y, int64_t n);
void quantize_ref_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_ref_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_ref_q6_k(const float* x, BlockQ6_K* y, int64_t n);
void quantize_ref_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);
void quantize_ref_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n);

// Per-type reference dequantizers (ggml's dequantize_row_* semantics).

// The 16 non-linear levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl).
extern const int8_t kIq4nlLevelsRef[16];

}  // namespace ts::tensor
