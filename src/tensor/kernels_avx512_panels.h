// Batched AVX-512 kernels for Q5_0 and the ggml-ordered R16 layouts (Q5_0_R16, Q4_1_R16,
// Q5_1_R16): 16-row panels of signed int8 values (decoded once for all tokens) multiplied in
// ggml's float summation order. (IQ4_NL sums each block exactly and runs the Q4_0_R16 kernels.)
//
// NOT a normal header: included once by kernels_avx512.cc inside its anonymous namespace, after
// KPanel, transpose_16x16_dwords and the kernels_x86_*.h helpers (compiled for AVX-512 only).

enum class KKind { kQ4_K, kQ6_K };

// 16 rows of a signed 32-block type (W: WQ5_0) -> Q8_0_R16-shaped pair records
// ([2][16] fp16 scales, [2 blocks][8 k4][16 rows][4]) holding the signed int8 values as is.
// Lanes >= `lanes` get scale 0.
template <typename W>
void decode_signed32_panel(const GemmArgs& g, int64_t r, int lanes, uint8_t* panel) {
  const int64_t nb = g.act->cols / 32;
  alignas(64) uint8_t q[16][64];
  for (int64_t b = 0; b < nb; b += 2) {
    uint8_t* rec = panel + static_cast<size_t>(b / 2) * kR16PairBytes;
    for (int lane = 0; lane < 16; ++lane) {
      const bool live = lane < lanes;
      const uint8_t* row = g.w + static_cast<size_t>(r + (live ? lane : 0)) * g.stride;
      for (int h = 0; h < 2; ++h) {
        uint16_t d = 0;
        __m256i v = _mm256_setzero_si256();  // the missing second block of an odd count: never read
        if (b + h < nb) {
          const uint8_t* blk = row + (b + h) * W::kBlockBytes;
          if (live) __builtin_memcpy(&d, blk, 2);
          v = W::vals(blk);
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(q[lane] + 32 * h), v);
        __builtin_memcpy(rec + h * 32 + lane * 2, &d, 2);
      }
    }
    transpose_16x16_dwords(&q[0][0], 64, rec + 64);
  }
}

// Signed int8 values of 16 rows x 4 values (k4) of block half `half` of a pair record.
struct DecPanelS8 {  // decode_signed32_panel output (Q8_0_R16 shape, signed values)
  static constexpr size_t kRec = kR16PairBytes;
  static constexpr bool kMin = false;
  static __m512i vals(const uint8_t* rec, int half, int k4) {
    return _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + 64 + half * 512 + 64 * k4));
  }
};
inline __m512i r16_nibbles(const uint8_t* rec, int half, int k4) {
  // k4 < 4: low nibbles of line k4 (values 4*k4..); else high nibbles of line k4 - 4.
  const __m512i v = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + 64 + half * 256 + 64 * (k4 % 4)));
  return _mm512_and_si512(k4 < 4 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(0xF));
}
struct DecQ4_1R16 {  // Q4_1_R16: unsigned nibbles (Q4_0_R16 byte order) and a min per block
  static constexpr size_t kRec = kR16Q41PairBytes;
  static constexpr bool kMin = true;
  static constexpr size_t kMinOffset = kR16Q41MinOffset;
  static __m512i vals(const uint8_t* rec, int half, int k4) { return r16_nibbles(rec, half, k4); }
};
// Bytes (16 rows x values 4*k4 .. 4*k4 + 3 of block half `half`) whose 5th bit is set: bit k4
// of the Q5_0_R16 / Q5_1_R16 bit planes (kernels.h).
inline __mmask64 q5_high_mask(const uint8_t* rec, int half, int k4) {
  const __m512i planes = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + 576 + half * 64));
  return _mm512_test_epi8_mask(planes, _mm512_set1_epi8(static_cast<char>(1 << k4)));
}
struct DecQ5_0R16 {  // Q5_0_R16
  static constexpr size_t kRec = kR16Q5PairBytes;
  static constexpr bool kMin = false;
  // The values + 16 (nibble | 16 * bit, 0..31): the bit planes' bit k4 moved to bit 4 (a 16-bit
  // shift keeps each byte's bit 4 inside its byte for shifts up to 4) and or'ed in.
  static __m512i uvals(const uint8_t* rec, int half, int k4) {
    const __m512i planes = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + 576 + half * 64));
    const __m512i at4 = k4 < 4 ? _mm512_slli_epi16(planes, 4 - k4) : k4 > 4 ? _mm512_srli_epi16(planes, k4 - 4) : planes;
    return _mm512_ternarylogic_epi32(r16_nibbles(rec, half, k4), at4, _mm512_set1_epi8(0x10), 0xF8);  // a | (b & c)
  }
  static __m512i vals(const uint8_t* rec, int half, int k4) {
    const __m512i nib = r16_nibbles(rec, half, k4);
    // nibble | 0xF0 is nibble - 16; with the 5th bit the value is the nibble itself.
    return _mm512_mask_mov_epi8(_mm512_or_si512(nib, _mm512_set1_epi8(static_cast<char>(0xF0))), q5_high_mask(rec, half, k4),
                                nib);
  }
};
struct DecQ5_1R16 {  // Q5_1_R16: the Q5_0_R16 bytes as unsigned nibble | 16 * bit, and a min per block
  static constexpr size_t kRec = kR16Q51PairBytes;
  static constexpr bool kMin = true;
  static constexpr size_t kMinOffset = kR16Q51MinOffset;
  static __m512i vals(const uint8_t* rec, int half, int k4) {
    const __m512i nib = r16_nibbles(rec, half, k4);
    return _mm512_mask_mov_epi8(nib, q5_high_mask(rec, half, k4), _mm512_or_si512(nib, _mm512_set1_epi8(0x10)));
  }
};

