// AVX-512 kernels over the Q4_K_R16 / Q5_K_R16 and Q6_K_R16 layouts (and the kinds of Q6_K_R16's
// tile that other K-quant layouts reuse): token tiles that unpack each 16-row group's values once
// per tile. Byte layouts: kernels.h.
//
// NOT a normal header: included once by kernels_avx512.cc inside its anonymous namespace, after
// the Q8_0_R16 / Q4_0_R16 kernels and the prefetch helpers (compiled for AVX-512 only).

// The 8-token one-pass tiles' schedule, from 5 tokens on: tile<8> over each whole 8 tokens,
// then tile<T> over a 5-7 token rest. Returns where the 0-4 tokens left start (all of them
// below 5 tokens): the caller's narrower tiles take those.
template <typename F>
inline int64_t for_wide_tiles(int64_t n_tok, F&& tile) {
  if (n_tok < 5) return 0;
  int64_t t0 = 0;
  for (; t0 + 8 <= n_tok; t0 += 8) tile.template operator()<8>(t0);
  switch (n_tok - t0) {
    case 7: tile.template operator()<7>(t0); return n_tok;
    case 6: tile.template operator()<6>(t0); return n_tok;
    case 5: tile.template operator()<5>(t0); return n_tok;
    default: return t0;
  }
}

// Per lane, sum_k (p_2k, p_2k+1) . (S_2k, S_2k+1) over the int16 pairs p[k] and the pairs of a
// Q8_K block's 32-value sums S (q8k_sum_pairs32, broadcast from the stack, not from general
// registers): the Q4_K / Q5_K tiles' mins and the IQ4_XS tile's offset, four vpdpwssd.
__attribute__((always_inline)) inline __m512i q8k_pair_dot512(const __m512i (&p)[4], const BlockQ8_K& x) {
  alignas(32) int32_t pr[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(pr), q8k_sum_pairs32(x));
  __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) s = _mm512_dpwssd_epi32(s, p[k], bcast_dword(pr + kQ8KPairSlot[k]));
  return s;
}

// ---- Q4_K_R16: one zmm = 8 nibbles of 16 rows; unpacked once per token tile -----------------
// kQ5: Q5_K_R16 (the Q4_K_R16 record plus the qh lines): each value's 5th bit added as 16; the
// same integer sums and float steps as kpanel_block<8, 0> (kernels_avx512_kr16.h).

