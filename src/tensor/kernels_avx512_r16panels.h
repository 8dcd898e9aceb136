// Batched AVX-512 kernels for the resident Q4_K_R16 / Q6_K_R16 layouts: each 16-row group is
// decoded once per matmul into the K-quant panel format (KPanel: unsigned int8 values in
// [k4][16 rows][4] order, int32 scales, int16 pairs, float d) and multiplied by kpanel_tile for
// all token columns, instead of re-extracting nibbles / 6-bit values for every token tile (the
// R16 kernels above, kept for small batches).
//
// NOT a normal header: included once by kernels_avx512.cc inside its anonymous namespace, after
// KPanel, kpanel_tile and kernels_avx512_panels.h (compiled for AVX-512 only).

// The R16 K-quant groups go through decoded panels from kR16NibblePanelMinTokens tokens
// (Q4_K_R16 / Q5_K_R16 / IQ4_XS_R16) or kK16PanelMinTokens (Q6_K_R16 / Q3_K_R16 / Q2_K_R16).
// Q4_K_R16, Q5_K_R16 and IQ4_XS_R16, whose register tiles unpack a line's values in two to four
// ops for 2 x 4 vpdpbusd, keep those tiles up to here: below it a group's panel (decoded, stored
// and read back for only a few 4-token tiles; 109 KB, past L1, for 4864 columns) cost more than
// it saved. BM_Matmul, 2 threads, min of 3-5 alternated rounds, 4864x1024 / 1024x4864, us,
// panels -> tiles: 8 tokens Q4_K 145 / 139 -> 92 / 98, Q5_K 117 / 154 -> 112 / 116, IQ4_XS
// 105 / 133 -> 88 / 92; 16 tokens Q4_K 295 / 247 -> 182 / 179, Q5_K 205 / 261 -> 205 / 196,
// IQ4_XS 205 / 251 -> 171 / 172; 32 tokens within noise either way (1 thread, Q4_K 693 -> 880:
// the panels win from there).
constexpr int64_t kR16NibblePanelMinTokens = 32;
// Q6_K_R16 / Q3_K_R16 / Q2_K_R16 (the K16 kinds) keep their register tiles up to here (8-token
// one-pass tiles from 5 tokens, q6k_r16_tile). BM_Matmul, 2 threads, streamed, min of 4
// alternated rounds, 4864x1024 / 1024x4864, us, panels -> tiles: 8 tokens Q6_K 127 / 161 ->
// 116 / 110, Q3_K 112 / 132 -> 107 / 97, Q2_K 108 / 126 -> 94 / 84; 16 tokens mixed (Q6_K
// 202 / 243 -> 213 / 222, Q3_K 211 / 221 -> 222 / 202, Q2_K 198 / 207 -> 194 / 173), so the
// panels keep 16 on. (The 2-token tiles they had before lost to the panels from 8 tokens.)
constexpr int64_t kK16PanelMinTokens = 16;

// Lanes [lane0, lane0 + n) of a 16-dword vector moved to lanes [0, n), the others zero.
// (A whole group, lanes [0, 16), is the identity: no permute.)
struct LaneShift {
  __m512i idx;
  __mmask16 keep;
  bool whole;
  LaneShift(int lane0, int n)
      : idx(_mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                             _mm512_set1_epi32(lane0))),
        keep(static_cast<__mmask16>((1u << n) - 1)),
        whole(lane0 == 0 && n == 16) {}
  __m512i operator()(__m512i v) const { return whole ? v : _mm512_maskz_permutexvar_epi32(keep, idx, v); }
  __m512 ps(__m512 v) const { return whole ? v : _mm512_maskz_permutexvar_ps(keep, idx, v); }
};

inline void store_panel(uint8_t* p, __m512i v) { _mm512_store_si512(reinterpret_cast<__m512i*>(p), v); }
inline __m512i u8x16_to_i32(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512i s8x16_to_i32(const uint8_t* p) {
  return _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512i pair16(__m512i lo, __m512i hi) {
  return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(hi, 16));
}

// A Q4_K_R16 (or Q5_K_R16) block record's scales, mins, d and dmin -> the KPanel block at pb.
inline void decode_q4_k_r16_sides(const uint8_t* rec, const LaneShift& sh, uint8_t* pb) {
  for (int j = 0; j < 8; ++j) store_panel(pb + KPanel::kSc + j * 64, sh(u8x16_to_i32(rec + 2048 + j * 16)));
  for (int i = 0; i < 4; ++i) {
    store_panel(pb + KPanel::kPairs + i * 64,
                sh(pair16(u8x16_to_i32(rec + 2176 + (2 * i) * 16), u8x16_to_i32(rec + 2176 + (2 * i + 1) * 16))));
  }
  _mm512_store_ps(pb + KPanel::kD, sh.ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 2304)))));
  _mm512_store_ps(pb + KPanel::kDmin, sh.ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 2336)))));
}

