// Batched AVX-512 kernels for Q2_K, Q3_K, Q5_K and IQ4_XS (plain GGUF layouts): each 16-row
// group is decoded once per matmul into int16 "lane panels", then multiplied by all token
// columns with vpdpwssd.
//
// NOT a normal header: included once by kernels_avx512.cc inside its anonymous namespace, after
// kernels_x86_more.h (whose per-row kernels and scale helpers it uses), compiled for AVX-512.
//
// The per-row kernels of kernels_x86_more.h sum each row in 8 int32 lanes per 256-value block
// (lane l: values 4l..4l+3 of every 32-value chunk, times their sub-block's scale), scale the
// lanes with one FMA a block and add them in hsum_ps's order. Golden models are sensitive to
// that order (summing a block into one int32 drifts their logits by 0.2-0.3), and a row's
// result must not depend on the batch size (batch_invariance_test), so the batched kernel
// keeps exactly those lanes: a panel holds, per pair of rows and chunk, the values already
// multiplied by their sub-block scale as int16 (|value x scale| <= 127 x 32) in two vectors, A
// = (v_4l, v_4l+1) and B = (v_4l+2, v_4l+3) for the 8 lanes of each row, so two vpdpwssd
// against the token's activations in the same arrangement give both rows' 8 lanes: the same
// int32 sums as vpmaddubsw + vpmaddwd (exact integers either way), then the same float steps.
// Per 64 products: 2 vpdpwssd, against ~6 operations and an unpack per 4 tokens in the per-row
// kernels.

enum class LaneKind { kQ2_K, kQ3_K, kQ5_K, kIQ4_XS };

// From this many tokens on, these types go through the lane panels.
constexpr int64_t kLanePanelMinTokens = 16;

// Per pair of rows and 256-value block: 8 chunks x (A, B) x 64 bytes; the side pairs (per row
// and lane, an int16 pair against the activation's bsums pair (2l, 2l + 1): Q2_K the mins
// (m_2l, m_2l+1), Q3_K -4 x the scales, Q5_K (m_l, m_l)); d and dmin as [row 0 x 8 | row 1 x 8].
constexpr size_t kLpSide = 8 * 2 * 64, kLpD = kLpSide + 64, kLpDmin = kLpD + 64, kLpPair = kLpDmin + 64;
static_assert(8 * kLpPair == kLanePanelBlockBytes);