// T <= 4: both nibbles of a line per step, two sums per token (four at T <= 2, where one chain
// a sub-block would be latency-bound). T = 5..8, one pass over the group for up to 8 tokens: each
// sub-block's low and high nibbles in turn (the lines read twice, from L1), one chain per token,
// so that T chains, T block sums and T accumulators fit the 32 registers. The same exact integer
// sums and float steps either way (bit-identical).
template <int T, bool kQ5 = false>
inline void q4k_r16_tile(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0,
                         TilePrefetch pf) {
  static_assert(T >= 1 && T <= 8);
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  constexpr size_t kRecBytes = kQ5 ? kQ5KR16BlockBytes : kQ4KR16BlockBytes;
  const __m512i m4 = _mm512_set1_epi8(0xF);
  const __m512i b16 = _mm512_set1_epi8(16);
  const BlockQ8_K* xk[T];
  for (int t = 0; t < T; ++t) xk[t] = a.qk + (t0 + t) * nb;
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b) * kRecBytes;
    const LinePrefetch lp = pf.lines<kRecBytes>(g, rec);
    __m512i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    if constexpr (T <= 4) {
      constexpr int kChains = T <= 2 ? 2 : 1;
#pragma GCC unroll 1
      for (int c = 0; c < 4; ++c) {
        __m512i il[kChains][T], ih[kChains][T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
#pragma GCC unroll 2
          for (int k = 0; k < kChains; ++k) {
            il[k][t] = _mm512_setzero_si512();
            ih[k][t] = _mm512_setzero_si512();
          }
        }
        // Q5: the 5th bits of line (c, m) are bits 2c and 2c + 1 of qh line m.
        const __m512i bit_lo = _mm512_set1_epi8(static_cast<char>(1 << (2 * c)));
        const __m512i bit_hi = _mm512_set1_epi8(static_cast<char>(2 << (2 * c)));
#pragma GCC unroll 8
        for (int m = 0; m < 8; ++m) {
          lp.line<32, kRecBytes>(c * 8 + m);
          const __m512i v = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + (c * 8 + m) * 64));
          __m512i lo = _mm512_and_si512(v, m4);
          __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          if constexpr (kQ5) {
            const __m512i hb = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + kQ4KR16BlockBytes + m * 64));
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hb, bit_lo), lo, b16);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(hb, bit_hi), hi, b16);
          }
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = xk[t][b].qs + 64 * c + 4 * m;
            il[m % kChains][t] = _mm512_dpbusd_epi32(il[m % kChains][t], lo, bcast_dword(xq));
            ih[m % kChains][t] = _mm512_dpbusd_epi32(ih[m % kChains][t], hi, bcast_dword(xq + 32));
          }
        }
        if constexpr (kChains == 2) {
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            il[0][t] = _mm512_add_epi32(il[0][t], il[1][t]);
            ih[0][t] = _mm512_add_epi32(ih[0][t], ih[1][t]);
          }
        }
        const __m512i scl = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + 2048 + 32 * c)));
        const __m512i sch =
            _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + 2048 + 32 * c + 16)));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m512i lo_hi = _mm512_add_epi32(_mm512_mullo_epi32(il[0][t], scl), _mm512_mullo_epi32(ih[0][t], sch));
          isum[t] = _mm512_add_epi32(isum[t], lo_hi);
        }
      }
    } else {
#pragma GCC unroll 1
      for (int c = 0; c < 4; ++c) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          // Sub-block 2c + h: nibble h of lines (c, 0..7); Q5: its 5th bits are bit 2c + h of qh line m.
          const __m512i bit = _mm512_set1_epi8(static_cast<char>(1 << (2 * c + h)));
          __m512i is[T];
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) is[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
          for (int m = 0; m < 8; ++m) {
            lp.line<64, kRecBytes>((c * 2 + h) * 8 + m);
            const __m512i v = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + (c * 8 + m) * 64));
            __m512i q = _mm512_and_si512(h == 0 ? v : _mm512_srli_epi16(v, 4), m4);
            if constexpr (kQ5) {
              const __m512i hb = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + kQ4KR16BlockBytes + m * 64));
              q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hb, bit), q, b16);
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
              is[t] = _mm512_dpbusd_epi32(is[t], q, bcast_dword(xk[t][b].qs + 64 * c + 32 * h + 4 * m));
            }
          }
          const __m512i sc =
              _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + 2048 + 32 * c + 16 * h)));
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(is[t], sc));
        }
      }
    }
    // Mins: sum_j m_j * (x sum of sub-block j), one vpdpwssd per token for two sub-blocks (the
    // (m_2i, m_2i+1) int16 pairs against the two sums, each within int16: 32 values of at most
    // 127), not a vpmulld and an add per sub-block: the same exact int32 sum.
    __m512i mpair[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const uint8_t* mins = rec + 2176 + 32 * i;  // m_2i of the 16 rows, then m_2i+1
      const __m512i m0 = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(mins)));
      const __m512i m1 = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(mins + 16)));
      mpair[i] = _mm512_or_si512(m0, _mm512_slli_epi32(m1, 16));
    }
    const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + 2304)));
    const __m512 dmv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + 2336)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i msum = q8k_pair_dot512(mpair, xk[t][b]);
      const __m512 dx = _mm512_set1_ps(xk[t][b].d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmv, dx), acc[t]);
    }
  }
  store_group512(g, acc, T, t0, lane0, lane1, out_r);
}

