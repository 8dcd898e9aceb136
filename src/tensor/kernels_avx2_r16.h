// AVX2 kernels over the R16 layouts (Q8_0_R16, Q4_0_R16, IQ4_NL_R16, Q5_0_R16; the Q4_K_R16 and
// Q6_K_R16 tiles are in kernels_avx2_kquant.h, which includes this file's helpers), so one
// repacked layout serves the AVX2 and the AVX-512 tier. Byte layouts: kernels.h.
//
// NOT a normal header: included once by kernels_avx2.cc inside its anonymous namespace, after
// kernels_x86_impl.h / kernels_x86_more.h, under its avx2,fma,f16c target pragma. It uses no
// VNNI (AVX-VNNI is not on every AVX2 CPU, e.g. Zen 3): int8 products are vpmaddubsw (u8 x s8
// -> s16 pairs, saturating) + vpmaddwd. Every use below is kept inside int16:
//   unsigned weights (nibbles 0..15, Q6_K 0..63) x activations |x| <= 127: pairs <= 16002, and
//   at most 30480 after summing (8 nibble pairs, or 2 Q6_K pairs) before vpmaddwd;
//   signed weights (IQ4_NL, Q5_0): |w| as u8 against x carrying w's sign (vpsignb), pairs <=
//   2 * 128 * 127 = 32512, widened right away.
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

// ---- IQ4_NL_R16 / Q5_0_R16 (signed 32-blocks) in ggml's float order --------------------------

// Signed int8 values of 8 rows (half h) x 4 values (k4) of block half `half` of a pair record.
inline __m256i r16_nibbles_256(const uint8_t* rec, int half, int k4, int h) {
  const __m256i v = loadu256(rec + 64 + half * 256 + 64 * (k4 % 4) + 32 * h);
  return _mm256_and_si256(k4 < 4 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0xF));
}
struct DecIQ4NL256 {
  static constexpr size_t kRec = kR16Q4PairBytes;
  static constexpr bool kMin = false;
  static constexpr bool kQ5 = false;  // values up to 127: the ggml panel's AVX2 dot would saturate
  static __m256i vals(const uint8_t* rec, int half, int k4, int h) {
    return _mm256_shuffle_epi8(iq4nl_table(), r16_nibbles_256(rec, half, k4, h));
  }
};
// 0x10 in each byte whose value (4*k4 .. 4*k4 + 3 of 8 rows, half h) has its 5th bit set: bit
// k4 of the Q5_0_R16 / Q5_1_R16 bit planes (kernels.h), moved to bit 4 (a 16-bit shift keeps
// each byte's bit 4 inside its byte for shifts up to 4).
inline __m256i q5_bit16_256(const uint8_t* rec, int half, int k4, int h) {
  const __m256i planes = loadu256(rec + 576 + half * 64 + 32 * h);
  const __m256i at4 = k4 < 4 ? _mm256_slli_epi16(planes, 4 - k4) : k4 > 4 ? _mm256_srli_epi16(planes, k4 - 4) : planes;
  return _mm256_and_si256(at4, _mm256_set1_epi8(0x10));
}
struct DecQ5_0256 {
  static constexpr size_t kRec = kR16Q5PairBytes;
  static constexpr bool kMin = false;
  static constexpr bool kQ5 = true;  // values -16..15
  // The values + 16 (nibble | 16 * bit, 0..31).
  static __m256i uvals(const uint8_t* rec, int half, int k4, int h) {
    return _mm256_or_si256(r16_nibbles_256(rec, half, k4, h), q5_bit16_256(rec, half, k4, h));
  }
  static __m256i vals(const uint8_t* rec, int half, int k4, int h) {
    return _mm256_sub_epi8(uvals(rec, half, k4, h), _mm256_set1_epi8(16));
  }
};

// Q4_1_R16: unsigned nibbles (the Q4_0_R16 byte order) and a per-block min (kR16Q41MinOffset).
struct DecQ4_1256 {
  static constexpr size_t kRec = kR16Q41PairBytes;
  static constexpr bool kMin = true;
  static constexpr bool kQ5 = false;
  static constexpr size_t kMinOffset = kR16Q41MinOffset;
  static __m256i vals(const uint8_t* rec, int half, int k4, int h) { return r16_nibbles_256(rec, half, k4, h); }
};
// Q5_1_R16: the Q5_0_R16 bytes read as unsigned values nibble | 16 * bit (0..31), and a min.
struct DecQ5_1256 {
  static constexpr size_t kRec = kR16Q51PairBytes;
  static constexpr bool kMin = true;
  static constexpr bool kQ5 = false;
  static constexpr size_t kMinOffset = kR16Q51MinOffset;
  static __m256i vals(const uint8_t* rec, int half, int k4, int h) { return DecQ5_0256::uvals(rec, half, k4, h); }
};