// The 16 sub-block scales of a 16-value-sub-block type (int32 per row, and (sc_2i, sc_2i+1)
// int16 pairs) from [16][16] int8 at p, and the fp16 d row at d.
inline void kpanel_signed_scales16(const uint8_t* p, const uint8_t* d, const LaneShift& sh, uint8_t* pb) {
  for (int j = 0; j < 16; ++j) store_panel(pb + KPanel::kSc + j * 64, sh(s8x16_to_i32(p + j * 16)));
  for (int i = 0; i < 8; ++i) {
    store_panel(pb + KPanel::kPairs + i * 64, sh(pair16(s8x16_to_i32(p + (2 * i) * 16), s8x16_to_i32(p + (2 * i + 1) * 16))));
  }
  _mm512_store_ps(pb + KPanel::kD, sh.ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d)))));
}

// Block decoders (Dec): block(rec, sh, pb) turns one 256-value block record of a 16-row group
// into the KPanel block at pb (rows moved by sh); kSub / kShift select kpanel_tile's form.
struct DecQ4KR16 {
  static constexpr int kSub = 8, kShift = 0;
  static constexpr size_t kBytes = kQ4KR16BlockBytes;
  static void block(const uint8_t* rec, const LaneShift& sh, uint8_t* pb) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    for (int c = 0; c < 4; ++c) {
      for (int m = 0; m < 8; ++m) {
        // Line (c, m): low nibbles are values 64c + 4m.. (panel k4 16c + m), high ones 32 later.
        const __m512i v = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + (c * 8 + m) * 64));
        store_panel(pb + KPanel::kVals + (16 * c + m) * 64, sh(_mm512_and_si512(v, m4)));
        store_panel(pb + KPanel::kVals + (16 * c + 8 + m) * 64, sh(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4)));
      }
    }
    decode_q4_k_r16_sides(rec, sh, pb);
  }
};

struct DecQ6KR16 {
  static constexpr int kSub = 16, kShift = 5;
  static constexpr size_t kBytes = kQ6KR16BlockBytes;
  static void block(const uint8_t* rec, const LaneShift& sh, uint8_t* pb) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    for (int c = 0; c < 2; ++c) {
      for (int m = 0; m < 8; ++m) {
        const __m512i va = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + (c * 16 + m) * 64));
        const __m512i vb = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + (c * 16 + m + 8) * 64));
        const __m512i vh = _mm512_load_si512(reinterpret_cast<const __m512i*>(rec + 2048 + (c * 8 + m) * 64));
        __m512i q[4];
        q[0] = _mm512_or_si512(_mm512_and_si512(va, m4), _mm512_and_si512(_mm512_slli_epi16(vh, 4), m30));
        q[1] = _mm512_or_si512(_mm512_and_si512(vb, m4), _mm512_and_si512(_mm512_slli_epi16(vh, 2), m30));
        q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(va, 4), m4), _mm512_and_si512(vh, m30));
        q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(vb, 4), m4), _mm512_and_si512(_mm512_srli_epi16(vh, 2), m30));
        // q[i] holds values 128c + 32i + 4m.. (unsigned, stored + 32): panel k4 32c + 8i + m.
        for (int i = 0; i < 4; ++i) store_panel(pb + KPanel::kVals + (32 * c + 8 * i + m) * 64, sh(q[i]));
      }
    }
    kpanel_signed_scales16(rec + 3072, rec + 3328, sh, pb);
  }
};

// Per group: the panel decode (streaming the group from DRAM), then kpanel_tile over tiles of 4
// tokens, compute-only passes that prefetch the next group at a steady rate meanwhile.
template <typename Dec>
void gemm_kr16_panels(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  const int64_t nb = g.act->cols / kQK_K;
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    const int lanes = lane1 - lane0;
    const LaneShift sh(lane0, lanes);
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, (n_tok + 3) / 4 * nb);
    const KPanel p{g.scratch};
    for (int64_t b = 0; b < nb; ++b) Dec::block(grp + static_cast<size_t>(b) * Dec::kBytes, sh, p.blk(b));
    int64_t t0 = 0;
    for (; t0 + 4 <= n_tok; t0 += 4) kpanel_tile<Dec::kSub, Dec::kShift, 4>(g, g.scratch, lanes, out_r, t0, &pf);
    switch (n_tok - t0) {
      case 3: kpanel_tile<Dec::kSub, Dec::kShift, 3>(g, g.scratch, lanes, out_r, t0, &pf); break;
      case 2: kpanel_tile<Dec::kSub, Dec::kShift, 2>(g, g.scratch, lanes, out_r, t0, &pf); break;
      case 1: kpanel_tile<Dec::kSub, Dec::kShift, 1>(g, g.scratch, lanes, out_r, t0, &pf); break;
      default: break;
    }
  });
}

void gemm_q4_k_r16_any(const GemmArgs& g) {
  if (g.act->n_tok < kR16NibblePanelMinTokens || g.scratch == nullptr) return gemm_q4_k_r16(g);
  gemm_kr16_panels<DecQ4KR16>(g);
}
void gemm_q6_k_r16_any(const GemmArgs& g) {
  if (g.act->n_tok < kK16PanelMinTokens || g.scratch == nullptr) return gemm_q6_k_r16(g);
  gemm_kr16_panels<DecQ6KR16>(g);
}
