// Interleaved 16-row ("R16") weight layouts built once at load (PERFORMANCE.md), and their
// row-level decoding. Internal to src/tensor; the byte layouts are documented in kernels.h.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/kernels.h"

namespace ts::tensor {

// Bytes of one 16-row group of `layout` (an R16 layout) for rows of `cols` values.
size_t r16_group_stride(kern::Layout layout, int64_t cols);

// Repacks `rows` GGUF rows (row r at src + r * row_bytes) of the R16 layout's source type into
// ceil(rows / 16) groups at dst (64-byte aligned, zero-filled by the caller). Padding rows get
// zero scales.
void repack_r16(kern::Layout layout, const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols,
                uint8_t* dst);

// Row `lane` (0..15) of the group at grp, dequantized exactly like the GGUF row would be.
void dequantize_r16_row(kern::Layout layout, const uint8_t* grp, int lane, int64_t cols, float* out);

// Block b of row `lane` of a Q6_K_R16 group, back in the GGUF layout.
void q6_k_r16_block(const uint8_t* grp, int lane, int64_t b, BlockQ6_K* out);

}  // namespace ts::tensor