// ggml's final reduction of a row's 8 float lanes (acc[i]: values 4i..4i+3 of every block):
// (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then (0+1), as kernels_scalar.cc hsum8.
inline __m256 ggml_lanes_sum(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6, __m256 a7) {
  const __m256 h0 = _mm256_add_ps(a0, a4), h1 = _mm256_add_ps(a1, a5);
  const __m256 h2 = _mm256_add_ps(a2, a6), h3 = _mm256_add_ps(a3, a7);
  return _mm256_add_ps(_mm256_add_ps(h0, h2), _mm256_add_ps(h1, h3));
}

// The same of 8 accumulators stored one after another at p (64-byte aligned).
inline __m256 ggml_lanes_sum_at(const float* p) {
  return ggml_lanes_sum(_mm256_load_ps(p), _mm256_load_ps(p + 8), _mm256_load_ps(p + 16), _mm256_load_ps(p + 24),
                        _mm256_load_ps(p + 32), _mm256_load_ps(p + 40), _mm256_load_ps(p + 48), _mm256_load_ps(p + 56));
}

// Half h (8 rows) of one group for token t: lane i of ggml's x86 dot is accumulator acc[i]
// (values 4i..4i+3 of every block, one FMA per block), reduced as kernels_scalar.cc hsum8 does,
// so the result is bit-identical to the scalar reference and to the AVX-512 kernel.
template <typename Dec>
inline __m256 r16_ggml_half_avx2(const GemmArgs& g, const uint8_t* grp, int h, int64_t t, PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const int8_t* xq = a.q8 + t * a.cols;
  __m256 acc[8], summ = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * Dec::kRec;
    const int half = static_cast<int>(b & 1);
    const __m256 d = _mm256_mul_ps(load8_f16(rec + half * 32 + 16 * h), _mm256_set1_ps(a.d8[t * nb + b]));
    pf.step();
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m256i w = Dec::vals(rec, half, k4, h);
      const __m256i x = bcast4(xq + b * 32 + 4 * k4);
      // Unsigned values (kMin: Q4_1 / Q5_1, pairs <= 2 * 31 * 127) multiply as they are.
      // Signed values: |w| (kept in the decoded panel, Dec::abs_vals) against x with w's sign.
      __m256i aw = w;
      if constexpr (!Dec::kMin) {
        if constexpr (requires { Dec::abs_vals(rec, half, k4, h); }) {
          aw = Dec::abs_vals(rec, half, k4, h);
        } else {
          aw = _mm256_sign_epi8(w, w);
        }
      }
      const __m256i p = Dec::kMin ? _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones16())
                                  : _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), ones16());
      acc[k4] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[k4]);
    }
    if constexpr (Dec::kMin) {
      // summ += m * s1 per block, a multiply then an add (the scalar reference's order).
      const __m256 m = load8_f16(rec + Dec::kMinOffset + half * 32 + 16 * h);
      summ = _mm256_add_ps(summ, _mm256_mul_ps(m, _mm256_set1_ps(a.s1[t * nb + b])));
    }
  }
  const __m256 s = ggml_lanes_sum(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]);
  return Dec::kMin ? _mm256_add_ps(s, summ) : s;
}

// A group decoded once into Q8_0_R16-shaped pair records of signed int8 values ([2][16] fp16
// scales, [2 blocks][8 k4][16 rows][4]) followed by the values' absolute values in the same
// order, for batches: the per-token passes then only load (the |w| operand of vpmaddubsw was a
// vpsignb per 4 values and token).
constexpr size_t kSignedPanelPairBytes = kR16PairBytes + 2 * 512;
// It fits the scratch that panel_scratch_bytes sizes for the ggml panels (an odd block count
// rounds up to a whole pair record, which the accumulators' span covers).
static_assert(kSignedPanelPairBytes <= 2 * kGgmlPanelBlockBytes &&
              kSignedPanelPairBytes / 2 <= static_cast<size_t>(kGgmlPanelSpan * 2 * kGgmlAccTokenFloats * 4));
