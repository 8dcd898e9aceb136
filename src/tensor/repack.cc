#include "tensor/repack.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "core/check.h"
#include "tensor/fp16.h"
#include "tensor/quants.h"

namespace ts::tensor {

namespace {

// F32_R16 / F16_R16 (kernels.h): column k of a group's 16 rows is 16 consecutive values of
// kBytes (padding rows stay zero: the caller zero-fills dst). Rows are read in runs of kRun
// columns so that the 16 source streams and the destination stay in cache.
template <size_t kBytes>
void repack_float(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst, size_t gbytes) {
  constexpr int64_t kRun = 256;
  for (int64_t g = 0; g < (rows + 15) / 16; ++g) {
    uint8_t* grp = dst + static_cast<size_t>(g) * gbytes;
    const int lanes = static_cast<int>(std::min<int64_t>(16, rows - g * 16));
    for (int64_t k0 = 0; k0 < cols; k0 += kRun) {
      const int64_t k1 = std::min(cols, k0 + kRun);
      for (int lane = 0; lane < lanes; ++lane) {
        const uint8_t* row = src + static_cast<size_t>(g * 16 + lane) * row_bytes;
        for (int64_t k = k0; k < k1; ++k)
          std::memcpy(grp + (static_cast<size_t>(k) * 16 + lane) * kBytes, row + static_cast<size_t>(k) * kBytes, kBytes);
      }
    }
  }
}

void repack_q8_0(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / kQK8_0;
  const size_t gbytes = kern::r16_group_bytes(cols);
  for (int64_t g = 0; g < (rows + 15) / 16; ++g) {
    uint8_t* grp = dst + static_cast<size_t>(g) * gbytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = grp + static_cast<size_t>(b / 2) * kern::kR16PairBytes;
      const int half = static_cast<int>(b % 2);
      uint8_t* vals = rec + 64 + half * 512;
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t r = g * 16 + lane;
        BlockQ8_0 blk{};  // padding rows: scale 0, stored value 128 (= weight 0)
        if (r < rows) std::memcpy(&blk, src + static_cast<size_t>(r) * row_bytes + b * sizeof(BlockQ8_0), sizeof(blk));
        std::memcpy(rec + half * 32 + lane * 2, &blk.d, 2);
        for (int k = 0; k < kQK8_0; ++k) {
          vals[(k / 4) * 64 + lane * 4 + k % 4] = static_cast<uint8_t>(blk.qs[k] + 128);
        }
      }
    }
  }
}

void repack_q4_0(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / kQK4_0;
  const size_t gbytes = kern::r16_q4_group_bytes(cols);
  for (int64_t g = 0; g < (rows + 15) / 16; ++g) {
    uint8_t* grp = dst + static_cast<size_t>(g) * gbytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = grp + static_cast<size_t>(b / 2) * kern::kR16Q4PairBytes;
      const int half = static_cast<int>(b % 2);
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t r = g * 16 + lane;
        if (r >= rows) continue;  // zero-filled: scale 0
        BlockQ4_0 blk;
        std::memcpy(&blk, src + static_cast<size_t>(r) * row_bytes + b * sizeof(BlockQ4_0), sizeof(blk));
        std::memcpy(rec + half * 32 + lane * 2, &blk.d, 2);
        for (int m = 0; m < 4; ++m) std::memcpy(rec + 64 + half * 256 + m * 64 + lane * 4, blk.qs + 4 * m, 4);
      }
    }
  }
}

void repack_q4_1(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32;
  const size_t gbytes = kern::r16_q4_1_group_bytes(cols);
  for (int64_t g = 0; g < (rows + 15) / 16; ++g) {
    uint8_t* grp = dst + static_cast<size_t>(g) * gbytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = grp + static_cast<size_t>(b / 2) * kern::kR16Q41PairBytes;
      const int half = static_cast<int>(b % 2);
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t r = g * 16 + lane;
        if (r >= rows) continue;  // zero-filled: scale and min 0
        BlockQ4_1 blk;
        std::memcpy(&blk, src + static_cast<size_t>(r) * row_bytes + b * sizeof(BlockQ4_1), sizeof(blk));
        std::memcpy(rec + half * 32 + lane * 2, &blk.d, 2);
        std::memcpy(rec + kern::kR16Q41MinOffset + half * 32 + lane * 2, &blk.m, 2);
        for (int m = 0; m < 4; ++m) std::memcpy(rec + 64 + half * 256 + m * 64 + lane * 4, blk.qs + 4 * m, 4);
      }
    }
  }
}

