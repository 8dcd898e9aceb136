// Scalar reference kernels: the definition of what every SIMD kernel must compute.
#include <cmath>
#include <cstring>

#include "tensor/fp16.h"
#include "tensor/kernels.h"
#include "tensor/quants.h"
#include "tensor/repack.h"

namespace ts::tensor::kern {

namespace {

// Row r of a plain layout.
template <typename Block>
const Block* row_at(const GemmArgs& g, int64_t r) {
  return reinterpret_cast<const Block*>(g.w + static_cast<size_t>(r) * g.stride);
}

// Loads a T from possibly unaligned memory (GGUF tensors are only 32-byte aligned as a whole,
// and F16 rows of odd length start at odd 2-byte offsets which is fine, but be strict).
template <typename T>
T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename Dot>
void for_each_row_token(const GemmArgs& g, Dot dot) {
  const Act& a = *g.act;
  for (int64_t r = 0; r < g.num_rows; ++r) {
    for (int64_t t = 0; t < a.n_tok; ++t) g.y[t * g.ldy + r] = dot(r, t);
  }
}

void gemm_f32(const GemmArgs& g) {
  const Act& a = *g.act;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    const float* x = a.xf + t * a.cols;
    double s = 0;
    for (int64_t k = 0; k < a.cols; ++k) s += static_cast<double>(load<float>(w + 4 * k)) * x[k];
    return static_cast<float>(s);
  });
}

void gemm_f16(const GemmArgs& g) {
  const Act& a = *g.act;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    const float* x = a.xf + t * a.cols;
    double s = 0;
    for (int64_t k = 0; k < a.cols; ++k) {
      s += static_cast<double>(fp16_to_fp32(load<uint16_t>(w + 2 * k))) * x[k];
    }
    return static_cast<float>(s);
  });
}

void gemm_bf16(const GemmArgs& g) {
  const Act& a = *g.act;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    const float* x = a.xf + t * a.cols;
    double s = 0;
    for (int64_t k = 0; k < a.cols; ++k) {
      s += static_cast<double>(bf16_to_fp32(load<uint16_t>(w + 2 * k))) * x[k];
    }
    return static_cast<float>(s);
  });
}

void gemm_q8_0(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK8_0;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    const int8_t* xq = a.q8 + t * a.cols;
    const float* xd = a.d8 + t * nb;
    float s = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_0 blk = load<BlockQ8_0>(w + b * sizeof(BlockQ8_0));
      int32_t isum = 0;
      for (int j = 0; j < kQK8_0; ++j) isum += blk.qs[j] * xq[b * kQK8_0 + j];
      s += static_cast<float>(isum) * (fp16_to_fp32(blk.d) * xd[b]);
    }
    return s;
  });
}

// Q4_0 in llama.cpp's x86 order: it repacks every Q4_0 matrix of 8k rows (q4_0_8x8) on any AVX2
// CPU, and those kernels add each block's exact sum with one FMA (as gemm_iq4_nl below).
void gemm_q4_0(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK4_0;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    const int8_t* xq = a.q8 + t * a.cols;
    const float* xd = a.d8 + t * nb;
    float s = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ4_0 blk = load<BlockQ4_0>(w + b * sizeof(BlockQ4_0));
      const int8_t* xb = xq + b * kQK4_0;
      int32_t isum = 0;
      for (int j = 0; j < kQK4_0 / 2; ++j) {
        isum += ((blk.qs[j] & 0xF) - 8) * xb[j] + ((blk.qs[j] >> 4) - 8) * xb[j + 16];
      }
      s = std::fma(static_cast<float>(isum), fp16_to_fp32(blk.d) * xd[b], s);
    }
    return s;
  });
}

void gemm_q4_k(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    const BlockQ8_K* xk = a.qk + t * nb;
    float s = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ4_K blk = load<BlockQ4_K>(w + b * sizeof(BlockQ4_K));
      const BlockQ8_K& xb = xk[b];
      int32_t sumi = 0, summ = 0;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        q4k_scale_min(j, blk.scales, &sc, &m);
        const uint8_t* q = blk.qs + 32 * (j / 2);
        const int shift = (j % 2) * 4;
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) dot += ((q[l] >> shift) & 0xF) * xb.qs[32 * j + l];
        sumi += sc * dot;
        summ += m * (xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
      }
      s += fp16_to_fp32(blk.d) * xb.d * static_cast<float>(sumi) -
           fp16_to_fp32(blk.dmin) * xb.d * static_cast<float>(summ);
    }
    return s;
  });
}

