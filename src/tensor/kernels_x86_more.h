// 256-bit x86 kernels for the other common ggml types (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K,
// IQ4_NL, IQ4_XS) in their plain GGUF layouts.
//
// NOT a normal header: like kernels_x86_impl.h (which must be included first) it is included
// by kernels_avx2.cc and kernels_avx512.cc inside an anonymous namespace after their target
// pragmas, so each ISA gets its own copy (AVX2: vpmaddubsw/vpmaddwd; AVX-512: the same code
// with VNNI vpdpbusd/vpdpwssd through mul_sum_us8/madd_acc16).
//
// These per-row kernels (token tiles of up to 4, 8 for the K-types on AVX-512; each weight
// block decoded once per tile) serve matrices left in their GGUF layout: every one of these
// types has an R16 layout that the SIMD tiers repack it into by default (kernels_avx2_r16.h,
// kernels_avx2_ggml.h, kernels_avx2_kquant.h, kernels_avx2_panels.h, kernels_avx512_panels.h,
// kernels_avx512_kr16.h).
// Without repacking, Q2_K, Q3_K, Q5_K and IQ4_XS on AVX-512 run two rows per vector in decode
// batches (kernels_avx512_rowpairs.h) and decoded int16 panels from 16 tokens
// (kernels_avx512_lanepanels.h), both in these kernels' lanes; on AVX2 / AVX-VNNI they run here
// at every batch size.

// Token tiles of the K-type per-row kernels below: 8 tokens where the including file allows it
// (kKTileMax, 8 on AVX-512: its 32 vector registers hold 8 tokens' int32 and float lanes, so
// each block's values are unpacked once for 8 tokens instead of 4), then 4, 3, 2, 1. Each
// token's operations do not depend on the tile it is in (bit-identical whatever the batch).
template <typename F>
inline void for_ktoken_tiles(int64_t n_tok, F&& tile) {
  int64_t t0 = 0;
  if constexpr (kKTileMax >= 8) {
    for (; t0 + 8 <= n_tok; t0 += 8) tile.template operator()<8>(t0);
  }
  for (; t0 + 4 <= n_tok; t0 += 4) tile.template operator()<4>(t0);
  switch (n_tok - t0) {
    case 3: tile.template operator()<3>(t0); break;
    case 2: tile.template operator()<2>(t0); break;
    case 1: tile.template operator()<1>(t0); break;
    default: break;
  }
}

// 32 bits at p -> 32 bytes, byte j = 0xFF when bit j is set, else 0.
inline __m256i bits_to_bytes(const uint8_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                        3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(v)), shuf), bit), bit);
}

// 16 bytes of nibbles -> 32 bytes: low nibbles (values 0..15), then high nibbles (16..31).
inline __m256i nibbles_32(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m4 = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
}

inline __m256i iq4nl_table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
}

// ---- Q5_0 / IQ4_NL: signed 32-blocks with an fp16 scale first, through q8_tile ---------------

struct WQ5_0 {
  static constexpr size_t kBlockBytes = sizeof(BlockQ5_0);
  static constexpr bool kBlockOrder = false;
  static __m256i vals(const uint8_t* blk) {
    // Clear 5th bit: nibble | 0xF0 is nibble - 16 as int8; set: the nibble is the value.
    const __m256i hb = bits_to_bytes(blk + 2);
    return _mm256_or_si256(nibbles_32(blk + 6), _mm256_andnot_si256(hb, _mm256_set1_epi8(static_cast<char>(0xF0))));
  }
};
// Q5_0 in the block order (GemmArgs::q5_block: matrix.h Q50Order::kBlock).
struct WQ5_0Block : WQ5_0 {
  static constexpr bool kBlockOrder = true;
};
struct WIQ4_NL {
  static constexpr size_t kBlockBytes = sizeof(BlockIQ4_NL);
  static constexpr bool kBlockOrder = true;  // llama.cpp's x86 order (kernels_scalar.cc gemm_iq4_nl)
  static __m256i vals(const uint8_t* blk) { return _mm256_shuffle_epi8(iq4nl_table(), nibbles_32(blk + 2)); }
};