// Rows [lane0, lane1) of one 16-row group (panel or resident R16 layout, decoded by Dec) for
// tokens [t0, t0 + T), into y[t][out_r + lane - lane0]. ggml's x86 q8_0-style dot keeps 8 float
// lanes per row, lane i summing fl(int dot of values 4i..4i+3) * fl(d_w * d_x) with an FMA per
// block, then adds (0+4, 1+5, 2+6, 3+7), (0+2, 1+3), (0+1); here lane i is accumulator acc[i]
// (one zmm = 16 rows), so the result is bit-identical to ggml and to the scalar reference.
// Signed x signed: |w| as u8 against x with w's sign applied (vpdpbusd), exact for int8 pairs.
// kTermX16T (Q5_0): the weights go in unsigned, the values + 16 (Dec::uvals), with the token's
// 4-value term (Act::x16t).
enum GgmlTerm : int { kTermNone = 0, kTermX16T = 2 };
template <typename Dec, int T, int kTerm = kTermNone>
inline void r16_ggml_tile(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r, int64_t t0) {
  const Act& a = *g.act;
  const __m512 biasf = _mm512_set1_ps(kActIlBias0F);
  const int64_t nb = a.cols / 32;
  __m512 acc[8][T], summ[T];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) summ[t] = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * Dec::kRec;
    const int half = static_cast<int>(b & 1);
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + half * 32)));
    if (half == 0 && g.sw_prefetch) prefetch_record<Dec::kRec>(rec);  // the pair record kR16KPrefetchBytes ahead
    __m512 d[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) d[t] = _mm512_mul_ps(dw, _mm512_set1_ps(a.d8[(t0 + t) * nb + b]));
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      constexpr bool kUnsigned = kTerm != kTermNone;
      __m512i aw;  // kTerm: the values + 16 (unsigned); else |w|, the sign mask moved onto x
      __mmask64 neg = 0;
      if constexpr (kTerm == kTermX16T) {
        aw = Dec::uvals(rec, half, k4);
      } else if constexpr (Dec::kMin) {
        aw = Dec::vals(rec, half, k4);  // Q4_1 / Q5_1: unsigned already, no sign to move
      } else {
        const __m512i w = Dec::vals(rec, half, k4);
        aw = _mm512_abs_epi8(w);
        neg = _mm512_movepi8_mask(w);
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m512i x = bcast_dword(a.q8 + (t0 + t) * a.cols + b * 32 + 4 * k4);
        if constexpr (kUnsigned) {
          // w + 16 against the signed x, the token's term kActIlBias0 - 16 * (sum of the 4 x) as the
          // accumulator: kActIlBias0 + S, one vsubps to float(S) (exact, |S| < 2^22).
          const __m512i p = _mm512_dpbusd_epi32(_mm512_set1_epi32(a.x16t[(t0 + t) * (a.cols / 4) + b * 8 + k4]), aw, x);
          acc[k4][t] = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_castsi512_ps(p), biasf), d[t], acc[k4][t]);
        } else {
          const __m512i sx = Dec::kMin ? x : _mm512_mask_sub_epi8(x, neg, zero, x);
          const __m512i p = _mm512_dpbusd_epi32(zero, aw, sx);
          acc[k4][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d[t], acc[k4][t]);
        }
      }
    }
    if constexpr (Dec::kMin) {
      // summ += m * s1 per block, a multiply then an add (the scalar reference's order).
      const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + Dec::kMinOffset + half * 32)));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) summ[t] = _mm512_add_ps(summ[t], _mm512_mul_ps(m, _mm512_set1_ps(a.s1[(t0 + t) * nb + b])));
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const __m512 h0 = _mm512_add_ps(acc[0][t], acc[4][t]), h1 = _mm512_add_ps(acc[1][t], acc[5][t]);
    const __m512 h2 = _mm512_add_ps(acc[2][t], acc[6][t]), h3 = _mm512_add_ps(acc[3][t], acc[7][t]);
    const __m512 s = _mm512_add_ps(_mm512_add_ps(h0, h2), _mm512_add_ps(h1, h3));
    const __m512 sum = Dec::kMin ? _mm512_add_ps(s, summ[t]) : s;
    if (lane0 == 0) {
      store_lanes(g, sum, t0 + t, out_r, lane1);
    } else {
      alignas(64) float out[16];
      _mm512_store_ps(out, sum);
      for (int l = lane0; l < lane1; ++l) g.y[(t0 + t) * g.ldy + out_r + (l - lane0)] = out[l];
    }
  }
}

