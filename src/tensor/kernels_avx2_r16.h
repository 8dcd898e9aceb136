// AVX2 kernels over the R16 layouts (Q8_0_R16, Q4_0_R16 and IQ4_NL_R16 here, with the helpers
// the other AVX2 headers use; Q5_0_R16, Q4_1_R16 and Q5_1_R16 in kernels_avx2_ggml.h and
// kernels_avx2_q5u.h, the Q4_K_R16 and Q6_K_R16 tiles in kernels_avx2_kquant.h), so one
// repacked layout serves the AVX2 and the AVX-512 tier. Byte layouts: kernels.h.
//
// NOT a normal header: included once by kernels_avx2.cc inside its anonymous namespace, after
// kernels_x86_impl.h / kernels_x86_more.h, under its avx2,fma,f16c target pragma. It uses no
// VNNI (AVX-VNNI is not on every AVX2 CPU, e.g. Zen 3): int8 products are vpmaddubsw (u8 x s8
// -> s16 pairs, saturating) + vpmaddwd. Every use below is kept inside int16:
//   unsigned weights (nibbles 0..15, Q6_K 0..63) x activations |x| <= 127: pairs <= 16002, and
//   at most 30480 after summing (8 nibble pairs, or 2 Q6_K pairs) before vpmaddwd;
//   signed weights (IQ4_NL, Q5_0, Q8_0): |w| as u8 against x carrying w's sign (vpsignb), pairs
//   <= 2 * 128 * 127 = 32512, widened right away.
// One ymm holds 8 rows x 4 values of one 64-byte R16 line (rows 0-7 in the low 32 bytes,
// 8-15 in the high 32): a 16-row group is two halves, each weight byte loaded once per token
// tile and reused for the tile's columns from registers.

inline __m256i ones16() { return _mm256_set1_epi16(1); }
inline __m256i bcast4(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
inline __m256 load8_f16(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
// 8 bytes at p (one per row) -> 8 int32 lanes, each holding the row's value as an int16 pair
// (v, v) for vpmaddwd. kSigned: the bytes are int8 (Q6_K scales), else u8.
template <bool kSigned>
inline __m256i scale_pairs(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m256i v = kSigned ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
  return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}
// The same from 8 unsigned bytes in a register.
inline __m256i scale_pairs_u8(__m128i b) {
  const __m256i v = _mm256_cvtepu8_epi32(b);
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}
// Rows' values of sub-blocks j (at p) and j + 1 (at p + 16), 8 bytes each -> int16 pairs
// (v_j, v_j+1) per row, for vpmaddwd against a broadcast (x-sum_j, x-sum_j+1) pair.
template <bool kSigned>
inline __m256i pair_of_rows(const uint8_t* p) {
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16));
  const __m128i il = _mm_unpacklo_epi8(a, b);
  return kSigned ? _mm256_cvtepi8_epi16(il) : _mm256_cvtepu8_epi16(il);
}

inline void store256_s8(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
inline void store256(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// Pins an accumulator in a register at this point. Without it GCC reassociates the unrolled
// chains of integer adds into trees whose partial products it spills to the stack (a store and
// a reload per product; the store/load ports absorbed that in L2-resident measurements, so it
// is hygiene, not a measured speed-up). Emits no instruction.
inline void keep_reg(__m256i& v) { __asm__("" : "+x"(v)); }

// vpdpbusd on ymm in its VEX form (AVX-VNNI), as inline assembly so that the generic kernels
// need no target attribute (GCC does not inline the intrinsic into a function compiled
// without one). Run only where the CPU has AVX-VNNI (the avxvnni tier and above).
inline __m256i dpbusd_vex(__m256i acc, __m256i u, __m256i x) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(x));
  return acc;
}
// PrefetchSpread (kernels_x86_impl.h) spreads the next group's prefetch over a group's passes.

// Writes the 16 lanes of one group (two 8-row halves) for one token, lanes [lane0, lane1).
inline void store_group(const GemmArgs& g, __m256 lo, __m256 hi, int64_t t, int lane0, int lane1, int64_t out_r) {
  float* y = g.y + t * g.ldy + out_r;
  if (lane0 == 0 && lane1 == 16) {
    _mm256_storeu_ps(y, lo);
    _mm256_storeu_ps(y + 8, hi);
    return;
  }
  float out[16];
  _mm256_storeu_ps(out, lo);
  _mm256_storeu_ps(out + 8, hi);
  for (int l = lane0; l < lane1; ++l) y[l - lane0] = out[l];
}