inline void gemm_q5_0_256(const GemmArgs& g) {
  if (g.q5_block) return gemm_q8<WQ5_0Block>(g);
  gemm_q8<WQ5_0>(g);
}
inline void gemm_iq4_nl_256(const GemmArgs& g) { gemm_q8<WIQ4_NL>(g); }

// ---- Q4_1 / Q5_1 x Q8_1: unsigned 32-blocks with fp16 d and m -------------------------------

struct WQ4_1 {
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_1);
  static __m256i vals(const uint8_t* blk) { return nibbles_32(blk + 4); }
};
struct WQ5_1 {
  static constexpr size_t kBlockBytes = sizeof(BlockQ5_1);
  static __m256i vals(const uint8_t* blk) {
    return _mm256_or_si256(nibbles_32(blk + 8), _mm256_and_si256(bits_to_bytes(blk + 4), _mm256_set1_epi8(0x10)));
  }
};

template <typename W, int T>
inline void q8_1_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  __m256 acc[T];
  float summ[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    summ[t] = 0.0f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * W::kBlockBytes;
    const __m256i u = W::vals(blk);  // 0..31: no maddubs saturation against |x| <= 127
    const float dw = load_f16(blk), mw = load_f16(blk + 2);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i x = loadu256(a.q8 + (t0 + t) * a.cols + b * 32);
      const __m256 d = _mm256_set1_ps(dw * a.d8[(t0 + t) * nb + b]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mul_sum_us8(u, x)), d, acc[t]);
      summ[t] += mw * a.s1[(t0 + t) * nb + b];
    }
  }
  for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.ldy + r] = hsum_ps(acc[t]) + summ[t];
}

template <typename W>
inline void gemm_q8_1(const GemmArgs& g) {
  for (int64_t r = 0; r < g.num_rows; ++r) {
    for_token_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { q8_1_tile<W, T>(g, r, t0); });
  }
}

inline void gemm_q4_1_256(const GemmArgs& g) { gemm_q8_1<WQ4_1>(g); }
inline void gemm_q5_1_256(const GemmArgs& g) { gemm_q8_1<WQ5_1>(g); }

// ---- K-types x Q8_K ---------------------------------------------------------------------------

inline __m256i srl16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

// The 16 sub-block scales (int8) as int16 [s0 s2 .. s14 | s1 s3 .. s15]: chunk_scales16 then
// needs one in-lane shuffle a 32-value chunk.
inline __m256i even_odd_scales16(__m128i s8) {
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
}
// For 32-value chunk c (sub-blocks 2c, 2c+1) from even_odd_scales16: s_2c in every int16 of the
// low 128-bit lane, s_2c+1 in the high one (vpmaddwd's scale operand).
inline __m256i chunk_scales16_pattern(int c) {
  const char lo = static_cast<char>(2 * c), hi = static_cast<char>(2 * c + 1);
  return _mm256_setr_epi8(lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi,
                          lo, hi, lo, hi, lo, hi, lo, hi);
}
inline __m256i chunk_scales16(__m256i eo16, int c) { return _mm256_shuffle_epi8(eo16, chunk_scales16_pattern(c)); }

// Q3_K's 16 signed 6-bit scales (12 packed bytes, quants.h q3k_scales) as int8 (value - 32):
// low 4 bits from the nibbles of bytes 0-7 (j < 8: low nibble of byte j; else high nibble of
// byte j - 8), high 2 bits from byte 8 + j % 4 at bit 2 * (j / 4). Reads only the 12 bytes.
inline __m128i q3k_scales_vec(const uint8_t* p) {
  uint64_t lo8;
  uint32_t hi4;
  __builtin_memcpy(&lo8, p, 8);
  __builtin_memcpy(&hi4, p + 8, 4);
  const __m128i a = _mm_set_epi64x(static_cast<long long>(hi4), static_cast<long long>(lo8));
  const __m128i m4 = _mm_set1_epi8(0xF);
  const __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(a, _mm_srli_epi16(a, 4)), m4);
  const __m128i h = _mm_shuffle_epi8(a, _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11));
  __m128i hs = _mm_blend_epi32(h, _mm_srli_epi16(h, 2), 0x2);
  hs = _mm_blend_epi32(hs, _mm_srli_epi16(h, 4), 0x4);
  hs = _mm_blend_epi32(hs, _mm_srli_epi16(h, 6), 0x8);
  const __m128i hi = _mm_slli_epi16(_mm_and_si128(hs, _mm_set1_epi8(3)), 4);
  return _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
}

