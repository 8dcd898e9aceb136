// AVX-512 kernels for the Q5_K_R16 / Q3_K_R16 / Q2_K_R16 / IQ4_XS_R16 layouts (kernels.h). From
// kK16PanelMinTokens tokens (Q5_K and IQ4_XS: kR16NibblePanelMinTokens) each 16-row group is
// decoded once per matmul into the K-quant panel format (KPanel: unsigned int8 values in
// [k4][16 rows][4] order, int32 sub-block scales, int16 pairs, float d / dmin) and multiplied by
// kpanel_tile, as the Q4_K_R16 / Q6_K_R16 batches:
//   Q5_K    8 sub-blocks of 32, values 0..31, mins            kpanel_tile<8, 0>
//   Q2_K   16 sub-blocks of 16, values 0..3, mins             kpanel_tile<16, 0>
//   Q3_K   16 sub-blocks of 16, values -4..3 stored + 4       kpanel_tile<16, 2>
//   IQ4_XS  8 sub-blocks of 32, values -127..113 stored + 128 kpanel_tile<8, 7>
// (gemm_kr16_panels, kernels_avx512_r16panels.h). Smaller batches run register tiles (Q5_K: Q4_K_R16's, Q3_K / Q2_K: Q6_K_R16's in
// kernels_avx512_kquant.h, IQ4_XS: iq4xs_r16_tile below) with the same exact integer block sums and the
// same float steps per block and row (one, two with mins), so a row's result does not depend on
// the batch size.
//
// NOT a normal header: included once by kernels_avx512.cc inside its anonymous namespace, after
// kernels_avx512_r16panels.h (LaneShift, store_panel, pair16, kpanel_signed_scales16, the Q4_K_R16
// side decode).

// Calls f.template operator()<I>() for I = 0 .. N-1 (shift counts that must be constants).
template <int N, typename F>
inline void static_for(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f.template operator()<I>(), ...); }(std::make_integer_sequence<int, N>{});
}

// Bit kFrom (0..7) of every byte of v moved to bit kTo; the other bits are unspecified (the
// caller masks). 16-bit shifts never carry a byte's own bit across its boundary for kFrom <= 7.
template <int kFrom, int kTo>
inline __m512i bit_to(__m512i v) {
  if constexpr (kFrom < kTo) return _mm512_slli_epi16(v, kTo - kFrom);
  else if constexpr (kFrom > kTo) return _mm512_srli_epi16(v, kFrom - kTo);
  else return v;
}

inline __m512i load_rec(const uint8_t* p) { return _mm512_loadu_si512(p); }

struct DecQ5KR16 {
  static constexpr int kSub = 8, kShift = 0;
  static constexpr size_t kBytes = kQ5KR16BlockBytes;
  static void block(const uint8_t* rec, const LaneShift& sh, uint8_t* pb) {
    const __m512i m4 = _mm512_set1_epi8(0xF), b4 = _mm512_set1_epi8(0x10);
    for (int m = 0; m < 8; ++m) {
      const __m512i hb = load_rec(rec + kQ4KR16BlockBytes + m * 64);
      static_for<4>([&]<int c>() {
        // Line (c, m): low nibbles are values 64c + 4m.. (k4 16c + m), high ones 32 later;
        // their 5th bits are bits 2c and 2c + 1 of the qh line.
        const __m512i v = load_rec(rec + (c * 8 + m) * 64);
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_and_si512(bit_to<2 * c, 4>(hb), b4));
        const __m512i hi =
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), _mm512_and_si512(bit_to<2 * c + 1, 4>(hb), b4));
        store_panel(pb + KPanel::kVals + (16 * c + m) * 64, sh(lo));
        store_panel(pb + KPanel::kVals + (16 * c + 8 + m) * 64, sh(hi));
      });
    }
    decode_q4_k_r16_sides(rec, sh, pb);  // same scales, mins, d and dmin bytes as Q4_K_R16
  }
};

