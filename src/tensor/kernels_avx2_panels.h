// AVX2 kernels for batches over the R16 layouts: each 16-row group is decoded once into a panel
// (int16 for Q8_0_R16, int8 for the K-quant R16 layouts) that every token tile then reads.
//
// NOT a normal header: included once by kernels_avx2.cc inside its anonymous namespace, right
// after kernels_avx2_r16.h (whose helpers it uses), under the same avx2,fma,f16c target pragma.

// ---- Batched Q8_0_R16: each group decoded once into int16, vpmaddwd against int16 activations ---
//
// Why: the per-pair kernel above issues vpsignb + vpmaddubsw + vpmaddwd per (weight vector,
// token) and 32 MACs; on Zen 4 all three go to the same two pipes (measured: 2 of any mix of
// them per cycle, vpaddd 4 per cycle), a cap of ~21 MAC/cycle. With the group's weights widened
// once to int16 and the activations to int16 (Act::q16), 32 MACs are two vpmaddwd + two vpaddd.
// The group is decoded a chunk of kQ8PanelChunk blocks at a time (8.5 KB, stays in L1 while
// every token tile of the span runs over it); the float accumulators of a span of up to
// kQ8PanelSpan tokens live in the scratch behind the chunk.
// Chunk panel, per 32-block b (Avx2Q8Panel::kBlock bytes):
//   vals [16 k2][16 rows][2] int16   signed weights (the stored u8 - 128), values 2*k2, 2*k2 + 1
//   d    [16] float                  the rows' fp16 scales as float
// Sums are exact int32 (|sum| <= 32 * 128 * 127); each token's accumulators take the blocks in
// order with the per-pair kernel's epilogue (acc += float(isum) * (dw * dx)), so the results
// are bit-identical to it and to the scalar reference.
struct Avx2Q8Panel {
  static constexpr size_t kVals = 0, kD = 1024, kBlock = 1088;
};
constexpr int64_t kQ8PanelChunk = 8;  // blocks per decoded chunk
constexpr int64_t kQ8PanelSpan = 64;  // tokens per accumulator span
static_assert(kQ8PanelChunk * Avx2Q8Panel::kBlock + kQ8PanelSpan * 64 == 12800,
              "panel_scratch_bytes() reserves 12800 bytes for the AVX2 int16 Q8_0 panel");

// Blocks [b0, b1) of a group -> the chunk panel.
inline void decode_q8_0_r16_panel_avx2(const uint8_t* grp, int64_t b0, int64_t b1, uint8_t* panel, PrefetchSpread& pf) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  // Per 128-bit lane (4 rows x 4 values): the rows' (v0, v1) bytes, then their (v2, v3).
  const __m256i shuf = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * kR16PairBytes;
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * 512;
    uint8_t* pb = panel + static_cast<size_t>(b - b0) * Avx2Q8Panel::kBlock;
    pf.step();
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_shuffle_epi8(_mm256_xor_si256(loadu256(vals + 64 * k4 + 32 * h), flip), shuf);
        // qwords [rows 0-3 (v0,v1), rows 0-3 (v2,v3), rows 4-7 (v0,v1), rows 4-7 (v2,v3)] -> [0, 2, 1, 3]
        const __m256i p = _mm256_permute4x64_epi64(v, 0xD8);
        store256(pb + Avx2Q8Panel::kVals + (2 * k4) * 64 + 32 * h, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(p)));
        store256(pb + Avx2Q8Panel::kVals + (2 * k4 + 1) * 64 + 32 * h, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(p, 1)));
      }
    }
    _mm256_storeu_ps(reinterpret_cast<float*>(pb + Avx2Q8Panel::kD), load8_f16(rec + half * 32));
    _mm256_storeu_ps(reinterpret_cast<float*>(pb + Avx2Q8Panel::kD + 32), load8_f16(rec + half * 32 + 16));
  }
}

// The chunk panels' per-block epilogue for one token: at[0..15] (two 8-row halves) +=
// float(isum) * (dw * dx), as the per-pair kernels do it.
inline void panel_acc16(float* at, __m256i i0, __m256i i1, __m256 d0, __m256 d1, __m256 dx) {
  _mm256_store_ps(at, _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(d0, dx), _mm256_load_ps(at)));
  _mm256_store_ps(at + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(d1, dx), _mm256_load_ps(at + 8)));
}

// The chunk-panel driver (Q8_0_R16's int16 and Q4_0_R16's u8 panels): per group and span of
// kSpan tokens, chunk by chunk of kChunk blocks: decode(grp, b0, b1, panel, pf) (which also
// streams the group and prefetches the next), then tile<T>(b0, b1, t0, acc, pf) over tiles of
// up to kTile tokens on the L1-resident chunk (t0 absolute, acc the tile's [T][16] floats);
// the span's accumulators ([span][16] floats) sit behind the chunk (kBlock bytes a block).
template <int64_t kChunk, int64_t kSpan, int kTile, size_t kBlock, typename Decode, typename Tile>
inline void gemm_chunk_panels_avx2(const GemmArgs& g, Decode&& decode, Tile&& tile) {
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t n_tok = g.act->n_tok, nb = g.act->cols / 32;
  const int64_t spans = (n_tok + kSpan - 1) / kSpan;
  uint8_t* panel = g.scratch;
  float* acc = reinterpret_cast<float*>(g.scratch + kChunk * kBlock);  // [span][16]
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    PrefetchSpread pf(g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr, g.stride, (spans + (n_tok + kTile - 1) / kTile) * nb);
    for (int64_t s0 = 0; s0 < n_tok; s0 += kSpan) {
      const int64_t sn = n_tok - s0 < kSpan ? n_tok - s0 : kSpan;
      __builtin_memset(acc, 0, static_cast<size_t>(sn) * 64);
      for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
        const int64_t b1 = nb - b0 < kChunk ? nb : b0 + kChunk;
        decode(grp, b0, b1, panel, pf);
        for_tiles<kTile>(sn, [&]<int T>(int64_t t0) { tile.template operator()<T>(b0, b1, s0 + t0, acc + 16 * t0, pf); });
      }
      for (int64_t t = 0; t < sn; ++t) {
        store_group(g, _mm256_load_ps(acc + 16 * t), _mm256_load_ps(acc + 16 * t + 8), s0 + t, lane0, lane1, out_r);
      }
    }
  });
}

