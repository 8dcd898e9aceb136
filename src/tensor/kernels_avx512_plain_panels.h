// Batched AVX-512 kernels for the plain (not repacked) Q4_0 / Q4_K / Q6_K layouts: 16-row
// panels decoded once per matmul, then vpdpbusd over all token columns.
//
// NOT a normal header: included once by kernels_avx512.cc inside its anonymous namespace, after
// the Q8_0/Q4_K/Q6_K R16 kernels (compiled for AVX-512 only).

// ---- Batched Q4_0 / Q4_K / Q6_K: decode 16-row panels once, then vpdpbusd over all tokens ----

// Plain (not repacked) Q4_0 / Q4_K / Q6_K rows always go through the panels, even for one
// token where the per-row 256-bit kernels would be a little faster: the K-quants' sum in another
// order, and a row's result must not depend on the batch size (batch_invariance_test); Q4_0's
// give the same bits (each block exactly, one FMA) but measured no faster. Plain layouts only run
// here when repacking was turned off (tests, benchmarks) or failed.
// The ggml-ordered signed panels (Q5_0 / IQ4_NL, kernels_avx512_more.h) give the per-row
// kernels' bits exactly, so they switch at kPanelMinTokens, where decoding starts to pay.
constexpr int64_t kPanelMinTokens = 4;

// 16 rows x 16 dwords (row i at src + i * src_stride) -> dst + c * 64 holds dword c of rows
// 0..15 (a 16x16 32-bit transpose: unpack 32, unpack 64, then two 128-bit lane shuffles).
inline void transpose_16x16_dwords(const uint8_t* src, size_t src_stride, uint8_t* dst) {
  __m512i r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + static_cast<size_t>(i) * src_stride);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // Per group of 4 rows q (t[4q..4q+3]): u[4q + m] holds, in each 128-bit lane L, dword 4L + m
  // of rows 4q..4q+3.
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    r[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    r[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    r[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    r[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512i v = _mm512_shuffle_i32x4(r[m], r[4 + m], 0x88);    // L0,L2 of rows 0-3 | 4-7
    const __m512i w = _mm512_shuffle_i32x4(r[m], r[4 + m], 0xDD);    // L1,L3
    const __m512i v2 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0x88);
    const __m512i w2 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0xDD);
    _mm512_store_si512(dst + (0 + m) * 64, _mm512_shuffle_i32x4(v, v2, 0x88));
    _mm512_store_si512(dst + (8 + m) * 64, _mm512_shuffle_i32x4(v, v2, 0xDD));
    _mm512_store_si512(dst + (4 + m) * 64, _mm512_shuffle_i32x4(w, w2, 0x88));
    _mm512_store_si512(dst + (12 + m) * 64, _mm512_shuffle_i32x4(w, w2, 0xDD));
  }
}

inline void store_lanes(const GemmArgs& g, __m512 acc, int64_t t, int64_t r, int lanes) {
  if (lanes == 16) {
    _mm512_storeu_ps(g.y + t * g.ldy + r, acc);
  } else {
    _mm512_mask_storeu_ps(g.y + t * g.ldy + r, static_cast<__mmask16>((1u << lanes) - 1), acc);
  }
}