// kKind: 0 = Q2_K, 1 = Q3_K. Per block, 8 int32 lanes (lane l: values 4l..4l+3 of each 32-value
// chunk, times their sub-block's scale) and one FMA a lane with d (Q2_K: then the mins' lanes,
// bsums pairs times mins, with dmin; Q3_K: minus 4 x the same pairs times the scales).
template <int kKind, int T>
inline void q23_k_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  constexpr size_t kBytes = kKind == 0 ? sizeof(BlockQ2_K) : sizeof(BlockQ3_K);
  constexpr int kQs = kKind == 0 ? 16 : 32;  // offset of the 2-bit values
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i four = _mm256_set1_epi8(4);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kBytes;
    float d, dmin = 0;
    __m256i eo16;    // the 16 sub-block scales, even_odd_scales16
    __m256i side16;  // Q2_K: the 16 mins; Q3_K: the 16 signed scales (for the -4 offset)
    if constexpr (kKind == 0) {
      const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
      eo16 = even_odd_scales16(_mm_and_si128(s8, _mm_set1_epi8(0xF)));
      side16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0xF)));
      d = load_f16(blk + 80);
      dmin = load_f16(blk + 82);
    } else {
      const __m128i s8 = q3k_scales_vec(blk + 96);
      eo16 = even_odd_scales16(s8);
      side16 = _mm256_cvtepi8_epi16(s8);
      d = load_f16(blk + 108);
    }
    const __m256i hm = kKind == 1 ? loadu256(blk) : _mm256_setzero_si256();
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
      const __m256i q = loadu256(blk + kQs + 32 * n);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        // Values 128n + 32j .. +31: sub-blocks 8n + 2j (low lane) and 8n + 2j + 1 (high lane).
        __m256i u = _mm256_and_si256(srl16(q, 2 * j), m3);
        if constexpr (kKind == 1) {
          // Stored 3rd bit set means "no -4"; u + 4*bit - 4 is the value, -4 folded in below.
          // Bit 4n + j of each byte moved to bit 2 (16-bit shifts by at most 5: no other byte's
          // bit lands on bit 2).
          const int k = 4 * n + j;
          const __m256i h = k >= 2 ? srl16(hm, k - 2) : _mm256_sll_epi16(hm, _mm_cvtsi32_si128(2 - k));
          u = _mm256_or_si256(u, _mm256_and_si256(h, four));
        }
        const __m256i s16 = chunk_scales16(eo16, 4 * n + j);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a.qk[(t0 + t) * nb + b].qs + 128 * n + 32 * j;
          isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(u, loadu256(xq)), s16);
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& xb = a.qk[(t0 + t) * nb + b];
      const __m256i side = _mm256_madd_epi16(loadu256(xb.bsums), side16);
      if constexpr (kKind == 0) {
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * xb.d), acc[t]);
        acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(side), _mm256_set1_ps(dmin * xb.d), acc[t]);
      } else {
        const __m256i s = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(side, 2));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xb.d), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.ldy + r] = hsum_ps(acc[t]);
}

template <int kKind>
inline void gemm_q23_k(const GemmArgs& g) {
  for (int64_t r = 0; r < g.num_rows; ++r) {
    for_ktoken_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { q23_k_tile<kKind, T>(g, r, t0); });
  }
}

inline void gemm_q2_k_256(const GemmArgs& g) { gemm_q23_k<0>(g); }
inline void gemm_q3_k_256(const GemmArgs& g) { gemm_q23_k<1>(g); }

// Q4_K / Q5_K's 8 6-bit scales and 8 6-bit mins (12 packed bytes, quants.h q4k_scale_min), one
// byte each, from three 32-bit words: j < 4 from the low 6 bits of bytes j (scales) and j + 4
// (mins); j >= 4 from the nibbles of byte j + 4 with 2 high bits from the top of bytes j - 4 / j.
inline void q4k_scales_mins8(const uint8_t* p, uint64_t* scales, uint64_t* mins) {
  uint32_t u[3];
  __builtin_memcpy(u, p, 12);
  constexpr uint32_t k6 = 0x3f3f3f3fu, k4 = 0x0f0f0f0fu, k2 = 0x03030303u;
  const uint32_t sc_hi = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
  const uint32_t mn_hi = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
  *scales = (u[0] & k6) | (static_cast<uint64_t>(sc_hi) << 32);
  *mins = (u[1] & k6) | (static_cast<uint64_t>(mn_hi) << 32);
}