// All 16 rows of chunk [b0, b1) for tokens [t0, t0 + T), accumulating into acc[T][16] (64-byte
// aligned): per k2 two weight loads feed 2T vpmaddwd; the int32 sums (2T registers) live for one
// block, the float accumulators are read and written once per block.
template <int T>
inline void q8_0_panel_tile_avx2(const GemmArgs& g, const uint8_t* panel, int64_t b0, int64_t b1, int64_t t0,
                                 float* acc, PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const int16_t* xq[T];
  const float* xd[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.q16 + (t0 + t) * a.cols;
    xd[t] = a.d8 + (t0 + t) * nb;
  }
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* pb = panel + static_cast<size_t>(b - b0) * Avx2Q8Panel::kBlock;
    pf.step();
    __m256i s0[T], s1[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) s0[t] = s1[t] = _mm256_setzero_si256();
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      const __m256i w0 = loadu256(pb + Avx2Q8Panel::kVals + 64 * j);
      const __m256i w1 = loadu256(pb + Avx2Q8Panel::kVals + 64 * j + 32);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i x = bcast4(xq[t] + b * 32 + 2 * j);
        s0[t] = _mm256_add_epi32(s0[t], _mm256_madd_epi16(w0, x));
        s1[t] = _mm256_add_epi32(s1[t], _mm256_madd_epi16(w1, x));
        keep_reg(s0[t]);
        keep_reg(s1[t]);
      }
    }
    const __m256 d0 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + Avx2Q8Panel::kD));
    const __m256 d1 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + Avx2Q8Panel::kD + 32));
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      panel_acc16(acc + 16 * t, s0[t], s1[t], d0, d1, _mm256_set1_ps(xd[t][b]));
    }
  }
}

// Batched Q8_0_R16 (needs Act::q16 and g.scratch): tiles of 4 tokens over chunk panels.
inline void gemm_q8_0_r16_panels_avx2(const GemmArgs& g) {
  gemm_chunk_panels_avx2<kQ8PanelChunk, kQ8PanelSpan, 4, Avx2Q8Panel::kBlock>(
      g, decode_q8_0_r16_panel_avx2, [&]<int T>(int64_t b0, int64_t b1, int64_t t0, float* acc, PrefetchSpread& pf) {
        q8_0_panel_tile_avx2<T>(g, g.scratch, b0, b1, t0, acc, pf);
      });
}

// ---- Batched Q4_0_R16 / IQ4_NL_R16: each group's nibbles unpacked a chunk at a time ----------
//
// Why: the per-tile kernel (q4_0_r16_tile_avx2 / _vnni, 3 tokens) unpacks the nibbles again for
// every tile and broadcasts each activation dword once per 8-row half. Here a chunk of
// kQ4PanelChunk blocks is unpacked once per span of tokens into u8 values, and a tile of up to
// kQ4PanelTile tokens feeds both halves of the group from one broadcast (2 vpmaddubsw, or 2 vpdpbusd on
// AVX-VNNI, per dword). Chunk panel, per 32-block b (Avx2Q4Panel::kBlock bytes):
//   vals [8 k4][16 rows][4] u8   the stored nibbles (w + 8) of values 4*k4 .. 4*k4 + 3
//   d    [16] float              the rows' fp16 scales as float
// The integer sums are the tile kernels' (AVX2: <= 8 vpmaddubsw pairs of <= 2 * 15 * 127 in
// int16, then vpmaddwd; both minus 8 * sum(x)), and each token's accumulators take the blocks in
// order with their epilogue (acc += float(isum) * (dw * dx)), so the results are the same bits.
// IQ4_NL_R16 (the same bytes, Q4Vals below): on AVX-VNNI the vals are the table values + 128
// against -128 * sum(x); on plain AVX2 the signed values followed by their absolute values
// ([8 k4][16 rows][4] s8, then the same as u8, Avx2Q4Panel::kAbs), |w| against x with w's sign
// per 4 values (vpmaddubsw pairs <= 2 * 127 * 127, widened at once): the exact block sums of
// iq4nl_r16_tile_avx2, the same bits. Q5_0_R16 in Q50Order::kBlock (Q4Vals::kQ5Plus16, AVX-VNNI
// only: the plain AVX2 int16 sums could overflow with values up to 31): the vals are the nibbles
// with the record's 5th bit as bit 4 (w + 16) against -16 * sum(x), the exact block sums of
// q4_0_r16_tile_vnni<T, kQ5Plus16>.
struct Avx2Q4Panel {
  static constexpr size_t kVals = 0, kD = 512, kBlock = 576;
  static constexpr size_t kAbs = 512, kDSigned = 1024, kBlockSigned = 1088;  // Q4Vals::kNlSigned
};
enum class Q4Vals { kQ4_0, kNlPlus128, kNlSigned, kQ5Plus16 };
// What the stored values are offset by (w + kOff), and the record stride, of each kind.
template <Q4Vals kV>
constexpr int q4_vals_offset() { return kV == Q4Vals::kQ4_0 ? 8 : kV == Q4Vals::kQ5Plus16 ? 16 : 128; }
template <Q4Vals kV>
constexpr size_t q4_vals_record() { return kV == Q4Vals::kQ5Plus16 ? kR16Q5PairBytes : kR16Q4PairBytes; }
// Q5_0_R16: the 5th bits of 8 rows (half h) of line m's low (k4 = m) and high (k4 = m + 4)
// nibbles, at bit 4 of each byte (bit k4 of the bit planes, kernels.h; a 16-bit shift keeps each
// byte's bit 4 inside its byte for shifts up to 4), or'ed into lo / hi.
inline void q5_merge_bits_256(const uint8_t* rec, int half, int h, int m, __m256i& lo, __m256i& hi) {
  const __m256i planes = loadu256(rec + kR16Q4PairBytes + half * 64 + 32 * h);
  const __m256i b4 = _mm256_set1_epi8(0x10);
  lo = _mm256_or_si256(lo, _mm256_and_si256(m < 4 ? _mm256_slli_epi16(planes, 4 - m) : planes, b4));
  hi = _mm256_or_si256(hi, _mm256_and_si256(m > 0 ? _mm256_srli_epi16(planes, m) : planes, b4));
}
template <Q4Vals kV>
constexpr size_t q4_panel_block() { return kV == Q4Vals::kNlSigned ? Avx2Q4Panel::kBlockSigned : Avx2Q4Panel::kBlock; }
template <Q4Vals kV>
constexpr size_t q4_panel_d() { return kV == Q4Vals::kNlSigned ? Avx2Q4Panel::kDSigned : Avx2Q4Panel::kD; }
constexpr int64_t kQ4PanelChunk = 8;   // blocks per decoded chunk (4.5 KB; 8.5 KB signed)
constexpr int64_t kQ4PanelSpan = 64;   // tokens per accumulator span
// Tokens per Q4 panel tile. AVX2: 10 int sums + 2 weights + 1 broadcast of the 16 ymm; tiles of
// 6 (12 sums) spilled in the epilogue: BM_Matmul Q4_0 4864x896 / 896x4864, 1 thread, Zen 5, min
// of 5 alternated rounds, 64 / 512 tokens: 2442-2559 / 19912-19914 us -> 2355-2356 /
// 18651-18972, and engine_bench's wide Q4_0 prefill of 511 tokens 845-871 -> 817-837 ms (3
// alternated runs); 4 tied 5. AVX-VNNI (no int16 step, fewer live registers) keeps 6: 5 was ~3 %
// faster in BM_Matmul but ~1 % slower in that prefill (714 -> 719-725 ms).
constexpr int kQ4PanelTile = 5;
constexpr int kQ4PanelTileVnni = 6;
constexpr int kQ4PanelTileSigned = 4;  // 8 int sums + 4 weights (values and |values|) + 1 broadcast
static_assert(kQ4PanelChunk * Avx2Q4Panel::kBlockSigned + kQ4PanelSpan * 64 <= 12800,
              "panel_scratch_bytes() reserves at least 12800 bytes");

