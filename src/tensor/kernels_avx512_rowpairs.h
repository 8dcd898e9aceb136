// AVX-512 kernels for Q2_K, Q3_K, Q5_K and IQ4_XS batches below the lane panels (decode steps):
// two rows per 512-bit vector.
//
// NOT a normal header: included once by kernels_avx512.cc inside its anonymous namespace, after
// kernels_x86_more.h and kernels_avx512_lanepanels.h, compiled for AVX-512.
//
// kernels_x86_more.h's per-row kernels run one row's 8 int32 lanes in a 256-bit vector; here
// the low half of each vector holds row r and the high half row r + 1, with the same
// operations on each half (the activations broadcast to both halves, each row's scales in its
// own half), so the unpacking, the dot products and the per-block float steps run once for two
// rows: bit-identical to the per-row kernels (same lanes, same operations, same hsum order).

// The 16 int16 of v (one row's 8 in each half when idx says so) picked by vpermw.
inline __m512i perm16(__m512i idx, __m512i v) { return _mm512_permutexvar_epi16(idx, v); }

// idx for element k of rows A (int16 0..7) and B (8..15): k in the low half, 8 + k in the high.
inline __m512i pick_pair16(int k) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<short>(k))),
                            _mm256_set1_epi16(static_cast<short>(8 + k)), 1);
}

inline __m512i pair256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
// [a x 8 | b x 8]: a per-row float for the two rows' lanes.
inline __m512 halves_ps(float a, float b) { return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1); }

inline __m512i load2x256(const uint8_t* a, const uint8_t* b) { return pair256(loadu256(a), loadu256(b)); }

// A row pair's two streams are each one row long (a few KB), too short for the hardware
// prefetcher to pick up (decode from DRAM ran at half the speed of the per-row kernels, whose
// rows make one long stream): the next pair's rows (2 x stride contiguous bytes) are
// prefetched, spread over this pair's blocks.
inline PrefetchSpread next_pair_prefetch(const GemmArgs& g, int64_t r) {
  const bool more = g.sw_prefetch && r + 4 <= g.num_rows;
  const uint8_t* next = g.w + static_cast<size_t>(r + 2) * g.stride;
  return PrefetchSpread(more ? next : nullptr, 2 * g.stride, g.act->cols / kQK_K);
}

// Rows (r, r + 1) of the lanes' float sums to y, each in hsum_ps's order.
template <int T>
inline void store_row_pair(const GemmArgs& g, const __m512 (&acc)[T], int64_t r, int64_t t0) {
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    g.y[(t0 + t) * g.ldy + r] = hsum_ps(_mm512_castps512_ps256(acc[t]));
    g.y[(t0 + t) * g.ldy + r + 1] = hsum_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1)));
  }
}

template <int T>
inline void q5_k_tile2(const GemmArgs& g, int64_t r, int64_t t0, PrefetchSpread* pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* rowa = g.w + static_cast<size_t>(r) * g.stride;
  const uint8_t* rowb = rowa + g.stride;
  const __m512i m4 = _mm512_set1_epi8(0xF), b16 = _mm512_set1_epi8(0x10);
  // mins as (m_l, m_l) int16 pairs per lane: elements 0,0,1,1,..,7,7 of each row.
  const __m512i mins_idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(0x10001));  // int16 pairs (i, i)
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf != nullptr) pf->step();
    const uint8_t* ba = rowa + b * sizeof(BlockQ5_K);
    const uint8_t* bb = rowb + b * sizeof(BlockQ5_K);
    const float da = load_f16(ba), dmina = load_f16(ba + 2), db = load_f16(bb), dminb = load_f16(bb + 2);
    uint64_t sca, mna, scb, mnb;
    q4k_scales_mins8(ba + 4, &sca, &mna);
    q4k_scales_mins8(bb + 4, &scb, &mnb);
    // int16 0..7: row A's scales (mins), 8..15: row B's.
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_set_epi64x(static_cast<long long>(scb), static_cast<long long>(sca))));
    const __m512i mn16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_set_epi64x(static_cast<long long>(mnb), static_cast<long long>(mna))));
    const __m512i mins = perm16(mins_idx, mn16);
    const __m512i qh = load2x256(ba + 16, bb + 16);
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = load2x256(ba + 48 + 32 * c, bb + 48 + 32 * c);
      const __m512i h_lo = _mm512_and_si512(c == 2 ? qh : (c < 2 ? _mm512_sll_epi16(qh, _mm_cvtsi32_si128(4 - 2 * c)) : _mm512_srl_epi16(qh, _mm_cvtsi32_si128(2 * c - 4))), b16);
      const int k1 = 2 * c + 1;
      const __m512i h_hi = _mm512_and_si512(k1 <= 4 ? _mm512_sll_epi16(qh, _mm_cvtsi32_si128(4 - k1)) : _mm512_srl_epi16(qh, _mm_cvtsi32_si128(k1 - 4)), b16);
      const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), h_lo);
      const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), h_hi);
      const __m512i s_lo = perm16(pick_pair16(2 * c), sc16);
      const __m512i s_hi = perm16(pick_pair16(2 * c + 1), sc16);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const int8_t* xq = a.qk[(t0 + t) * nb + b].qs + 64 * c;
        const __m512i xl = _mm512_broadcast_i64x4(loadu256(xq)), xh = _mm512_broadcast_i64x4(loadu256(xq + 32));
        isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(lo, xl), s_lo);
        isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(hi, xh), s_hi);
      }
    }
    const __m512 dv = halves_ps(da, db), mv = halves_ps(dmina, dminb);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& xb = a.qk[(t0 + t) * nb + b];
      const __m512i msum = _mm512_madd_epi16(_mm512_broadcast_i64x4(loadu256(xb.bsums)), mins);
      acc[t] = block_end_mins(acc[t], isum[t], msum, dv, mv, _mm512_set1_ps(xb.d));
    }
  }
  store_row_pair<T>(g, acc, r, t0);
}

