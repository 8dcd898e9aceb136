// 256-bit x86 kernels shared by the AVX2 and AVX-512 translation units.
//
// NOT a normal header: it is included by kernels_avx2.cc and kernels_avx512.cc inside an
// anonymous namespace after `#pragma GCC target(...)`, so each includes its own copy compiled
// for its ISA (no ODR sharing between ISAs). Before including it, the TU defines:
//   __m256i mul_sum_us8(__m256i u8, __m256i s8);                 // 8 x int32 sums of 4 u8*s8
//   __m256i madd_acc16(__m256i acc, __m256i a16, __m256i b16);    // acc + pmaddwd(a, b)
// Only intrinsics and plain loops here: no standard-library templates (they would be
// instantiated for this ISA and could be picked by the linker for generic code).
//
// All kernels loop over rows and, per row, over tiles of up to kTileT tokens, so each weight
// row is decoded once per tile and stays in L1 across tiles.

constexpr int kTileT = 4;

// The activation sums of 32-value sub-blocks 2i and 2i + 1 of a Q8_K block (bsums 4i..4i + 3),
// packed as an int16 pair (low half 2i) for vpmaddwd / vpdpwssd against (m_2i, m_2i+1) pairs.
// Each sum fits int16: 32 values of at most 127 in magnitude.
inline int32_t q8k_sum_pair32(const BlockQ8_K& x, int i) {
  const auto s0 = static_cast<uint32_t>(x.bsums[4 * i] + x.bsums[4 * i + 1]);
  const auto s1 = static_cast<uint32_t>(x.bsums[4 * i + 2] + x.bsums[4 * i + 3]);
  return static_cast<int32_t>((s0 & 0xFFFF) | (s1 << 16));
}
// All four of them at once: q8k_sum_pair32(x, i) is dword kQ8KPairSlot[i] of the result (the
// eight 32-value sums by vpmaddwd, packed to int16 within each 128-bit lane; each sum is at most
// 32 * 128 in magnitude, so the saturating pack is exact). Without the scalar adds and the
// general-register broadcasts per pair (measured: 16 % of an 8-token AVX-512 Q4_K tile's time).
inline __m256i q8k_sum_pairs32(const BlockQ8_K& x) {
  const __m256i s = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)),
                                      _mm256_set1_epi16(1));
  return _mm256_packs_epi32(s, s);
}
constexpr int kQ8KPairSlot[4] = {0, 1, 4, 5};

// Prefetches the next 16-row group at a steady rate over every block step of every pass made
// over the current group. Batched kernels pass over a group several times (token tiles,
// halves) but only the first pass streams from DRAM; spreading the next group's lines over
// all the passes keeps DRAM busy the whole time instead of in bursts that fill the line-fill
// buffers and stall the compute (measured: an 8-token Q8_0 matmul from DRAM took the sum of
// its memory and compute times, not their maximum).
// With `one_pass` (the kernel reads the group once, front to back: the AVX2 K-quant tiles at
// 1-2 tokens, the AVX2 Q8_0 kernel at one) the window runs kPrefetchAheadBytes ahead of the
// read position instead, reaching into the next group only near the end of this one: with long
// rows (a down projection's 4864 columns make a 43-63 KB Q4_K/Q6_K group) a whole group ahead
// overflows L1 and the lines arrive too early; 8 KB ahead cut a 1-token 896x4864 Q4_K/Q6_K
// matmul from DRAM by 20-25 % on AVX2 (kernels_bench, alternated in one process; short rows
// keep the whole-group distance).
constexpr size_t kPrefetchAheadBytes = 8192;
struct PrefetchSpread {
  const char* next = nullptr;  // the next group, or null (nothing to prefetch)
  size_t bytes = 0;            // its size
  size_t done = 0;             // bytes prefetched so far
  size_t per_step = 64;        // bytes per block step, a multiple of 64
  size_t back = 0;             // the window starts at next - back (0: the next group itself)
  PrefetchSpread(const uint8_t* next_group, size_t group_bytes, int64_t steps, bool one_pass = false)
      : next(reinterpret_cast<const char*>(next_group)), bytes(group_bytes) {
    if (steps > 0) per_step = ((group_bytes / static_cast<size_t>(steps)) / 64 + 1) * 64;
    if (one_pass && group_bytes > kPrefetchAheadBytes) back = (group_bytes - kPrefetchAheadBytes) & ~size_t{63};
  }
  void step() {
    if (next == nullptr) return;
    const size_t end = done + per_step < bytes ? done + per_step : bytes;
    for (; done < end; done += 64) _mm_prefetch(next - back + done, _MM_HINT_T0);
  }
  // step()'s lines (the same ones, a partial last line included), not yet requested: the caller
  // issues them (LinePrefetch) a few at a time through its block step.
  template <typename Lines>
  Lines take() {
    if (next == nullptr) return {};
    const size_t end = done + per_step < bytes ? done + per_step : bytes;
    const Lines l{next - back + done, static_cast<int>((end - done + 63) / 64)};
    done = end;
    return l;
  }
};