// Q4_0 rows -> R16 format with bias 8 (u8 = nibble, weight = nibble - 8).
void decode_q4_0_panel(const GemmArgs& g, int64_t r, int lanes, uint8_t* panel) {
  const int64_t nb = g.act->cols / 32;
  const __m128i m4 = _mm_set1_epi8(0xF);
  alignas(64) uint8_t q[16][64];  // per lane: blocks b and b + 1, unsigned nibbles in order
  for (int64_t b = 0; b < nb; b += 2) {
    uint8_t* rec = panel + static_cast<size_t>(b / 2) * kR16PairBytes;
    for (int lane = 0; lane < 16; ++lane) {
      const bool live = lane < lanes;
      const uint8_t* row = g.w + static_cast<size_t>(r + (live ? lane : 0)) * g.stride;
      for (int h = 0; h < 2; ++h) {
        uint16_t d = 0;
        if (b + h < nb) {
          const uint8_t* blk = row + (b + h) * sizeof(BlockQ4_0);
          if (live) __builtin_memcpy(&d, blk, 2);
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
          _mm_store_si128(reinterpret_cast<__m128i*>(q[lane] + 32 * h), _mm_and_si128(v, m4));
          _mm_store_si128(reinterpret_cast<__m128i*>(q[lane] + 32 * h + 16), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
        } else {
          _mm256_store_si256(reinterpret_cast<__m256i*>(q[lane] + 32 * h), _mm256_setzero_si256());
        }
        __builtin_memcpy(rec + h * 32 + lane * 2, &d, 2);
      }
    }
    transpose_16x16_dwords(&q[0][0], 64, rec + 64);
  }
}

void gemm_q4_0(const GemmArgs& g) {
  if (g.scratch == nullptr) return gemm_q4_0_256(g);  // every batch size (see above)
  for (int64_t r = 0; r < g.num_rows; r += 16) {
    const int lanes = static_cast<int>(g.num_rows - r < 16 ? g.num_rows - r : 16);
    decode_q4_0_panel(g, r, lanes, g.scratch);
    r16_group<8>(g, g.scratch, 0, lanes, r);
  }
}

// K-quant panel, per 256-value block (kKPanelBlock bytes):
//   vals  [64 k4][16 lanes][4] u8   (4096 B)   unsigned values (Q4_K 0..15, Q6_K 0..63)
//   sc    [S][16] int32             sub-block scales (Q4_K S = 8 of 32 values; Q6_K S = 16 of 16)
//   pairs [S/2][16][2] int16        Q4_K: mins (m_2i, m_2i+1); Q6_K: scales (sc_2i, sc_2i+1)
//   d     [16] float, dmin [16] float (Q4_K only)
constexpr size_t kKPanelBlock = 4096 + 1024 + 512 + 64 + 64;  // panel_scratch_bytes() reserves 5760
static_assert(kKPanelBlock == 5760);
struct KPanel {
  uint8_t* base;
  static constexpr size_t kVals = 0, kSc = 4096, kPairs = 4096 + 1024, kD = 4096 + 1024 + 512, kDmin = kD + 64;
  uint8_t* blk(int64_t b) const { return base + static_cast<size_t>(b) * kKPanelBlock; }
};

void decode_q4_k_panel(const GemmArgs& g, int64_t r, int lanes, uint8_t* panel) {
  const int64_t nb = g.act->cols / kQK_K;
  const KPanel p{panel};
  const __m256i m4 = _mm256_set1_epi8(0xF);
  alignas(64) uint8_t qall[16][256];
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* pb = p.blk(b);
    for (int lane = 0; lane < 16; ++lane) {
      const bool live = lane < lanes;
      const uint8_t* blk = g.w + static_cast<size_t>(r + (live ? lane : 0)) * g.stride + b * sizeof(BlockQ4_K);
      uint8_t* q = qall[lane];
      for (int c = 0; c < 4; ++c) {
        const __m256i v = loadu256(blk + 16 + 32 * c);
        _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * c), _mm256_and_si256(v, m4));
        _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * c + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
      }
      uint8_t sc[8], mn[8];
      for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk + 4, &sc[j], &mn[j]);
      for (int j = 0; j < 8; ++j) {
        const int32_t s32 = live ? sc[j] : 0;
        __builtin_memcpy(pb + KPanel::kSc + (j * 16 + lane) * 4, &s32, 4);
      }
      for (int i = 0; i < 4; ++i) {
        const int16_t pr[2] = {static_cast<int16_t>(live ? mn[2 * i] : 0), static_cast<int16_t>(live ? mn[2 * i + 1] : 0)};
        __builtin_memcpy(pb + KPanel::kPairs + (i * 16 + lane) * 4, pr, 4);
      }
      const float d = live ? load_f16(blk) : 0.0f, dmin = live ? load_f16(blk + 2) : 0.0f;
      __builtin_memcpy(pb + KPanel::kD + lane * 4, &d, 4);
      __builtin_memcpy(pb + KPanel::kDmin + lane * 4, &dmin, 4);
    }
    for (int c = 0; c < 4; ++c) transpose_16x16_dwords(&qall[0][64 * c], 256, pb + KPanel::kVals + c * 16 * 64);
  }
}