// Calls tile<T>(t0) over token tiles of kMax (then one smaller tile for the rest).
template <int kMax, typename F>
inline void for_tiles(int64_t n_tok, F&& tile) {
  int64_t t0 = 0;
  for (; t0 + kMax <= n_tok; t0 += kMax) tile.template operator()<kMax>(t0);
  const int64_t left = n_tok - t0;
  if constexpr (kMax > 5) {
    if (left == 5) return tile.template operator()<5>(t0);
  }
  if constexpr (kMax > 4) {
    if (left == 4) return tile.template operator()<4>(t0);
  }
  if constexpr (kMax > 3) {
    if (left == 3) return tile.template operator()<3>(t0);
  }
  if constexpr (kMax > 2) {
    if (left == 2) return tile.template operator()<2>(t0);
  }
  if (left == 1) tile.template operator()<1>(t0);
}

// for_r16_groups (kernels_x86_impl.h) walks the 16-row groups the rows of g touch.

// ---- Q4_0_R16 (nibble - 8) x Q8_0 ------------------------------------------------------------

template <int T>
inline void q4_0_r16_tile_avx2(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r,
                               int64_t t0, PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc[2][T];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kR16Q4PairBytes;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * 256;
    pf.step();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      // Nibble x activation pairs stay <= 3810; the 8 of a block sum to <= 30480 in int16.
      __m256i s16[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) s16[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const __m256i v = loadu256(vals + 64 * m + 32 * h);
        const __m256i lo = _mm256_and_si256(v, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a.q8 + (t0 + t) * a.cols + b * 32;
          s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(lo, bcast4(xq + 4 * m)));
          s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(hi, bcast4(xq + 16 + 4 * m)));
          keep_reg(s16[t]);
        }
      }
      const __m256 dw = load8_f16(rec + half * 32 + 16 * h);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        // Stored nibbles are w + 8: subtract 8 * sum(x) of the block.
        const __m256i s = _mm256_sub_epi32(_mm256_madd_epi16(s16[t], ones16()),
                                           _mm256_set1_epi32(8 * a.s8[(t0 + t) * nb + b]));
        const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(a.d8[(t0 + t) * nb + b]));
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[h][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) store_group(g, acc[0][t], acc[1][t], t0 + t, lane0, lane1, out_r);
}

inline void gemm_q4_0_r16_avx2(const GemmArgs& g) {
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, (n_tok + 2) / 3 * nb);
    for_tiles<3>(n_tok, [&]<int T>(int64_t t0) { q4_0_r16_tile_avx2<T>(g, grp, lane0, lane1, out_r, t0, pf); });
  });
}

// ---- IQ4_NL_R16 (table values) x Q8_0 in llama.cpp's x86 order --------------------------------
// The Q4_0_R16 bytes with every nibble looked up in the IQ4_NL table (vpshufb). Each block's 32
// products are summed exactly in int32 and added with one FMA, acc = fma(float(S), d_w * d_x,
// acc) (kernels_scalar.cc gemm_iq4_nl): the same bits as the scalar reference. The values
// (-127..113) go in as |w| against x carrying w's sign (pairs <= 2 * 127 * 127), widened per 4
// values with vpmaddwd. (The AVX-VNNI tier takes them + 128 unsigned: q4_0_r16_tile_vnni.)
inline __m256i iq4nl_lo256(__m256i table, __m256i v) {
  return _mm256_shuffle_epi8(table, _mm256_and_si256(v, _mm256_set1_epi8(0xF)));
}
inline __m256i iq4nl_hi256(__m256i table, __m256i v) {
  return _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0xF)));
}
template <int T>
inline void iq4nl_r16_tile_avx2(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r,
                                int64_t t0, PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const __m256i table = iq4nl_table();
  __m256 acc[2][T];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kR16Q4PairBytes;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * 256;
    pf.step();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i isum[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const __m256i v = loadu256(vals + 64 * m + 32 * h);
        const __m256i wl = iq4nl_lo256(table, v), wh = iq4nl_hi256(table, v);  // values 4m.., 16 + 4m..
        const __m256i al = _mm256_sign_epi8(wl, wl), ah = _mm256_sign_epi8(wh, wh);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a.q8 + (t0 + t) * a.cols + b * 32;
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(al, _mm256_sign_epi8(bcast4(xq + 4 * m), wl)), ones16()));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(ah, _mm256_sign_epi8(bcast4(xq + 16 + 4 * m), wh)), ones16()));
          keep_reg(isum[t]);
        }
      }
      const __m256 dw = load8_f16(rec + half * 32 + 16 * h);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(a.d8[(t0 + t) * nb + b]));
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), d, acc[h][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) store_group(g, acc[0][t], acc[1][t], t0 + t, lane0, lane1, out_r);
}

inline void gemm_iq4nl_r16_avx2(const GemmArgs& g) {
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, (n_tok + 2) / 3 * nb);
    for_tiles<3>(n_tok, [&]<int T>(int64_t t0) { iq4nl_r16_tile_avx2<T>(g, grp, lane0, lane1, out_r, t0, pf); });
  });
}