// A block step's prefetch lines, issued through the step's inner loop (line(k) at iteration k of
// kIters: lines k, k + kIters, ...) instead of all at its start: a burst of 21-53 prefetches at
// every block start of a compute-heavy tile (5-8 tokens) left its DRAM stream no faster than the
// sum of its memory and compute times (kernels_avx512.cc, TilePrefetch).
struct LinePrefetch {
  const char* base = nullptr;
  int n = 0;  // lines from base
  // kBytes: the most a step takes (a block record), so at most kPer lines an iteration.
  template <int kIters, size_t kBytes>
  void line(int k) const {
    constexpr int kPer = static_cast<int>((kBytes / 64 + kIters - 1) / kIters);
#pragma GCC unroll 8
    for (int r = 0; r < kPer; ++r) {
      if (k + r * kIters < n) _mm_prefetch(base + 64 * (k + r * kIters), _MM_HINT_T0);
    }
  }
};

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Calls tile<T>(t0) for token tiles t0 = 0, 4, 8, ... with T = min(4, n_tok - t0).
template <typename F>
inline void for_token_tiles(int64_t n_tok, F&& tile) {
  int64_t t0 = 0;
  for (; t0 + kTileT <= n_tok; t0 += kTileT) tile.template operator()<4>(t0);
  switch (n_tok - t0) {
    case 3: tile.template operator()<3>(t0); break;
    case 2: tile.template operator()<2>(t0); break;
    case 1: tile.template operator()<1>(t0); break;
    default: break;
  }
}

// Calls group(grp, lane0, lane1, out_r) for every 16-row group of an R16 layout the rows of g
// touch: lanes [lane0, lane1) of group grp are output rows out_r, out_r + 1, ...
template <typename F>
inline void for_r16_groups(const GemmArgs& g, F&& group) {
  int64_t done = 0;
  const uint8_t* grp = g.w;
  int lane0 = static_cast<int>(g.row0);
  while (done < g.num_rows) {
    const int64_t left = g.num_rows - done;
    const int lane1 = left < 16 - lane0 ? lane0 + static_cast<int>(left) : 16;
    group(grp, lane0, lane1, done);
    done += lane1 - lane0;
    lane0 = 0;
    grp += g.stride;
  }
}

// ---- F32 / F16 / BF16 ------------------------------------------------------------------------

