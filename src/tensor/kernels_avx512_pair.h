// The AVX-512 Q8_0_R16 kernels over two whole adjacent 16-row groups at once (32 rows), over
// interleaved activations (Act::q8_il): prefill passes (r16_il_pair, which Q4_0_R16 shares) and
// the decode-sized tile of wide matrices (r16_il_pair_small).
//
// NOT a normal header: included once by kernels_avx512.cc inside its anonymous namespace, after
// r16_il_tile and the prefetch constants (compiled for AVX-512 only).

// The integer block sums of one 32-value block of a group pair (vals0 / vals1: the block's
// value lines in each group) for tokens slot0 .. slot0 + T - 1 of the Act::q8_il tile record xa:
// per 4 values two weight vectors and T broadcasts feed 2T vpdpbusd from registers; each sum
// starts at its token's term. kQ4: Q4_0_R16 lines (one 64-byte line holds the nibbles of two
// k4 groups: values 4*k4.. in the low nibbles, 16 + 4*k4.. in the high ones), unpacked in
// registers (q4_line_values, kernels_avx512.cc), the sums starting at kActIlBias0 - 8 * sum
// (the values are w + 8); else Q8_0_R16 lines (u8 = w + 128) and the record's own kActIlBias0 -
// 128 * sum. kNib (with kQ4): kNibTable, IQ4_NL_R16, every nibble looked up as its table value +
// 128, so the sums start at the record's own term as for Q8_0_R16; kNibQ5, Q5_0_R16, the 5th
// bits from planes0 / planes1 (each group's bit line of the block), w + 16 against
// kActIlBias0 - 16 * sum.
template <int T, bool kQ4 = false, int kNib = kNibPlain>
inline void pair_block_sums(const uint8_t* vals0, const uint8_t* vals1, const uint8_t* xa, int slot0, __m512i* s0,
                            __m512i* s1, __m512i planes0 = __m512i{}, __m512i planes1 = __m512i{}) {
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m512i t128 = bcast_dword(xa + kActIlTile * 32 + 4 * (slot0 + t));
    if constexpr (kQ4 && kNib != kNibTable) {
      // kActIlBias0 - 128 * sum -> kActIlBias0 - 8 (or 16) * sum (exact: the difference is a multiple of 128).
      constexpr int kShift = kNib == kNibQ5 ? 3 : 4;
      const __m512i b0 = _mm512_set1_epi32(kActIlBias0);
      s0[t] = s1[t] = _mm512_sub_epi32(b0, _mm512_srai_epi32(_mm512_sub_epi32(b0, t128), kShift));
    } else {
      s0[t] = s1[t] = t128;
    }
  }
#pragma GCC unroll 8
  for (int k4 = 0; k4 < 8; ++k4) {
    __m512i w0, w1;
    if constexpr (kQ4) {
      const __m512i v0 = _mm512_load_si512(reinterpret_cast<const __m512i*>(vals0 + 64 * (k4 % 4)));
      const __m512i v1 = _mm512_load_si512(reinterpret_cast<const __m512i*>(vals1 + 64 * (k4 % 4)));
      w0 = q4_line_values<kNib>(v0, k4, planes0);
      w1 = q4_line_values<kNib>(v1, k4, planes1);
    } else {
      w0 = _mm512_load_si512(reinterpret_cast<const __m512i*>(vals0 + 64 * k4));
      w1 = _mm512_load_si512(reinterpret_cast<const __m512i*>(vals1 + 64 * k4));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i x = bcast_dword(xa + 32 * (slot0 + t) + 4 * k4);
      s0[t] = _mm512_dpbusd_epi32(s0[t], w0, x);
      s1[t] = _mm512_dpbusd_epi32(s1[t], w1, x);
    }
  }
}