// Integer part of a Q6_K x Q8_K block dot (sum over sub-blocks of scale * sum (q - 32) * x).
int32_t q6_k_block_dot(const BlockQ6_K& blk, const BlockQ8_K& xb);

void gemm_q6_k(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    const BlockQ8_K* xk = a.qk + t * nb;
    float s = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ6_K blk = load<BlockQ6_K>(w + b * sizeof(BlockQ6_K));
      s += fp16_to_fp32(blk.d) * xk[b].d * static_cast<float>(q6_k_block_dot(blk, xk[b]));
    }
    return s;
  });
}

void gemm_q6_k_r16(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  for (int64_t i = 0; i < g.num_rows; ++i) {
    const int64_t rr = g.row0 + i;
    const uint8_t* grp = g.w + static_cast<size_t>(rr / 16) * g.stride;
    const int lane = static_cast<int>(rr % 16);
    for (int64_t t = 0; t < a.n_tok; ++t) {
      const BlockQ8_K* xk = a.qk + t * nb;
      float s = 0;
      for (int64_t b = 0; b < nb; ++b) {
        BlockQ6_K blk;
        q6_k_r16_block(grp, lane, b, &blk);
        s += fp16_to_fp32(blk.d) * xk[b].d * static_cast<float>(q6_k_block_dot(blk, xk[b]));
      }
      g.y[t * g.ldy + i] = s;
    }
  }
}

int32_t q6_k_block_dot(const BlockQ6_K& blk, const BlockQ8_K& xb) {
  int32_t sumi = 0;
  for (int c = 0; c < 2; ++c) {
    const uint8_t* ql = blk.ql + 64 * c;
    const uint8_t* qh = blk.qh + 32 * c;
    const int8_t* sc = blk.scales + 8 * c;
    const int8_t* xq = xb.qs + 128 * c;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      sumi += sc[is] * q1 * xq[l] + sc[is + 2] * q2 * xq[l + 32] + sc[is + 4] * q3 * xq[l + 64] +
              sc[is + 6] * q4 * xq[l + 96];
    }
  }
  return sumi;
}

// F32_R16 / F16_R16 (kernels.h): each (row, token) one fused multiply-add chain over
// k = 0..cols-1 from +0, the definition every SIMD tier reproduces bit for bit.
template <Layout kL>
void gemm_float_r16(const GemmArgs& g) {
  const Act& a = *g.act;
  constexpr size_t kBytes = float_r16_value_bytes(kL);
  for (int64_t i = 0; i < g.num_rows; ++i) {
    const int64_t rr = g.row0 + i;  // row relative to the first group
    const uint8_t* col = g.w + static_cast<size_t>(rr / 16) * g.stride + static_cast<size_t>(rr % 16) * kBytes;
    for (int64_t t = 0; t < a.n_tok; ++t) {
      const float* x = a.xf + t * a.cols;
      float s = 0.0f;
      for (int64_t k = 0; k < a.cols; ++k) {
        const uint8_t* p = col + static_cast<size_t>(k) * 16 * kBytes;
        const float w = kL == Layout::kF32_R16 ? load<float>(p) : fp16_to_fp32(load<uint16_t>(p));
        s = std::fma(w, x[k], s);
      }
      g.y[t * g.ldy + i] = s;
    }
  }
}

void gemm_q8_0_r16(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK8_0;
  for (int64_t i = 0; i < g.num_rows; ++i) {
    const int64_t rr = g.row0 + i;  // row relative to the first group
    const uint8_t* grp = g.w + static_cast<size_t>(rr / 16) * g.stride;
    const int lane = static_cast<int>(rr % 16);
    for (int64_t t = 0; t < a.n_tok; ++t) {
      const int8_t* xq = a.q8 + t * a.cols;
      const float* xd = a.d8 + t * nb;
      float s = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = grp + static_cast<size_t>(b / 2) * kR16PairBytes;
        const int half = static_cast<int>(b % 2);
        const float dw = fp16_to_fp32(load<uint16_t>(rec + half * 32 + lane * 2));
        const uint8_t* vals = rec + 64 + half * 512;
        int32_t isum = 0;
        for (int k = 0; k < kQK8_0; ++k) {
          const int wq = static_cast<int>(vals[(k / 4) * 64 + lane * 4 + k % 4]) - 128;
          isum += wq * xq[b * kQK8_0 + k];
        }
        s += static_cast<float>(isum) * (dw * xd[b]);
      }
      g.y[t * g.ldy + i] = s;
    }
  }
}

