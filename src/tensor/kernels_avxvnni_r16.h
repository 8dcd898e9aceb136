// AVX-VNNI kernels (vpdpbusd on ymm, VEX-encoded: Intel Alder Lake+ / Sierra Forest, AMD Zen 5)
// for the avxvnni tier: the AVX2 tier's table with the layouts below (Q8_0_R16, Q4_0_R16,
// IQ4_NL_R16, Q5_1_R16 batches) replaced. Used only when CPUID reports AVX-VNNI (matrix.cc clamps a forced avxvnni tier to avx2 otherwise).
//
// NOT a normal header: included once by kernels_avx2.cc inside its anonymous namespace after
// kernels_avx2_r16.h, kernels_avx2_ggml.h and kernels_avx2_q5u.h (whose helpers it uses), under
// the avx2,fma,f16c pragma; each function here adds "avxvnni" with a target attribute.

// ---- Q8_0_R16 (u8 = w + 128) x Q8_0 with vpdpbusd ----------------------------------------------

// One 8-row half h of one group for tokens [t0, t0 + T): vpdpbusd multiplies the stored u8
// bytes (w + 128) with the s8 activations straight into int32 (no saturation, no sign trick);
// the +128 is undone with the block's activation sum. The integer block sums are exactly the
// AVX2 kernel's, and the float steps are the same, so both tiers give identical results.
#define TS_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
template <int T>
TS_AVXVNNI void q8_0_r16_half_vnni(const GemmArgs& g, const uint8_t* grp, int h, int64_t t0, __m256* out,
                                   PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const int8_t* xq[T];
  const float* xd[T];
  const int32_t* xs[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.q8 + (t0 + t) * a.cols;
    xd[t] = a.d8 + (t0 + t) * nb;
    xs[t] = a.s8 + (t0 + t) * nb;
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
    for (int t = 0; t < T; ++t) isum[t] = _mm256_set1_epi32(-128 * xs[t][b]);
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m256i u = loadu256(vals + 64 * k4);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) isum[t] = _mm256_dpbusd_avx_epi32(isum[t], u, bcast4(xq[t] + b * 32 + 4 * k4));
    }
    const __m256 dw = load8_f16(rec + half * 32 + 16 * h);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, _mm256_set1_ps(xd[t][b])), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = acc[t];
}

struct Q8_0R16HalfVnni {
  template <int T>
  TS_AVXVNNI static void run(const GemmArgs& g, const uint8_t* grp, int h, int64_t t0, __m256* out,
                             PrefetchSpread& pf) {
    q8_0_r16_half_vnni<T>(g, grp, h, t0, out, pf);
  }
};

// Tokens [slot0, slot0 + T) (T <= 3) of one Act::q8_il tile (xa: the tile's first block
// record), all 16 rows of one group: per 4 values, two weight loads and T activation broadcasts
// feed 2T vpdpbusd from registers. Why: on Zen 5 (this tier, forced) the per-half kernel was
// bound by vector loads (~1.4 a cycle, measured with a loop of broadcast loads alone), not by
// vpdpbusd (2 a cycle with 8 independent sums): it loaded ~1.4 vectors per vpdpbusd (a
// broadcast for each, the weights, the per-token block terms), this ~1.0. The block sum's -128
// correction arrives precomputed (kActIlBias0 - 128 * sum, a broadcast load), and the int32 sum
// becomes float with one vsubps (exact, see kActIlBias0). Same integer block sums and float
// steps as the AVX2 and per-half kernels, so identical results.
template <int T>
TS_AVXVNNI void q8_0_r16_il_group_vnni(const GemmArgs& g, const uint8_t* grp, const uint8_t* xa, int slot0,
                                       __m256* lo, __m256* hi, PrefetchSpread& pf) {
  const int64_t nb = g.act->cols / 32;
  const __m256 bias = _mm256_set1_ps(kActIlBias0F);
  __m256 acc0[T], acc1[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, xa += kActIlBlockBytes) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kR16PairBytes;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * 512;
    pf.step();
    __m256i s0[T], s1[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) s0[t] = s1[t] = bcast4(xa + kActIlTile * 32 + 4 * (slot0 + t));
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m256i w0 = loadu256(vals + 64 * k4);
      const __m256i w1 = loadu256(vals + 64 * k4 + 32);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i x = bcast4(xa + 32 * (slot0 + t) + 4 * k4);
        s0[t] = _mm256_dpbusd_avx_epi32(s0[t], w0, x);
        s1[t] = _mm256_dpbusd_avx_epi32(s1[t], w1, x);
      }
    }
    const __m256 dw0 = load8_f16(rec + half * 32);
    const __m256 dw1 = load8_f16(rec + half * 32 + 16);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256 xd = _mm256_broadcast_ss(reinterpret_cast<const float*>(xa + kActIlTile * 36 + 4 * (slot0 + t)));
      acc0[t] = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_castsi256_ps(s0[t]), bias), _mm256_mul_ps(dw0, xd), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_castsi256_ps(s1[t]), bias), _mm256_mul_ps(dw1, xd), acc1[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    lo[t] = acc0[t];
    hi[t] = acc1[t];
  }
}