// Blocks [b0, b1) of a group -> the chunk panel.
template <Q4Vals kV>
inline void decode_q4_r16_panel_avx2(const uint8_t* grp, int64_t b0, int64_t b1, uint8_t* panel, PrefetchSpread& pf) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i table = kV == Q4Vals::kNlPlus128 ? _mm256_xor_si256(iq4nl_table(), _mm256_set1_epi8(static_cast<char>(0x80)))
                                                 : iq4nl_table();
  auto store = [&](uint8_t* at, __m256i nib) {
    if constexpr (kV == Q4Vals::kQ4_0 || kV == Q4Vals::kQ5Plus16) {
      store256(at, nib);
    } else {
      const __m256i w = _mm256_shuffle_epi8(table, nib);
      store256(at, w);
      if constexpr (kV == Q4Vals::kNlSigned) store256(at + Avx2Q4Panel::kAbs, _mm256_sign_epi8(w, w));
    }
  };
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* rec = grp + static_cast<size_t>(b >> 1) * q4_vals_record<kV>();
    const int half = static_cast<int>(b & 1);
    const uint8_t* vals = rec + 64 + half * 256;
    uint8_t* pb = panel + static_cast<size_t>(b - b0) * q4_panel_block<kV>();
    pf.step();
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i v = loadu256(vals + 64 * m + 32 * h);  // low nibbles: values 4m.., high: 16 + 4m..
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (kV == Q4Vals::kQ5Plus16) q5_merge_bits_256(rec, half, h, m, lo, hi);
        store(pb + Avx2Q4Panel::kVals + 64 * m + 32 * h, lo);
        store(pb + Avx2Q4Panel::kVals + 64 * (m + 4) + 32 * h, hi);
      }
    }
    _mm256_storeu_ps(reinterpret_cast<float*>(pb + q4_panel_d<kV>()), load8_f16(rec + half * 32));
    _mm256_storeu_ps(reinterpret_cast<float*>(pb + q4_panel_d<kV>() + 32), load8_f16(rec + half * 32 + 16));
  }
}