void gemm_q4_0_r16(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK4_0;
  for (int64_t i = 0; i < g.num_rows; ++i) {
    const int64_t rr = g.row0 + i;
    const uint8_t* grp = g.w + static_cast<size_t>(rr / 16) * g.stride;
    const int lane = static_cast<int>(rr % 16);
    for (int64_t t = 0; t < a.n_tok; ++t) {
      const int8_t* xq = a.q8 + t * a.cols;
      const float* xd = a.d8 + t * nb;
      float s = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = grp + static_cast<size_t>(b / 2) * kR16Q4PairBytes;
        const int half = static_cast<int>(b % 2);
        const float dw = fp16_to_fp32(load<uint16_t>(rec + half * 32 + lane * 2));
        const uint8_t* vals = rec + 64 + half * 256;
        int32_t isum = 0;
        for (int k = 0; k < kQK4_0; ++k) {
          const uint8_t byte = vals[((k % 16) / 4) * 64 + lane * 4 + k % 4];
          isum += ((k < 16 ? byte & 0xF : byte >> 4) - 8) * xq[b * kQK4_0 + k];
        }
        s = std::fma(static_cast<float>(isum), dw * xd[b], s);
      }
      g.y[t * g.ldy + i] = s;
    }
  }
}

void gemm_q4_k_r16(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  for (int64_t i = 0; i < g.num_rows; ++i) {
    const int64_t rr = g.row0 + i;
    const uint8_t* grp = g.w + static_cast<size_t>(rr / 16) * g.stride;
    const int lane = static_cast<int>(rr % 16);
    for (int64_t t = 0; t < a.n_tok; ++t) {
      const BlockQ8_K* xk = a.qk + t * nb;
      float s = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = grp + static_cast<size_t>(b) * kQ4KR16BlockBytes;
        const BlockQ8_K& xb = xk[b];
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; ++j) {
          const int c = j / 2, h = j % 2;
          int32_t dot = 0;
          for (int l = 0; l < 32; ++l) {
            const uint8_t byte = rec[(c * 8 + l / 4) * 64 + lane * 4 + l % 4];
            dot += (h ? byte >> 4 : byte & 0xF) * xb.qs[32 * j + l];
          }
          sumi += rec[2048 + j * 16 + lane] * dot;
          summ += rec[2176 + j * 16 + lane] * (xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
        }
        const float d = fp16_to_fp32(load<uint16_t>(rec + 2304 + lane * 2));
        const float dmin = fp16_to_fp32(load<uint16_t>(rec + 2336 + lane * 2));
        s += d * xb.d * static_cast<float>(sumi) - dmin * xb.d * static_cast<float>(summ);
      }
      g.y[t * g.ldy + i] = s;
    }
  }
}

// ---- The other ggml types (plain GGUF layouts) ----------------------------------------------
// Weight values are decoded per element index (not by ggml's loop structure), so these are an
// independent statement of each format; tests also compare them with dequantize_row.

// Value j (0..31) of a 32-block's nibbles (low nibbles hold values 0..15).
inline int nibble32(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }
inline int bit32(const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return static_cast<int>((h >> j) & 1);
}

// ggml's x86 order of float sums for 32-blocks: 8 lanes (lane i: values 4i..4i+3 of every
// block, scaled per block with an FMA), then (0..3 + 4..7), (0+2, 1+3), (0 + 1). The quantized
// models are sensitive to last-bit differences (they flip later activation roundings), so the
// reference follows llama.cpp's order; the SIMD kernels use the same lanes.
inline float hsum8(const float* acc) {
  float h[4];
  for (int i = 0; i < 4; ++i) h[i] = acc[i] + acc[i + 4];
  const float a0 = h[0] + h[2], a1 = h[1] + h[3];
  return a0 + a1;
}

// One 32-block into the 8 lanes of hsum8's order: lane l gets the integer sum of values
// 4l..4l+3 times the activations, fused into acc[l] with the block's scale d.
template <typename Value>
inline void dot_block32(float* acc, float d, const int8_t* xq, Value value) {
  for (int l = 0; l < 8; ++l) {
    int32_t isum = 0;
    for (int k = 4 * l; k < 4 * l + 4; ++k) isum += value(k) * xq[k];
    acc[l] = std::fma(static_cast<float>(isum), d, acc[l]);
  }
}