struct LoadF32 {
  static __m256 vec(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static float one(const uint8_t* p) {
    float f;
    __builtin_memcpy(&f, p, 4);
    return f;
  }
  static constexpr int kBytes = 4;
};
struct LoadF16 {
  static __m256 vec(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float one(const uint8_t* p) { return load_f16(p); }
  static constexpr int kBytes = 2;
};
struct LoadBF16 {
  static __m256 vec(const uint8_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static float one(const uint8_t* p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
  }
  static constexpr int kBytes = 2;
};

// Software prefetch distance of the float decode tiles (bytes ahead in each row; on the Zen 5
// host, wide F16 decode on avx2 in the same minutes: 512 B 56.5-57.5 t/s, 1024 B 55.3-57.4,
// 2048 B 52.0-55.5, none ~36-37 (with 4-row tiles)). Honours GemmArgs::sw_prefetch.
constexpr int64_t kFloatPrefetchBytes = 1024;
// Rows are contiguous, so a tile of R short rows is followed by the next tile's: prefetching the
// same column of the row R rows down (R * stride ahead) covers every row from its first line,
// where kFloatPrefetchBytes within the row misses each row's first KB. Used while the next tile
// is at most kFloatNextTileMaxBytes ahead (rows of <= 4 KB at R = 4); longer rows keep the
// in-row distance. kernels_bench BM_Matmul BF16 (index 13) 4864x896, 1 token, 2 threads, Zen 5,
// alternated: 367 / 277 -> 201 / 175 us; plain F16: 343 / 321 -> 286 / 200 us.
constexpr int64_t kFloatNextTileMaxBytes = 16384;
inline int64_t float_prefetch_ahead(size_t stride, int rows) {
  const int64_t next = static_cast<int64_t>(stride) * rows;
  return next <= kFloatNextTileMaxBytes ? next : kFloatPrefetchBytes;
}

// R rows x T tokens of a float-type matrix; scalar tail for cols % 8.
template <typename L, int R, int T>
inline void float_tile(const GemmArgs& g, int64_t r0, int64_t t0) {
  const Act& a = *g.act;
  const int64_t cols = a.cols;
  const uint8_t* w[R];
  const float* x[T];
  for (int r = 0; r < R; ++r) w[r] = g.w + static_cast<size_t>(r0 + r) * g.stride;
  for (int t = 0; t < T; ++t) x[t] = a.xf + (t0 + t) * cols;
  __m256 acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  const auto step = [&](int64_t kk) {
    __m256 xv[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x[t] + kk);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 wv = L::vec(w[r] + kk * L::kBytes);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  };
  int64_t k = 0;
  if (T <= 2 && g.sw_prefetch) {
    // Decode batches: each row's stream prefetched float_prefetch_ahead bytes ahead, one line a step.
    const int64_t pf_ahead = float_prefetch_ahead(g.stride, R);
    constexpr int64_t kLine = 64 / L::kBytes;  // values per 64-byte line
    for (; k + kLine <= cols; k += kLine) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w[r] + k * L::kBytes) + pf_ahead, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int64_t kk = k; kk < k + kLine; kk += 8) step(kk);
    }
  }
  for (; k + 8 <= cols; k += 8) step(k);
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = hsum_ps(acc[r][t]);
      for (int64_t kk = k; kk < cols; ++kk) s += L::one(w[r] + kk * L::kBytes) * x[t][kk];
      g.y[(t0 + t) * g.ldy + r0 + r] = s;
    }
  }
}

template <typename L>
inline void gemm_float(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  int64_t r = 0;
  // 4 rows a tile: at decode batches 4 weight streams and FMA chains in flight (with 2 rows an F16
  // decode from DRAM ran at ~20 GB/s), in batches 4 x 3 tokens (12 accumulators, the 4 converted
  // weight vectors reused by 3 FMAs each, the activations as FMA memory operands). A row's sums do
  // not depend on the tile.
  for (; r + 4 <= g.num_rows; r += 4) {
    int64_t t0 = 0;
    for (; t0 + 3 <= n_tok; t0 += 3) float_tile<L, 4, 3>(g, r, t0);
    if (n_tok - t0 == 2) float_tile<L, 4, 2>(g, r, t0);
    if (n_tok - t0 == 1) float_tile<L, 4, 1>(g, r, t0);
  }
  for (; r + 2 <= g.num_rows; r += 2) {
    for_token_tiles(n_tok, [&]<int T>(int64_t t0) { float_tile<L, 2, T>(g, r, t0); });
  }
  for (; r < g.num_rows; ++r) {
    for_token_tiles(n_tok, [&]<int T>(int64_t t0) { float_tile<L, 1, T>(g, r, t0); });
  }
}

inline void gemm_f32_256(const GemmArgs& g) { gemm_float<LoadF32>(g); }
inline void gemm_f16_256(const GemmArgs& g) { gemm_float<LoadF16>(g); }
inline void gemm_bf16_256(const GemmArgs& g) { gemm_float<LoadBF16>(g); }