// One row's block as int16 values times their sub-block scale, in value order (w[256]), its 8
// side pairs (low int16: the pair's first) and d / dmin.
template <LaneKind K>
inline void lane_decode_row(const uint8_t* blk, int16_t* w, uint32_t* side, float* d, float* dmin) {
  auto put32 = [&](int i0, __m256i v8, bool is_signed, int16_t s_lo, int16_t s_hi) {
    // 32 values (bytes) at w[i0..]: the first 16 times s_lo, the next 16 times s_hi.
    const __m512i v16 = is_signed ? _mm512_cvtepi8_epi16(v8) : _mm512_cvtepu8_epi16(v8);
    const __m512i s = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(s_lo)), _mm256_set1_epi16(s_hi), 1);
    _mm512_storeu_si512(w + i0, _mm512_mullo_epi16(v16, s));
  };
  *dmin = 0.0f;
  if constexpr (K == LaneKind::kIQ4_XS) {
    *d = load_f16(blk);
    uint16_t sh;
    __builtin_memcpy(&sh, blk + 2, 2);
    const __m256i table = iq4nl_table(), m4 = _mm256_set1_epi8(0xF);
    for (int i = 0; i < 4; ++i) {
      const __m256i v = loadu256(blk + 8 + 32 * i);
      const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      const __m256i nibs[2] = {_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31)};
      for (int h = 0; h < 2; ++h) {
        const int ib = 2 * i + h;
        const int16_t ls = static_cast<int16_t>(
            (((blk[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)) - 32);
        const __m256i nib = nibs[h];
        put32(32 * ib, _mm256_shuffle_epi8(table, nib), true, ls, ls);
      }
    }
    for (int l = 0; l < 8; ++l) side[l] = 0;
  } else if constexpr (K == LaneKind::kQ5_K) {
    *d = load_f16(blk);
    *dmin = load_f16(blk + 2);
    uint64_t sc64, mn64;
    q4k_scales_mins8(blk + 4, &sc64, &mn64);
    uint8_t sc[8], mn[8];
    __builtin_memcpy(sc, &sc64, 8);
    __builtin_memcpy(mn, &mn64, 8);
    const __m256i qh = loadu256(blk + 16), m4 = _mm256_set1_epi8(0xF), b16 = _mm256_set1_epi8(0x10);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = loadu256(blk + 48 + 32 * c);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(bit_to4(qh, 2 * c), b16));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                         _mm256_and_si256(bit_to4(qh, 2 * c + 1), b16));
      put32(64 * c, lo, false, sc[2 * c], sc[2 * c]);
      put32(64 * c + 32, hi, false, sc[2 * c + 1], sc[2 * c + 1]);
    }
    for (int l = 0; l < 8; ++l) side[l] = static_cast<uint32_t>(mn[l]) | (static_cast<uint32_t>(mn[l]) << 16);
  } else {
    constexpr bool kQ3 = K == LaneKind::kQ3_K;
    alignas(16) int8_t sc[16];
    int16_t sd[16];  // the side pairs' values (Q3_K: -4 x scale, up to 128)
    if constexpr (kQ3) {
      _mm_store_si128(reinterpret_cast<__m128i*>(sc), q3k_scales_vec(blk + 96));
      for (int j = 0; j < 16; ++j) sd[j] = static_cast<int16_t>(-4 * sc[j]);
      *d = load_f16(blk + 108);
    } else {
      for (int j = 0; j < 16; ++j) {
        sc[j] = static_cast<int8_t>(blk[j] & 0xF);
        sd[j] = static_cast<int16_t>(blk[j] >> 4);
      }
      *d = load_f16(blk + 80);
      *dmin = load_f16(blk + 82);
    }
    constexpr int kQs = kQ3 ? 32 : 16;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m256i hm = kQ3 ? loadu256(blk) : _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i q = loadu256(blk + kQs + 32 * n);
      for (int j = 0; j < 4; ++j) {
        __m256i u = _mm256_and_si256(srl16(q, 2 * j), m3);
        if constexpr (kQ3) {
          const int k = 4 * n + j;
          const __m256i h = k >= 2 ? srl16(hm, k - 2) : _mm256_sll_epi16(hm, _mm_cvtsi32_si128(2 - k));
          u = _mm256_or_si256(u, _mm256_and_si256(h, four));
        }
        const int sb = 8 * n + 2 * j;  // sub-blocks sb (first 16 values) and sb + 1
        put32(128 * n + 32 * j, u, false, sc[sb], sc[sb + 1]);
      }
    }
    for (int l = 0; l < 8; ++l) {
      side[l] = static_cast<uint32_t>(static_cast<uint16_t>(sd[2 * l])) |
                (static_cast<uint32_t>(static_cast<uint16_t>(sd[2 * l + 1])) << 16);
    }
  }
}