// Rows in pairs through pair.template operator()<T>(r, t0, pf) (pf: the next pair's prefetch, on
// the first token tile), an odd last row through single.template operator()<T>(r, t0) (the
// per-row kernel), token tiles as the per-row kernels take them.
template <typename Pair, typename Single>
inline void gemm_row_pairs(const GemmArgs& g, Pair&& pair, Single&& single) {
  int64_t r = 0;
  for (; r + 2 <= g.num_rows; r += 2) {
    PrefetchSpread pf = next_pair_prefetch(g, r);
    for_ktoken_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { pair.template operator()<T>(r, t0, t0 == 0 ? &pf : nullptr); });
  }
  if (r < g.num_rows) {
    for_ktoken_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { single.template operator()<T>(r, t0); });
  }
}

inline void gemm_q5_k_pairs(const GemmArgs& g) {
  gemm_row_pairs(
      g, [&]<int T>(int64_t r, int64_t t0, PrefetchSpread* pf) { q5_k_tile2<T>(g, r, t0, pf); },
      [&]<int T>(int64_t r, int64_t t0) { q5_k_tile<T>(g, r, t0); });
}

// IQ4_XS's per-row tile (kernels_x86_more.h iq4_xs_tile) on rows (r, r + 1). vpsignb has no
// 512-bit form: x is negated under w's sign mask instead (the same bytes wherever w != 0, and
// |w| = 0 zeroes the product where w == 0).
template <int T>
inline void iq4_xs_tile2(const GemmArgs& g, int64_t r, int64_t t0, PrefetchSpread* pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* rowa = g.w + static_cast<size_t>(r) * g.stride;
  const uint8_t* rowb = rowa + g.stride;
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
  const __m512i m4 = _mm512_set1_epi8(0xF), zero = _mm512_setzero_si512();
  // 128-bit lanes (lo L0, hi L0 | lo L2, hi L2) and (lo L1, hi L1 | lo L3, hi L3): each row's
  // sub-blocks 2i and 2i + 1 in value order (16 low nibbles, then 16 high).
  const __m512i even = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), odd = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf != nullptr) pf->step();
    const uint8_t* ba = rowa + b * sizeof(BlockIQ4_XS);
    const uint8_t* bb = rowb + b * sizeof(BlockIQ4_XS);
    uint16_t sha, shb;
    __builtin_memcpy(&sha, ba + 2, 2);
    __builtin_memcpy(&shb, bb + 2, 2);
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m512i v = load2x256(ba + 8 + 32 * i, bb + 8 + 32 * i);
      const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int ib = 2 * i + h;
        const int lsa = (((ba[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sha >> (2 * ib)) & 3) << 4)) - 32;
        const int lsb = (((bb[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((shb >> (2 * ib)) & 3) << 4)) - 32;
        const __m512i w = _mm512_shuffle_epi8(table, _mm512_permutex2var_epi64(lo, h == 0 ? even : odd, hi));
        const __m512i aw = _mm512_abs_epi8(w);
        const __mmask64 neg = _mm512_movepi8_mask(w);
        const __m512i s16 = _mm512_mask_set1_epi16(_mm512_set1_epi16(static_cast<short>(lsa)), 0xFFFF0000u,
                                                   static_cast<short>(lsb));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m512i x = _mm512_broadcast_i64x4(loadu256(a.qk[(t0 + t) * nb + b].qs + 32 * ib));
          isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(aw, _mm512_mask_sub_epi8(x, neg, zero, x)), s16);
        }
      }
    }
    const __m512 dv = halves_ps(load_f16(ba), load_f16(bb));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 xd = _mm512_set1_ps(a.qk[(t0 + t) * nb + b].d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, xd), acc[t]);
    }
  }
  store_row_pair<T>(g, acc, r, t0);
}