// Tiles of 4 tokens unpack the 4-/5-bit values once for 4 (Q5_0 4864x896 at 8 tokens, 1
// thread: 1.92-2.14x the Q8_0_R16 time against 2.28-2.46x with tiles of 2, 2.10-2.16x of 3).
template <typename Dec, int kTerm>
void r16_ggml_tiles(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
  const int64_t n_tok = g.act->n_tok;
  int64_t t0 = 0;
  for (; t0 + 4 <= n_tok; t0 += 4) r16_ggml_tile<Dec, 4, kTerm>(g, grp, lane0, lane1, out_r, t0);
  for (; t0 + 2 <= n_tok; t0 += 2) r16_ggml_tile<Dec, 2, kTerm>(g, grp, lane0, lane1, out_r, t0);
  if (t0 < n_tok) r16_ggml_tile<Dec, 1, kTerm>(g, grp, lane0, lane1, out_r, t0);
}
template <typename Dec>
void r16_ggml_group(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
  if constexpr (requires { Dec::uvals(nullptr, 0, 0); }) {
    if (g.act->x16t != nullptr) return r16_ggml_tiles<Dec, kTermX16T>(g, grp, lane0, lane1, out_r);
  }
  r16_ggml_tiles<Dec, kTermNone>(g, grp, lane0, lane1, out_r);
}

// ---- Batches of Q5_0_R16 (and Q5_1_R16, with its mins): one decoded panel per group ---------
//
// ggml's order needs, per 4 values of 16 rows and per token, the exact int sum S, float(S) and
// an FMA: r16_ggml_tile spends a sign flip of the broadcast activation (vpsubb under the
// weights' sign mask), vpdpbusd, vcvtdq2ps and the FMA on it, and unpacks the 4-/5-bit values
// again for every pair of tokens (Q5_0 4864x896 at 512 tokens, 1 thread: ~2.5-3.3x the Q8_0_R16
// time). Here each group is unpacked once into a panel that also holds, per row and 4 values,
// kActIlBias0 - 128 * (their sum); the activation dword goes in unsigned (x ^ 0x80 = x + 128),
// so vpdpbusd(that term, x + 128, w) = kActIlBias0 + S, and one vsubps gives float(S) exactly
// (|S| <= 4 * 128 * 127 < 2^22). Per 4 values and token: a broadcast (Act::q8u), a load of the
// term, vpdpbusd, vsubps and the FMA; the result is r16_ggml_tile's bit for bit.
// Panel block b: kGgmlPanelBlockBytes (kernels.h).

template <typename Dec>
void decode_ggml_panel(const uint8_t* grp, int64_t nb, uint8_t* panel) {
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i bias = _mm512_set1_epi32(kActIlBias0);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * Dec::kRec;
    uint8_t* out = panel + static_cast<size_t>(b) * kGgmlPanelBlockBytes;
    const int half = static_cast<int>(b & 1);
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m512i w = Dec::vals(rec, half, k4);
      _mm512_store_si512(out + 64 * k4, w);
      const __m512i sum4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, w);
      _mm512_store_si512(out + 512 + 64 * k4, _mm512_sub_epi32(bias, _mm512_slli_epi32(sum4, 7)));
    }
    _mm512_store_ps(out + 1024, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + half * 32))));
    if constexpr (Dec::kMin) {
      _mm512_store_ps(out + kGgmlPanelMinsOffset,
                      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + Dec::kMinOffset + half * 32))));
    }
  }
}