struct DecPanelS8_256 {
  static constexpr size_t kRec = kSignedPanelPairBytes;
  static constexpr bool kMin = false;
  static constexpr bool kQ5 = false;
  static __m256i vals(const uint8_t* rec, int half, int k4, int h) {
    return loadu256(rec + 64 + half * 512 + 64 * k4 + 32 * h);
  }
  static __m256i abs_vals(const uint8_t* rec, int half, int k4, int h) {
    return loadu256(rec + kR16PairBytes + half * 512 + 64 * k4 + 32 * h);
  }
};
template <typename Dec>
inline void decode_signed_r16_panel_avx2(const uint8_t* grp, int64_t nb, uint8_t* panel, PrefetchSpread& pf) {
  for (int64_t b = 0; b < nb; ++b) {
    pf.step();
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * Dec::kRec;
    uint8_t* out = panel + static_cast<size_t>(b >> 1) * kSignedPanelPairBytes;
    const int half = static_cast<int>(b & 1);
    __builtin_memcpy(out + half * 32, rec + half * 32, 32);
    for (int k4 = 0; k4 < 8; ++k4) {
      for (int h = 0; h < 2; ++h) {
        const __m256i w = Dec::vals(rec, half, k4, h);
        store256_s8(out + 64 + half * 512 + 64 * k4 + 32 * h, w);
        store256_s8(out + kR16PairBytes + half * 512 + 64 * k4 + 32 * h, _mm256_sign_epi8(w, w));
      }
    }
  }
}

// A signed group decoded once into kGgmlPanelBlockBytes blocks (kernels.h): the values, per row
// and 4 values kActIlBias0 - 128 * their sum, and the float scales. A tile then feeds the
// activation dword in unsigned (x ^ 0x80 = x + 128), so the int sum of the 4 products with that
// term added is kActIlBias0 + S (S the signed sum, |S| < 2^22), and one vsubps makes it float(S)
// exactly: no vpsignb pair per token. Used by the AVX2 Q5_0 tile (values -16..15, so the
// unsigned activation cannot saturate vpmaddubsw: pairs <= 2 * 255 * 16) and the AVX-VNNI tiles.
template <typename Dec>
inline void decode_ggml_panel_avx2(const uint8_t* grp, int64_t nb, uint8_t* panel, PrefetchSpread& pf) {
  const __m256i bias = _mm256_set1_epi32(kActIlBias0);
  for (int64_t b = 0; b < nb; ++b) {
    pf.step();
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * Dec::kRec;
    uint8_t* out = panel + static_cast<size_t>(b) * kGgmlPanelBlockBytes;
    const int half = static_cast<int>(b & 1);
    for (int k4 = 0; k4 < 8; ++k4) {
      for (int h = 0; h < 2; ++h) {
        const __m256i w = Dec::vals(rec, half, k4, h);
        store256(out + 64 * k4 + 32 * h, w);
        const __m256i sum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), w), ones16());
        store256(out + 512 + 64 * k4 + 32 * h, _mm256_sub_epi32(bias, _mm256_slli_epi32(sum4, 7)));
      }
    }
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(reinterpret_cast<float*>(out + 1024 + 32 * h), load8_f16(rec + half * 32 + 16 * h));
    if constexpr (Dec::kMin) {
      for (int h = 0; h < 2; ++h) {
        _mm256_storeu_ps(reinterpret_cast<float*>(out + kGgmlPanelMinsOffset + 32 * h),
                         load8_f16(rec + Dec::kMinOffset + half * 32 + 16 * h));
      }
    }
  }
}