struct DecQ3KR16 {
  static constexpr int kSub = 16, kShift = 2;
  static constexpr size_t kBytes = kQ3KR16BlockBytes;
  static void block(const uint8_t* rec, const LaneShift& sh, uint8_t* pb) {
    const __m512i m3 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4);
    for (int m = 0; m < 8; ++m) {
      const __m512i hm = load_rec(rec + 1024 + m * 64);
      static_for<2>([&]<int c>() {
        const __m512i v = load_rec(rec + (c * 8 + m) * 64);
        static_for<4>([&]<int s>() {
          // Values 128c + 32s + 4m..: low bits 2s, 2s + 1 of the qs line, high bit 4c + s of
          // the hmask line; stored q + 4 = low | 4 * high (0..7), k4 32c + 8s + m.
          const __m512i lo = _mm512_and_si512(s == 0 ? v : _mm512_srli_epi16(v, 2 * s), m3);
          const __m512i q = _mm512_or_si512(lo, _mm512_and_si512(bit_to<4 * c + s, 2>(hm), b2));
          store_panel(pb + KPanel::kVals + (32 * c + 8 * s + m) * 64, sh(q));
        });
      });
    }
    kpanel_signed_scales16(rec + 1536, rec + 1792, sh, pb);
  }
};

struct DecQ2KR16 {
  static constexpr int kSub = 16, kShift = 0;
  static constexpr size_t kBytes = kQ2KR16BlockBytes;
  static void block(const uint8_t* rec, const LaneShift& sh, uint8_t* pb) {
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int m = 0; m < 8; ++m) {
      static_for<2>([&]<int c>() {
        const __m512i v = load_rec(rec + (c * 8 + m) * 64);
        static_for<4>([&]<int s>() {
          const __m512i q = _mm512_and_si512(s == 0 ? v : _mm512_srli_epi16(v, 2 * s), m3);
          store_panel(pb + KPanel::kVals + (32 * c + 8 * s + m) * 64, sh(q));
        });
      });
    }
    // Scale bytes: the scale in the low nibble, the min in the high one.
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m512i mn[16];
    for (int j = 0; j < 16; ++j) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 1024 + j * 16));
      store_panel(pb + KPanel::kSc + j * 64, sh(_mm512_cvtepu8_epi32(_mm_and_si128(raw, m4))));
      mn[j] = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
    }
    for (int i = 0; i < 8; ++i) store_panel(pb + KPanel::kPairs + i * 64, sh(pair16(mn[2 * i], mn[2 * i + 1])));
    _mm512_store_ps(pb + KPanel::kD, sh.ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 1280)))));
    _mm512_store_ps(pb + KPanel::kDmin, sh.ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 1312)))));
  }
};

// IQ4_XS's table values + 128 (1..241), as vpshufb bytes.
inline __m512i iq4_table_u8() {
  alignas(16) uint8_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(kIQ4NLValues[i] + 128);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

struct DecIQ4XSR16 {
  static constexpr int kSub = 8, kShift = 7;
  static constexpr size_t kBytes = kIQ4XSR16BlockBytes;
  static void block(const uint8_t* rec, const LaneShift& sh, uint8_t* pb) {
    const __m512i m4 = _mm512_set1_epi8(0xF), tab = iq4_table_u8();
    for (int ib = 0; ib < 8; ++ib) {
      for (int m = 0; m < 4; ++m) {
        // Line (ib, m): low nibbles index values 32ib + 4m.. (k4 8ib + m), high ones 16 later.
        const __m512i v = load_rec(rec + (ib * 4 + m) * 64);
        store_panel(pb + KPanel::kVals + (8 * ib + m) * 64, sh(_mm512_shuffle_epi8(tab, _mm512_and_si512(v, m4))));
        store_panel(pb + KPanel::kVals + (8 * ib + 4 + m) * 64,
                    sh(_mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4))));
      }
    }
    for (int j = 0; j < 8; ++j) store_panel(pb + KPanel::kSc + j * 64, sh(s8x16_to_i32(rec + 2048 + j * 16)));
    for (int i = 0; i < 4; ++i) {
      store_panel(pb + KPanel::kPairs + i * 64,
                  sh(pair16(s8x16_to_i32(rec + 2048 + (2 * i) * 16), s8x16_to_i32(rec + 2048 + (2 * i + 1) * 16))));
    }
    _mm512_store_ps(pb + KPanel::kD, sh.ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 2176)))));
  }
};