// Every (row, token) of an R16 layout: dot(group, lane, t) for the 16-row group and the lane
// holding row row0 + i.
template <typename Dot>
void for_each_r16_row_token(const GemmArgs& g, Dot dot) {
  for (int64_t i = 0; i < g.num_rows; ++i) {
    const int64_t rr = g.row0 + i;
    const uint8_t* grp = g.w + static_cast<size_t>(rr / 16) * g.stride;
    const int lane = static_cast<int>(rr % 16);
    for (int64_t t = 0; t < g.act->n_tok; ++t) g.y[t * g.ldy + i] = dot(grp, lane, t);
  }
}

// Signed 32-value blocks x Q8_0 activations: s = sum_b d_w * d_x * sum_j w_j x_j, for one row
// and token: block(b, v) writes block b's 32 values to v and returns its d_w * d_x. ggml's 8-lane order
// (dot_block32, hsum8: Q5_0 by default), or kBlock: each block's products summed exactly in int32
// and added with one FMA, acc = fma(float(S_b), d_w * d_x, acc), block by block: llama.cpp's x86
// order for IQ4_NL (it repacks every IQ4_NL matrix of 8k rows, iq4_nl_8x8, ggml-cpu repack.cpp,
// on any AVX2 CPU, and those kernels sum so; not the 8-lane order of ggml's plain vec_dot that
// Q5_0 / Q4_1 / Q5_1 follow), and Q5_0's in Q50Order::kBlock (matrix.h).
template <bool kBlock, typename BlockFn>
float signed32_dot(int64_t nb, const int8_t* xq, BlockFn block) {
  float acc[8] = {}, s = 0;
  int32_t v[32];
  for (int64_t b = 0; b < nb; ++b) {
    const float d = block(b, v);
    if constexpr (kBlock) {
      int32_t isum = 0;
      for (int j = 0; j < 32; ++j) isum += v[j] * xq[b * 32 + j];
      s = std::fma(static_cast<float>(isum), d, s);
    } else {
      dot_block32(acc, d, xq + b * 32, [&](int j) { return v[j]; });
    }
  }
  return kBlock ? s : hsum8(acc);
}
template <bool kBlock, typename Block, typename Val>
void gemm_signed32(const GemmArgs& g, Val val) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    return signed32_dot<kBlock>(nb, a.q8 + t * a.cols, [&](int64_t b, int32_t* v) {
      const Block blk = load<Block>(w + b * sizeof(Block));
      for (int j = 0; j < 32; ++j) v[j] = val(blk, j);
      return fp16_to_fp32(blk.d) * a.d8[t * nb + b];
    });
  });
}
// Q5_0_R16 / IQ4_NL_R16 (repacked signed 32-blocks), in gemm_signed32<kBlock>'s order.
template <bool kBlock, Layout kL>
void gemm_signed32_r16(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  for_each_r16_row_token(g, [&](const uint8_t* grp, int lane, int64_t t) {
    return signed32_dot<kBlock>(nb, a.q8 + t * a.cols, [&](int64_t b, int32_t* v) {
      for (int k = 0; k < 32; ++k) v[k] = r16_signed_value(kL, grp, b, lane, k);
      return fp16_to_fp32(load<uint16_t>(r16_block_scale(kL, grp, b, lane))) * a.d8[t * nb + b];
    });
  });
}
// Q5_0_R16: ggml's order (gemm_signed32_r16), or the block order (GemmArgs::q5_block).
void gemm_q5_0_r16(const GemmArgs& g) {
  if (g.q5_block) return gemm_signed32_r16<true, Layout::kQ5_0_R16>(g);
  gemm_signed32_r16<false, Layout::kQ5_0_R16>(g);
}

// Unsigned 32-value blocks with a min x Q8_1 activations (ggml's q4_1/q5_1 x q8_1 dot):
// s = sum_b (d_w * d_x * sum_j u_j x_j) + m_w * s_x.
template <typename Block, typename Val>
void gemm_affine32(const GemmArgs& g, Val val) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    const int8_t* xq = a.q8 + t * a.cols;
    float acc[8] = {}, summ = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const Block blk = load<Block>(w + b * sizeof(Block));
      dot_block32(acc, fp16_to_fp32(blk.d) * a.d8[t * nb + b], xq + b * 32, [&](int j) { return val(blk, j); });
      summ += fp16_to_fp32(blk.m) * a.s1[t * nb + b];
    }
    return hsum8(acc) + summ;
  });
}