// Half h (8 rows) of a ggml panel, blocks [b0, b1), for tokens [t0, t0 + T), in
// r16_ggml_half_avx2's order (so bit-identical to it): vpmaddubsw + vpmaddwd of the unsigned
// activation and the signed values (Q5_0 only, see above; the AVX-VNNI tier has its own copy
// with vpdpbusd, ggml_panel_half_vnni). The float steps are the scalar reference's. The 8 lane
// accumulators of token t0 + t are at accm + t * kGgmlAccTokenFloats when kCarry (in and out:
// the blocks of a row arrive chunk by chunk, gemm_ggml_panels_avx2), else they start at zero and
// out[t] gets their ggml lane sum. Both tiers run it one token at a time (8
// accumulators; tiles of 2-4 tokens, which spill on the 16 ymm registers, measured no faster:
// kernels_bench BM_Matmul/6/0/512, Zen 5).
template <int T, bool kCarry, bool kMin>
inline void ggml_panel_half_avx2(const GemmArgs& g, const uint8_t* panel, int64_t b0, int64_t b1, int h, int64_t t0,
                                 float* accm, __m256* out) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const __m256 biasf = _mm256_set1_ps(kActIlBias0F);
  __m256 acc[8][T];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[i][t] = kCarry ? _mm256_load_ps(accm + t * kGgmlAccTokenFloats + 8 * i) : _mm256_setzero_ps();
  }
  __m256 summ[T];  // kMin: the sum of the blocks' m * s1 terms (ggml's Q4_1 / Q5_1 dot)
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) summ[t] = kCarry && kMin ? _mm256_load_ps(accm + t * kGgmlAccTokenFloats + 64) : _mm256_setzero_ps();
  const uint8_t* xu8 = a.q8u + t0 * a.cols;
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* pb = panel + static_cast<size_t>(b) * kGgmlPanelBlockBytes + 32 * h;
    const __m256 dw = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + 1024));
    __m256 d[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) d[t] = _mm256_mul_ps(dw, _mm256_set1_ps(a.d8[(t0 + t) * nb + b]));
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m256i w = loadu256(pb + 64 * k4);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i xu = bcast4(xu8 + t * a.cols + b * 32 + 4 * k4);
        const __m256i p = _mm256_add_epi32(loadu256(pb + 512 + 64 * k4), _mm256_madd_epi16(_mm256_maddubs_epi16(xu, w), ones16()));
        acc[k4][t] = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_castsi256_ps(p), biasf), d[t], acc[k4][t]);
      }
    }
    if constexpr (kMin) {
      // summ += m * s1 per block, a multiply then an add (r16_ggml_half_avx2's order).
      const __m256 m = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + kGgmlPanelMinsOffset));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) summ[t] = _mm256_add_ps(summ[t], _mm256_mul_ps(m, _mm256_set1_ps(a.s1[(t0 + t) * nb + b])));
    }
  }
  if constexpr (kCarry) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) _mm256_store_ps(accm + t * kGgmlAccTokenFloats + 8 * i, acc[i][t]);
    }
    if constexpr (kMin) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) _mm256_store_ps(accm + t * kGgmlAccTokenFloats + 64, summ[t]);
    }
  } else {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256 s = ggml_lanes_sum(acc[0][t], acc[1][t], acc[2][t], acc[3][t], acc[4][t], acc[5][t], acc[6][t], acc[7][t]);
      out[t] = kMin ? _mm256_add_ps(s, summ[t]) : s;
    }
  }
}
struct GgmlHalfAvx2 {
  template <int T, bool kCarry, bool kMin>
  void run(const GemmArgs& g, const uint8_t* panel, int64_t b0, int64_t b1, int h, int64_t t0, float* accm, __m256* out) const {
    ggml_panel_half_avx2<T, kCarry, kMin>(g, panel, b0, b1, h, t0, accm, out);
  }
};

// The span and chunk walk of a batch over a decoded panel of a group longer than kGgmlPanelWhole
// blocks: tokens in spans of kGgmlPanelSpan, blocks in chunks of kGgmlPanelChunk, every token of
// a span over one chunk before the next. chunk(t, b0, b1, at) adds token t's blocks [b0, b1) to
// its carried lane accumulators at `at` (half h at at + h * kGgmlAccTokenFloats: [8 k4][8 lanes],
// then with kMin the min sums' 8 floats), zeroed at the span's start; at the span's end each
// token's halves are reduced in ggml's lane order (plus the min sums) and stored.
template <bool kMin, typename Chunk>
inline void for_panel_chunks(const GemmArgs& g, int64_t nb, int lane0, int lane1, int64_t out_r, float* accm, Chunk&& chunk) {
  const int64_t n_tok = g.act->n_tok;
  for (int64_t s0 = 0; s0 < n_tok; s0 += kGgmlPanelSpan) {
    const int64_t sn = std::min<int64_t>(kGgmlPanelSpan, n_tok - s0);
    __builtin_memset(accm, 0, static_cast<size_t>(sn) * 2 * kGgmlAccTokenFloats * sizeof(float));
    for (int64_t b0 = 0; b0 < nb; b0 += kGgmlPanelChunk) {
      const int64_t b1 = std::min(nb, b0 + kGgmlPanelChunk);
      for (int64_t t = 0; t < sn; ++t) chunk(s0 + t, b0, b1, accm + 2 * t * kGgmlAccTokenFloats);
    }
    for (int64_t t = 0; t < sn; ++t) {
      const float* lo = accm + 2 * t * kGgmlAccTokenFloats;
      const float* hi = lo + kGgmlAccTokenFloats;
      if constexpr (kMin) {
        store_group(g, _mm256_add_ps(ggml_lanes_sum_at(lo), _mm256_load_ps(lo + 64)),
                    _mm256_add_ps(ggml_lanes_sum_at(hi), _mm256_load_ps(hi + 64)), s0 + t, lane0, lane1, out_r);
      } else {
        store_group(g, ggml_lanes_sum_at(lo), ggml_lanes_sum_at(hi), s0 + t, lane0, lane1, out_r);
      }
    }
  }
}