// Two whole adjacent groups (rows out_r .. out_r + 31) x tokens [t0 + slot0, + T) of one
// Act::q8_il tile (T <= 4): per 4 values two weight loads and T broadcasts feed 2T vpdpbusd
// from registers. Why: on Zen 5 r16_il_tile was bound by vector loads (~1.4 a cycle there;
// vpdpbusd runs 2 a cycle): every vpdpbusd carried its own broadcast load, ~1.4 loads per
// vpdpbusd with the per-block terms; this is ~0.9. kPrefetch: this pass also prefetches the
// blocks' lines (the first pass over a tile does; later ones find them in cache).
// Same integer block sums and float steps as r16_il_tile, so identical results. kQ4: Q4_0_R16-
// shaped groups (pair_block_sums), whose integer sums are r16_tile<T, kBias, true, kNib>'s, and
// whose float steps (float(S) exactly, times fl(d_w * d_x), one FMA) are too: the same bits.
template <int T, bool kPrefetch, bool kQ4 = false, int kNib = kNibPlain>
inline void r16_il_pair_pass(const GemmArgs& g, const uint8_t* grp, int64_t out_r, int64_t t0, int slot0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  constexpr size_t kRec = r16_rec_bytes<kQ4, kNib>();
  constexpr size_t kHalfBytes = kQ4 ? 256 : 512;
  const uint8_t* xa = a.q8_il + static_cast<size_t>(t0 / kActIlTile) * static_cast<size_t>(nb) * kActIlBlockBytes;
  const uint8_t* grp1 = grp + g.stride;
  __m512 acc0[T], acc1[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, xa += kActIlBlockBytes) {
    const size_t ro = static_cast<size_t>(b >> 1) * kRec;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals0 = grp + ro + 64 + half * kHalfBytes;
    const uint8_t* vals1 = grp1 + ro + 64 + half * kHalfBytes;
    if constexpr (kPrefetch) {
      const char* pf0 = reinterpret_cast<const char*>(vals0) + kR16IlPrefetchBytes;
      const char* pf1 = reinterpret_cast<const char*>(vals1) + kR16IlPrefetchBytes;
#pragma GCC unroll 8
      for (size_t l = 0; l < kHalfBytes / 64; ++l) {
        _mm_prefetch(pf0 + 64 * l, _MM_HINT_T1);
        _mm_prefetch(pf1 + 64 * l, _MM_HINT_T1);
      }
      if (half == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(grp + ro) + kR16IlPrefetchBytes, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(grp1 + ro) + kR16IlPrefetchBytes, _MM_HINT_T1);
      }
      if constexpr (kNib == kNibQ5) {  // the block's 5th-bit lines
        const size_t po = ro + kR16Q4PairBytes + half * 64 + kR16IlPrefetchBytes;
        _mm_prefetch(reinterpret_cast<const char*>(grp + po), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(grp1 + po), _MM_HINT_T1);
      }
    }
    __m512i s0[T], s1[T], p0{}, p1{};  // p0 / p1: the groups' 5th-bit lines of the block (kNibQ5)
    if constexpr (kNib == kNibQ5) {
      p0 = _mm512_load_si512(reinterpret_cast<const __m512i*>(grp + ro + kR16Q4PairBytes + half * 64));
      p1 = _mm512_load_si512(reinterpret_cast<const __m512i*>(grp1 + ro + kR16Q4PairBytes + half * 64));
    }
    pair_block_sums<T, kQ4, kNib>(vals0, vals1, xa, slot0, s0, s1, p0, p1);
    const __m512 dw0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(grp + ro + half * 32)));
    const __m512 dw1 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(grp1 + ro + half * 32)));
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      float xd;
      __builtin_memcpy(&xd, xa + kActIlTile * 36 + 4 * (slot0 + t), 4);
      const __m512 vxd = _mm512_set1_ps(xd);
      const __m512 bias = _mm512_set1_ps(kActIlBias0F);
      acc0[t] = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_castsi512_ps(s0[t]), bias), _mm512_mul_ps(dw0, vxd), acc0[t]);
      acc1[t] = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_castsi512_ps(s1[t]), bias), _mm512_mul_ps(dw1, vxd), acc1[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    float* y = g.y + (t0 + slot0 + t) * g.ldy + out_r;
    _mm512_storeu_ps(y, acc0[t]);
    _mm512_storeu_ps(y + 16, acc1[t]);
  }
}

// Two whole groups, all tokens: per tile of kActIlTile tokens, passes of up to 4 (kQ4:
// Q4_0_R16-shaped groups of nibble kind kNib).
template <bool kQ4 = false, int kNib = kNibPlain>
void r16_il_pair(const GemmArgs& g, const uint8_t* grp, int64_t out_r) {
  const int64_t n_tok = g.act->n_tok;
  for (int64_t t0 = 0; t0 < n_tok; t0 += kActIlTile) {
    const int64_t tn = n_tok - t0 < kActIlTile ? n_tok - t0 : kActIlTile;
    switch (tn) {
      case 8:
        r16_il_pair_pass<4, true, kQ4, kNib>(g, grp, out_r, t0, 0);
        r16_il_pair_pass<4, false, kQ4, kNib>(g, grp, out_r, t0, 4);
        break;
      case 7:
        r16_il_pair_pass<4, true, kQ4, kNib>(g, grp, out_r, t0, 0);
        r16_il_pair_pass<3, false, kQ4, kNib>(g, grp, out_r, t0, 4);
        break;
      case 6:
        r16_il_pair_pass<3, true, kQ4, kNib>(g, grp, out_r, t0, 0);
        r16_il_pair_pass<3, false, kQ4, kNib>(g, grp, out_r, t0, 3);
        break;
      case 5:
        r16_il_pair_pass<3, true, kQ4, kNib>(g, grp, out_r, t0, 0);
        r16_il_pair_pass<2, false, kQ4, kNib>(g, grp, out_r, t0, 3);
        break;
      case 4:
        r16_il_pair_pass<4, true, kQ4, kNib>(g, grp, out_r, t0, 0);
        break;
      case 3:
        r16_il_pair_pass<3, true, kQ4, kNib>(g, grp, out_r, t0, 0);
        break;
      case 2:
        r16_il_pair_pass<2, true, kQ4, kNib>(g, grp, out_r, t0, 0);
        break;
      case 1:
        r16_il_pair_pass<1, true, kQ4, kNib>(g, grp, out_r, t0, 0);
        break;
      default: break;
    }
  }
}

