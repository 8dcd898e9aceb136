// AVX2 kernels over the K-quant R16 layouts at small batches (Q4_K_R16, Q6_K_R16: 1-7 tokens;
// Q5_K_R16, Q3_K_R16, Q2_K_R16, IQ4_XS_R16: 1-2): each 16-row group read once per 2-token tile,
// the values unpacked in registers (larger batches: the decoded panels of kernels_avx2_panels.h).
// The kVnni forms (vpdpbusd through dpbusd_vex) run only on the avxvnni tier.
//
// NOT a normal header: included once by kernels_avx2.cc inside its anonymous namespace, right
// after kernels_avx2_r16.h (whose helpers it uses), under the same avx2,fma,f16c target pragma.

// Hides a pointer's value from the optimizer. The K-quant tiles read the same activation bytes in
// both 8-row halves of a block; without this GCC keeps every broadcast of the first half alive
// for the second and spills them to the stack (a store and a reload per broadcast).
template <typename P>
inline P opaque(P p) {
  __asm__("" : "+r"(p));
  return p;
}

// The walk every AVX2 K-quant tile makes: each block record of the group (kRecBytes apart, the
// prefetch stepped once a block) and each 8-row half h of it, calling body(rec, h, xb, xqs, acc)
// with the T tokens' Q8_K blocks, their values' pointers hidden from GCC (opaque) and the half's
// float accumulators; then the T output rows are stored.
template <int T, size_t kRecBytes, typename Body>
__attribute__((always_inline)) inline void kquant_tile_walk_avx2(const GemmArgs& g, const uint8_t* grp, int lane0,
                                                                 int lane1, int64_t out_r, int64_t t0,
                                                                 PrefetchSpread& pf, Body&& body) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  __m256 acc[2][T];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b) * kRecBytes;
    pf.step();
    const BlockQ8_K* xb[T];
    for (int t = 0; t < T; ++t) xb[t] = a.qk + (t0 + t) * nb + b;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int8_t* xqs[T];
      for (int t = 0; t < T; ++t) xqs[t] = opaque(xb[t]->qs);
      body(rec, h, xb, xqs, acc[h]);
    }
  }
  for (int t = 0; t < T; ++t) store_group(g, acc[0][t], acc[1][t], t0 + t, lane0, lane1, out_r);
}

// ---- Q4_K_R16 x Q8_K -------------------------------------------------------------------------

// kQ5: Q5_K_R16 (the Q4_K_R16 record plus the qh lines): each value's 5th bit added as 16, and
// the lines' vpmaddubsw pairs (<= 2 * 31 * 127) summed in int16 four at a time instead of eight;
// the same integer sums and float steps as kpanel_block_avx2<KSpecQ5K>.
template <int T, bool kQ5 = false>
inline void q4k_r16_tile_avx2(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0,
                              PrefetchSpread& pf) {
  constexpr size_t kRecBytes = kQ5 ? kQ5KR16BlockBytes : kQ4KR16BlockBytes;
  constexpr int kGroupM = kQ5 ? 4 : 8;  // lines summed in int16
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i b16 = _mm256_set1_epi8(16);
  kquant_tile_walk_avx2<T, kRecBytes>(
      g, grp, lane0, lane1, out_r, t0, pf,
      [&](const uint8_t* rec, int h, const BlockQ8_K* const(&xb)[T], const int8_t* const(&xqs)[T],
          __m256(&acc)[T]) __attribute__((always_inline)) {
    __m256i isum[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int c = 0; c < 4; ++c) {
      // Sub-blocks 2c (low nibbles) and 2c + 1 (high): 8 lines of 4 values each, summed in
      // int16 (Q4_K: all 8, <= 8 * 3810; Q5_K: 4 at a time), then scaled per row with vpmaddwd.
      // Q5: bits 2c, 2c + 1 of the qh line -> bits 0, 1
      [[maybe_unused]] const __m128i hshift = _mm_cvtsi32_si128(2 * c);
#pragma GCC unroll 2
      for (int q = 0; q < 8 / kGroupM; ++q) {
        __m256i slo[T], shi[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) slo[t] = shi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int mm = 0; mm < kGroupM; ++mm) {
          const int m = q * kGroupM + mm;
          const __m256i v = loadu256(rec + (c * 8 + m) * 64 + 32 * h);
          __m256i lo = _mm256_and_si256(v, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (kQ5) {
            const __m256i hb = _mm256_srl_epi16(loadu256(rec + kQ4KR16BlockBytes + m * 64 + 32 * h), hshift);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), b16));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), b16));
          }
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = xqs[t] + 64 * c + 4 * m;
            slo[t] = _mm256_add_epi16(slo[t], _mm256_maddubs_epi16(lo, bcast4(xq)));
            shi[t] = _mm256_add_epi16(shi[t], _mm256_maddubs_epi16(hi, bcast4(xq + 32)));
            keep_reg(slo[t]);
            keep_reg(shi[t]);
          }
        }
        const __m256i sc_lo = scale_pairs<false>(rec + 2048 + (2 * c) * 16 + 8 * h);
        const __m256i sc_hi = scale_pairs<false>(rec + 2048 + (2 * c + 1) * 16 + 8 * h);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(slo[t], sc_lo));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(shi[t], sc_hi));
        }
      }
    }
    // sum_j m_j * (activation sum of sub-block j), two sub-blocks per vpmaddwd.
    __m256i msum[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) msum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m256i mp = pair_of_rows<false>(rec + 2176 + (2 * i) * 16 + 8 * h);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i xs = _mm256_set1_epi32(q8k_sum_pair32(*xb[t], i));
        msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(mp, xs));
      }
    }
    const __m256 dv = load8_f16(rec + 2304 + 16 * h);
    const __m256 dmv = load8_f16(rec + 2336 + 16 * h);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(xb[t]->d);
      // Mins first, then the scaled sum: the order of the batched panel kernel
      // (kpanel_tile_avx2), so a row's result does not depend on the batch size.
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[t]), _mm256_mul_ps(dmv, dx), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dv, dx), acc[t]);
    }
  });
}