// Every group of g through ggml panels (decoded once per group into the scratch), each half by
// Half::run<T> over tiles of up to kMaxT tokens. The tokens go in spans of kGgmlPanelSpan and
// the blocks in chunks of kGgmlPanelChunk: every token of a span runs over one chunk of the
// panel before the next chunk, so a chunk (18 KB) stays in L1 while the span's tokens read it,
// and the 16 lane accumulators of each token (2 halves x 8, and Q5_1's min sums: kGgmlAccTokenFloats
// floats a half) wait in the scratch behind the panel. Whole-row passes over a group's panel (1152
// bytes per 32 columns, 1088 before the mins were added: 165 KB at 4864 columns) read it from L2
// for every token: Q5_0 896x4864 at 512 tokens
// ran 2.6x slower than 4864x896 (kernels_bench BM_Matmul/6/1/512, avx2, Zen 5). Each
// accumulator still takes its blocks in order, so the results are the same bits. Panels of up
// to kGgmlPanelWhole blocks (37 KB) run whole rows as before: chunking them measured ~10 %
// slower at 896 columns (4864x896, 512 tokens, both tiers, alternated).
template <typename Dec, int kMaxT, typename Half>
inline void gemm_ggml_panels_avx2(const GemmArgs& g, Half half) {
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  float* accm = reinterpret_cast<float*>(g.scratch + static_cast<size_t>(nb) * kGgmlPanelBlockBytes);  // [span][2 h][8][8]
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, nb);
    decode_ggml_panel_avx2<Dec>(grp, nb, g.scratch, pf);
    if (nb <= kGgmlPanelWhole) {  // the panel stays in L1 across the tokens: whole rows at a time
      for_tiles<kMaxT>(n_tok, [&]<int T>(int64_t t0) {
        __m256 lo[T], hi[T];
        for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
        if (lane0 < 8) half.template run<T, false, Dec::kMin>(g, g.scratch, 0, nb, 0, t0, nullptr, lo);
        if (lane1 > 8) half.template run<T, false, Dec::kMin>(g, g.scratch, 0, nb, 1, t0, nullptr, hi);
        for (int t = 0; t < T; ++t) store_group(g, lo[t], hi[t], t0 + t, lane0, lane1, out_r);
      });
      return;
    }
    for_panel_chunks<Dec::kMin>(g, nb, lane0, lane1, out_r, accm, [&](int64_t t, int64_t b0, int64_t b1, float* at) {
      if (lane0 < 8) half.template run<1, true, Dec::kMin>(g, g.scratch, b0, b1, 0, t, at, nullptr);
      if (lane1 > 8) half.template run<1, true, Dec::kMin>(g, g.scratch, b0, b1, 1, t, at + kGgmlAccTokenFloats, nullptr);
    });
  });
}

// ---- Q5_0_R16 with Act::x16t: the values unsigned against the signed activation ------------
// ggml's Q5_0 dot needs, per row, token and 4 values, the exact int sum S of the products. Here
// the values go in unsigned (u = value + 16 = nibble | 16 * bit, 0..31, so vpmaddubsw cannot
// saturate: pairs <= 2 * 31 * 127) against the signed activation; sum(u * x) plus the token's
// term Act::x16t (kActIlBias0 - 16 * the 4 x's sum) is kActIlBias0 + S, and one vsubps makes it
// float(S) exactly (|S| < 2^22). No vpsignb pair per token, and the 5th bits cost a shift and a
// mask (the bit planes). kVnni (the AVX-VNNI tier): one vpdpbusd for vpmaddubsw + vpmaddwd +
// vpaddd. The float steps are r16_ggml_half_avx2's, so the results are bit-identical to it.