// v shifted (as 16-bit lanes) so that bit k (0..7) of each byte sits at bit 4.
inline __m256i bit_to4(__m256i v, int k) {
  return k <= 4 ? _mm256_sll_epi16(v, _mm_cvtsi32_si128(4 - k)) : srl16(v, k - 4);
}

// Q5_K: Q4_K's scales and mins, plus a 5th bit per value from qh.
template <int T>
inline void q5_k_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i b16 = _mm256_set1_epi8(0x10);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * sizeof(BlockQ5_K);
    const float d = load_f16(blk), dmin = load_f16(blk + 2);
    uint64_t sc64, mn64;
    q4k_scales_mins8(blk + 4, &sc64, &mn64);
    alignas(16) int16_t sc[8];  // broadcast from memory per sub-block
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc64))));
    const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mn64)));
    const __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
    const __m256i qh = loadu256(blk + 16);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    const uint8_t* qs = blk + 48;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i v = loadu256(qs + 32 * c);
      // Bit k of each qh byte moved to bit 4 (16-bit shifts by at most 4: no other byte's bit
      // lands on bit 4), then masked: the 5th bit's 16.
      const __m256i h_lo = _mm256_and_si256(bit_to4(qh, 2 * c), b16);
      const __m256i h_hi = _mm256_and_si256(bit_to4(qh, 2 * c + 1), b16);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4), h_lo);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), h_hi);
      const __m256i s_lo = _mm256_set1_epi16(sc[2 * c]);
      const __m256i s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const int8_t* xq = a.qk[(t0 + t) * nb + b].qs + 64 * c;
        isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(lo, loadu256(xq)), s_lo);
        isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(hi, loadu256(xq + 32)), s_hi);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& xb = a.qk[(t0 + t) * nb + b];
      const __m256i msum = _mm256_madd_epi16(loadu256(xb.bsums), mins);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * xb.d), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * xb.d), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.ldy + r] = hsum_ps(acc[t]);
}

inline void gemm_q5_k_256(const GemmArgs& g) {
  for (int64_t r = 0; r < g.num_rows; ++r) {
    for_ktoken_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { q5_k_tile<T>(g, r, t0); });
  }
}

// IQ4_XS: 8 sub-blocks of 32 table values with signed 6-bit scales.
template <int T>
inline void iq4_xs_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  const __m256i table = iq4nl_table();
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * sizeof(BlockIQ4_XS);
    const float d = load_f16(blk);
    uint16_t sh;
    __builtin_memcpy(&sh, blk + 2, 2);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    __m256i nib[8];  // sub-block ib's nibbles in value order: 16 low, then 16 high
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {  // one 32-byte load holds sub-blocks 2i and 2i + 1
      const __m256i v = loadu256(blk + 8 + 32 * i);
      const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      nib[2 * i] = _mm256_permute2x128_si256(lo, hi, 0x20);
      nib[2 * i + 1] = _mm256_permute2x128_si256(lo, hi, 0x31);
    }
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = (((blk[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
      const __m256i w = _mm256_shuffle_epi8(table, nib[ib]);
      const __m256i aw = _mm256_sign_epi8(w, w);
      const __m256i s16 = _mm256_set1_epi16(static_cast<short>(ls));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m256i x = loadu256(a.qk[(t0 + t) * nb + b].qs + 32 * ib);
        // |w|, |x| <= 127: a pair sums to at most 32258, no vpmaddubsw saturation.
        isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), s16);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * a.qk[(t0 + t) * nb + b].d), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.ldy + r] = hsum_ps(acc[t]);
}

inline void gemm_iq4_xs_256(const GemmArgs& g) {
  for (int64_t r = 0; r < g.num_rows; ++r) {
    for_ktoken_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { iq4_xs_tile<T>(g, r, t0); });
  }
}