// ---- Q8_0 / Q4_0 (signed weights x Q8_0 activations, sign trick) ----------------------------

// Signed 32 weights of block b: Q8_0 as stored; Q4_0 nibbles minus 8.
struct WQ8_0 {
  static constexpr size_t kBlockBytes = sizeof(BlockQ8_0);
  static constexpr bool kBlockOrder = false;
  static __m256i vals(const uint8_t* blk) { return loadu256(blk + 2); }
};
struct WQ4_0 {
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_0);
  static constexpr bool kBlockOrder = true;  // llama.cpp's x86 order (it repacks Q4_0: q4_0_8x8)
  static __m256i vals(const uint8_t* blk) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i m4 = _mm_set1_epi8(0xF);
    const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
  }
};

// kBlockOrder (W): each block's products summed exactly (S) and added with one FMA,
// acc = fma(float(S), d_w * d_x, acc), block by block: llama.cpp's x86 order for Q4_0 and IQ4_NL
// (it repacks both, q4_0_8x8 / iq4_nl_8x8, and its repacked kernels sum so; the scalar
// reference's gemm_q4_0 / gemm_iq4_nl, and every R16 kernel of both), and Q5_0's in the opt-in
// block order (matrix.h Q50Order::kBlock). Else 8 float lanes (4
// values each) reduced at the end. For matrices left in the plain layout (rare: the SIMD tiers
// repack these types), so kept simple.
template <typename W, int T>
inline void q8_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / 32;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  __m256 acc[T];
  float accb[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm256_setzero_ps();
    accb[t] = 0.0f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * W::kBlockBytes;
    const __m256i w = W::vals(blk);
    const __m256i aw = _mm256_sign_epi8(w, w);
    const float dw = load_f16(blk);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i x = loadu256(a.q8 + (t0 + t) * a.cols + b * 32);
      const __m256i p = mul_sum_us8(aw, _mm256_sign_epi8(x, w));
      const float d = dw * a.d8[(t0 + t) * nb + b];
      if constexpr (W::kBlockOrder) {
        accb[t] = std::fma(static_cast<float>(hsum_epi32(p)), d, accb[t]);
      } else {
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.ldy + r] = W::kBlockOrder ? accb[t] : hsum_ps(acc[t]);
}

template <typename W>
inline void gemm_q8(const GemmArgs& g) {
  for (int64_t r = 0; r < g.num_rows; ++r) {
    for_token_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { q8_tile<W, T>(g, r, t0); });
  }
}

inline void gemm_q8_0_256(const GemmArgs& g) { gemm_q8<WQ8_0>(g); }
inline void gemm_q4_0_256(const GemmArgs& g) { gemm_q8<WQ4_0>(g); }

// ---- Q4_K ------------------------------------------------------------------------------------

template <int T>
inline void q4_k_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * sizeof(BlockQ4_K);
    const float d = load_f16(blk), dmin = load_f16(blk + 2);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk + 4, &sc[j], &mn[j]);
    uint64_t mn64;
    __builtin_memcpy(&mn64, mn, 8);
    const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mn64)));
    const __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    const uint8_t* qs = blk + 16;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i v = loadu256(qs + 32 * c);
      const __m256i lo = _mm256_and_si256(v, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      const __m256i s_lo = _mm256_set1_epi16(sc[2 * c]);
      const __m256i s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* xq = a.qk[(t0 + t) * nb + b].qs + 64 * c;
        isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(lo, loadu256(xq)), s_lo);
        isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(hi, loadu256(xq + 32)), s_hi);
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& xb = a.qk[(t0 + t) * nb + b];
      const __m256i msum = _mm256_madd_epi16(loadu256(xb.bsums), mins);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * xb.d), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * xb.d), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.ldy + r] = hsum_ps(acc[t]);
}

inline void gemm_q4_k_256(const GemmArgs& g) {
  for (int64_t r = 0; r < g.num_rows; ++r) {
    for_token_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { q4_k_tile<T>(g, r, t0); });
  }
}