// A K-quant R16 matmul through 2-token tiles: tile.template operator()<T>(grp, lane0, lane1,
// out_r, t0, pf) for each group and tile (a single pass at 1-2 tokens: one_pass prefetch).
template <typename Tile>
inline void gemm_kquant_tiles_avx2(const GemmArgs& g, Tile&& tile) {
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / kQK_K;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, (n_tok + 1) / 2 * nb, /*one_pass=*/n_tok <= 2);
    for_tiles<2>(n_tok, [&]<int T>(int64_t t0) { tile.template operator()<T>(grp, lane0, lane1, out_r, t0, pf); });
  });
}

template <bool kQ5 = false>
inline void gemm_q4_k_r16_avx2(const GemmArgs& g) {
  gemm_kquant_tiles_avx2(g, [&]<int T>(const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0, PrefetchSpread& pf) {
    q4k_r16_tile_avx2<T, kQ5>(g, grp, lane0, lane1, out_r, t0, pf);
  });
}

// ---- Q6_K_R16 x Q8_K -------------------------------------------------------------------------

// The R16 types of 16 sub-blocks of 16 values (K16 kinds): Q6_K_R16 (q6k_r16_tile_avx2), Q3_K_R16
// (values + 4 from a qs line and an hmask line) and Q2_K_R16 (qs line, mins) (k16_lines_tile_avx2).
enum class K16 { kQ6_K, kQ3_K, kQ2_K };

// Line m of quarter i of half c (8 rows, half h) of a Q6_K_R16 block: its values + 32 (0..63).
inline __m256i q6_line(const uint8_t* rec, int c, int i, int m, int h) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
  const __m256i l = loadu256(rec + (c * 16 + m + (i & 1) * 8) * 64 + 32 * h);
  const __m256i qh = loadu256(rec + 2048 + (c * 8 + m) * 64 + 32 * h);
  const __m256i low = i < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
  __m256i high;
  if (i == 0) high = _mm256_slli_epi16(qh, 4);
  else if (i == 1) high = _mm256_slli_epi16(qh, 2);
  else if (i == 2) high = qh;
  else high = _mm256_srli_epi16(qh, 2);
  return _mm256_or_si256(low, _mm256_and_si256(high, m30));
}
// Sub-block scales of 8 rows at p: Q6_K / Q3_K int8; Q2_K the low nibbles of its scale bytes.
template <K16 kKind>
inline __m128i k16_scale8(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return kKind == K16::kQ2_K ? _mm_and_si128(b, _mm_set1_epi8(0xF)) : b;
}