// The Q5_0_R16 / Q5_1_R16 5th bits of one row's block (the GGUF qh dword, bit j = value j) as
// 4 bytes beside the row's nibble bytes: byte j, bit k4 = the 5th bit of value 4 * k4 + j.
void q5_bit_planes(const uint8_t* qh, uint8_t* out) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int j = 0; j < 4; ++j) {
    uint8_t byte = 0;
    for (int k4 = 0; k4 < 8; ++k4) byte = static_cast<uint8_t>(byte | (((h >> (4 * k4 + j)) & 1u) << k4));
    out[j] = byte;
  }
}

void repack_q5_1(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32;
  const size_t gbytes = kern::r16_q5_1_group_bytes(cols);
  for (int64_t g = 0; g < (rows + 15) / 16; ++g) {
    uint8_t* grp = dst + static_cast<size_t>(g) * gbytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = grp + static_cast<size_t>(b / 2) * kern::kR16Q51PairBytes;
      const int half = static_cast<int>(b % 2);
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t r = g * 16 + lane;
        if (r >= rows) continue;  // zero-filled: scale and min 0
        BlockQ5_1 blk;
        std::memcpy(&blk, src + static_cast<size_t>(r) * row_bytes + b * sizeof(BlockQ5_1), sizeof(blk));
        std::memcpy(rec + half * 32 + lane * 2, &blk.d, 2);
        for (int m = 0; m < 4; ++m) std::memcpy(rec + 64 + half * 256 + m * 64 + lane * 4, blk.qs + 4 * m, 4);
        q5_bit_planes(blk.qh, rec + 576 + half * 64 + lane * 4);
        std::memcpy(rec + kern::kR16Q51MinOffset + half * 32 + lane * 2, &blk.m, 2);
      }
    }
  }
}

void repack_q5_0(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / 32;
  const size_t gbytes = kern::r16_q5_group_bytes(cols);
  for (int64_t g = 0; g < (rows + 15) / 16; ++g) {
    uint8_t* grp = dst + static_cast<size_t>(g) * gbytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = grp + static_cast<size_t>(b / 2) * kern::kR16Q5PairBytes;
      const int half = static_cast<int>(b % 2);
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t r = g * 16 + lane;
        if (r >= rows) continue;  // zero-filled: scale 0
        BlockQ5_0 blk;
        std::memcpy(&blk, src + static_cast<size_t>(r) * row_bytes + b * sizeof(BlockQ5_0), sizeof(blk));
        std::memcpy(rec + half * 32 + lane * 2, &blk.d, 2);
        for (int m = 0; m < 4; ++m) std::memcpy(rec + 64 + half * 256 + m * 64 + lane * 4, blk.qs + 4 * m, 4);
        q5_bit_planes(blk.qh, rec + 576 + half * 64 + lane * 4);
      }
    }
  }
}

void repack_q4_k(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / kQK_K;
  const size_t gbytes = static_cast<size_t>(nb) * kern::kQ4KR16BlockBytes;
  for (int64_t g = 0; g < (rows + 15) / 16; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + static_cast<size_t>(g) * gbytes + static_cast<size_t>(b) * kern::kQ4KR16BlockBytes;
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t r = g * 16 + lane;
        if (r >= rows) continue;  // zero-filled: scales, mins and d are 0
        BlockQ4_K blk;
        std::memcpy(&blk, src + static_cast<size_t>(r) * row_bytes + b * sizeof(BlockQ4_K), sizeof(blk));
        for (int c = 0; c < 4; ++c) {
          for (int m = 0; m < 8; ++m) std::memcpy(rec + (c * 8 + m) * 64 + lane * 4, blk.qs + 32 * c + 4 * m, 4);
        }
        for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk.scales, rec + 2048 + j * 16 + lane, rec + 2176 + j * 16 + lane);
        std::memcpy(rec + 2304 + lane * 2, &blk.d, 2);
        std::memcpy(rec + 2336 + lane * 2, &blk.dmin, 2);
      }
    }
  }
}