template <int T, bool kMin>
inline void ggml_panel_tile(const GemmArgs& g, const uint8_t* panel, int lane0, int lane1, int64_t out_r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  __m512 acc[8][T], summ[T];  // summ (kMin): the blocks' m * s1 terms
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) summ[t] = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  }
  const __m512 biasf = _mm512_set1_ps(kActIlBias0F);
  const uint8_t* xu8 = a.q8u + t0 * a.cols;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = panel + static_cast<size_t>(b) * kGgmlPanelBlockBytes;
    const __m512 dw = _mm512_load_ps(pb + 1024);
    __m512 d[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) d[t] = _mm512_mul_ps(dw, _mm512_set1_ps(a.d8[(t0 + t) * nb + b]));
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m512i w = _mm512_load_si512(pb + 64 * k4);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512i xu = bcast_dword(xu8 + t * a.cols + b * 32 + 4 * k4);
        const __m512i p = _mm512_dpbusd_epi32(_mm512_load_si512(pb + 512 + 64 * k4), xu, w);
        acc[k4][t] = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_castsi512_ps(p), biasf), d[t], acc[k4][t]);
      }
    }
    if constexpr (kMin) {
      // summ += m * s1 per block, a multiply then an add (r16_ggml_tile's order).
      const __m512 m = _mm512_load_ps(pb + kGgmlPanelMinsOffset);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) summ[t] = _mm512_add_ps(summ[t], _mm512_mul_ps(m, _mm512_set1_ps(a.s1[(t0 + t) * nb + b])));
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m512 h0 = _mm512_add_ps(acc[0][t], acc[4][t]), h1 = _mm512_add_ps(acc[1][t], acc[5][t]);
    const __m512 h2 = _mm512_add_ps(acc[2][t], acc[6][t]), h3 = _mm512_add_ps(acc[3][t], acc[7][t]);
    const __m512 s = _mm512_add_ps(_mm512_add_ps(h0, h2), _mm512_add_ps(h1, h3));
    const __m512 sum = kMin ? _mm512_add_ps(s, summ[t]) : s;
    if (lane0 == 0) {
      store_lanes(g, sum, t0 + t, out_r, lane1);
    } else {
      alignas(64) float out[16];
      _mm512_store_ps(out, sum);
      for (int l = lane0; l < lane1; ++l) g.y[(t0 + t) * g.ldy + out_r + (l - lane0)] = out[l];
    }
  }
}

// A resident R16 layout (Q5_0_R16, Q4_1_R16, Q5_1_R16): every group in
// [row0, row0 + num_rows). Batches of the signed ones that come with Act::q8u
// (kGgmlPanelMinTokensAvx512 tokens and more) go through the decoded panel above.
template <typename Dec>
void gemm_r16_ggml(const GemmArgs& g) {
  int64_t done = 0;
  const uint8_t* grp = g.w;
  int lane0 = static_cast<int>(g.row0);
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  const bool panel = g.act->q8u != nullptr && g.scratch != nullptr;
  while (done < g.num_rows) {
    const int64_t left = g.num_rows - done;
    const int lane1 = left < 16 - lane0 ? lane0 + static_cast<int>(left) : 16;
    if (panel) {
      decode_ggml_panel<Dec>(grp, nb, g.scratch);
      int64_t t0 = 0;
      // 4 tokens a tile (32 accumulators; a few spill): 1.84-1.90x the Q8_0_R16 time at 512
      // tokens where tiles of 2, 3, 5, 6 or 8 took 2.3-2.8x (kernels_bench, same process).
      for (; t0 + 4 <= n_tok; t0 += 4) ggml_panel_tile<4, Dec::kMin>(g, g.scratch, lane0, lane1, done, t0);
      for (; t0 + 2 <= n_tok; t0 += 2) ggml_panel_tile<2, Dec::kMin>(g, g.scratch, lane0, lane1, done, t0);
      if (t0 < n_tok) ggml_panel_tile<1, Dec::kMin>(g, g.scratch, lane0, lane1, done, t0);
    } else {
      r16_ggml_group<Dec>(g, grp, lane0, lane1, done);
    }
    done += lane1 - lane0;
    lane0 = 0;
    grp += g.stride;
  }
}