// All 16 rows of chunk [b0, b1) for tokens [t0, t0 + T), accumulating into acc[T][16] (64-byte
// aligned, read and written once per block).
template <int T, bool kVnni, Q4Vals kV>
inline void q4_0_panel_tile_avx2(const GemmArgs& g, const uint8_t* panel, int64_t b0, int64_t b1, int64_t t0,
                                 float* acc, PrefetchSpread& pf) {
  static_assert((kV != Q4Vals::kNlPlus128 && kV != Q4Vals::kQ5Plus16) || kVnni,
                "unsigned table / 5-bit values need vpdpbusd");
  static_assert(kV != Q4Vals::kNlSigned || !kVnni, "the AVX-VNNI tier takes the values + 128");
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  constexpr int kOff = q4_vals_offset<kV>();
  const int8_t* xq[T];
  for (int t = 0; t < T; ++t) xq[t] = a.q8 + (t0 + t) * a.cols;
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* pb = panel + static_cast<size_t>(b - b0) * q4_panel_block<kV>();
    pf.step();
    __m256i s0[T], s1[T];
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      s0[t] = s1[t] = kVnni ? _mm256_set1_epi32(-kOff * a.s8[(t0 + t) * nb + b]) : _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int k4 = 0; k4 < 8; ++k4) {
      const __m256i w0 = loadu256(pb + Avx2Q4Panel::kVals + 64 * k4);
      const __m256i w1 = loadu256(pb + Avx2Q4Panel::kVals + 64 * k4 + 32);
      __m256i a0 = w0, a1 = w1;
      if constexpr (kV == Q4Vals::kNlSigned) {
        a0 = loadu256(pb + Avx2Q4Panel::kAbs + 64 * k4);
        a1 = loadu256(pb + Avx2Q4Panel::kAbs + 64 * k4 + 32);
      }
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t) {
        const __m256i x = bcast4(xq[t] + b * 32 + 4 * k4);
        if constexpr (kVnni) {
          s0[t] = dpbusd_vex(s0[t], w0, x);
          s1[t] = dpbusd_vex(s1[t], w1, x);
        } else if constexpr (kV == Q4Vals::kNlSigned) {
          s0[t] = _mm256_add_epi32(s0[t], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(x, w0)), ones16()));
          s1[t] = _mm256_add_epi32(s1[t], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(x, w1)), ones16()));
        } else {
          s0[t] = _mm256_add_epi16(s0[t], _mm256_maddubs_epi16(w0, x));
          s1[t] = _mm256_add_epi16(s1[t], _mm256_maddubs_epi16(w1, x));
        }
        keep_reg(s0[t]);
        keep_reg(s1[t]);
      }
    }
    const __m256 d0 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + q4_panel_d<kV>()));
    const __m256 d1 = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + q4_panel_d<kV>() + 32));
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      __m256i i0 = s0[t], i1 = s1[t];
      if constexpr (!kVnni && kV == Q4Vals::kQ4_0) {
        const __m256i off = _mm256_set1_epi32(8 * a.s8[(t0 + t) * nb + b]);
        i0 = _mm256_sub_epi32(_mm256_madd_epi16(i0, ones16()), off);
        i1 = _mm256_sub_epi32(_mm256_madd_epi16(i1, ones16()), off);
      }
      panel_acc16(acc + 16 * t, i0, i1, d0, d1, _mm256_set1_ps(a.d8[(t0 + t) * nb + b]));
    }
  }
}

// Batched Q4_0_R16 / IQ4_NL_R16 / Q5_0_R16 in Q50Order::kBlock (needs g.scratch): tiles of
// kQ4PanelTile / kQ4PanelTileVnni tokens (4 for the signed IQ4_NL panel) over chunk panels.
// kVnni: the AVX-VNNI tier (vpdpbusd through dpbusd_vex).
template <bool kVnni, Q4Vals kV = Q4Vals::kQ4_0>
inline void gemm_q4_0_r16_panels_avx2(const GemmArgs& g) {
  constexpr int kTile = kV == Q4Vals::kNlSigned ? kQ4PanelTileSigned : kVnni ? kQ4PanelTileVnni : kQ4PanelTile;
  gemm_chunk_panels_avx2<kQ4PanelChunk, kQ4PanelSpan, kTile, q4_panel_block<kV>()>(
      g, decode_q4_r16_panel_avx2<kV>, [&]<int T>(int64_t b0, int64_t b1, int64_t t0, float* acc, PrefetchSpread& pf) {
        q4_0_panel_tile_avx2<T, kVnni, kV>(g, g.scratch, b0, b1, t0, acc, pf);
      });
}

// ---- Batched K-quant R16 layouts: each group decoded once into an int8 panel -----------------

// Panel of one 16-row group, per 256-value block (kAvx2KBlock bytes, in the caller's scratch:
// panel_scratch_bytes() reserves 5760 per block):
//   vals  [64 k4][16 rows][4] u8   the values as KSpec says (Q4_K 0..15, Q6_K 0..63 = q + 32, ...)
//   sc    [S][16] (int16, int16)   each row's sub-block scale twice, for vpmaddwd
//   pairs [S/2][16] (int16, int16) with mins: (m_2i, m_2i+1); else scales (sc_2i, sc_2i+1)
//   d     [16] float, dmin [16] float (types with mins only)
// (S = 8 sub-blocks of 32 values for Q4_K / Q5_K / IQ4_XS, 16 of 16 for Q6_K / Q3_K / Q2_K.)
// Rows keep their lanes in the group; the kernel skips the 8-row halves outside [lane0, lane1).
struct Avx2KPanel {
  static constexpr size_t kVals = 0, kSc = 4096, kPairs = 4096 + 1024, kD = 4096 + 1024 + 512, kDmin = kD + 64;
  static constexpr size_t kBlock = kDmin + 64;
};
static_assert(Avx2KPanel::kBlock == 5760, "panel_scratch_bytes() reserves 5760 bytes per block");
constexpr int64_t kAvx2KPanelMinTokens = 8;


// What a K-quant panel holds and how its lines are summed (Avx2KPanel): kSub sub-blocks per
// 256 values (8 of 32, or 16 of 16); kMins: the pairs are mins, scaled by the dmin row (Q4_K,
// Q5_K, Q2_K), else sub-block scales for the values' offset; kShift: the values are stored
// + 2^kShift (0: as they are); kGroup: lines whose vpmaddubsw pairs are summed in int16 before
// vpmaddwd (each pair <= 2 * 127 * the largest value, so kGroup times that <= 32767); kSigned:
// the values are stored signed (IQ4_XS on the plain AVX2 tier: |w| against x with w's sign).
template <int kSub_, bool kMins_, int kShift_, int kGroup_, bool kSigned_ = false>
struct KSpec {
  static constexpr int kSub = kSub_, kShift = kShift_, kGroup = kGroup_;
  static constexpr bool kMins = kMins_, kSigned = kSigned_;
};
using KSpecQ4K = KSpec<8, true, 0, 8>;     // 0..15
using KSpecQ6K = KSpec<16, false, 5, 2>;   // 0..63 = q + 32
using KSpecQ5K = KSpec<8, true, 0, 4>;     // 0..31
using KSpecQ2K = KSpec<16, true, 0, 4>;    // 0..3
using KSpecQ3K = KSpec<16, false, 2, 4>;   // 0..7 = q + 4
using KSpecIQ4XSS = KSpec<8, false, 0, 1, true>;  // -127..113 (plain AVX2)
using KSpecIQ4XSU = KSpec<8, false, 7, 1>;        // 1..241 = q + 128 (AVX-VNNI only: vpdpbusd)