void repack_q6_k(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / kQK_K;
  const size_t gbytes = static_cast<size_t>(nb) * kern::kQ6KR16BlockBytes;
  for (int64_t g = 0; g < (rows + 15) / 16; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + static_cast<size_t>(g) * gbytes + static_cast<size_t>(b) * kern::kQ6KR16BlockBytes;
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t r = g * 16 + lane;
        if (r >= rows) continue;  // zero-filled: scales and d are 0
        BlockQ6_K blk;
        std::memcpy(&blk, src + static_cast<size_t>(r) * row_bytes + b * sizeof(BlockQ6_K), sizeof(blk));
        for (int c = 0; c < 2; ++c) {
          for (int m = 0; m < 16; ++m) std::memcpy(rec + (c * 16 + m) * 64 + lane * 4, blk.ql + 64 * c + 4 * m, 4);
          for (int m = 0; m < 8; ++m) std::memcpy(rec + 2048 + (c * 8 + m) * 64 + lane * 4, blk.qh + 32 * c + 4 * m, 4);
        }
        for (int j = 0; j < 16; ++j) std::memcpy(rec + 3072 + j * 16 + lane, &blk.scales[j], 1);
        std::memcpy(rec + 3328 + lane * 2, &blk.d, 2);
      }
    }
  }
}

// The K-quant R16 records (kernels.h): calls f(rec, lane, block) for every source row's block b
// (block: the row's GGUF block, copied) with rec the record of its group and block; padding
// rows are left as the caller zero-filled them.
template <typename Block, typename F>
void for_each_kblock(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst, size_t rec_bytes,
                     F&& f) {
  const int64_t nb = cols / kQK_K;
  const size_t gbytes = static_cast<size_t>(nb) * rec_bytes;
  for (int64_t g = 0; g < (rows + 15) / 16; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + static_cast<size_t>(g) * gbytes + static_cast<size_t>(b) * rec_bytes;
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t r = g * 16 + lane;
        if (r >= rows) continue;
        Block blk;
        std::memcpy(&blk, src + static_cast<size_t>(r) * row_bytes + b * sizeof(Block), sizeof(blk));
        f(rec, lane, blk);
      }
    }
  }
}

// Q5_K / Q3_K / Q2_K / IQ4_XS (kernels.h): each row's block, scales decoded, into its lane.
void repack_q5_k(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  for_each_kblock<BlockQ5_K>(src, row_bytes, rows, cols, dst, kern::kQ5KR16BlockBytes,
                             [](uint8_t* rec, int lane, const BlockQ5_K& blk) {
    for (int c = 0; c < 4; ++c) {
      for (int m = 0; m < 8; ++m) std::memcpy(rec + (c * 8 + m) * 64 + lane * 4, blk.qs + 32 * c + 4 * m, 4);
    }
    for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk.scales, rec + 2048 + j * 16 + lane, rec + 2176 + j * 16 + lane);
    std::memcpy(rec + 2304 + lane * 2, &blk.d, 2);
    std::memcpy(rec + 2336 + lane * 2, &blk.dmin, 2);
    for (int m = 0; m < 8; ++m) std::memcpy(rec + kern::kQ4KR16BlockBytes + m * 64 + lane * 4, blk.qh + 4 * m, 4);
  });
}

// The 2-bit value lines of Q3_K / Q2_K: [2 c][8 m][16 rows][4] GGUF qs bytes 32c + 4m ...
void q2_lines(const uint8_t* qs, int lane, uint8_t* rec) {
  for (int c = 0; c < 2; ++c) {
    for (int m = 0; m < 8; ++m) std::memcpy(rec + (c * 8 + m) * 64 + lane * 4, qs + 32 * c + 4 * m, 4);
  }
}

void repack_q3_k(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  for_each_kblock<BlockQ3_K>(src, row_bytes, rows, cols, dst, kern::kQ3KR16BlockBytes,
                             [](uint8_t* rec, int lane, const BlockQ3_K& blk) {
    q2_lines(blk.qs, lane, rec);
    for (int m = 0; m < 8; ++m) std::memcpy(rec + 1024 + m * 64 + lane * 4, blk.hmask + 4 * m, 4);
    int8_t sc[16];
    q3k_scales(blk.scales, sc);
    for (int j = 0; j < 16; ++j) std::memcpy(rec + 1536 + j * 16 + lane, &sc[j], 1);
    std::memcpy(rec + 1792 + lane * 2, &blk.d, 2);
  });
}