template <bool kQ5 = false>
void gemm_q4_k_r16(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  const auto pass = [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r, TilePrefetch pf) {
    const int64_t t0 = for_wide_tiles(
        n_tok, [&]<int T>(int64_t t) { q4k_r16_tile<T, kQ5>(g, grp, lane0, lane1, out_r, t, pf); });
    switch (n_tok - t0) {
      case 4: q4k_r16_tile<4, kQ5>(g, grp, lane0, lane1, out_r, t0, pf); break;
      case 3: q4k_r16_tile<3, kQ5>(g, grp, lane0, lane1, out_r, t0, pf); break;
      case 2: q4k_r16_tile<2, kQ5>(g, grp, lane0, lane1, out_r, t0, pf); break;
      case 1: q4k_r16_tile<1, kQ5>(g, grp, lane0, lane1, out_r, t0, pf); break;
      default: break;
    }
  };
  for_r16_groups_passes(g, (n_tok + 7) / 8, pass);
}

// ---- Q6_K_R16: three zmm (ql low half, ql high half, qh) = 16 values of 16 rows ------------
// The same tile serves the other R16 types of 16 sub-blocks of 16 values (K16 kinds): Q3_K_R16
// (a qs line and an hmask line give 16 values + 4 of 16 rows) and Q2_K_R16 (a qs line, mins),
// with the integer sums and float steps of kpanel_block<16, 2> / <16, 0> (kernels_avx512_kr16.h).
enum class K16 { kQ6_K, kQ3_K, kQ2_K };

// Quarter i (values 128c + 32i + 4m.. of the 16 rows) of line m in half c of a K16 record, as
// unsigned bytes (stored + kOffset): Q6_K from a ql line (low nibbles for quarters 0-1, high for
// 2-3) and 2 bits of the qh line; Q3_K / Q2_K the 2-bit field i of the qs line, Q3_K + 4 where
// bit 4c + i of hmask line m is set.
template <K16 kKind>
inline __m512i k16_quarter(const uint8_t* rec, int c, int i, int m) {
  const auto line = [&](size_t off) { return _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + off)); };
  if constexpr (kKind == K16::kQ6_K) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    const __m512i l = line((c * 16 + m + (i & 1) * 8) * 64);
    const __m512i vh = line(2048 + (c * 8 + m) * 64);
    const __m512i lo = _mm512_and_si512(i < 2 ? l : _mm512_srli_epi16(l, 4), m4);
    const __m512i hi = i == 0   ? _mm512_slli_epi16(vh, 4)
                       : i == 1 ? _mm512_slli_epi16(vh, 2)
                       : i == 2 ? vh
                                : _mm512_srli_epi16(vh, 2);
    return _mm512_or_si512(lo, _mm512_and_si512(hi, m30));
  } else {
    const __m512i v = line((c * 8 + m) * 64);
    __m512i q = _mm512_and_si512(i == 0 ? v : _mm512_srli_epi16(v, 2 * i), _mm512_set1_epi8(3));
    if constexpr (kKind == K16::kQ3_K) {
      // Bit 4c + i of the hmask byte moved to bit 2 (an epi16 shift by at most 5 keeps bit 2 of
      // each byte from its own byte) and or'ed in: q <= 3 has no bit 2.
      const __m512i hm = line(1024 + m * 64);
      const int s = 4 * c + i - 2;
      const __m512i hb = s > 0 ? _mm512_srli_epi16(hm, s) : s < 0 ? _mm512_slli_epi16(hm, -s) : hm;
      q = _mm512_or_si512(q, _mm512_and_si512(hb, _mm512_set1_epi8(4)));
    }
    return q;
  }
}