inline void gemm_iq4_xs_pairs(const GemmArgs& g) {
  gemm_row_pairs(
      g, [&]<int T>(int64_t r, int64_t t0, PrefetchSpread* pf) { iq4_xs_tile2<T>(g, r, t0, pf); },
      [&]<int T>(int64_t r, int64_t t0) { iq4_xs_tile<T>(g, r, t0); });
}

// Q2_K / Q3_K's per-row tile (kernels_x86_more.h q23_k_tile) on rows (r, r + 1).
template <int kKind, int T>
inline void q23_k_tile2(const GemmArgs& g, int64_t r, int64_t t0, PrefetchSpread* pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* rowa = g.w + static_cast<size_t>(r) * g.stride;
  const uint8_t* rowb = rowa + g.stride;
  constexpr size_t kBytes = kKind == 0 ? sizeof(BlockQ2_K) : sizeof(BlockQ3_K);
  constexpr int kQs = kKind == 0 ? 16 : 32;
  const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf != nullptr) pf->step();
    const uint8_t* ba = rowa + b * kBytes;
    const uint8_t* bb = rowb + b * kBytes;
    __m512i eo16, side16;
    float da, db, dmina = 0, dminb = 0;
    if constexpr (kKind == 0) {
      const __m128i sa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ba));
      const __m128i sb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bb));
      const __m128i f = _mm_set1_epi8(0xF);
      eo16 = pair256(even_odd_scales16(_mm_and_si128(sa, f)), even_odd_scales16(_mm_and_si128(sb, f)));
      side16 = pair256(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sa, 4), f)),
                       _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), f)));
      da = load_f16(ba + 80);
      dmina = load_f16(ba + 82);
      db = load_f16(bb + 80);
      dminb = load_f16(bb + 82);
    } else {
      const __m128i sa = q3k_scales_vec(ba + 96), sb = q3k_scales_vec(bb + 96);
      eo16 = pair256(even_odd_scales16(sa), even_odd_scales16(sb));
      side16 = pair256(_mm256_cvtepi8_epi16(sa), _mm256_cvtepi8_epi16(sb));
      da = load_f16(ba + 108);
      db = load_f16(bb + 108);
    }
    const __m512i hm = kKind == 1 ? load2x256(ba, bb) : _mm512_setzero_si512();
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
      const __m512i q = load2x256(ba + kQs + 32 * n, bb + kQs + 32 * n);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        __m512i u = _mm512_and_si512(_mm512_srl_epi16(q, _mm_cvtsi32_si128(2 * j)), m3);
        if constexpr (kKind == 1) {
          const int k = 4 * n + j;
          const __m512i h = k >= 2 ? _mm512_srl_epi16(hm, _mm_cvtsi32_si128(k - 2)) : _mm512_sll_epi16(hm, _mm_cvtsi32_si128(2 - k));
          u = _mm512_or_si512(u, _mm512_and_si512(h, four));
        }
        const __m256i pick = chunk_scales16_pattern(4 * n + j);
        const __m512i s16 = _mm512_shuffle_epi8(eo16, _mm512_inserti64x4(_mm512_castsi256_si512(pick), pick, 1));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a.qk[(t0 + t) * nb + b].qs + 128 * n + 32 * j;
          isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(u, _mm512_broadcast_i64x4(loadu256(xq))), s16);
        }
      }
    }
    const __m512 dv = halves_ps(da, db), mv = halves_ps(dmina, dminb);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& xb = a.qk[(t0 + t) * nb + b];
      const __m512i side = _mm512_madd_epi16(_mm512_broadcast_i64x4(loadu256(xb.bsums)), side16);
      const __m512 xd = _mm512_set1_ps(xb.d);
      if constexpr (kKind == 0) {
        acc[t] = block_end_mins(acc[t], isum[t], side, dv, mv, xd);
      } else {
        const __m512i s = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(side, 2));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, xd), acc[t]);
      }
    }
  }
  store_row_pair<T>(g, acc, r, t0);
}

template <int kKind>
inline void gemm_q23_k_pairs(const GemmArgs& g) {
  gemm_row_pairs(
      g, [&]<int T>(int64_t r, int64_t t0, PrefetchSpread* pf) { q23_k_tile2<kKind, T>(g, r, t0, pf); },
      [&]<int T>(int64_t r, int64_t t0) { q23_k_tile<kKind, T>(g, r, t0); });
}
inline void gemm_q2_k_pairs(const GemmArgs& g) { gemm_q23_k_pairs<0>(g); }
inline void gemm_q3_k_pairs(const GemmArgs& g) { gemm_q23_k_pairs<1>(g); }