// vpdpbusd on ymm in its VEX form (AVX-VNNI), as inline assembly so that the generic kernels
// below need no target attribute (GCC does not inline the intrinsic into a function compiled
// without one). Run only where the CPU has AVX-VNNI (the avxvnni tier and above).
inline __m256i dpbusd_vex(__m256i acc, __m256i u, __m256i x) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(x));
  return acc;
}
template <bool kVnni>
inline __m256i q5u_dot(__m256i term, __m256i u, __m256i x) {
  if constexpr (kVnni) {
    return dpbusd_vex(term, u, x);
  } else {
    return _mm256_add_epi32(term, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones16()));
  }
}
// Where the unsigned values come from: the R16 record itself (read by the panel decode and, a
// pair record at a time, by q5u_half_direct at one token), or a group decoded once (batches):
// per 32 columns [8 k4][16 rows][4] u8 values and [16] float scales.
constexpr size_t kQ5uPanelBlockBytes = 512 + 64;
struct Q5uDirect {
  static const uint8_t* block(const uint8_t* grp, int64_t b) { return grp + static_cast<size_t>(b >> 1) * kR16Q5PairBytes; }
  static __m256 scales(const uint8_t* rec, int64_t b, int h) { return load8_f16(rec + (b & 1) * 32 + 16 * h); }
  static __m256i u(const uint8_t* rec, int64_t b, int k4, int h) { return DecQ5_0256::uvals(rec, static_cast<int>(b & 1), k4, h); }
};
struct Q5uPanel {
  static const uint8_t* block(const uint8_t* panel, int64_t b) { return panel + static_cast<size_t>(b) * kQ5uPanelBlockBytes; }
  static __m256 scales(const uint8_t* pb, int64_t, int h) { return _mm256_loadu_ps(reinterpret_cast<const float*>(pb + 512 + 32 * h)); }
  static __m256i u(const uint8_t* pb, int64_t, int k4, int h) { return loadu256(pb + 64 * k4 + 32 * h); }
};
inline void decode_q5u_panel(const uint8_t* grp, int64_t nb, uint8_t* panel, PrefetchSpread& pf) {
  for (int64_t b = 0; b < nb; ++b) {
    pf.step();
    const uint8_t* rec = Q5uDirect::block(grp, b);
    uint8_t* out = panel + static_cast<size_t>(b) * kQ5uPanelBlockBytes;
    for (int k4 = 0; k4 < 8; ++k4) {
      for (int h = 0; h < 2; ++h) store256(out + 64 * k4 + 32 * h, Q5uDirect::u(rec, b, k4, h));
    }
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(reinterpret_cast<float*>(out + 512 + 32 * h), Q5uDirect::scales(rec, b, h));
  }
}
// One block of 8 rows for one token: acc[k4] += float(S_k4) * d, S_k4 the exact sum of values
// 4*k4..4*k4+3 times the activations (ggml's lane order); u(k4) gives the unsigned values, term
// and x point at the block's 8 terms and 32 activations.
template <bool kVnni, typename U>
inline void q5u_block(__m256* acc, const int32_t* term, const int8_t* x, __m256 d, __m256 biasf, U u) {
#pragma GCC unroll 8
  for (int k4 = 0; k4 < 8; ++k4) {
    const __m256i p = q5u_dot<kVnni>(_mm256_set1_epi32(term[k4]), u(k4), bcast4(x + 4 * k4));
    acc[k4] = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_castsi256_ps(p), biasf), d, acc[k4]);
  }
}
// Half h (8 rows) for token t, blocks [b0, b1): acc[k4] += the values 4*k4.. of each block
// (ggml's lane order), block by block.
template <bool kVnni, typename Src>
inline void q5u_half_blocks(const GemmArgs& g, const uint8_t* src, int h, int64_t t, int64_t b0, int64_t b1, __m256* acc,
                            PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const int8_t* xq = a.q8 + t * a.cols;
  const int32_t* term = a.x16t + t * (a.cols / 4);
  const __m256 biasf = _mm256_set1_ps(kActIlBias0F);
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* blk = Src::block(src, b);
    const __m256 d = _mm256_mul_ps(Src::scales(blk, b, h), _mm256_set1_ps(a.d8[t * nb + b]));
    pf.step();
    q5u_block<kVnni>(acc, term + b * 8, xq + b * 32, d, biasf, [&](int k4) { return Src::u(blk, b, k4, h); });
  }
}
// Half h for token t over every block: its 8 lanes summed in ggml's order.
template <bool kVnni, typename Src>
inline __m256 q5u_half(const GemmArgs& g, const uint8_t* src, int h, int64_t t, PrefetchSpread& pf) {
  __m256 acc[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  q5u_half_blocks<kVnni, Src>(g, src, h, t, 0, g.act->cols / 32, acc, pf);
  return ggml_lanes_sum(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]);
}
// One token straight from the records, half kH: q5u_half's operations in its order, walked a
// pair record at a time so that a block's half of the record (kHalf) and the row half are
// constants: the byte offsets fold into the loads, and the per-block address and parity
// arithmetic (about a fifth of the loop's instructions) goes. One prefetch step a pair.
template <bool kVnni, int kH>
inline __m256 q5u_half_direct(const GemmArgs& g, const uint8_t* grp, int64_t t, PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const int8_t* xq = a.q8 + t * a.cols;
  const int32_t* term = a.x16t + t * (a.cols / 4);
  const float* d8 = a.d8 + t * nb;
  const __m256 biasf = _mm256_set1_ps(kActIlBias0F);
  __m256 acc[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  auto block = [&]<int kHalf>(const uint8_t* rec, int64_t b) {
    const __m256 d = _mm256_mul_ps(load8_f16(rec + kHalf * 32 + 16 * kH), _mm256_set1_ps(d8[b]));
    q5u_block<kVnni>(acc, term + b * 8, xq + b * 32, d, biasf, [&](int k4) { return DecQ5_0256::uvals(rec, kHalf, k4, kH); });
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kR16Q5PairBytes;
    pf.step();
    block.template operator()<0>(rec, b);
    block.template operator()<1>(rec, b + 1);
  }
  if (b < nb) {
    pf.step();
    block.template operator()<0>(grp + static_cast<size_t>(b >> 1) * kR16Q5PairBytes, b);
  }
  return ggml_lanes_sum(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]);
}
// Both halves (16 rows) for token t, in two passes over the blocks: values 0-15 of every block
// (acc lanes 0-3), then 16-31 (lanes 4-7). Each pass keeps 2 x 4 accumulators, so a k4's
// activation and term broadcasts feed both halves' dots: on AVX-VNNI, where one vpdpbusd is
// the whole dot, the loads bound the loop (3 per dot in q5u_half, 2 here; a stand-alone loop
// ran 20 % faster). Each accumulator sees the same operations in the same order as in
// q5u_half, so the results are identical. (AVX2's three-instruction dot leaves it ALU-bound:
// no gain there, so it keeps q5u_half.)
template <bool kVnni, typename Src>
inline void q5u_group_blocks(const GemmArgs& g, const uint8_t* src, int64_t t, int64_t b0, int64_t b1, __m256 (&acc)[2][8]) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const int8_t* xq = a.q8 + t * a.cols;
  const int32_t* term = a.x16t + t * (a.cols / 4);
  const __m256 biasf = _mm256_set1_ps(kActIlBias0F);
