// 256-bit x86 kernels for the other common ggml types (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K,
// IQ4_NL, IQ4_XS) in their plain GGUF layouts.
//
// NOT a normal header: like kernels_x86_impl.h (which must be included first) it is included
// by kernels_avx2.cc and kernels_avx512.cc inside an anonymous namespace after their target
// pragmas, so each ISA gets its own copy (AVX2: vpmaddubsw/vpmaddwd; AVX-512: the same code
// with VNNI vpdpbusd/vpdpwssd through mul_sum_us8/madd_acc16).
//
// Partial: these are per-row kernels over token tiles of up to 4 (each weight block decoded
// once per tile). Q5_0 and IQ4_NL have R16 layouts on AVX2 and AVX-512 (kernels_avx2_r16.h,
// kernels_avx512_panels.h); Q4_1, Q5_1, Q2_K, Q3_K, Q5_K and IQ4_XS have no repacked layout or
// decoded-panel GEMM yet on any ISA, so their batched/prefill throughput is below the others.

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
  static __m256i vals(const uint8_t* blk) {
    // Clear 5th bit: nibble | 0xF0 is nibble - 16 as int8; set: the nibble is the value.
    const __m256i hb = bits_to_bytes(blk + 2);
    return _mm256_or_si256(nibbles_32(blk + 6), _mm256_andnot_si256(hb, _mm256_set1_epi8(static_cast<char>(0xF0))));
  }
};
struct WIQ4_NL {
  static constexpr size_t kBlockBytes = sizeof(BlockIQ4_NL);
  static __m256i vals(const uint8_t* blk) { return _mm256_shuffle_epi8(iq4nl_table(), nibbles_32(blk + 2)); }
};

inline void gemm_q5_0_256(const GemmArgs& g) { gemm_q8<WQ5_0>(g); }
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

// Two 16-value sub-block scales (a for the low 128-bit lane, b for the high) as int16 lanes.
inline __m256i scale_pair16(int a, int b) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(b)), _mm_set1_epi16(static_cast<short>(a)));
}

// kKind: 0 = Q2_K, 1 = Q3_K.
template <int kKind, int T>
inline void q23_k_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  constexpr size_t kBytes = kKind == 0 ? sizeof(BlockQ2_K) : sizeof(BlockQ3_K);
  constexpr int kQs = kKind == 0 ? 16 : 32;  // offset of the 2-bit values
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kBytes;
    int sc[16];
    float d, dmin = 0;
    __m256i side16;  // Q2_K: the 16 mins; Q3_K: the 16 signed scales (for the -4 offset)
    if constexpr (kKind == 0) {
      for (int j = 0; j < 16; ++j) sc[j] = blk[j] & 0xF;
      const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
      side16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0xF)));
      d = load_f16(blk + 80);
      dmin = load_f16(blk + 82);
    } else {
      alignas(16) int8_t s3[16];
      q3k_scales(blk + 96, s3);
      for (int j = 0; j < 16; ++j) sc[j] = s3[j];
      side16 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(s3)));
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
          u = _mm256_or_si256(u, _mm256_slli_epi16(_mm256_and_si256(srl16(hm, 4 * n + j), one), 2));
        }
        const __m256i s16 = scale_pair16(sc[8 * n + 2 * j], sc[8 * n + 2 * j + 1]);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a.qk[(t0 + t) * nb + b].qs + 128 * n + 32 * j;
          isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(u, loadu256(xq)), s16);
        }
      }
    }
#pragma GCC unroll 4
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
    for_token_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { q23_k_tile<kKind, T>(g, r, t0); });
  }
}

inline void gemm_q2_k_256(const GemmArgs& g) { gemm_q23_k<0>(g); }
inline void gemm_q3_k_256(const GemmArgs& g) { gemm_q23_k<1>(g); }

// Q5_K: Q4_K's scales and mins, plus a 5th bit per value from qh.
template <int T>
inline void q5_k_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * sizeof(BlockQ5_K);
    const float d = load_f16(blk), dmin = load_f16(blk + 2);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk + 4, &sc[j], &mn[j]);
    uint64_t mn64;
    __builtin_memcpy(&mn64, mn, 8);
    const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mn64)));
    const __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
    const __m256i qh = loadu256(blk + 16);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    const uint8_t* qs = blk + 48;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i v = loadu256(qs + 32 * c);
      const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c), one), 4);
      const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * c + 1), one), 4);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4), h_lo);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), h_hi);
      const __m256i s_lo = _mm256_set1_epi16(sc[2 * c]);
      const __m256i s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* xq = a.qk[(t0 + t) * nb + b].qs + 64 * c;
        isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(lo, loadu256(xq)), s_lo);
        isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(hi, loadu256(xq + 32)), s_hi);
      }
    }
#pragma GCC unroll 4
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
    for_token_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { q5_k_tile<T>(g, r, t0); });
  }
}

// IQ4_XS: 8 sub-blocks of 32 table values with signed 6-bit scales.
template <int T>
inline void iq4_xs_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  const __m256i table = iq4nl_table();
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * sizeof(BlockIQ4_XS);
    const float d = load_f16(blk);
    uint16_t sh;
    __builtin_memcpy(&sh, blk + 2, 2);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = (((blk[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
      const __m256i w = _mm256_shuffle_epi8(table, nibbles_32(blk + 8 + 16 * ib));
      const __m256i aw = _mm256_sign_epi8(w, w);
      const __m256i s16 = _mm256_set1_epi16(static_cast<short>(ls));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i x = loadu256(a.qk[(t0 + t) * nb + b].qs + 32 * ib);
        // |w|, |x| <= 127: a pair sums to at most 32258, no vpmaddubsw saturation.
        isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), s16);
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * a.qk[(t0 + t) * nb + b].d), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.ldy + r] = hsum_ps(acc[t]);
}

inline void gemm_iq4_xs_256(const GemmArgs& g) {
  for (int64_t r = 0; r < g.num_rows; ++r) {
    for_token_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { iq4_xs_tile<T>(g, r, t0); });
  }
}