// Q4_1_R16 / Q5_1_R16 (repacked unsigned 32-blocks with a min), in the same order as gemm_affine32.
template <Layout kL>
void gemm_affine32_r16(const GemmArgs& g) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  for_each_r16_row_token(g, [&](const uint8_t* grp, int lane, int64_t t) {
    const int8_t* xq = a.q8 + t * a.cols;
    float acc[8] = {}, summ = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const float d = fp16_to_fp32(load<uint16_t>(r16_block_scale(kL, grp, b, lane))) * a.d8[t * nb + b];
      dot_block32(acc, d, xq + b * 32, [&](int k) { return r16_signed_value(kL, grp, b, lane, k); });
      summ += fp16_to_fp32(load<uint16_t>(r16_block_min(kL, grp, b, lane))) * a.s1[t * nb + b];
    }
    return hsum8(acc) + summ;
  });
}

void gemm_q4_1(const GemmArgs& g) {
  gemm_affine32<BlockQ4_1>(g, [](const BlockQ4_1& b, int j) { return nibble32(b.qs, j); });
}
void gemm_q5_1(const GemmArgs& g) {
  gemm_affine32<BlockQ5_1>(g, [](const BlockQ5_1& b, int j) { return nibble32(b.qs, j) | (bit32(b.qh, j) << 4); });
}
void gemm_q5_0(const GemmArgs& g) {
  auto val = [](const BlockQ5_0& b, int j) { return (nibble32(b.qs, j) | (bit32(b.qh, j) << 4)) - 16; };
  if (g.q5_block) return gemm_signed32<true, BlockQ5_0>(g, val);  // Q50Order::kBlock (matrix.h)
  gemm_signed32<false, BlockQ5_0>(g, val);
}
// IQ4_NL in llama.cpp's x86 order (gemm_signed32<true>).
void gemm_iq4_nl(const GemmArgs& g) {
  gemm_signed32<true, BlockIQ4_NL>(g, [](const BlockIQ4_NL& b, int j) { return int{kIQ4NLValues[nibble32(b.qs, j)]}; });
}

// K-type blocks x Q8_K: dot(blk, xb) returns the block's contribution / (d_x), given d_w terms.
template <typename Block, typename Dot>
void gemm_k(const GemmArgs& g, Dot dot) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  for_each_row_token(g, [&](int64_t r, int64_t t) {
    const uint8_t* w = g.w + static_cast<size_t>(r) * g.stride;
    const BlockQ8_K* xk = a.qk + t * nb;
    float s = 0;
    for (int64_t b = 0; b < nb; ++b) s += dot(load<Block>(w + b * sizeof(Block)), xk[b]);
    return s;
  });
}