inline void store_f16_row(uint8_t* p, const uint8_t* f16) { _mm256_storeu_ps(reinterpret_cast<float*>(p), load8_f16(f16)); }

// Bit kFrom (0..7) of every byte moved to bit kTo (other bits unspecified; the caller masks).
template <int kFrom, int kTo>
inline __m256i bit_to256(__m256i v) {
  if constexpr (kFrom < kTo) return _mm256_slli_epi16(v, kTo - kFrom);
  else if constexpr (kFrom > kTo) return _mm256_srli_epi16(v, kFrom - kTo);
  else return v;
}
template <int N, typename F>
inline void static_for256(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f.template operator()<I>(), ...); }(std::make_integer_sequence<int, N>{});
}

// A Q4_K_R16 / Q5_K_R16 record's scales, mins, d and dmin -> the panel block (both halves).
inline void decode_q4_k_r16_sides_avx2(const uint8_t* rec, uint8_t* pb) {
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 8; ++j) store256(pb + Avx2KPanel::kSc + j * 64 + 32 * h, scale_pairs<false>(rec + 2048 + j * 16 + 8 * h));
    for (int i = 0; i < 4; ++i) {
      store256(pb + Avx2KPanel::kPairs + i * 64 + 32 * h, pair_of_rows<false>(rec + 2176 + (2 * i) * 16 + 8 * h));
    }
    store_f16_row(pb + Avx2KPanel::kD + 32 * h, rec + 2304 + 16 * h);
    store_f16_row(pb + Avx2KPanel::kDmin + 32 * h, rec + 2336 + 16 * h);
  }
}

// Signed per-row sub-block scales ([S][16] int8 at sc) and the fp16 d row -> the panel block.
template <int kSub>
inline void decode_signed_scales_avx2(const uint8_t* sc, const uint8_t* d, uint8_t* pb) {
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < kSub; ++j) store256(pb + Avx2KPanel::kSc + j * 64 + 32 * h, scale_pairs<true>(sc + j * 16 + 8 * h));
    for (int i = 0; i < kSub / 2; ++i) {
      store256(pb + Avx2KPanel::kPairs + i * 64 + 32 * h, pair_of_rows<true>(sc + (2 * i) * 16 + 8 * h));
    }
    store_f16_row(pb + Avx2KPanel::kD + 32 * h, d + 16 * h);
  }
}

// Block decoders: block(rec, pb) turns one 256-value block record of a 16-row group into the
// panel block at pb.
struct DecQ4KR16Avx2 {
  using Spec = KSpecQ4K;
  static constexpr size_t kBytes = kQ4KR16BlockBytes;
  static void block(const uint8_t* rec, uint8_t* pb) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int c = 0; c < 4; ++c) {
      for (int m = 0; m < 8; ++m) {
        // Line (c, m): low nibbles are values 64c + 4m.. (k4 16c + m), high ones 32 later.
        for (int h = 0; h < 2; ++h) {
          const __m256i v = loadu256(rec + (c * 8 + m) * 64 + 32 * h);
          store256(pb + Avx2KPanel::kVals + (16 * c + m) * 64 + 32 * h, _mm256_and_si256(v, m4));
          store256(pb + Avx2KPanel::kVals + (16 * c + 8 + m) * 64 + 32 * h, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        }
      }
    }
    decode_q4_k_r16_sides_avx2(rec, pb);
  }
};

struct DecQ6KR16Avx2 {
  using Spec = KSpecQ6K;
  static constexpr size_t kBytes = kQ6KR16BlockBytes;
  static void block(const uint8_t* rec, uint8_t* pb) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m30 = _mm256_set1_epi8(0x30);
    for (int c = 0; c < 2; ++c) {
      for (int m = 0; m < 8; ++m) {
        for (int h = 0; h < 2; ++h) {
          const __m256i va = loadu256(rec + (c * 16 + m) * 64 + 32 * h);
          const __m256i vb = loadu256(rec + (c * 16 + m + 8) * 64 + 32 * h);
          const __m256i vh = loadu256(rec + 2048 + (c * 8 + m) * 64 + 32 * h);
          __m256i q[4];
          q[0] = _mm256_or_si256(_mm256_and_si256(va, m4), _mm256_and_si256(_mm256_slli_epi16(vh, 4), m30));
          q[1] = _mm256_or_si256(_mm256_and_si256(vb, m4), _mm256_and_si256(_mm256_slli_epi16(vh, 2), m30));
          q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(va, 4), m4), _mm256_and_si256(vh, m30));
          q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(vb, 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(vh, 2), m30));
          // q[i]: values 128c + 32i + 4m.. (k4 32c + 8i + m).
          for (int i = 0; i < 4; ++i) store256(pb + Avx2KPanel::kVals + (32 * c + 8 * i + m) * 64 + 32 * h, q[i]);
        }
      }
    }
    decode_signed_scales_avx2<16>(rec + 3072, rec + 3328, pb);
  }
};

struct DecQ5KR16Avx2 {
  using Spec = KSpecQ5K;
  static constexpr size_t kBytes = kQ5KR16BlockBytes;
  static void block(const uint8_t* rec, uint8_t* pb) {
    const __m256i m4 = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(0x10);
    for (int m = 0; m < 8; ++m) {
      for (int h = 0; h < 2; ++h) {
        const __m256i hb = loadu256(rec + kQ4KR16BlockBytes + m * 64 + 32 * h);
        static_for256<4>([&]<int c>() {
          // Q4_K_R16's line (c, m) with the 5th bits: bits 2c and 2c + 1 of the qh line.
          const __m256i v = loadu256(rec + (c * 8 + m) * 64 + 32 * h);
          const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(bit_to256<2 * c, 4>(hb), b4));
          const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                             _mm256_and_si256(bit_to256<2 * c + 1, 4>(hb), b4));
          store256(pb + Avx2KPanel::kVals + (16 * c + m) * 64 + 32 * h, lo);
          store256(pb + Avx2KPanel::kVals + (16 * c + 8 + m) * 64 + 32 * h, hi);
        });
      }
    }
    decode_q4_k_r16_sides_avx2(rec, pb);
  }
};