void decode_q6_k_panel(const GemmArgs& g, int64_t r, int lanes, uint8_t* panel) {
  const int64_t nb = g.act->cols / kQK_K;
  const KPanel p{panel};
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  alignas(64) uint8_t qall[16][256];
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* pb = p.blk(b);
    for (int lane = 0; lane < 16; ++lane) {
      const bool live = lane < lanes;
      const uint8_t* blk = g.w + static_cast<size_t>(r + (live ? lane : 0)) * g.stride + b * sizeof(BlockQ6_K);
      uint8_t* q = qall[lane];
      for (int c = 0; c < 2; ++c) {
        const __m256i l0 = loadu256(blk + 64 * c);
        const __m256i l1 = loadu256(blk + 64 * c + 32);
        const __m256i h = loadu256(blk + 128 + 32 * c);
        uint8_t* qc = q + 128 * c;
        _mm256_store_si256(reinterpret_cast<__m256i*>(qc),
                           _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(qc + 32),
                           _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(qc + 64),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(qc + 96),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(h, 2), m30)));
      }
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      for (int j = 0; j < 16; ++j) {
        const int32_t s32 = live ? sc[j] : 0;
        __builtin_memcpy(pb + KPanel::kSc + (j * 16 + lane) * 4, &s32, 4);
      }
      for (int i = 0; i < 8; ++i) {
        const int16_t pr[2] = {static_cast<int16_t>(live ? sc[2 * i] : 0), static_cast<int16_t>(live ? sc[2 * i + 1] : 0)};
        __builtin_memcpy(pb + KPanel::kPairs + (i * 16 + lane) * 4, pr, 4);
      }
      const float d = live ? load_f16(blk + 208) : 0.0f;
      __builtin_memcpy(pb + KPanel::kD + lane * 4, &d, 4);
    }
    for (int c = 0; c < 4; ++c) transpose_16x16_dwords(&qall[0][64 * c], 256, pb + KPanel::kVals + c * 16 * 64);
  }
}

inline __m512i load_panel(const uint8_t* p) { return _mm512_load_si512(reinterpret_cast<const __m512i*>(p)); }

// One panel block (pb) for T tokens (xb[t]: each token's Q8_K block) into acc[T]. kSub:
// sub-blocks per 256-value block (16 of 16 values, or 8 of 32). kShift > 0: the panel values
// are stored + 2^kShift (Q6_K 32, Q3_K 4, IQ4_XS 128) and the pairs hold the sub-block scales;
// kShift == 0: Q4_K-style mins in the pairs, scaled by the dmin row.
template <int kSub, int kShift, int T>
inline void kpanel_block(const uint8_t* pb, const BlockQ8_K* const* xb, __m512* acc) {
  constexpr bool kQ6 = kSub == 16;         // 16-value sub-blocks: one bsum per sub-block
  constexpr int kK4 = kQ6 ? 4 : 8;         // 4-value groups per sub-block
  __m512i isum[T], side[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    isum[t] = _mm512_setzero_si512();
    side[t] = _mm512_setzero_si512();
  }
  for (int j = 0; j < kSub; ++j) {
    __m512i isub[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isub[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k4 = 0; k4 < kK4; ++k4) {
      const __m512i w = load_panel(pb + KPanel::kVals + (j * kK4 + k4) * 64);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        isub[t] = _mm512_dpbusd_epi32(isub[t], w, bcast_dword(xb[t]->qs + (j * kK4 + k4) * 4));
      }
    }
    const __m512i sc = load_panel(pb + KPanel::kSc + j * 64);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(isub[t], sc));
  }
  // Side term: Q4_K sum_j m_j * (x sum of sub-block j); Q6_K sum_j sc_j * bsum_j (for -32).