#pragma GCC unroll 1
  for (int pass = 0; pass < 2; ++pass) {
    __m256 a0[4], a1[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      a0[i] = acc[0][4 * pass + i];
      a1[i] = acc[1][4 * pass + i];
    }
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* blk = Src::block(src, b);
      const __m256 dx = _mm256_set1_ps(a.d8[t * nb + b]);
      const __m256 d0 = _mm256_mul_ps(Src::scales(blk, b, 0), dx);
      const __m256 d1 = _mm256_mul_ps(Src::scales(blk, b, 1), dx);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const int k4 = 4 * pass + i;
        const __m256i tm = _mm256_set1_epi32(term[b * 8 + k4]);
        const __m256i x = bcast4(xq + b * 32 + 4 * k4);
        const __m256i p0 = q5u_dot<kVnni>(tm, Src::u(blk, b, k4, 0), x);
        const __m256i p1 = q5u_dot<kVnni>(tm, Src::u(blk, b, k4, 1), x);
        a0[i] = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_castsi256_ps(p0), biasf), d0, a0[i]);
        a1[i] = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_castsi256_ps(p1), biasf), d1, a1[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      acc[0][4 * pass + i] = a0[i];
      acc[1][4 * pass + i] = a1[i];
    }
  }
}
template <bool kVnni, typename Src>
inline void q5u_group(const GemmArgs& g, const uint8_t* src, int64_t t, __m256& lo, __m256& hi) {
  __m256 acc[2][8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
  q5u_group_blocks<kVnni, Src>(g, src, t, 0, g.act->cols / 32, acc);
  lo = ggml_lanes_sum(acc[0][0], acc[0][1], acc[0][2], acc[0][3], acc[0][4], acc[0][5], acc[0][6], acc[0][7]);
  hi = ggml_lanes_sum(acc[1][0], acc[1][1], acc[1][2], acc[1][3], acc[1][4], acc[1][5], acc[1][6], acc[1][7]);
}
// A batch over a group's decoded panel of more than kGgmlPanelWhole blocks: the panel (576 bytes
// per block, 87 KB at 4864 columns) would be read from L2 for every token, so the blocks run in
// chunks of kGgmlPanelChunk (9 KB, in L1 across the tokens) over spans of kGgmlPanelSpan tokens,
// each token's 16 lane accumulators (2 halves x 8) kept in `accm` between chunks
// (for_panel_chunks, the ggml panels' walk). Every
// accumulator still takes its blocks in order: the same bits as the whole-row pass. Measured
// (kernels_bench BM_Matmul Q5_0 896x4864, 1 thread, min of 3 alternated rounds, Zen 5): AVX-VNNI
// 512 tokens 42.0 -> 38.4-38.6 ms, 64 tokens 5.38 -> 4.81-4.87; AVX2 64 tokens 5.62-5.71 ->
// 5.41 (its 512 tokens run the ggml panels). Chunks of 8 blocks were slower, of 32 the same.
template <bool kVnni>
inline void q5u_panel_chunks(const GemmArgs& g, int lane0, int lane1, int64_t out_r, float* accm) {
  PrefetchSpread none(nullptr, 0, 1);
  for_panel_chunks<false>(g, g.act->cols / 32, lane0, lane1, out_r, accm, [&](int64_t t, int64_t b0, int64_t b1, float* at) {
    if constexpr (kVnni) {
      __m256 acc[2][8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        acc[0][i] = _mm256_load_ps(at + 8 * i);
        acc[1][i] = _mm256_load_ps(at + kGgmlAccTokenFloats + 8 * i);
      }
      q5u_group_blocks<kVnni, Q5uPanel>(g, g.scratch, t, b0, b1, acc);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        _mm256_store_ps(at + 8 * i, acc[0][i]);
        _mm256_store_ps(at + kGgmlAccTokenFloats + 8 * i, acc[1][i]);
      }
    } else {
      for (int h = lane0 < 8 ? 0 : 1; h < (lane1 > 8 ? 2 : 1); ++h) {
        float* ah = at + h * kGgmlAccTokenFloats;
        __m256 acc[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) acc[i] = _mm256_load_ps(ah + 8 * i);
        q5u_half_blocks<kVnni, Q5uPanel>(g, g.scratch, h, t, b0, b1, acc, none);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) _mm256_store_ps(ah + 8 * i, acc[i]);
      }
    }
  });
}
// A Q5_0_R16 matmul with Act::x16t on the ymm tiers: one token straight from the record, a batch
// through each group decoded once into a panel (the unpacking, about as many operations as a
// token's dot, is then done once per group instead of once per token).
template <bool kVnni>
inline void gemm_q5_0_r16_x16t(const GemmArgs& g) {
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  const bool batched = n_tok >= 2 && g.scratch != nullptr;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    const int halves = (lane0 < 8) + (lane1 > 8);
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride,
                      batched ? nb : halves * ((nb + 1) / 2));
    if (batched) decode_q5u_panel(grp, nb, g.scratch, pf);
    if (batched && nb > kGgmlPanelWhole) {
      return q5u_panel_chunks<kVnni>(g, lane0, lane1, out_r,
                                     reinterpret_cast<float*>(g.scratch + static_cast<size_t>(nb) * kQ5uPanelBlockBytes));
    }
    PrefetchSpread none(nullptr, 0, 1);
    for (int64_t t = 0; t < n_tok; ++t) {
      __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
      if (batched && kVnni) {
        q5u_group<kVnni, Q5uPanel>(g, g.scratch, t, lo, hi);
      } else if (batched) {
        if (lane0 < 8) lo = q5u_half<kVnni, Q5uPanel>(g, g.scratch, 0, t, none);
        if (lane1 > 8) hi = q5u_half<kVnni, Q5uPanel>(g, g.scratch, 1, t, none);
      } else {
        if (lane0 < 8) lo = q5u_half_direct<kVnni, 0>(g, grp, t, pf);
        if (lane1 > 8) hi = q5u_half_direct<kVnni, 1>(g, grp, t, pf);
      }
      store_group(g, lo, hi, t, lane0, lane1, out_r);
    }
  });
}