// Two whole adjacent groups (rows out_r .. out_r + 31) x all T tokens of a batch of one
// activation tile (T <= kActIlTile) in one pass: each weight line and each activation broadcast is loaded once for
// 32 rows x T tokens. The 2 x T integer block sums live in registers; the float accumulators
// (2 x T vectors, which with the sums would not fit the 32 registers) in an L1 array, one load
// and one store each per block. Same integer block sums and float steps as r16_il_tile, so
// identical results.
template <int T, bool kPf>
inline void r16_il_pair_tile(const GemmArgs& g, const uint8_t* grp, int64_t out_r) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const uint8_t* xa = a.q8_il;
  const uint8_t* grp1 = grp + g.stride;
  alignas(64) float acc[2 * T][16];
  for (int i = 0; i < 2 * T; ++i) _mm512_store_ps(acc[i], _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b, xa += kActIlBlockBytes) {
    const size_t ro = static_cast<size_t>(b >> 1) * kR16PairBytes;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals0 = grp + ro + 64 + half * 512;
    const uint8_t* vals1 = grp1 + ro + 64 + half * 512;
    if constexpr (kPf) {
      // kR16IlPrefetchBytes ahead in both groups' streams; past their ends, the same offset in
      // the next pair's two groups (each group is one stream of g.stride bytes).
      size_t off = static_cast<size_t>(vals0 - grp) + kR16IlPrefetchBytes;
      const uint8_t* b0 = grp;
      if (off >= static_cast<size_t>(g.stride)) {
        off -= static_cast<size_t>(g.stride);
        b0 = grp + 2 * g.stride;
      }
      const char* pf0 = reinterpret_cast<const char*>(b0 + off);
      const char* pf1 = pf0 + g.stride;
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        _mm_prefetch(pf0 + 64 * l, _MM_HINT_T1);
        _mm_prefetch(pf1 + 64 * l, _MM_HINT_T1);
      }
      if (half == 0) {
        _mm_prefetch(pf0 - 64, _MM_HINT_T1);
        _mm_prefetch(pf1 - 64, _MM_HINT_T1);
      }
    }
    __m512i s0[T], s1[T];
    pair_block_sums<T>(vals0, vals1, xa, 0, s0, s1);
    const __m512 dw0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(grp + ro + half * 32)));
    const __m512 dw1 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(grp1 + ro + half * 32)));
    const __m512 bias = _mm512_set1_ps(kActIlBias0F);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      float xd;
      __builtin_memcpy(&xd, xa + kActIlTile * 36 + 4 * t, 4);
      const __m512 vxd = _mm512_set1_ps(xd);
      _mm512_store_ps(acc[2 * t], _mm512_fmadd_ps(_mm512_sub_ps(_mm512_castsi512_ps(s0[t]), bias), _mm512_mul_ps(dw0, vxd),
                                                  _mm512_load_ps(acc[2 * t])));
      _mm512_store_ps(acc[2 * t + 1], _mm512_fmadd_ps(_mm512_sub_ps(_mm512_castsi512_ps(s1[t]), bias),
                                                      _mm512_mul_ps(dw1, vxd), _mm512_load_ps(acc[2 * t + 1])));
    }
  }
  for (int t = 0; t < T; ++t) {
    float* y = g.y + t * g.ldy + out_r;
    _mm512_storeu_ps(y, _mm512_load_ps(acc[2 * t]));
    _mm512_storeu_ps(y + 16, _mm512_load_ps(acc[2 * t + 1]));
  }
}

// A decode-sized batch (5-8 tokens, one activation tile) over two whole groups.
template <bool kPf>
void r16_il_pair_small(const GemmArgs& g, const uint8_t* grp, int64_t out_r) {
  switch (g.act->n_tok) {
    case 8: r16_il_pair_tile<8, kPf>(g, grp, out_r); break;
    case 7: r16_il_pair_tile<7, kPf>(g, grp, out_r); break;
    case 6: r16_il_pair_tile<6, kPf>(g, grp, out_r); break;
    case 5: r16_il_pair_tile<5, kPf>(g, grp, out_r); break;
    default: break;
  }
}