// Q8_0_R16 over Act::q8_il (n_tok >= kAvxVnniIlMinTokens, i.e. every batch): per group, per tile of kActIlTile
// tokens, passes of up to kVnniIlPass tokens over all 16 rows (the group stays in L1 across the
// tiles). Rows outside [lane0, lane1) of a partial group are computed (padding rows have scale
// 0) and not stored.
constexpr int kVnniIlPass = 3;
// Calls tile<T>(s0) over ceil(n / kMax) passes of as equal sizes as they can be (larger first):
// 4 tokens as 2 + 2, 7 as 3 + 2 + 2, not 3 + 1 and 3 + 3 + 1. Why: a 1-token pass feeds 2
// vpdpbusd per 3 loads; on Zen 5 (avxvnni forced, 1 thread, L2-resident 1024x896) 4 tokens took
// longer than 2 + 2 would (kernels_bench BM_MatmulL2/0/4: 115 GMAC/s against 131 at 2 tokens).
template <int kMax, typename F>
TS_AVXVNNI inline void for_even_tiles(int64_t n, F&& tile) {
  const int64_t passes = (n + kMax - 1) / kMax;
  int64_t s0 = 0;
  for (int64_t p = 0; p < passes; ++p) {
    const int64_t left = n - s0, size = (left + (passes - p) - 1) / (passes - p);
    if constexpr (kMax >= 4) {
      if (size == 4) { tile.template operator()<4>(s0); s0 += 4; continue; }
    }
    if (size == 3) tile.template operator()<3>(s0);
    if (size == 2) tile.template operator()<2>(s0);
    if (size == 1) tile.template operator()<1>(s0);
    s0 += size;
  }
}
TS_AVXVNNI void gemm_q8_0_r16_il_vnni(const GemmArgs& g) {
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  constexpr int64_t kTilePasses = (kActIlTile + kVnniIlPass - 1) / kVnniIlPass;
  const int64_t passes = (n_tok / kActIlTile) * kTilePasses + (n_tok % kActIlTile + kVnniIlPass - 1) / kVnniIlPass;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, passes * nb);
    for (int64_t t0 = 0; t0 < n_tok; t0 += kActIlTile) {
      const uint8_t* xa = g.act->q8_il + static_cast<size_t>(t0 / kActIlTile) * static_cast<size_t>(nb) * kActIlBlockBytes;
      const int64_t tn = n_tok - t0 < kActIlTile ? n_tok - t0 : kActIlTile;
      for_even_tiles<kVnniIlPass>(tn, [&]<int T>(int64_t s0) {
        __m256 lo[T], hi[T];
        q8_0_r16_il_group_vnni<T>(g, grp, xa, static_cast<int>(s0), lo, hi, pf);
        for (int t = 0; t < T; ++t) store_group(g, lo[t], hi[t], t0 + s0 + t, lane0, lane1, out_r);
      });
    }
  });
}