template <typename Dec>
inline void gemm_r16_ggml_avx2(const GemmArgs& g) {
  // The ggml panels where vpmaddubsw cannot saturate (values -16..31: Q5_0, Q4_1, Q5_1).
  if constexpr (Dec::kQ5 || Dec::kMin) {
    if (g.act->q8u != nullptr && g.scratch != nullptr) return gemm_ggml_panels_avx2<Dec, 1>(g, GgmlHalfAvx2{});
  }
  if constexpr (Dec::kQ5) {
    if (g.act->x16t != nullptr) return gemm_q5_0_r16_x16t<false>(g);
  }
  // The decoded signed panel has no mins: Q4_1's nibbles are read in place (cheap to unpack).
  const bool batched = !Dec::kMin && g.act->n_tok >= 2 && g.scratch != nullptr;
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    const int halves = (lane0 < 8) + (lane1 > 8);
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, (n_tok * halves + (batched ? 1 : 0)) * nb);
    if (batched) decode_signed_r16_panel_avx2<Dec>(grp, nb, g.scratch, pf);
    for (int64_t t = 0; t < n_tok; ++t) {
      __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
      if (batched) {
        if (lane0 < 8) lo = r16_ggml_half_avx2<DecPanelS8_256>(g, g.scratch, 0, t, pf);
        if (lane1 > 8) hi = r16_ggml_half_avx2<DecPanelS8_256>(g, g.scratch, 1, t, pf);
      } else {
        if (lane0 < 8) lo = r16_ggml_half_avx2<Dec>(g, grp, 0, t, pf);
        if (lane1 > 8) hi = r16_ggml_half_avx2<Dec>(g, grp, 1, t, pf);
      }
      store_group(g, lo, hi, t, lane0, lane1, out_r);
    }
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