// Rows [r, r + lanes) of the matrix (lanes <= 16) into the panel, every block; rows past
// `lanes` are zero.
template <LaneKind K>
void lane_decode_panel(const GemmArgs& g, int64_t r, int lanes, uint8_t* panel) {
  const int64_t nb = g.act->cols / kQK_K;
  constexpr size_t kBytes = K == LaneKind::kQ2_K   ? sizeof(BlockQ2_K)
                            : K == LaneKind::kQ3_K ? sizeof(BlockQ3_K)
                            : K == LaneKind::kQ5_K ? sizeof(BlockQ5_K)
                                                   : sizeof(BlockIQ4_XS);
  alignas(64) int16_t w[2][kQK_K];
  uint32_t side[2][8];
  float d[2], dmin[2];
  const __m512i ia = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i ib = _mm512_add_epi32(ia, _mm512_set1_epi32(1));
  for (int64_t b = 0; b < nb; ++b) {
    for (int p = 0; p < 8; ++p) {
      for (int h = 0; h < 2; ++h) {
        const int row = 2 * p + h;
        if (row < lanes) {
          lane_decode_row<K>(g.w + static_cast<size_t>(r + row) * g.stride + b * kBytes, w[h], side[h], &d[h], &dmin[h]);
        } else {
          std::memset(w[h], 0, sizeof(w[h]));
          std::memset(side[h], 0, sizeof(side[h]));
          d[h] = dmin[h] = 0.0f;
        }
      }
      uint8_t* pp = panel + static_cast<size_t>(b) * kLanePanelBlockBytes + static_cast<size_t>(p) * kLpPair;
      for (int c = 0; c < 8; ++c) {
        const __m512i r0 = _mm512_load_si512(w[0] + 32 * c), r1 = _mm512_load_si512(w[1] + 32 * c);
        // dword 2l of a chunk's 32 int16 is (v_4l, v_4l+1), dword 2l + 1 is (v_4l+2, v_4l+3).
        _mm512_store_si512(pp + (2 * c) * 64, _mm512_permutex2var_epi32(r0, ia, r1));
        _mm512_store_si512(pp + (2 * c + 1) * 64, _mm512_permutex2var_epi32(r0, ib, r1));
      }
      alignas(64) uint32_t sp[16];
      alignas(64) float dv[16], mv[16];
      for (int l = 0; l < 8; ++l) {
        sp[l] = side[0][l];
        sp[8 + l] = side[1][l];
        dv[l] = d[0];
        dv[8 + l] = d[1];
        mv[l] = dmin[0];
        mv[8 + l] = dmin[1];
      }
      std::memcpy(pp + kLpSide, sp, 64);
      std::memcpy(pp + kLpD, dv, 64);
      std::memcpy(pp + kLpDmin, mv, 64);
    }
  }
}

// A block's end with mins (Q5_K, Q2_K; the per-row kernels' order): acc + isum x (d x xd), then
// minus side x (dmin x xd). Also used by kernels_avx512_rowpairs.h.
inline __m512 block_end_mins(__m512 acc, __m512i isum, __m512i side, __m512 dv, __m512 mv, __m512 xd) {
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dv, xd), acc);
  return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(side), _mm512_mul_ps(mv, xd), acc);
}

// Pairs [p0, p0 + P) of a decoded panel for tokens [t0, t0 + T); xab: per token, per chunk of
// the row, the activations as A then B (16 int16 each: the 8 lanes' pairs (x_4l, x_4l+1), then
// (x_4l+2, x_4l+3)), broadcast to both rows of a pair. Writes the rows that exist (lanes).
template <LaneKind K, int P, int T>
inline void lane_tile(const GemmArgs& g, const uint8_t* panel, const int16_t* xab, int p0, int lanes, int64_t r,
                      int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  __m512 acc[P][T];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = panel + static_cast<size_t>(b) * kLanePanelBlockBytes + static_cast<size_t>(p0) * kLpPair;
    __m512i isum[P][T];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) isum[p][t] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m512i xa[T], xb[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int16_t* x = xab + (static_cast<size_t>(t) * nb * 8 + static_cast<size_t>(b) * 8 + c) * 32;
        xa[t] = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(x)));
        xb[t] = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(x + 16)));
      }
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {
        const __m512i wa = _mm512_load_si512(pb + p * kLpPair + (2 * c) * 64);
        const __m512i wb = _mm512_load_si512(pb + p * kLpPair + (2 * c + 1) * 64);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          isum[p][t] = _mm512_dpwssd_epi32(isum[p][t], wa, xa[t]);
          isum[p][t] = _mm512_dpwssd_epi32(isum[p][t], wb, xb[t]);
        }
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& xq = a.qk[(t0 + t) * nb + b];
      const __m512 dx = _mm512_set1_ps(xq.d);
      const __m512i bs = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.bsums)));
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {
        const uint8_t* pp = pb + p * kLpPair;
        const __m512 dv = _mm512_load_ps(reinterpret_cast<const float*>(pp + kLpD));
        const __m512i sp = _mm512_load_si512(pp + kLpSide);
        if constexpr (K == LaneKind::kIQ4_XS) {
          acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[p][t]), _mm512_mul_ps(dv, dx), acc[p][t]);
        } else if constexpr (K == LaneKind::kQ3_K) {
          // isum - 4 x (bsums pairs . scales pairs): the side pairs hold -4 x the scales.
          const __m512i s = _mm512_dpwssd_epi32(isum[p][t], sp, bs);
          acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, dx), acc[p][t]);
        } else {
          const __m512 mv = _mm512_load_ps(reinterpret_cast<const float*>(pp + kLpDmin));
          const __m512i side = _mm512_dpwssd_epi32(_mm512_setzero_si512(), sp, bs);
          acc[p][t] = block_end_mins(acc[p][t], isum[p][t], side, dv, mv, dx);
        }
      }
    }
  }
  // Each row's 8 lanes in hsum_ps's order: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      alignas(64) float v[16];
      _mm512_store_ps(v, acc[p][t]);
      for (int h = 0; h < 2; ++h) {
        const int row = 2 * (p0 + p) + h;
        if (row >= lanes) continue;
        const float* l = v + 8 * h;
        const float h0 = l[0] + l[4], h1 = l[1] + l[5], h2 = l[2] + l[6], h3 = l[3] + l[7];
        g.y[(t0 + t) * g.ldy + r + row] = (h0 + h2) + (h1 + h3);
      }
    }
  }
}

