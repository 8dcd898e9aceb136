// AVX2 kernels for the 32-blocks on R16 that sum in ggml's float order (Q5_0_R16, Q4_1_R16,
// Q5_1_R16), so bit-identical to the scalar reference: the in-place tiles, the ggml panels and
// their span / chunk walk, and the dispatcher gemm_r16_ggml_avx2 (the Q5_0 x16t kernels it also
// picks are in kernels_avx2_q5u.h). IQ4_NL_R16 sums each block exactly (llama.cpp's x86 order)
// and runs the Q4_0_R16 kernels (kernels_avx2_r16.h, kernels_avx2_panels.h).
//
// NOT a normal header: included once by kernels_avx2.cc inside its anonymous namespace, right
// after kernels_avx2_r16.h (whose helpers it uses), under the same avx2,fma,f16c target pragma.

// ---- Q5_0_R16 (signed 32-blocks) and Q4_1_R16 / Q5_1_R16 (with mins) in ggml's float order ----

// Signed int8 values of 8 rows (half h) x 4 values (k4) of block half `half` of a pair record.
inline __m256i r16_nibbles_256(const uint8_t* rec, int half, int k4, int h) {
  const __m256i v = loadu256(rec + 64 + half * 256 + 64 * (k4 % 4) + 32 * h);
  return _mm256_and_si256(k4 < 4 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0xF));
}
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
      // Unsigned values (kMin: Q4_1 / Q5_1, pairs <= 2 * 31 * 127) multiply as they are; signed
      // ones (Q5_0) as |w| against x with w's sign.
      const __m256i p = Dec::kMin ? _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones16())
                                  : _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)), ones16());
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
// activation and the signed values (values -16..31 only, see above), or with kVnni (the AVX-VNNI
// tier) one vpdpbusd into the panel's term. The float steps are the scalar reference's. The 8 lane
// accumulators of token t0 + t are at accm + t * kGgmlAccTokenFloats when kCarry (in and out:
// the blocks of a row arrive chunk by chunk, gemm_ggml_panels_avx2), else they start at zero and
// out[t] gets their ggml lane sum. Both tiers run it one token at a time (8
// accumulators; tiles of 2-4 tokens, which spill on the 16 ymm registers, measured no faster:
// kernels_bench BM_Matmul/6/0/512, Zen 5).
template <int T, bool kCarry, bool kMin, bool kVnni>
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
        const __m256i term = loadu256(pb + 512 + 64 * k4);
        const __m256i p = kVnni ? dpbusd_vex(term, xu, w) : _mm256_add_epi32(term, _mm256_madd_epi16(_mm256_maddubs_epi16(xu, w), ones16()));
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
template <bool kVnni>
struct GgmlHalfAvx2 {
  template <int T, bool kCarry, bool kMin>
  void run(const GemmArgs& g, const uint8_t* panel, int64_t b0, int64_t b1, int h, int64_t t0, float* accm, __m256* out) const {
    ggml_panel_half_avx2<T, kCarry, kMin, kVnni>(g, panel, b0, b1, h, t0, accm, out);
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

// kernels_avx2_q5u.h (included after this file).
template <bool kVnni>
inline void gemm_q5_0_r16_x16t(const GemmArgs& g);

template <typename Dec>
inline void gemm_r16_ggml_avx2(const GemmArgs& g) {
  // The ggml panels (vpmaddubsw cannot saturate there: values -16..31).
  if (g.act->q8u != nullptr && g.scratch != nullptr) return gemm_ggml_panels_avx2<Dec, 1>(g, GgmlHalfAvx2<false>{});
  if constexpr (Dec::kQ5) {
    if (g.act->x16t != nullptr) return gemm_q5_0_r16_x16t<false>(g);
  }
  // Q4_1 (and the others without their activation forms) in place, one token at a time.
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    const int halves = (lane0 < 8) + (lane1 > 8);
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, n_tok * halves * nb);
    for (int64_t t = 0; t < n_tok; ++t) {
      __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
      if (lane0 < 8) lo = r16_ggml_half_avx2<Dec>(g, grp, 0, t, pf);
      if (lane1 > 8) hi = r16_ggml_half_avx2<Dec>(g, grp, 1, t, pf);
      store_group(g, lo, hi, t, lane0, lane1, out_r);
    }
  });
}