// Q3_K / Q2_K value lines: values 128c + 32s + 4m.. at k4 32c + 8s + m; Q3_K adds the high bit
// 4c + s of the hmask line as 4 (stored q + 4).
template <bool kQ3>
inline void decode_q2_lines_avx2(const uint8_t* rec, uint8_t* pb) {
  const __m256i m3 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
  for (int m = 0; m < 8; ++m) {
    for (int h = 0; h < 2; ++h) {
      const __m256i hm = kQ3 ? loadu256(rec + 1024 + m * 64 + 32 * h) : _mm256_setzero_si256();
      static_for256<2>([&]<int c>() {
        const __m256i v = loadu256(rec + (c * 8 + m) * 64 + 32 * h);
        static_for256<4>([&]<int s>() {
          __m256i q = _mm256_and_si256(s == 0 ? v : _mm256_srli_epi16(v, 2 * s), m3);
          if constexpr (kQ3) q = _mm256_or_si256(q, _mm256_and_si256(bit_to256<4 * c + s, 2>(hm), b2));
          store256(pb + Avx2KPanel::kVals + (32 * c + 8 * s + m) * 64 + 32 * h, q);
        });
      });
    }
  }
}

struct DecQ3KR16Avx2 {
  using Spec = KSpecQ3K;
  static constexpr size_t kBytes = kQ3KR16BlockBytes;
  static void block(const uint8_t* rec, uint8_t* pb) {
    decode_q2_lines_avx2<true>(rec, pb);
    decode_signed_scales_avx2<16>(rec + 1536, rec + 1792, pb);
  }
};

struct DecQ2KR16Avx2 {
  using Spec = KSpecQ2K;
  static constexpr size_t kBytes = kQ2KR16BlockBytes;
  static void block(const uint8_t* rec, uint8_t* pb) {
    decode_q2_lines_avx2<false>(rec, pb);
    const __m128i m4 = _mm_set1_epi8(0xF);
    for (int h = 0; h < 2; ++h) {
      // Scale bytes: the scale in the low nibble, the min in the high one.
      __m128i mn[16];
      for (int j = 0; j < 16; ++j) {
        const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + 1024 + j * 16 + 8 * h));
        store256(pb + Avx2KPanel::kSc + j * 64 + 32 * h, scale_pairs_u8(_mm_and_si128(raw, m4)));
        mn[j] = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
      }
      for (int i = 0; i < 8; ++i) {
        store256(pb + Avx2KPanel::kPairs + i * 64 + 32 * h, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn[2 * i], mn[2 * i + 1])));
      }
      store_f16_row(pb + Avx2KPanel::kD + 32 * h, rec + 1280 + 16 * h);
      store_f16_row(pb + Avx2KPanel::kDmin + 32 * h, rec + 1312 + 16 * h);
    }
  }
};

// IQ4_XS: kUnsigned (the AVX-VNNI tier) stores the table values + 128, else signed.
template <bool kUnsigned>
struct DecIQ4XSR16Avx2 {
  using Spec = std::conditional_t<kUnsigned, KSpecIQ4XSU, KSpecIQ4XSS>;
  static constexpr size_t kBytes = kIQ4XSR16BlockBytes;
  static void block(const uint8_t* rec, uint8_t* pb) {
    alignas(16) int8_t t[16];
    for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(kIQ4NLValues[i] + (kUnsigned ? 128 : 0));
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int ib = 0; ib < 8; ++ib) {
      for (int m = 0; m < 4; ++m) {
        for (int h = 0; h < 2; ++h) {
          // Line (ib, m): low nibbles index values 32ib + 4m.. (k4 8ib + m), high ones 16 later.
          const __m256i v = loadu256(rec + (ib * 4 + m) * 64 + 32 * h);
          store256(pb + Avx2KPanel::kVals + (8 * ib + m) * 64 + 32 * h, _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4)));
          store256(pb + Avx2KPanel::kVals + (8 * ib + 4 + m) * 64 + 32 * h,
                   _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)));
        }
      }
    }
    decode_signed_scales_avx2<8>(rec + 2048, rec + 2176, pb);
  }
};