TS_AVXVNNI void gemm_q8_0_r16_vnni(const GemmArgs& g) {
  if (g.act->q8_il != nullptr) return gemm_q8_0_r16_il_vnni(g);
  gemm_q8_0_r16_halves<Q8_0R16HalfVnni>(g);
}
// ---- Q4_0_R16 (nibble - 8), IQ4_NL_R16 (table values), Q5_0_R16 (block order) with vpdpbusd --

// The AVX2 tile (q4_0_r16_tile_avx2) with each nibble plane's vpmaddubsw + int16 add replaced by
// one vpdpbusd into int32; the block sum starts at -8 * sum(x) (stored nibbles are w + 8), so
// the integer sums, and the results, are the AVX2 kernel's. kNlPlus128: IQ4_NL_R16, every nibble
// looked up as its table value + 128 (1..241, unsigned for vpdpbusd) and the sum starting at -128
// * sum(x): the exact block sums of iq4nl_r16_tile_avx2, the same float steps, the same bits.
// kQ5Plus16: Q5_0_R16 in Q50Order::kBlock, each nibble with its 5th bit (w + 16) against -16 *
// sum(x): the scalar reference's block sums and float steps in that order, the same bits.
template <int T, Q4Vals kV>
TS_AVXVNNI void q4_0_r16_tile_vnni(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r,
                                   int64_t t0, PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i table = _mm256_xor_si256(iq4nl_table(), _mm256_set1_epi8(static_cast<char>(0x80)));  // value + 128
  constexpr bool kNl = kV == Q4Vals::kNlPlus128;
  constexpr int kOff = q4_vals_offset<kV>();
  __m256 acc[2][T];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * q4_vals_record<kV>();
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * 256;
    pf.step();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i isum[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) isum[t] = _mm256_set1_epi32(-kOff * a.s8[(t0 + t) * nb + b]);
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const __m256i v = loadu256(vals + 64 * m + 32 * h);
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (kNl) {
          lo = _mm256_shuffle_epi8(table, lo);
          hi = _mm256_shuffle_epi8(table, hi);
        }
        if constexpr (kV == Q4Vals::kQ5Plus16) q5_merge_bits_256(rec, half, h, m, lo, hi);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a.q8 + (t0 + t) * a.cols + b * 32;
          isum[t] = _mm256_dpbusd_avx_epi32(isum[t], lo, bcast4(xq + 4 * m));
          isum[t] = _mm256_dpbusd_avx_epi32(isum[t], hi, bcast4(xq + 16 + 4 * m));
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

template <Q4Vals kV>
TS_AVXVNNI void gemm_q4_0_r16_vnni(const GemmArgs& g) {
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, (n_tok + 2) / 3 * nb);
    for_tiles<3>(n_tok, [&]<int T>(int64_t t0) { q4_0_r16_tile_vnni<T, kV>(g, grp, lane0, lane1, out_r, t0, pf); });
  });
}
// ---- Q5_1_R16 batches: the ggml panels (kernels_avx2_ggml.h) with vpdpbusd ------------------
// (ggml_panel_half_avx2 with kVnni). Q5_0 runs its x16t kernels at every size on this tier (in
// ggml's order; Q50Order::kBlock: the Q4_0_R16 kernels, gemm_q5_0_r16_avxvnni).
template <typename Dec>
void gemm_r16_ggml_vnni(const GemmArgs& g) {
  if (g.act->q8u != nullptr && g.scratch != nullptr) return gemm_ggml_panels_avx2<Dec, 1>(g, GgmlHalfAvx2<true>{});
  if constexpr (Dec::kQ5) {
    if (g.act->x16t != nullptr) return gemm_q5_0_r16_x16t<true>(g);
  }
  gemm_r16_ggml_avx2<Dec>(g);
}
#undef TS_AVXVNNI