// The end of a half-block (8 rows, half h) of a tile whose values are stored + 2^kShift (Q6_K 32,
// Q3_K 4): 2^kShift * sum_j sc_j * bsum_j (the int8 sub-block scales at `scales`, two sub-blocks a
// vpmaddwd) taken off each token's isum, which is then added, times d * the token's d, to acc.
// The callers pass the scales through opaque: it keeps GCC from holding their earlier loads alive.
template <int T, int kShift>
inline void k16_offset_step(const uint8_t* scales, const uint8_t* d, int h, const BlockQ8_K* const (&xb)[T],
                            const __m256i (&isum)[T], __m256 (&acc)[T]) {
  __m256i corr[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) corr[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const __m256i sp = pair_of_rows<true>(scales + (2 * i) * 16 + 8 * h);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      corr[t] = _mm256_add_epi32(corr[t], _mm256_madd_epi16(sp, bcast4(xb[t]->bsums + 2 * i)));
    }
  }
  const __m256 dv = load8_f16(d + 16 * h);
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const __m256i s = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(corr[t], kShift));
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dv, _mm256_set1_ps(xb[t]->d)), acc[t]);
  }
}

// The same integer sums and float steps as kpanel_block_avx2<KSpecQ6K>. kVnni (the AVX-VNNI
// tier): a sub-block's four lines summed in int32 by vpdpbusd and scaled by one vpmulld
// (kpanel_tile_avx2's form) instead of vpmaddubsw + vpaddw per line and vpmaddwd per line pair:
// the same exact integer sums, so the same results.
template <int T, bool kVnni = false>
inline void q6k_r16_tile_avx2(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0,
                              PrefetchSpread& pf) {
  constexpr size_t kRecBytes = kQ6KR16BlockBytes;
  constexpr size_t kScales = 3072, kD = 3328;
  kquant_tile_walk_avx2<T, kRecBytes>(
      g, grp, lane0, lane1, out_r, t0, pf,
      [&](const uint8_t* rec, int h, const BlockQ8_K* const(&xb)[T], const int8_t* const(&xqs)[T],
          __m256(&acc)[T]) __attribute__((always_inline)) {
    __m256i isum[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int c = 0; c < 2; ++c) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        // Quarter i of the 128 values: q_i of lines m = 0..7 (values 128c + 32i + 4m..);
        // lines 0-3 are sub-block 8c + 2i, lines 4-7 sub-block 8c + 2i + 1. Two lines'
        // pairs (<= 2 * 16002) are summed in int16 before vpmaddwd with the row scales.
#pragma GCC unroll 2
        for (int hh = 0; hh < 2; ++hh) {
          const uint8_t* scp = rec + kScales + (8 * c + 2 * i + hh) * 16 + 8 * h;
          if constexpr (kVnni) {
            const __m256i sc32 = _mm256_cvtepi8_epi32(k16_scale8<K16::kQ6_K>(scp));
            __m256i s32[T];
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) s32[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int mm = 0; mm < 4; ++mm) {
              const int m = 4 * hh + mm;
              const __m256i q = q6_line(rec, c, i, m, h);
#pragma GCC unroll 4
              for (int t = 0; t < T; ++t) s32[t] = dpbusd_vex(s32[t], q, bcast4(xqs[t] + 128 * c + 32 * i + 4 * m));
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
              isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s32[t], sc32));
              keep_reg(isum[t]);
            }
            continue;
          }
          const __m256i sc = scale_pairs<true>(scp);
#pragma GCC unroll 2
          for (int pr = 0; pr < 2; ++pr) {
            __m256i s16[T];
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) s16[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int mm = 0; mm < 2; ++mm) {
              const int m = 4 * hh + 2 * pr + mm;
              const __m256i q = q6_line(rec, c, i, m, h);
#pragma GCC unroll 4
              for (int t = 0; t < T; ++t) {
                s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(q, bcast4(xqs[t] + 128 * c + 32 * i + 4 * m)));
                keep_reg(s16[t]);
              }
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
              isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16[t], sc));
              keep_reg(isum[t]);
            }
          }
        }
      }
    }
    k16_offset_step<T, 5>(opaque(rec + kScales), rec + kD, h, xb, isum, acc);  // values stored + 32
  });
}