// kH halves (8 rows each) of one decoded panel block (pb: the block, + 32h for half h) for T
// tokens (xb[t]: each token's Q8_K block) into acc[h * T + t], in the order of Spec (KSpec).
// kH == 2: each activation broadcast feeds both halves. The broadcasts read the tokens' Q8_K
// blocks from L2 and were what bound one half at a time (a broadcast per vpdpbusd / vpmaddubsw;
// BM_Matmul's K-quant batches ran ~1.15 vpdpbusd a cycle on Zen 5, which issues 2), so the
// callers pair the halves where that measured faster (kKPanelPairs).
// kVnni (the AVX-VNNI tier): each sub-block's lines are summed in int32 by vpdpbusd and scaled
// with one vpmulld per sub-block instead of vpmaddubsw + vpaddw per line and vpmaddwd per int16
// group: the same integer sums (exact, no saturation either way), so the same results.
template <typename Spec, int T, bool kVnni = false, int kH = 1>
__attribute__((always_inline)) inline void kpanel_block_avx2(const uint8_t* pb, const BlockQ8_K* const* xb,
                                                             __m256* acc) {
  constexpr int kSub = Spec::kSub;
  constexpr bool kSub16 = kSub == 16;  // 16-value sub-blocks: one bsum per sub-block
  constexpr int kLines = 64 / kSub;    // 4-value lines per sub-block
  constexpr int kGroup = Spec::kGroup;
  static_assert(!Spec::kSigned || (!kVnni && kGroup == 1 && Spec::kShift == 0 && !Spec::kMins));
  static_assert(kVnni || Spec::kShift < 7, "values + 128 would saturate vpmaddubsw");
  static_assert(kH == 1 || kH == 2);
  constexpr bool kSide = Spec::kMins || Spec::kShift > 0;
  // Side term first (frees its registers): sum_j sc_j * bsum_j for the values' offset, or
  // sum_j m_j * (x sum of sub-block j) for the mins.
  __m256i isum[kH * T];
#pragma GCC unroll 8
  for (int i = 0; i < kH * T; ++i) isum[i] = _mm256_setzero_si256();
  if constexpr (kSide) {
#pragma GCC unroll 8
    for (int i = 0; i < kSub / 2; ++i) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        __m256i xs;
        if constexpr (kSub16) {
          xs = bcast4(xb[t]->bsums + 2 * i);
        } else {
          xs = _mm256_set1_epi32(q8k_sum_pair32(*xb[t], i));
        }
#pragma GCC unroll 2
        for (int h = 0; h < kH; ++h) {
          const __m256i pr = loadu256(pb + Avx2KPanel::kPairs + i * 64 + 32 * h);
          isum[h * T + t] = _mm256_add_epi32(isum[h * T + t], _mm256_madd_epi16(pr, xs));
        }
      }
    }
  }
  if constexpr (Spec::kMins) {
#pragma GCC unroll 2
    for (int h = 0; h < kH; ++h) {
      const __m256 dm = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + Avx2KPanel::kDmin + 32 * h));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int i = h * T + t;
        acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(dm, _mm256_set1_ps(xb[t]->d)), acc[i]);
        isum[i] = _mm256_setzero_si256();
      }
    }
  } else if constexpr (Spec::kShift > 0) {
#pragma GCC unroll 8
    for (int i = 0; i < kH * T; ++i) {
      isum[i] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(isum[i], Spec::kShift));
    }
  }
#pragma GCC unroll 1
  for (int j = 0; j < kSub; ++j) {
    const uint8_t* sc = pb + Avx2KPanel::kSc + j * 64;
    if constexpr (kVnni) {
      __m256i s32[kH * T];
#pragma GCC unroll 8
      for (int i = 0; i < kH * T; ++i) s32[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int l = 0; l < kLines; ++l) {
        const int k4 = j * kLines + l;
        __m256i w[kH];
#pragma GCC unroll 2
        for (int h = 0; h < kH; ++h) w[h] = loadu256(pb + Avx2KPanel::kVals + k4 * 64 + 32 * h);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i x = bcast4(xb[t]->qs + 4 * k4);
#pragma GCC unroll 2
          for (int h = 0; h < kH; ++h) s32[h * T + t] = dpbusd_vex(s32[h * T + t], w[h], x);
        }
      }
#pragma GCC unroll 2
      for (int h = 0; h < kH; ++h) {
        const __m256i sc32 = _mm256_srai_epi32(loadu256(sc + 32 * h), 16);  // the (v, v) int16 pair -> v
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          isum[h * T + t] = _mm256_add_epi32(isum[h * T + t], _mm256_mullo_epi32(s32[h * T + t], sc32));
        }
      }
      continue;
    }
#pragma GCC unroll 4
    for (int q = 0; q < kLines / kGroup; ++q) {
      __m256i s16[kH * T];
#pragma GCC unroll 8
      for (int i = 0; i < kH * T; ++i) s16[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int l = 0; l < kGroup; ++l) {
        const int k4 = j * kLines + q * kGroup + l;
        __m256i w[kH], aw[kH];
#pragma GCC unroll 2
        for (int h = 0; h < kH; ++h) {
          w[h] = loadu256(pb + Avx2KPanel::kVals + k4 * 64 + 32 * h);
          if constexpr (Spec::kSigned) aw[h] = _mm256_abs_epi8(w[h]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i x = bcast4(xb[t]->qs + 4 * k4);
#pragma GCC unroll 2
          for (int h = 0; h < kH; ++h) {
            if constexpr (Spec::kSigned) {
              s16[h * T + t] = _mm256_maddubs_epi16(aw[h], _mm256_sign_epi8(x, w[h]));
            } else {
              s16[h * T + t] = _mm256_add_epi16(s16[h * T + t], _mm256_maddubs_epi16(w[h], x));
              keep_reg(s16[h * T + t]);
            }
          }
        }
      }
#pragma GCC unroll 2
      for (int h = 0; h < kH; ++h) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          // The scales as vpmaddwd's memory operand: a register for them spills the pair tiles.
          isum[h * T + t] = _mm256_add_epi32(isum[h * T + t], _mm256_madd_epi16(s16[h * T + t], loadu256(sc + 32 * h)));
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int h = 0; h < kH; ++h) {
    const __m256 dv = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + Avx2KPanel::kD + 32 * h));
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const int i = h * T + t;
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(dv, _mm256_set1_ps(xb[t]->d)), acc[i]);
    }
  }
}

// Every block of kH halves of a decoded panel (kH == 1: half h; 2: both, h == 0) for tokens
// [t0, t0 + T) into out[h * T + t] (kpanel_block_avx2 per block). A function of its own: inlined
// into the group driver, GCC's register allocation of the pair tiles varied with the rest of the
// driver (avx2 Q4_K at 512 tokens 18.2 or 22.7 ms for the same tile).
template <typename Spec, int T, bool kVnni = false, int kH = 1>
__attribute__((noinline)) void kpanel_tile_avx2(const GemmArgs& g, const uint8_t* panel, int h, int64_t t0, __m256* out,
                                                PrefetchSpread& pf) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  __m256 acc[kH * T];