// Q2_K / Q3_K value e (0..255): 2 low bits at byte 32*(e/128) + e%32, shift 2*((e%128)/32).
inline int q2_bits(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

float q2_k_dot(const BlockQ2_K& blk, const BlockQ8_K& xb) {
  int32_t sumi = 0, summ = 0;
  for (int j = 0; j < 16; ++j) {
    int32_t dot = 0;
    for (int e = 16 * j; e < 16 * j + 16; ++e) dot += q2_bits(blk.qs, e) * xb.qs[e];
    sumi += (blk.scales[j] & 0xF) * dot;
    summ += (blk.scales[j] >> 4) * xb.bsums[j];
  }
  return fp16_to_fp32(blk.d) * xb.d * static_cast<float>(sumi) - fp16_to_fp32(blk.dmin) * xb.d * static_cast<float>(summ);
}

float q3_k_dot(const BlockQ3_K& blk, const BlockQ8_K& xb) {
  int8_t sc[16];
  q3k_scales(blk.scales, sc);
  int32_t sumi = 0;
  for (int j = 0; j < 16; ++j) {
    int32_t dot = 0;
    for (int e = 16 * j; e < 16 * j + 16; ++e) {
      const int hbit = (blk.hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
      dot += (q2_bits(blk.qs, e) - (hbit ? 0 : 4)) * xb.qs[e];
    }
    sumi += sc[j] * dot;
  }
  return fp16_to_fp32(blk.d) * xb.d * static_cast<float>(sumi);
}

float q5_k_dot(const BlockQ5_K& blk, const BlockQ8_K& xb) {
  int32_t sumi = 0, summ = 0;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, blk.scales, &sc, &m);
    int32_t dot = 0;
    for (int e = 32 * j; e < 32 * j + 32; ++e) {
      const int c = e / 64, h = (e % 64) / 32, l = e % 32;
      const int lo = h ? blk.qs[32 * c + l] >> 4 : blk.qs[32 * c + l] & 0xF;
      dot += (lo | (((blk.qh[l] >> (2 * c + h)) & 1) << 4)) * xb.qs[e];
    }
    sumi += sc * dot;
    summ += m * (xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
  }
  return fp16_to_fp32(blk.d) * xb.d * static_cast<float>(sumi) - fp16_to_fp32(blk.dmin) * xb.d * static_cast<float>(summ);
}

float iq4_xs_dot(const BlockIQ4_XS& blk, const BlockQ8_K& xb) {
  int32_t sumi = 0;
  for (int ib = 0; ib < 8; ++ib) {
    int32_t dot = 0;
    for (int j = 0; j < 32; ++j) dot += kIQ4NLValues[nibble32(blk.qs + 16 * ib, j)] * xb.qs[32 * ib + j];
    sumi += iq4xs_scale(blk, ib) * dot;
  }
  return fp16_to_fp32(blk.d) * xb.d * static_cast<float>(sumi);
}

void gemm_q2_k(const GemmArgs& g) { gemm_k<BlockQ2_K>(g, q2_k_dot); }
void gemm_q3_k(const GemmArgs& g) { gemm_k<BlockQ3_K>(g, q3_k_dot); }
void gemm_q5_k(const GemmArgs& g) { gemm_k<BlockQ5_K>(g, q5_k_dot); }
void gemm_iq4_xs(const GemmArgs& g) { gemm_k<BlockIQ4_XS>(g, iq4_xs_dot); }

// Q5_K_R16 / Q3_K_R16 / Q2_K_R16 / IQ4_XS_R16: each row's blocks back in the GGUF layout, then
// the plain reference above (so the same results as the plain layout's reference).
template <Layout kL, typename Block>
void gemm_k_r16(const GemmArgs& g, float (*dot)(const Block&, const BlockQ8_K&)) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  for_each_r16_row_token(g, [&](const uint8_t* grp, int lane, int64_t t) {
    const BlockQ8_K* xk = a.qk + t * nb;
    float s = 0;
    for (int64_t b = 0; b < nb; ++b) {
      Block blk;
      kquant_r16_block(kL, grp, lane, b, &blk);
      s += dot(blk, xk[b]);
    }
    return s;
  });
}
void gemm_q5_k_r16(const GemmArgs& g) { gemm_k_r16<Layout::kQ5_K_R16, BlockQ5_K>(g, q5_k_dot); }
void gemm_q3_k_r16(const GemmArgs& g) { gemm_k_r16<Layout::kQ3_K_R16, BlockQ3_K>(g, q3_k_dot); }
void gemm_q2_k_r16(const GemmArgs& g) { gemm_k_r16<Layout::kQ2_K_R16, BlockQ2_K>(g, q2_k_dot); }
void gemm_iq4_xs_r16(const GemmArgs& g) { gemm_k_r16<Layout::kIQ4_XS_R16, BlockIQ4_XS>(g, iq4_xs_dot); }

void round_f16_row(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = round_fp16(x[i]);
}

void round_bf16_row(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(fp32_to_bf16(x[i]));
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table = {{
      gemm_f32,
      gemm_f16,
      gemm_bf16,
      gemm_q8_0,
      gemm_q4_0,
      gemm_q4_k,
      gemm_q6_k,
      gemm_q8_0_r16,
      gemm_q4_k_r16,
      gemm_q6_k_r16,
      gemm_q4_0_r16,
      gemm_q4_1,
      gemm_q5_0,
      gemm_q5_1,
      gemm_q2_k,
      gemm_q3_k,
      gemm_q5_k,
      gemm_iq4_nl,
      gemm_iq4_xs,
      gemm_signed32_r16<true, Layout::kIQ4_NL_R16>,
      gemm_q5_0_r16,
      gemm_affine32_r16<Layout::kQ4_1_R16>,
      gemm_affine32_r16<Layout::kQ5_1_R16>,
      gemm_q5_k_r16,
      gemm_q3_k_r16,
      gemm_q2_k_r16,
      gemm_iq4_xs_r16,
      gemm_float_r16<Layout::kF32_R16>,
      gemm_float_r16<Layout::kF16_R16>,
  }, {round_f16_row, round_bf16_row, quantize_act_q8_0, quantize_act_q8_k}};
  return table;
}

}  // namespace ts::tensor::kern