// T <= 2: the four quarters of a line per step, a chain per quarter and token (wider tiles of
// this form spill). T = 5..8, one pass over the group for up to 8 tokens: a sub-block at a time
// (its quarter of 4 lines, the lines read again from L1 for each quarter), one chain per token,
// and the values' + kOffset taken off once per block (two sub-blocks a vpdpwssd) instead of
// starting each chain from -kOffset * bsum: the same exact integer sums, the same float steps.
template <int T, K16 kKind = K16::kQ6_K>
inline void q6k_r16_tile(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0,
                         TilePrefetch pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  constexpr size_t kRecBytes = kKind == K16::kQ6_K ? kQ6KR16BlockBytes : kKind == K16::kQ3_K ? kQ3KR16BlockBytes : kQ2KR16BlockBytes;
  constexpr int kOffset = kKind == K16::kQ6_K ? 32 : kKind == K16::kQ3_K ? 4 : 0;  // values stored + kOffset
  constexpr bool kMins = kKind == K16::kQ2_K;
  const BlockQ8_K* xk[T];
  for (int t = 0; t < T; ++t) xk[t] = a.qk + (t0 + t) * nb;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b) * kRecBytes;
    const LinePrefetch lp = pf.lines<kRecBytes>(g, rec);
    // 8-token tiles: the float accumulators wait in memory through the block step (they are
    // needed only at its end), leaving the registers to the chains and integer sums.
    if constexpr (T > 4) __asm__ volatile("" : "+m"(acc));
    // Sub-block j's scales of the 16 rows (Q2_K: the low nibbles of its scale bytes).
    const auto k16_scale = [rec](int j) {
      constexpr size_t kSc = kKind == K16::kQ6_K ? 3072 : kKind == K16::kQ3_K ? 1536 : 1024;
      const __m128i b = _mm_load_si128(reinterpret_cast<const __m128i*>(rec + kSc + j * 16));
      if constexpr (kKind == K16::kQ2_K) return _mm512_and_si512(_mm512_cvtepu8_epi32(b), _mm512_set1_epi32(0xF));
      return _mm512_cvtepi8_epi32(b);
    };
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    if constexpr (T <= 4) {
#pragma GCC unroll 1
      for (int c = 0; c < 2; ++c) {
#pragma GCC unroll 2
        for (int hh = 0; hh < 2; ++hh) {
          // Sub-blocks (16 values) 8c + 2i + hh for i = 0..3 (the four 32-value quarters q1..q4).
          __m512i isub[4][T];
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 2
            for (int t = 0; t < T; ++t) {
              // Values are stored + kOffset: start from -kOffset * (sum of the sub-block's activations).
              isub[i][t] = _mm512_set1_epi32(-kOffset * xk[t][b].bsums[8 * c + 2 * i + hh]);
            }
          }
#pragma GCC unroll 4
          for (int mm = 0; mm < 4; ++mm) {
            const int m = 4 * hh + mm;
            lp.line<16, kRecBytes>((c * 2 + hh) * 4 + mm);
            __m512i q[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) q[i] = k16_quarter<kKind>(rec, c, i, m);
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 2
              for (int t = 0; t < T; ++t) {
                isub[i][t] = _mm512_dpbusd_epi32(isub[i][t], q[i], bcast_dword(xk[t][b].qs + 128 * c + 32 * i + 4 * m));
              }
            }
          }
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const __m512i sc = k16_scale(8 * c + 2 * i + hh);
#pragma GCC unroll 2
            for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(isub[i][t], sc));
          }
        }
      }
    } else {
#pragma GCC unroll 1
      for (int c = 0; c < 2; ++c) {
#pragma GCC unroll 2
        for (int hh = 0; hh < 2; ++hh) {
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const int j = 8 * c + 2 * i + hh;  // the sub-block: quarter i of lines 4hh..4hh + 3
            // The lines are loaded again for each quarter: hidden from GCC, which would otherwise
            // keep every line of the four quarters in registers and spill the integer sums.
            const uint8_t* rq = rec;
            __asm__("" : "+r"(rq));
            __m512i is[T];
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) is[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int mm = 0; mm < 4; ++mm) {
              const int m = 4 * hh + mm;
              lp.line<64, kRecBytes>(((c * 2 + hh) * 4 + i) * 4 + mm);
              const __m512i q = k16_quarter<kKind>(rq, c, i, m);
#pragma GCC unroll 8
              for (int t = 0; t < T; ++t) {
                is[t] = _mm512_dpbusd_epi32(is[t], q, bcast_dword(xk[t][b].qs + 128 * c + 32 * i + 4 * m));
              }
            }
            const __m512i sc = k16_scale(j);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(is[t], sc));
          }
        }
      }
      if constexpr (kOffset != 0) {
        __m512i sp[8];  // (sc_2k, sc_2k+1) as int16 pairs
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          sp[k] = _mm512_or_si512(_mm512_and_si512(k16_scale(2 * k), _mm512_set1_epi32(0xFFFF)),
                                  _mm512_slli_epi32(k16_scale(2 * k + 1), 16));
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          __m512i corr = _mm512_setzero_si512();
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) corr = _mm512_dpwssd_epi32(corr, sp[k], bcast_dword(xk[t][b].bsums + 2 * k));
          isum[t] = _mm512_sub_epi32(isum[t], _mm512_mullo_epi32(corr, _mm512_set1_epi32(kOffset)));
        }
      }
    }
    constexpr size_t kD = kKind == K16::kQ6_K ? 3328 : kKind == K16::kQ3_K ? 1792 : 1280;
    const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kD)));
    if constexpr (kMins) {
      // Q2_K: sum_j min_j * bsum_j (the high nibbles), then kpanel_block's two float steps.
      // (One vpdpwssd per token for two sub-blocks: (m_2i, m_2i+1) int16 pairs against the
      // pair of 16-value sums, as the Q4_K tile's mins.)
      __m512i msum[T];
      for (int t = 0; t < T; ++t) msum[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m512i m0 = _mm512_srli_epi32(
            _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + 1024 + 2 * i * 16))), 4);
        const __m512i m1 = _mm512_srli_epi32(
            _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(rec + 1024 + (2 * i + 1) * 16))), 4);
        const __m512i mp = _mm512_or_si512(m0, _mm512_slli_epi32(m1, 16));
        for (int t = 0; t < T; ++t) msum[t] = _mm512_dpwssd_epi32(msum[t], mp, bcast_dword(xk[t][b].bsums + 2 * i));
      }
      const __m512 dmv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 1312)));
      for (int t = 0; t < T; ++t) {
        const __m512 dx = _mm512_set1_ps(xk[t][b].d);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, dx), acc[t]);
        acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[t]), _mm512_mul_ps(dmv, dx), acc[t]);
      }
    } else {
      for (int t = 0; t < T; ++t) {
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, _mm512_set1_ps(xk[t][b].d)), acc[t]);
      }
    }
  }
  store_group512(g, acc, T, t0, lane0, lane1, out_r);
}

// 1-4 tokens: 2-token tiles, each with the record lookahead; from 5: 8-token tiles (one pass at
// 5-8 tokens; a 5-7 or a 1-4 token rest), the next group spread over the passes when several.
template <K16 kKind = K16::kQ6_K>
void gemm_q6_k_r16(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok, rest = n_tok % 8;
  const int64_t passes = n_tok <= 4 ? 1 : n_tok / 8 + (rest >= 5 ? 1 : (rest + 1) / 2);
  for_r16_groups_passes(g, passes, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r, TilePrefetch pf) {
    int64_t t0 = for_wide_tiles(
        n_tok, [&]<int T>(int64_t t) { q6k_r16_tile<T, kKind>(g, grp, lane0, lane1, out_r, t, pf); });
    for (; t0 + 2 <= n_tok; t0 += 2) q6k_r16_tile<2, kKind>(g, grp, lane0, lane1, out_r, t0, pf);
    if (t0 < n_tok) q6k_r16_tile<1, kKind>(g, grp, lane0, lane1, out_r, t0, pf);
  });
}