// ---- Q6_K ------------------------------------------------------------------------------------

template <int T>
inline void q6_k_tile(const GemmArgs& g, int64_t r, int64_t t0) {
  const Act& a = *g.act;
  const int64_t nb = a.cols / kQK_K;
  const uint8_t* row = g.w + static_cast<size_t>(r) * g.stride;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * sizeof(BlockQ6_K);
    const uint8_t* ql = blk;
    const uint8_t* qh = blk + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = load_f16(blk + 208);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    __m256i isum[T];
    for (int t = 0; t < T; ++t) {
      // -32 offset of every value, folded in with the 16-value activation sums.
      const __m256i corr = _mm256_madd_epi16(loadu256(a.qk[(t0 + t) * nb + b].bsums), sc16);
      isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
    }
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m256i l0 = loadu256(ql + 64 * c);
      const __m256i l1 = loadu256(ql + 64 * c + 32);
      const __m256i h = loadu256(qh + 32 * c);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
      q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const int s = 8 * c + 2 * i;
        const __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(sc[s + 1]), _mm_set1_epi16(sc[s]));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a.qk[(t0 + t) * nb + b].qs + 128 * c + 32 * i;
          isum[t] = madd_acc16(isum[t], _mm256_maddubs_epi16(q[i], loadu256(xq)), s16);
        }
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * a.qk[(t0 + t) * nb + b].d), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.ldy + r] = hsum_ps(acc[t]);
}

inline void gemm_q6_k_256(const GemmArgs& g) {
  for (int64_t r = 0; r < g.num_rows; ++r) {
    for_token_tiles(g.act->n_tok, [&]<int T>(int64_t t0) { q6_k_tile<T>(g, r, t0); });
  }
}

// ---- Activation preparation (bit-identical to the scalar versions) ---------------------------

inline void round_f16_256(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

inline __m256 round_bf16_vec(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  const __m256i rounded = _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
  // NaN: keep the top half and set the quiet bit.
  const __m256i nan = _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xffff0000u))),
                                      _mm256_set1_epi32(0x400000));
  const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(nan), is_nan);
}

inline void round_bf16_256(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, round_bf16_vec(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = i; j < n; ++j) tmp[j - i] = x[j];
    _mm256_storeu_ps(tmp, round_bf16_vec(_mm256_loadu_ps(tmp)));
    for (int64_t j = i; j < n; ++j) out[j] = tmp[j - i];
  }
}