void repack_q2_k(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  for_each_kblock<BlockQ2_K>(src, row_bytes, rows, cols, dst, kern::kQ2KR16BlockBytes,
                             [](uint8_t* rec, int lane, const BlockQ2_K& blk) {
    q2_lines(blk.qs, lane, rec);
    for (int j = 0; j < 16; ++j) rec[1024 + j * 16 + lane] = blk.scales[j];
    std::memcpy(rec + 1280 + lane * 2, &blk.d, 2);
    std::memcpy(rec + 1312 + lane * 2, &blk.dmin, 2);
  });
}

void repack_iq4_xs(const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
  for_each_kblock<BlockIQ4_XS>(src, row_bytes, rows, cols, dst, kern::kIQ4XSR16BlockBytes,
                               [](uint8_t* rec, int lane, const BlockIQ4_XS& blk) {
    for (int ib = 0; ib < 8; ++ib) {
      for (int m = 0; m < 4; ++m) std::memcpy(rec + (ib * 4 + m) * 64 + lane * 4, blk.qs + 16 * ib + 4 * m, 4);
      rec[2048 + ib * 16 + lane] = static_cast<uint8_t>(static_cast<int8_t>(iq4xs_scale(blk, ib)));
    }
    std::memcpy(rec + 2176 + lane * 2, &blk.d, 2);
  });
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace

size_t r16_group_stride(kern::Layout layout, int64_t cols) {
  switch (layout) {
    case kern::Layout::kQ8_0_R16: return kern::r16_group_bytes(cols);
    case kern::Layout::kQ4_K_R16: return static_cast<size_t>(cols / kQK_K) * kern::kQ4KR16BlockBytes;
    case kern::Layout::kQ6_K_R16: return static_cast<size_t>(cols / kQK_K) * kern::kQ6KR16BlockBytes;
    case kern::Layout::kQ4_0_R16:
    case kern::Layout::kIQ4_NL_R16: return kern::r16_q4_group_bytes(cols);
    case kern::Layout::kQ5_0_R16: return kern::r16_q5_group_bytes(cols);
    case kern::Layout::kQ4_1_R16: return kern::r16_q4_1_group_bytes(cols);
    case kern::Layout::kQ5_1_R16: return kern::r16_q5_1_group_bytes(cols);
    case kern::Layout::kQ5_K_R16: return static_cast<size_t>(cols / kQK_K) * kern::kQ5KR16BlockBytes;
    case kern::Layout::kQ3_K_R16: return static_cast<size_t>(cols / kQK_K) * kern::kQ3KR16BlockBytes;
    case kern::Layout::kQ2_K_R16: return static_cast<size_t>(cols / kQK_K) * kern::kQ2KR16BlockBytes;
    case kern::Layout::kIQ4_XS_R16: return static_cast<size_t>(cols / kQK_K) * kern::kIQ4XSR16BlockBytes;
    case kern::Layout::kF32_R16:
    case kern::Layout::kF16_R16: return kern::float_r16_group_bytes(layout, cols);
    default: break;
  }
  TS_CHECK(false, "r16_group_stride: not an R16 layout");
  return 0;
}

void repack_r16(kern::Layout layout, const uint8_t* src, size_t row_bytes, int64_t rows, int64_t cols,
                uint8_t* dst) {
  switch (layout) {
    case kern::Layout::kQ8_0_R16: return repack_q8_0(src, row_bytes, rows, cols, dst);
    case kern::Layout::kQ4_K_R16: return repack_q4_k(src, row_bytes, rows, cols, dst);
    case kern::Layout::kQ6_K_R16: return repack_q6_k(src, row_bytes, rows, cols, dst);
    case kern::Layout::kQ4_0_R16:
    case kern::Layout::kIQ4_NL_R16: return repack_q4_0(src, row_bytes, rows, cols, dst);  // same block shape
    case kern::Layout::kQ5_0_R16: return repack_q5_0(src, row_bytes, rows, cols, dst);
    case kern::Layout::kQ4_1_R16: return repack_q4_1(src, row_bytes, rows, cols, dst);
    case kern::Layout::kQ5_1_R16: return repack_q5_1(src, row_bytes, rows, cols, dst);
    case kern::Layout::kQ5_K_R16: return repack_q5_k(src, row_bytes, rows, cols, dst);
    case kern::Layout::kQ3_K_R16: return repack_q3_k(src, row_bytes, rows, cols, dst);
    case kern::Layout::kQ2_K_R16: return repack_q2_k(src, row_bytes, rows, cols, dst);
    case kern::Layout::kIQ4_XS_R16: return repack_iq4_xs(src, row_bytes, rows, cols, dst);
    case kern::Layout::kF32_R16: return repack_float<4>(src, row_bytes, rows, cols, dst, kern::float_r16_group_bytes(layout, cols));
    case kern::Layout::kF16_R16: return repack_float<2>(src, row_bytes, rows, cols, dst, kern::float_r16_group_bytes(layout, cols));
    default: break;
  }
  TS_CHECK(false, "repack_r16: not an R16 layout");
}

void dequantize_r16_row(kern::Layout layout, const uint8_t* grp, int lane, int64_t cols, float* out) {
  if (kern::is_float_r16(layout)) {
    for (int64_t k = 0; k < cols; ++k) {
      if (layout == kern::Layout::kF32_R16) {
        std::memcpy(&out[k], grp + (static_cast<size_t>(k) * 16 + lane) * 4, 4);
      } else {
        out[k] = fp16_to_fp32(load_u16(grp + (static_cast<size_t>(k) * 16 + lane) * 2));
      }
    }
    return;
  }
  if (layout == kern::Layout::kQ8_0_R16) {
    for (int64_t b = 0; b < cols / kQK8_0; ++b) {
      const uint8_t* rec = grp + static_cast<size_t>(b / 2) * kern::kR16PairBytes;
      const int half = static_cast<int>(b % 2);
      const float d = fp16_to_fp32(load_u16(rec + half * 32 + lane * 2));
      const uint8_t* vals = rec + 64 + half * 512;
      for (int k = 0; k < kQK8_0; ++k) {
        out[b * kQK8_0 + k] = static_cast<float>(static_cast<int>(vals[(k / 4) * 64 + lane * 4 + k % 4]) - 128) * d;
      }
    }
    return;
  }
  if (layout == kern::Layout::kQ4_1_R16 || layout == kern::Layout::kQ5_1_R16) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      const float d = fp16_to_fp32(load_u16(kern::r16_block_scale(layout, grp, b, lane)));
      const float m = fp16_to_fp32(load_u16(kern::r16_block_min(layout, grp, b, lane)));
      for (int k = 0; k < 32; ++k) out[b * 32 + k] = static_cast<float>(kern::r16_signed_value(layout, grp, b, lane, k)) * d + m;
    }
    return;
  }
  if (layout == kern::Layout::kIQ4_NL_R16 || layout == kern::Layout::kQ5_0_R16) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      const float d = fp16_to_fp32(load_u16(kern::r16_block_scale(layout, grp, b, lane)));
      for (int k = 0; k < 32; ++k) out[b * 32 + k] = static_cast<float>(kern::r16_signed_value(layout, grp, b, lane, k)) * d;
    }
    return;
  }
  if (layout == kern::Layout::kQ4_0_R16) {
    for (int64_t b = 0; b < cols / kQK4_0; ++b) {
      const uint8_t* rec = grp + static_cast<size_t>(b / 2) * kern::kR16Q4PairBytes;
      const int half = static_cast<int>(b % 2);
      const float d = fp16_to_fp32(load_u16(rec + half * 32 + lane * 2));
      const uint8_t* vals = rec + 64 + half * 256;
      for (int k = 0; k < kQK4_0; ++k) {
        const uint8_t byte = vals[((k % 16) / 4) * 64 + lane * 4 + k % 4];
        const int q = k < 16 ? byte & 0xF : byte >> 4;
        out[b * kQK4_0 + k] = static_cast<float>(q - 8) * d;
      }
    }
    return;
  }
  if (layout == kern::Layout::kQ6_K_R16) {
    for (int64_t b = 0; b < cols / kQK_K; ++b) {
      BlockQ6_K blk;
      q6_k_r16_block(grp, lane, b, &blk);
      dequantize_row_q6_k(&blk, out + b * kQK_K, kQK_K);
    }
    return;
  }
  if (layout == kern::Layout::kQ5_K_R16 || layout == kern::Layout::kQ3_K_R16 || layout == kern::Layout::kQ2_K_R16 ||
      layout == kern::Layout::kIQ4_XS_R16) {
    for (int64_t b = 0; b < cols / kQK_K; ++b) {
      alignas(8) uint8_t blk[sizeof(BlockQ5_K)];
      kquant_r16_block(layout, grp, lane, b, blk);
      float* y = out + b * kQK_K;
      switch (layout) {
        case kern::Layout::kQ5_K_R16: dequantize_row_q5_k(reinterpret_cast<const BlockQ5_K*>(blk), y, kQK_K); break;
        case kern::Layout::kQ3_K_R16: dequantize_row_q3_k(reinterpret_cast<const BlockQ3_K*>(blk), y, kQK_K); break;
        case kern::Layout::kQ2_K_R16: dequantize_row_q2_k(reinterpret_cast<const BlockQ2_K*>(blk), y, kQK_K); break;
        default: dequantize_row_iq4_xs(reinterpret_cast<const BlockIQ4_XS*>(blk), y, kQK_K); break;
      }
    }
    return;
  }
  TS_CHECK(layout == kern::Layout::kQ4_K_R16, "dequantize_r16_row: not an R16 layout");
  for (int64_t b = 0; b < cols / kQK_K; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b) * kern::kQ4KR16BlockBytes;
    const float d = fp16_to_fp32(load_u16(rec + 2304 + lane * 2));
    const float dmin = fp16_to_fp32(load_u16(rec + 2336 + lane * 2));
    float* y = out + b * kQK_K;
    for (int c = 0; c < 4; ++c) {
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * c + h;
        const float d1 = d * rec[2048 + j * 16 + lane], m1 = dmin * rec[2176 + j * 16 + lane];
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = rec[(c * 8 + l / 4) * 64 + lane * 4 + l % 4];
          const int q = h ? byte >> 4 : byte & 0xF;
          y[64 * c + 32 * h + l] = d1 * static_cast<float>(q) - m1;
        }
      }
    }
  }
}