// Tokens [t0, t0 + T) of the activations in the lane arrangement, into xab (see lane_tile).
template <int T>
inline void lane_activations(const Act& a, int64_t t0, int16_t* xab) {
  const int64_t nb = a.cols / kQK_K;
  const __m512i ia = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int t = 0; t < T; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* qs = a.qk[(t0 + t) * nb + b].qs;
      for (int c = 0; c < 8; ++c) {
        const __m512i x16 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c)));
        // A: dwords 0, 2, .., 14 ((x_4l, x_4l+1)); B: dwords 1, 3, .., 15.
        _mm512_store_si512(xab + (static_cast<size_t>(t) * nb * 8 + static_cast<size_t>(b) * 8 + c) * 32,
                           _mm512_permutexvar_epi32(ia, x16));
      }
    }
  }
}

// Token tiles of kLaneT over each decoded 16-row group: the tile's activations are arranged
// into an L1-sized buffer (kLaneT tokens x cols x 2 bytes), then every pair of rows runs against
// them. The arranging is redone for every group (about a fifth of the tile's operations at 16
// rows); arranging a token tile once for all groups would need every group's panel at once.
constexpr int kLaneT = 4;
template <LaneKind K>
void gemm_lane_panels(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  thread_local std::vector<int16_t> xab_buf;
  const size_t need = static_cast<size_t>(kLaneT) * static_cast<size_t>(g.act->cols) + 32;  // int16 a value
  if (xab_buf.size() < need) xab_buf.resize(need);
  int16_t* xab = reinterpret_cast<int16_t*>((reinterpret_cast<uintptr_t>(xab_buf.data()) + 63) & ~uintptr_t{63});
  for (int64_t r = 0; r < g.num_rows; r += 16) {
    const int lanes = static_cast<int>(g.num_rows - r < 16 ? g.num_rows - r : 16);
    lane_decode_panel<K>(g, r, lanes, g.scratch);
    const int pairs = (lanes + 1) / 2;
    auto run = [&]<int T>(int64_t t0) {
      lane_activations<T>(*g.act, t0, xab);
      int p = 0;
      for (; p + 2 <= pairs; p += 2) lane_tile<K, 2, T>(g, g.scratch, xab, p, lanes, r, t0);
      if (p < pairs) lane_tile<K, 1, T>(g, g.scratch, xab, p, lanes, r, t0);
    };
    int64_t t0 = 0;
    for (; t0 + kLaneT <= n_tok; t0 += kLaneT) run.template operator()<kLaneT>(t0);
    switch (n_tok - t0) {
      case 3: run.template operator()<3>(t0); break;
      case 2: run.template operator()<2>(t0); break;
      case 1: run.template operator()<1>(t0); break;
      default: break;
    }
  }
}

template <LaneKind K, typename Plain>
inline void gemm_lane_or_plain(const GemmArgs& g, Plain plain) {
  if (g.act->n_tok < kLanePanelMinTokens || g.scratch == nullptr) return plain(g);
  gemm_lane_panels<K>(g);
}