#pragma GCC unroll 8
  for (int i = 0; i < kH * T; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step();
    const BlockQ8_K* xb[T];
    for (int t = 0; t < T; ++t) xb[t] = a.qk + (t0 + t) * nb + b;
    kpanel_block_avx2<Spec, T, kVnni, kH>(panel + static_cast<size_t>(b) * Avx2KPanel::kBlock + 32 * h, xb, acc);
  }
  for (int i = 0; i < kH * T; ++i) out[i] = acc[i];
}

// Up to this many tokens (Q5_K / Q3_K / Q2_K / IQ4_XS R16) a group is decoded one block at a
// time into an L1-resident panel block and multiplied right away; from the next size on, the
// whole group is decoded once and every 4-token tile runs over it. The same kpanel_block_avx2
// per block either way, so a row's result does not depend on the batch size.
constexpr int64_t kAvx2KFusedMaxTokens = 4;
// Whole groups' batches (both halves holding rows) run kpanel_tile_avx2<.., 2> over tiles of
// kKPanelPairTile tokens where that measured faster than a half at a time over 4: on AVX-VNNI
// every type, with vpmaddubsw the int16 groups of 8 lines (Q4_K); not for groups of 2 or 4 or the
// signed values (BM_Matmul 4864x1024, 512 tokens, 1 thread, min of 3-4 alternated rounds, ms,
// half at a time -> pairs of 3: avx-vnni Q4_K 21.5 -> 17.3, Q5_K 22.2 -> 17.4, IQ4_XS 20.8 ->
// 16.3, Q6_K 19.9 -> 18.6, Q2_K 20.5 -> 18.9, Q3_K 20.1 -> 19.2; avx2 Q4_K 23.0 -> 18.7, Q5_K
// 25.0 -> 24.8, Q2_K 21.7 -> 21.2, Q3_K 21.5 -> 21.2, Q6_K 23.2 -> 24.1, IQ4_XS 30 -> 48).
template <typename Spec, bool kVnni>
constexpr bool kKPanelPairs = kVnni || (!Spec::kSigned && Spec::kGroup >= 8);
constexpr int kKPanelPairTile = 3;

template <typename Dec, int T, bool kVnni>
inline void kquant_r16_fused_group_avx2(const GemmArgs& g, const uint8_t* grp, int lane0, int lane1, int64_t out_r,
                                        PrefetchSpread& pf) {
  using Spec = typename Dec::Spec;
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  __m256 lo[T], hi[T];
  for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step();
    Dec::block(grp + static_cast<size_t>(b) * Dec::kBytes, g.scratch);
    const BlockQ8_K* xb[T];
    for (int t = 0; t < T; ++t) xb[t] = a.qk + t * nb + b;
    if (lane0 < 8) kpanel_block_avx2<Spec, T, kVnni>(g.scratch, xb, lo);
    if (lane1 > 8) kpanel_block_avx2<Spec, T, kVnni>(g.scratch + 32, xb, hi);
  }
  for (int t = 0; t < T; ++t) store_group(g, lo[t], hi[t], t, lane0, lane1, out_r);
}

// Per group: the panel decode (streaming the group), then every tile of 4 tokens over both
// halves; the decode and the compute passes prefetch the next group (batches of up to
// kAvx2KFusedMaxTokens block by block, as above).
template <typename Dec, bool kVnni = false>
inline void gemm_kquant_r16_panels_avx2(const GemmArgs& g) {
  using Spec = typename Dec::Spec;
  const int64_t nb = g.act->cols / kQK_K, n_tok = g.act->n_tok;
  const int64_t last_row = g.row0 + g.num_rows - 1;  // relative to the first group
  const uint8_t* last_grp = g.w + static_cast<size_t>(last_row / 16) * g.stride;
  const int64_t tiles = (n_tok + 3) / 4;
  const bool fused = n_tok <= kAvx2KFusedMaxTokens;
  for_r16_groups(g, [&](const uint8_t* grp, int lane0, int lane1, int64_t out_r) {
    const int halves = (lane0 < 8) + (lane1 > 8);
    const uint8_t* next = g.sw_prefetch && grp < last_grp ? grp + g.stride : nullptr;
    if (fused) {
      PrefetchSpread pf(next, g.stride, nb);
      switch (n_tok) {
        case 4: return kquant_r16_fused_group_avx2<Dec, 4, kVnni>(g, grp, lane0, lane1, out_r, pf);
        case 3: return kquant_r16_fused_group_avx2<Dec, 3, kVnni>(g, grp, lane0, lane1, out_r, pf);
        case 2: return kquant_r16_fused_group_avx2<Dec, 2, kVnni>(g, grp, lane0, lane1, out_r, pf);
        default: return kquant_r16_fused_group_avx2<Dec, 1, kVnni>(g, grp, lane0, lane1, out_r, pf);
      }
    }
    PrefetchSpread pf(next, g.stride, (1 + tiles * halves) * nb);
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      Dec::block(grp + static_cast<size_t>(b) * Dec::kBytes, g.scratch + static_cast<size_t>(b) * Avx2KPanel::kBlock);
    }
    if constexpr (kKPanelPairs<Spec, kVnni>) {
      if (halves == 2) {
        for_tiles<kKPanelPairTile>(n_tok, [&]<int T>(int64_t t0) {
          __m256 o[2 * T];
          kpanel_tile_avx2<Spec, T, kVnni, 2>(g, g.scratch, 0, t0, o, pf);
          for (int t = 0; t < T; ++t) store_group(g, o[t], o[T + t], t0 + t, lane0, lane1, out_r);
        });
        return;
      }
    }
    for_tiles<4>(n_tok, [&]<int T>(int64_t t0) {
      __m256 lo[T], hi[T];
      for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
      if (lane0 < 8) kpanel_tile_avx2<Spec, T, kVnni>(g, g.scratch, 0, t0, lo, pf);
      if (lane1 > 8) kpanel_tile_avx2<Spec, T, kVnni>(g, g.scratch, 1, t0, hi, pf);
      for (int t = 0; t < T; ++t) store_group(g, lo[t], hi[t], t0 + t, lane0, lane1, out_r);
    });
  });
}