void q6_k_r16_block(const uint8_t* grp, int lane, int64_t b, BlockQ6_K* out) {
  const uint8_t* rec = grp + static_cast<size_t>(b) * kern::kQ6KR16BlockBytes;
  for (int c = 0; c < 2; ++c) {
    for (int m = 0; m < 16; ++m) std::memcpy(out->ql + 64 * c + 4 * m, rec + (c * 16 + m) * 64 + lane * 4, 4);
    for (int m = 0; m < 8; ++m) std::memcpy(out->qh + 32 * c + 4 * m, rec + 2048 + (c * 8 + m) * 64 + lane * 4, 4);
  }
  for (int j = 0; j < 16; ++j) std::memcpy(&out->scales[j], rec + 3072 + j * 16 + lane, 1);
  std::memcpy(&out->d, rec + 3328 + lane * 2, 2);
}

void kquant_r16_block(kern::Layout layout, const uint8_t* grp, int lane, int64_t b, void* out) {
  switch (layout) {
    case kern::Layout::kQ5_K_R16: {
      const uint8_t* rec = grp + static_cast<size_t>(b) * kern::kQ5KR16BlockBytes;
      BlockQ5_K blk{};
      for (int c = 0; c < 4; ++c) {
        for (int m = 0; m < 8; ++m) std::memcpy(blk.qs + 32 * c + 4 * m, rec + (c * 8 + m) * 64 + lane * 4, 4);
      }
      for (int m = 0; m < 8; ++m) std::memcpy(blk.qh + 4 * m, rec + kern::kQ4KR16BlockBytes + m * 64 + lane * 4, 4);
      // The 12 packed bytes of q4k_scale_min's (scale, min) pairs.
      uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; ++j) {
        sc[j] = rec[2048 + j * 16 + lane];
        mn[j] = rec[2176 + j * 16 + lane];
      }
      for (int j = 0; j < 4; ++j) {
        blk.scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        blk.scales[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        blk.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
      }
      std::memcpy(&blk.d, rec + 2304 + lane * 2, 2);
      std::memcpy(&blk.dmin, rec + 2336 + lane * 2, 2);
      std::memcpy(out, &blk, sizeof(blk));
      return;
    }
    case kern::Layout::kQ3_K_R16: {
      const uint8_t* rec = grp + static_cast<size_t>(b) * kern::kQ3KR16BlockBytes;
      BlockQ3_K blk{};
      for (int c = 0; c < 2; ++c) {
        for (int m = 0; m < 8; ++m) std::memcpy(blk.qs + 32 * c + 4 * m, rec + (c * 8 + m) * 64 + lane * 4, 4);
      }
      for (int m = 0; m < 8; ++m) std::memcpy(blk.hmask + 4 * m, rec + 1024 + m * 64 + lane * 4, 4);
      for (int j = 0; j < 16; ++j) {  // q3k_scales' packing of the 6-bit (scale + 32)
        const int u = static_cast<int8_t>(rec[1536 + j * 16 + lane]) + 32;
        blk.scales[j % 8] = static_cast<uint8_t>(blk.scales[j % 8] | ((u & 0xF) << (j < 8 ? 0 : 4)));
        blk.scales[8 + j % 4] = static_cast<uint8_t>(blk.scales[8 + j % 4] | ((u >> 4) << (2 * (j / 4))));
      }
      std::memcpy(&blk.d, rec + 1792 + lane * 2, 2);
      std::memcpy(out, &blk, sizeof(blk));
      return;
    }
    case kern::Layout::kQ2_K_R16: {
      const uint8_t* rec = grp + static_cast<size_t>(b) * kern::kQ2KR16BlockBytes;
      BlockQ2_K blk{};
      for (int c = 0; c < 2; ++c) {
        for (int m = 0; m < 8; ++m) std::memcpy(blk.qs + 32 * c + 4 * m, rec + (c * 8 + m) * 64 + lane * 4, 4);
      }
      for (int j = 0; j < 16; ++j) blk.scales[j] = rec[1024 + j * 16 + lane];
      std::memcpy(&blk.d, rec + 1280 + lane * 2, 2);
      std::memcpy(&blk.dmin, rec + 1312 + lane * 2, 2);
      std::memcpy(out, &blk, sizeof(blk));
      return;
    }
    case kern::Layout::kIQ4_XS_R16: {
      const uint8_t* rec = grp + static_cast<size_t>(b) * kern::kIQ4XSR16BlockBytes;
      BlockIQ4_XS blk{};
      for (int ib = 0; ib < 8; ++ib) {
        for (int m = 0; m < 4; ++m) std::memcpy(blk.qs + 16 * ib + 4 * m, rec + (ib * 4 + m) * 64 + lane * 4, 4);
        const int ls = static_cast<int8_t>(rec[2048 + ib * 16 + lane]) + 32;
        blk.scales_l[ib / 2] = static_cast<uint8_t>(blk.scales_l[ib / 2] | ((ls & 0xF) << (4 * (ib % 2))));
        blk.scales_h = static_cast<uint16_t>(blk.scales_h | ((ls >> 4) << (2 * ib)));
      }
      std::memcpy(&blk.d, rec + 2176 + lane * 2, 2);
      std::memcpy(out, &blk, sizeof(blk));
      return;
    }
    default: break;
  }
  TS_CHECK(false, "kquant_r16_block: not a Q5_K / Q3_K / Q2_K / IQ4_XS R16 layout");
}

int repack_thread_count(const MatrixOptions& o, size_t bytes, int64_t parts) {
  if (bytes < kParallelRepackBytes) return 1;
  int n = o.repack_threads;
  if (n <= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    n = std::min(n, 32);
  }
  return static_cast<int>(std::clamp<int64_t>(parts, 1, std::max(n, 1)));
}

void split_runs(int64_t parts, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  const auto bound = [&](int i) { return parts * i / threads; };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(std::max(threads - 1, 0)));
  for (int i = 1; i < threads; ++i) {
    try {
      workers.emplace_back([&fn, b = bound(i), e = bound(i + 1)] { fn(b, e); });
    } catch (const std::system_error&) {
      fn(bound(i), bound(i + 1));
    }
  }
  fn(int64_t{0}, bound(1));
  for (auto& w : workers) w.join();
}

}  // namespace ts::tensor