#pragma GCC unroll 8
  for (int i = 0; i < kSub / 2; ++i) {
    const __m512i pr = load_panel(pb + KPanel::kPairs + i * 64);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      __m512i xs;
      if constexpr (kQ6) {
        xs = bcast_dword(xb[t]->bsums + 2 * i);
      } else {
        xs = _mm512_set1_epi32(q8k_sum_pair32(*xb[t], i));
      }
      side[t] = _mm512_dpwssd_epi32(side[t], pr, xs);
    }
  }
  const __m512 dv = _mm512_load_ps(reinterpret_cast<const float*>(pb + KPanel::kD));
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m512 dx = _mm512_set1_ps(xb[t]->d);
    if constexpr (kShift > 0) {
      const __m512i s = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(side[t], kShift));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, dx), acc[t]);
    } else {
      const __m512 dm = _mm512_load_ps(reinterpret_cast<const float*>(pb + KPanel::kDmin));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(side[t]), _mm512_mul_ps(dm, dx), acc[t]);
    }
  }
}

// Every block of a decoded panel for tokens [t0, t0 + T) (kpanel_block per block).
template <int kSub, int kShift, int T>
inline void kpanel_tile(const GemmArgs& g, const uint8_t* panel, int lanes, int64_t r, int64_t t0,
                        PrefetchSpread* pf = nullptr) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const KPanel p{const_cast<uint8_t*>(panel)};
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf != nullptr) pf->step();
    const BlockQ8_K* xb[T];
    for (int t = 0; t < T; ++t) xb[t] = a.qk + (t0 + t) * nb + b;
    kpanel_block<kSub, kShift, T>(p.blk(b), xb, acc);
  }
  for (int t = 0; t < T; ++t) store_lanes(g, acc[t], t0 + t, r, lanes);
}

#include "tensor/kernels_avx512_panels.h"

template <KKind kKind>
void gemm_kquant_panels(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  constexpr int kSub = kKind == KKind::kQ6_K ? 16 : 8;
  constexpr int kShift = kKind == KKind::kQ6_K ? 5 : 0;
  for (int64_t r = 0; r < g.num_rows; r += 16) {
    const int lanes = static_cast<int>(g.num_rows - r < 16 ? g.num_rows - r : 16);
    if constexpr (kKind == KKind::kQ6_K) {
      decode_q6_k_panel(g, r, lanes, g.scratch);
    } else {
      decode_q4_k_panel(g, r, lanes, g.scratch);
    }
    int64_t t0 = 0;
    for (; t0 + 4 <= n_tok; t0 += 4) kpanel_tile<kSub, kShift, 4>(g, g.scratch, lanes, r, t0);
    switch (n_tok - t0) {
      case 3: kpanel_tile<kSub, kShift, 3>(g, g.scratch, lanes, r, t0); break;
      case 2: kpanel_tile<kSub, kShift, 2>(g, g.scratch, lanes, r, t0); break;
      case 1: kpanel_tile<kSub, kShift, 1>(g, g.scratch, lanes, r, t0); break;
      default: break;
    }
  }
}

void gemm_q4_k(const GemmArgs& g) {
  if (g.scratch == nullptr) return gemm_q4_k_256(g);  // every batch size (see above)
  gemm_kquant_panels<KKind::kQ4_K>(g);
}

void gemm_q6_k(const GemmArgs& g) {
  if (g.scratch == nullptr) return gemm_q6_k_256(g);  // every batch size (see above)
  gemm_kquant_panels<KKind::kQ6_K>(g);
}