// Q3_K_R16 / Q2_K_R16 at 1-2 tokens, line by line: each qs line is loaded and shifted once for
// its four quarters (quarters 0, 1 from the line, 2, 3 from the line >> 4: fields 0, 2 masked to
// x1, fields 1, 3 in place, x4) and each Q3_K hmask line shifted once per half c (its bits 4c..4c+3
// to bits 4..7), the high bit of quarter s being min(hm & 2^(4+s), 4 or 16): and + min + or, no
// shift per quarter. The four lines of a sub-block are summed in int16 (<= 4 * 2 * 28 * 128) or
// by vpdpbusd (kVnni), then scaled per row; the x4 quarters' scales are not shifted, the x1
// quarters' are (x4), so every sum is 4 times the exact one: the same integer sums and float
// steps as kpanel_block_avx2<KSpecQ3K / KSpecQ2K> (Q2_K: the mins' term first).
template <int T, bool kVnni, K16 kKind>
inline void k16_lines_tile_avx2(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0,
                                PrefetchSpread& pf) {
  static_assert(kKind == K16::kQ3_K || kKind == K16::kQ2_K);
  constexpr bool kQ3 = kKind == K16::kQ3_K;
  constexpr size_t kRecBytes = kQ3 ? kQ3KR16BlockBytes : kQ2KR16BlockBytes;
  constexpr size_t kScales = kQ3 ? 1536 : 1024;
  constexpr size_t kD = kQ3 ? 1792 : 1280;
  const __m256i m03 = _mm256_set1_epi8(0x03), m0c = _mm256_set1_epi8(0x0C);
  kquant_tile_walk_avx2<T, kRecBytes>(
      g, grp, lane0, lane1, out_r, t0, pf,
      [&](const uint8_t* rec, int h, const BlockQ8_K* const(&xb)[T], const int8_t* const(&xqs)[T],
          __m256(&acc)[T]) __attribute__((always_inline)) {
    __m256i isum[T];
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int c = 0; c < 2; ++c) {
      [[maybe_unused]] const __m128i hshift = _mm_cvtsi32_si128(4 - 4 * c);
#pragma GCC unroll 2
      for (int hh = 0; hh < 2; ++hh) {
        __m256i s[4][T];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 2
          for (int t = 0; t < T; ++t) s[i][t] = _mm256_setzero_si256();
        }
#pragma GCC unroll 4
        for (int mm = 0; mm < 4; ++mm) {
          const int m = 4 * hh + mm;
          const __m256i v = loadu256(rec + (c * 8 + m) * 64 + 32 * h);
          const __m256i v4 = _mm256_srli_epi16(v, 4);
          [[maybe_unused]] __m256i hm;
          if constexpr (kQ3) hm = _mm256_sll_epi16(loadu256(rec + 1024 + m * 64 + 32 * h), hshift);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            __m256i q = _mm256_and_si256(i < 2 ? v : v4, (i & 1) ? m0c : m03);
            if constexpr (kQ3) {
              const __m256i hb = _mm256_and_si256(hm, _mm256_set1_epi8(static_cast<char>(16 << i)));
              q = _mm256_or_si256(q, _mm256_min_epu8(hb, _mm256_set1_epi8((i & 1) ? 16 : 4)));
            }
#pragma GCC unroll 2
            for (int t = 0; t < T; ++t) {
              const __m256i x = bcast4(xqs[t] + 128 * c + 32 * i + 4 * m);
              if constexpr (kVnni) {
                s[i][t] = dpbusd_vex(s[i][t], q, x);
              } else {
                s[i][t] = _mm256_add_epi16(s[i][t], _mm256_maddubs_epi16(q, x));
              }
              keep_reg(s[i][t]);
            }
          }
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const __m128i sc8 = k16_scale8<kKind>(rec + kScales + (8 * c + 2 * i + hh) * 16 + 8 * h);
          if constexpr (kVnni) {
            __m256i sc32 = kQ3 ? _mm256_cvtepi8_epi32(sc8) : _mm256_cvtepu8_epi32(sc8);
            if ((i & 1) == 0) sc32 = _mm256_slli_epi32(sc32, 2);
#pragma GCC unroll 2
            for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s[i][t], sc32));
          } else {
            const __m128i dup = _mm_unpacklo_epi8(sc8, sc8);  // each row's scale twice: an int16 pair
            __m256i sc = kQ3 ? _mm256_cvtepi8_epi16(dup) : _mm256_cvtepu8_epi16(dup);
            if ((i & 1) == 0) sc = _mm256_slli_epi16(sc, 2);
#pragma GCC unroll 2
            for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s[i][t], sc));
          }
#pragma GCC unroll 2
          for (int t = 0; t < T; ++t) keep_reg(isum[t]);
        }
      }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) isum[t] = _mm256_srai_epi32(isum[t], 2);  // exact: a multiple of 4
    if constexpr (kQ3) {
      k16_offset_step<T, 2>(opaque(rec + kScales), rec + kD, h, xb, isum, acc);  // values stored + 4
      return;
    }
    // Q2_K: sum_j min_j * bsum_j, the mins being the scale bytes' high nibbles (two sub-blocks a
    // vpmaddwd), taken off first.
    const uint8_t* scales = opaque(rec + kScales);
    __m256i corr[T];
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) corr[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const __m128i m4 = _mm_set1_epi8(0xF);
      const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + (2 * i) * 16 + 8 * h));
      const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + (2 * i + 1) * 16 + 8 * h));
      const __m256i sp = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(_mm_unpacklo_epi8(lo, hi), 4), m4));