// IQ4_XS_R16 below the panels' batch size: the values looked up (+ 128) in registers per token
// tile, the same integer sums and float step as kpanel_block<8, 7>: per sub-block ib,
// sc_ib * (sum (w + 128) x - 128 * bsum_ib), one vpmulld per sub-block and token.
template <int T>
inline void iq4xs_r16_tile(const GemmArgs& g, const uint8_t* grp, int lane0, int lanes, int64_t out_r, int64_t t0,
                           TilePrefetch pf = {}) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const __m512i m4 = _mm512_set1_epi8(0xF), tab = iq4_table_u8();
  const BlockQ8_K* xk[T];
  for (int t = 0; t < T; ++t) xk[t] = a.qk + (t0 + t) * nb;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b) * kIQ4XSR16BlockBytes;
    const LinePrefetch lp = pf.lines<kIQ4XSR16BlockBytes>(g, rec);
    // Line m of sub-block ib: its low and high nibbles' values + 128 (values 0-15, 16-31).
    const auto values = [&](int ib, int m) {
      lp.line<32, kIQ4XSR16BlockBytes>(ib * 4 + m);
      const __m512i v = load_rec(rec + (ib * 4 + m) * 64);
      return std::pair{_mm512_shuffle_epi8(tab, _mm512_and_si512(v, m4)),
                       _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4))};
    };
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    if constexpr (T > 4) {
      // 5-8 tokens, one pass: one chain per token and sub-block (its low, then high nibbles),
      // the offset taken off once per block: 128 * sum_ib sc_ib * bsum_ib by vpdpwssd of the
      // (sc_2k, sc_2k+1) int16 pairs against the pair sums (q8k_sum_pairs32). The float
      // accumulators wait in memory through the block step, leaving the registers to the chains.
      __asm__ volatile("" : "+m"(acc));
#pragma GCC unroll 2
      for (int ib = 0; ib < 8; ++ib) {
        __m512i is[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) is[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m) {
          const auto [lo, hi] = values(ib, m);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = xk[t][b].qs + 32 * ib + 4 * m;
            is[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(is[t], lo, bcast_dword(xq)), hi, bcast_dword(xq + 16));
          }
        }
        const __m512i sc = s8x16_to_i32(rec + 2048 + ib * 16);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(is[t], sc));
      }
      __m512i sp[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        sp[k] = pair16(s8x16_to_i32(rec + 2048 + (2 * k) * 16), s8x16_to_i32(rec + 2048 + (2 * k + 1) * 16));
      }
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        isum[t] = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(q8k_pair_dot512(sp, xk[t][b]), 7));
      }
    } else {
#pragma GCC unroll 2
    for (int ib = 0; ib < 8; ++ib) {
      // Two chains (low and high nibbles), the offset folded into the first.
      __m512i il[T], ih[T];
      for (int t = 0; t < T; ++t) {
        il[t] = _mm512_set1_epi32(-128 * (xk[t][b].bsums[2 * ib] + xk[t][b].bsums[2 * ib + 1]));
        ih[t] = _mm512_setzero_si512();
      }
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const auto [lo, hi] = values(ib, m);
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = xk[t][b].qs + 32 * ib + 4 * m;
          il[t] = _mm512_dpbusd_epi32(il[t], lo, bcast_dword(xq));
          ih[t] = _mm512_dpbusd_epi32(ih[t], hi, bcast_dword(xq + 16));
        }
      }
      const __m512i sc = s8x16_to_i32(rec + 2048 + ib * 16);
      for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(il[t], ih[t]), sc));
    }
    }
    const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 2176)));
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, _mm512_set1_ps(xk[t][b].d)), acc[t]);
    }
  }
  const LaneShift sh(lane0, lanes);
  for (int t = 0; t < T; ++t) store_lanes(g, sh.ps(acc[t]), t0 + t, out_r, lanes);
}

// 1-4 tokens: a 1-4 token tile; from 5: 8-token tiles (one pass at 5-8 tokens) and the rest.
inline void gemm_iq4_xs_r16_tiles(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    const int lanes = lane1 - lane0;
    const int64_t t0 =
        for_wide_tiles(n_tok, [&]<int T>(int64_t t) { iq4xs_r16_tile<T>(g, grp, lane0, lanes, out_r, t); });
    for_token_tiles(n_tok - t0, [&]<int T>(int64_t t1) { iq4xs_r16_tile<T>(g, grp, lane0, lanes, out_r, t0 + t1); });
  });
}