inline float hmax_ps(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// 32 int32 (4 vectors, in order) -> 32 int8 in order.
inline __m256i pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // lanes interleaved by 128-bit halves
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// 8 vectors of 8 lanes -> one vector of their 8 maxima (lane b = max of v[b]); exact.
inline __m256 hmax8_ps(const __m256* v) {
  __m256 p[4];
  for (int k = 0; k < 4; ++k) {
    // [max over lanes {0,2} / {1,3} of v[2k], v[2k+1] interleaved | the same for 4..7]
    p[k] = _mm256_max_ps(_mm256_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm256_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  }
  // [v0, v1, v2, v3 over lanes 0..3 | the same over 4..7], then v4..v7.
  const __m256 e = _mm256_max_ps(_mm256_shuffle_ps(p[0], p[1], 0x44), _mm256_shuffle_ps(p[0], p[1], 0xEE));
  const __m256 f = _mm256_max_ps(_mm256_shuffle_ps(p[2], p[3], 0x44), _mm256_shuffle_ps(p[2], p[3], 0xEE));
  return _mm256_max_ps(_mm256_permute2f128_ps(e, f, 0x20), _mm256_permute2f128_ps(e, f, 0x31));
}

// 8 vectors of 8 int32 -> one vector of their 8 sums (lane b = sum of v[b]); exact.
inline __m256i hsum8_epi32(const __m256i* v) {
  const __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i e = _mm256_hadd_epi32(a, b), f = _mm256_hadd_epi32(c, d);  // [v0..v3 low halves | high halves]
  return _mm256_add_epi32(_mm256_permute2x128_si256(e, f, 0x20), _mm256_permute2x128_si256(e, f, 0x31));
}

// Per-block scales of 8 blocks from their maxima: d = fp16-rounded amax / 127 into dout[0..8),
// and the multipliers id = 127 / amax (0 where amax == 0), as quantize_act_q8_0 computes them
// (IEEE division is exact-rounded in every lane, as in scalar code).
inline __m256 q8_0_scales8(__m256 amax, float* dout) {
  const __m256 d = _mm256_div_ps(amax, _mm256_set1_ps(127.f));
  _mm256_storeu_ps(dout, _mm256_cvtph_ps(_mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT)));
  const __m256 id = _mm256_div_ps(_mm256_set1_ps(127.f), amax);
  return _mm256_and_ps(id, _mm256_cmp_ps(amax, _mm256_setzero_ps(), _CMP_NEQ_OQ));
}

inline void quantize_q8_0_256(const float* x, int64_t n, int8_t* qs, float* dout, int32_t* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t b = 0;
  // Eight blocks at a time: their maxima, scales and sums reduced together (the horizontal
  // reductions were most of the per-block work). The float -> int conversion rounds to nearest
  // even under the default MXCSR, like nearest() (std::nearbyint) in the scalar reference.
  for (; b + 8 <= n / 32; b += 8) {
    const float* xb = x + 32 * b;
    __m256 mx[8];
    for (int k = 0; k < 8; ++k) {
      __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 32 * k));
      for (int j = 1; j < 4; ++j) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 32 * k + 8 * j)));
      mx[k] = m;
    }
    alignas(32) float id[8];
    _mm256_store_ps(id, q8_0_scales8(hmax8_ps(mx), dout + b));
    __m256i s[8];
    for (int k = 0; k < 8; ++k) {
      const __m256 vid = _mm256_broadcast_ss(id + k);
      __m256i q[4];
      for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * k + 8 * j), vid));
      s[k] = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * (b + k)), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sum + b), hsum8_epi32(s));
  }
  for (; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    __m256 v[4];
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(xb + 8 * j);
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[j]));
    }
    const float amax = hmax_ps(mx);
    const float id = amax != 0 ? 127.f / amax : 0.f;
    dout[b] = _cvtsh_ss(_cvtss_sh(amax / 127.f, _MM_FROUND_TO_NEAREST_INT));
    __m256i q[4];
    __m256i s = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      q[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], _mm256_set1_ps(id)),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      s = _mm256_add_epi32(s, q[j]);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * b), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
    sum[b] = hsum_epi32(s);
  }
}

inline void quantize_q8_k_256(const float* x, int64_t n, BlockQ8_K* y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    BlockQ8_K& out = y[b];
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < kQK_K; j += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    const float amax = hmax_ps(mx);
    if (amax == 0) {
      __builtin_memset(&out, 0, sizeof(out));
      continue;
    }
    // The first element of largest magnitude, like the scalar: 8 lanes compared at a time (a
    // scalar scan to it averaged about as long as the rest of the block's quantization).
    float max = 0;
    const __m256 va = _mm256_set1_ps(amax);
    for (int j = 0; j < kQK_K; j += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ));
      if (hit != 0) {
        max = x[j + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i lim = _mm256_set1_epi32(127);
    for (int j = 0; j < kQK_K; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vs),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        q[k] = _mm256_min_epi32(q[k], lim);
      }
      const __m256i q8 = pack_i32_to_i8(q[0], q[1], q[2], q[3]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs + j), q8);
      // Two 16-value sums: widen to int16 and add pairs with pmaddwd against ones.
      const __m256i w = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q8), _mm256_set1_epi16(1));
      // w: 8 int32 sums of 4; lanes 0..3 = values 0..15, 4..7 = values 16..31.
      const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
      out.bsums[j / 16] = static_cast<int16_t>(hsum_epi32(_mm256_set_m128i(_mm_setzero_si128(), lo)));
      out.bsums[j / 16 + 1] = static_cast<int16_t>(hsum_epi32(_mm256_set_m128i(_mm_setzero_si128(), hi)));
    }
    out.d = 1 / iscale;
  }
}