#pragma GCC unroll 2
      for (int t = 0; t < T; ++t) {
        corr[t] = _mm256_add_epi32(corr[t], _mm256_madd_epi16(sp, bcast4(xb[t]->bsums + 2 * i)));
      }
    }
    const __m256 dv = load8_f16(rec + kD + 16 * h);
    const __m256 dmv = load8_f16(rec + 1312 + 16 * h);
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(xb[t]->d);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(corr[t]), _mm256_mul_ps(dmv, dx), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dv, dx), acc[t]);
    }
  });
}
template <bool kVnni, K16 kKind>
inline void gemm_k16_lines_avx2(const GemmArgs& g) {
  gemm_kquant_tiles_avx2(g, [&]<int T>(const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0,
                                       PrefetchSpread& pf) {
    k16_lines_tile_avx2<T, kVnni, kKind>(g, grp, lane0, lane1, out_r, t0, pf);
  });
}

template <bool kVnni = false>
inline void gemm_q6_k_r16_avx2(const GemmArgs& g) {
  gemm_kquant_tiles_avx2(g, [&]<int T>(const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0, PrefetchSpread& pf) {
    q6k_r16_tile_avx2<T, kVnni>(g, grp, lane0, lane1, out_r, t0, pf);
  });
}

// ---- IQ4_XS_R16 x Q8_K ------------------------------------------------------------------------

// Values looked up per token tile: signed against x with w's sign (vpsignb) on the plain AVX2
// tier, + 128 against x (vpdpbusd, the -128 * bsum folded into the sub-block's sum) with kVnni;
// the same integer sums and float step as kpanel_block_avx2<KSpecIQ4XSS / KSpecIQ4XSU>.
template <int T, bool kVnni = false>
inline void iq4xs_r16_tile_avx2(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0,
                                PrefetchSpread& pf) {
  alignas(16) int8_t tv[16];
  for (int i = 0; i < 16; ++i) tv[i] = static_cast<int8_t>(kIQ4NLValues[i] + (kVnni ? 128 : 0));
  const __m256i tab = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(tv)));
  const __m256i m4 = _mm256_set1_epi8(0xF);
  kquant_tile_walk_avx2<T, kIQ4XSR16BlockBytes>(
      g, grp, lane0, lane1, out_r, t0, pf,
      [&](const uint8_t* rec, int h, const BlockQ8_K* const(&xb)[T], const int8_t* const(&xqs)[T],
          __m256(&acc)[T]) __attribute__((always_inline)) {
    __m256i isum[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* scp = rec + 2048 + ib * 16 + 8 * h;
      if constexpr (kVnni) {
        __m256i s32[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          s32[t] = _mm256_set1_epi32(-128 * (xb[t]->bsums[2 * ib] + xb[t]->bsums[2 * ib + 1]));
        }
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m) {
          const __m256i v = loadu256(rec + (ib * 4 + m) * 64 + 32 * h);
          const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
          const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            s32[t] = dpbusd_vex(s32[t], lo, bcast4(xqs[t] + 32 * ib + 4 * m));
            s32[t] = dpbusd_vex(s32[t], hi, bcast4(xqs[t] + 32 * ib + 16 + 4 * m));
          }
        }
        const __m256i sc32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scp)));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s32[t], sc32));
          keep_reg(isum[t]);
        }
      } else {
        const __m256i sc = scale_pairs<true>(scp);
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m) {
          const __m256i v = loadu256(rec + (ib * 4 + m) * 64 + 32 * h);
          const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
          const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
          const __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            // |w| * (x with w's sign): each pair <= 2 * 127 * 127, one line per vpmaddwd.
            const __m256i plo = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(bcast4(xqs[t] + 32 * ib + 4 * m), lo));
            const __m256i phi = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(bcast4(xqs[t] + 32 * ib + 16 + 4 * m), hi));
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(plo, sc));
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(phi, sc));
            keep_reg(isum[t]);
          }
        }
      }
    }
    const __m256 dv = load8_f16(rec + 2176 + 16 * h);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dv, _mm256_set1_ps(xb[t]->d)), acc[t]);
    }
  });
}

template <bool kVnni = false>
inline void gemm_iq4_xs_r16_avx2(const GemmArgs& g) {
  gemm_kquant_tiles_avx2(g, [&]<int T>(const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0, PrefetchSpread& pf) {
    iq4xs_r16_tile_avx2<T, kVnni>(g, grp, lane0, lane1, out_r, t0, pf);
  });
}
