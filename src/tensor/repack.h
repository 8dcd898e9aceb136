// Interleaved 16-row ("R16") weight layouts built once at load (PERFORMANCE.md), and their
// row-level decoding. Internal to src/tensor; the byte layouts are documented in kernels.h.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "tensor/kernels.h"
#include "tensor/matrix.h"
#include "tensor/quants.h"

namespace ts::tensor::kern {

// IQ4_NL_R16 / Q5_0_R16 / Q4_1_R16 / Q5_1_R16: bytes of one pair record.
inline size_t r16_pair_bytes(Layout layout) {
  switch (layout) {
    case Layout::kQ5_0_R16: return kR16Q5PairBytes;
    case Layout::kQ4_1_R16: return kR16Q41PairBytes;
    case Layout::kQ5_1_R16: return kR16Q51PairBytes;
    default: return kR16Q4PairBytes;
  }
}
// The same layouts: fp16 scale of block b of row `lane`, and its value k (0..31): signed for
// IQ4_NL / Q5_0, unsigned for Q4_1 / Q5_1 (whose fp16 min is at r16_block_min).
inline const uint8_t* r16_block_scale(Layout layout, const uint8_t* grp, int64_t b, int lane) {
  return grp + static_cast<size_t>(b / 2) * r16_pair_bytes(layout) + (b % 2) * 32 + lane * 2;
}
inline const uint8_t* r16_block_min(Layout layout, const uint8_t* grp, int64_t b, int lane) {  // Q4_1/Q5_1 R16
  const size_t off = layout == Layout::kQ5_1_R16 ? kR16Q51MinOffset : kR16Q41MinOffset;
  return grp + static_cast<size_t>(b / 2) * r16_pair_bytes(layout) + off + (b % 2) * 32 + lane * 2;
}
inline int r16_signed_value(Layout layout, const uint8_t* grp, int64_t b, int lane, int k) {
  const size_t rec_bytes = r16_pair_bytes(layout);
  const uint8_t* rec = grp + static_cast<size_t>(b / 2) * rec_bytes;
  const int half = static_cast<int>(b % 2);
  const uint8_t byte = rec[64 + half * 256 + ((k % 16) / 4) * 64 + lane * 4 + k % 4];
  const int nib = k < 16 ? byte & 0xF : byte >> 4;
  if (layout == Layout::kIQ4_NL_R16) return kIQ4NLValues[nib];
  if (layout == Layout::kQ4_1_R16) return nib;
  const int bit = (rec[576 + half * 64 + lane * 4 + k % 4] >> (k / 4)) & 1;  // kR16Q5PairBytes' bit planes
  const int q = nib | (bit << 4);
  return layout == Layout::kQ5_1_R16 ? q : q - 16;
}

}  // namespace ts::tensor::kern

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

// Block b of row `lane` of a Q5_K_R16 / Q3_K_R16 / Q2_K_R16 / IQ4_XS_R16 group, back in the GGUF
// layout (the same bytes as the source block): a BlockQ5_K / Q3_K / Q2_K / IQ4_XS at out.
void kquant_r16_block(kern::Layout layout, const uint8_t* grp, int lane, int64_t b, void* out);

// Threads for repacking `bytes` in `parts` independent pieces (MatrixOptions::repack_threads:
// when it is 0 or less, the CPUs in this process's affinity mask, at most 32); 1 below
// kParallelRepackBytes.
int repack_thread_count(const MatrixOptions& o, size_t bytes, int64_t parts);

// Calls fn(p0, p1) over [0, parts) split into `threads` contiguous runs: the first on the
// calling thread, the others on threads of their own (a run whose thread cannot be started
// runs on the calling thread). Returns when every run has.
void split_runs(int64_t parts, int threads, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace ts::tensor
