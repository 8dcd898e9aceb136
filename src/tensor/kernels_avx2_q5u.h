// AVX2 / AVX-VNNI kernels for Q5_0_R16 with Act::x16t (the values unsigned against the signed
// activation), picked by gemm_r16_ggml_avx2 (kernels_avx2_ggml.h) and the AVX-VNNI dispatcher.
//
// NOT a normal header: included once by kernels_avx2.cc inside its anonymous namespace, right
// after kernels_avx2_ggml.h (whose decoders, lane sums and chunk walk it uses), under the same
// avx2,fma,f16c target pragma.

// ---- Q5_0_R16 with Act::x16t: the values unsigned against the signed activation ------------
// ggml's Q5_0 dot needs, per row, token and 4 values, the exact int sum S of the products. Here
// the values go in unsigned (u = value + 16 = nibble | 16 * bit, 0..31, so vpmaddubsw cannot
// saturate: pairs <= 2 * 31 * 127) against the signed activation; sum(u * x) plus the token's
// term Act::x16t (kActIlBias0 - 16 * the 4 x's sum) is kActIlBias0 + S, and one vsubps makes it
// float(S) exactly (|S| < 2^22). No vpsignb pair per token, and the 5th bits cost a shift and a
// mask (the bit planes). kVnni (the AVX-VNNI tier): one vpdpbusd for vpmaddubsw + vpmaddwd +
// vpaddd. The float steps are r16_ggml_half_avx2's, so the results are bit-identical to it.

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