// ---- Q8_0_R16 (u8 = w + 128) x Q8_0 ----------------------------------------------------------

// One 8-row half h of one group for tokens [t0, t0 + T): the half's 32 bytes of every line are
// flipped back to signed (xor 0x80) and multiplied with the sign trick (|w| x sign(w) * x:
// pairs <= 32512, no vpmaddubsw saturation). Doing the halves one after the other keeps the
// tile's accumulators in registers (T = 4: 8 + 4 of the 16 ymm); the second pass over the
// group's lines hits L1/L2.
// pf: the next group's prefetch, one step per block (see PrefetchSpread).
template <int T>
inline void q8_0_r16_half_avx2(const GemmArgs& g, const uint8_t* grp, int h, int64_t t0, __m256* out,
                               PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const int8_t* xq[T];
  const float* xd[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.q8 + (t0 + t) * a.cols;
    xd[t] = a.d8 + (t0 + t) * nb;
  }
  __m256 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kR16PairBytes;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * 512 + 32 * h;
    pf.step();
    __m256i isum[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m256i w = _mm256_xor_si256(loadu256(vals + 64 * k4), flip);
      const __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i sx = _mm256_sign_epi8(bcast4(xq[t] + b * 32 + 4 * k4), w);
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones16()));
        keep_reg(isum[t]);
      }
    }
    const __m256 dw = load8_f16(rec + half * 32 + 16 * h);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[t][b])), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = acc[t];
}

// The Q8_0_R16 driver over 16-row groups and token tiles of up to 4, with Half::run<T> doing one
// 8-row half of a group (the AVX2 kernel above, or the AVX-VNNI one in kernels_avxvnni_r16.h).
template <typename Half>
inline void gemm_q8_0_r16_halves(const GemmArgs& g) {
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  const int64_t tiles = n_tok / 4 + (n_tok % 4 != 0);
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    const int halves = (lane0 < 8) + (lane1 > 8);
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, tiles * halves * nb);
    for_tiles<4>(n_tok, [&]<int T>(int64_t t0) {
      __m256 lo[T], hi[T];
      for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
      if (lane0 < 8) Half::template run<T>(g, grp, 0, t0, lo, pf);
      if (lane1 > 8) Half::template run<T>(g, grp, 1, t0, hi, pf);
      for (int t = 0; t < T; ++t) store_group(g, lo[t], hi[t], t0 + t, lane0, lane1, out_r);
    });
  });
}

struct Q8_0R16HalfAvx2 {
  template <int T>
  static void run(const GemmArgs& g, const uint8_t* grp, int h, int64_t t0, __m256* out, PrefetchSpread& pf) {
    q8_0_r16_half_avx2<T>(g, grp, h, t0, out, pf);
  }
};

// One token, both 8-row halves in one pass over the group: each line is read once, front to
// back, so the next group's prefetch can run kPrefetchAheadBytes ahead (PrefetchSpread
// one_pass); the halves' two passes re-read a long group from L2 (a down projection's 4864
// columns make 82 KB) and spread the prefetch a whole group ahead. The same operations per half
// as q8_0_r16_half_avx2, so the same results.
inline void q8_0_r16_group1_avx2(const GemmArgs& g, const uint8_t* grp, int64_t t, __m256& lo, __m256& hi,
                                 PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const int8_t* xq = a.q8 + t * a.cols;
  const float* xd = a.d8 + t * nb;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kR16PairBytes;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * 512;
    pf.step();
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m256i x = bcast4(xq + b * 32 + 4 * k4);
      const __m256i w0 = _mm256_xor_si256(loadu256(vals + 64 * k4), flip);
      const __m256i w1 = _mm256_xor_si256(loadu256(vals + 64 * k4 + 32), flip);
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w0, w0), _mm256_sign_epi8(x, w0)), ones16()));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w1, w1), _mm256_sign_epi8(x, w1)), ones16()));
      keep_reg(s0);
      keep_reg(s1);
    }
    const __m256 dx = _mm256_set1_ps(xd[b]);
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(load8_f16(rec + half * 32), dx), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(load8_f16(rec + half * 32 + 16), dx), acc1);
  }
  lo = acc0;
  hi = acc1;
}

inline void gemm_q8_0_r16_avx2(const GemmArgs& g) {
  if (g.act->n_tok != 1) return gemm_q8_0_r16_halves<Q8_0R16HalfAvx2>(g);
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t nb = g.act->cols / 32;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, nb, /*one_pass=*/true);
    __m256 lo, hi;
    q8_0_r16_group1_avx2(g, grp, 0, lo, hi, pf);
    store_group(g, lo, hi, 0, lane0, lane1, out_r);
  });
}
