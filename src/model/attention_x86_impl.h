// Shared body of the AVX2 and AVX-512 tiled-attention kernels (attention_kernels.h), included
// by attention_avx2.cc and attention_avx512.cc after they define the TS_* vector macros (type,
// width, intrinsics), the helpers r16-style code relies on (high_half, combine, load_halves,
// store_halves, load_i8) and exp_tile; compiled once per ISA under that file's target pragma.
// Not a public header.
namespace ts::model::attn {
namespace {

constexpr int W = TS_W;  // lanes per vector

inline TS_V r16(TS_V x) {
  return TS_CVTPH(TS_CVTPS(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// GCC has _Float16 on x86; clang 14 (the fuzz build) only with AVX512-FP16: use the
// tensor/fp16.h conversions there (same round-to-nearest-even results).
#if defined(__GNUC__) && !defined(__clang__)
inline float rnd16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }
inline float half_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
inline uint16_t float_to_half(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
#else
inline float rnd16(float x) { return tensor::round_fp16(x); }
inline float half_to_float(uint16_t h) { return tensor::fp16_to_fp32(h); }
inline uint16_t float_to_half(float f) { return tensor::fp32_to_fp16(f); }
#endif

// Scores for W keys starting at lane `off` of the transposed tile.
inline void scores_lanes(const float* q, const float* kt, int32_t hd, float scale, float* out, int off) {
  const int32_t np = hd & ~31;
  TS_V r[8];
  for (int l = 0; l < 8; ++l) {
    TS_V a0 = TS_SETZERO(), a1 = TS_SETZERO(), a2 = TS_SETZERO(), a3 = TS_SETZERO();
    for (int32_t c = 0; c < np; c += 32) {
      a0 = TS_FMADD(TS_SET1(q[c + l]), TS_LOADU(kt + (c + l) * kKeyTile + off), a0);
      a1 = TS_FMADD(TS_SET1(q[c + 8 + l]), TS_LOADU(kt + (c + 8 + l) * kKeyTile + off), a1);
      a2 = TS_FMADD(TS_SET1(q[c + 16 + l]), TS_LOADU(kt + (c + 16 + l) * kKeyTile + off), a2);
      a3 = TS_FMADD(TS_SET1(q[c + 24 + l]), TS_LOADU(kt + (c + 24 + l) * kKeyTile + off), a3);
    }
    r[l] = TS_ADD(TS_ADD(a0, a2), TS_ADD(a1, a3));
  }
  TS_V t0 = TS_ADD(r[0], r[4]), t1 = TS_ADD(r[1], r[5]), t2 = TS_ADD(r[2], r[6]), t3 = TS_ADD(r[3], r[7]);
  TS_V res = TS_ADD(TS_ADD(t0, t1), TS_ADD(t2, t3));
  if (np < hd) {
    // Tail in double, as ggml does past the last multiple of 32.
    TS_VD lo = TS_CVTPD(TS_LOWHALF(res)), hi = TS_CVTPD(TS_HIGHHALF(res));
    for (int32_t d = np; d < hd; ++d) {
      const TS_V prod = TS_MUL(TS_SET1(q[d]), TS_LOADU(kt + d * kKeyTile + off));
      lo = TS_ADDPD(lo, TS_CVTPD(TS_LOWHALF(prod)));
      hi = TS_ADDPD(hi, TS_CVTPD(TS_HIGHHALF(prod)));
    }
    res = TS_COMBINE(TS_CVTPDPS(lo), TS_CVTPDPS(hi));
  }
  TS_STOREU(out + off, TS_MUL(res, TS_SET1(scale)));
}


// The sum chains s = fma(s, ms[i], w[i]) (keys in order) of R rows, rows innermost: the rows'
// chains (one dependent fma per key, latency-bound) advance side by side. Run row after row,
// each row's 16 dependent fmas were ~60 % of online_f16's time (perf, Decode8 smollm2 shape):
// out-of-order execution did not overlap the rows' chains.
template <int R>
inline void sum_chains(const float* ms, const float* w, int32_t i0, int32_t i1, float* s_io) {
  float s[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) s[r] = s_io[r];
  // Where no row rescales in [i0, i1) (every ms 1: the running maxima did not move, most
  // tiles once a context is a few tiles long) fma(s, 1, w) is s + w exactly (s * 1 is exact,
  // then the one rounding), so the chains are adds, whose latency is shorter than an fma's.
  // online_f16 below leaves ms 1 on every lane outside [i0, i1) (its running max there is
  // +inf), so whole rows are tested.
  bool ones = true;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int off = 0; off < kKeyTile; off += W) ones = ones && !any_ne_one(TS_LOADU(ms + r * kKeyTile + off), W);
  if (ones) {
    for (int32_t i = i0; i < i1; ++i) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r] += w[r * kKeyTile + i];
    }
  } else {
    for (int32_t i = i0; i < i1; ++i) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[r] = std::fma(s[r], ms[r * kKeyTile + i], w[r * kKeyTile + i]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) s_io[r] = s[r];
}

// Branch-free form of the reference's one-key-a-step rule: the running max before key i, mp[i],
// comes from a max chain (std::max(m, sc) is the reference's "sc > m ? sc : m"); then per lane,
// at vector width, rescaled = sc > mp, the exp argument, and w / ms by selects. Then the rows'
// sum chains in passes of up to 8 rows (sum_chains). Lanes outside [i0, i1) of w and ms are
// written with values nobody reads.
template <int32_t kRowsPerPass>
void online_f16_weights(const float* sc, int32_t nrows, int32_t i0, int32_t i1, float* m_io, float* w, float* ms) {
  const TS_V one = TS_SET1(1.f), inf = TS_SET1(INFINITY);
  // Every lane outside [i0, i1) gets ms = 1 (mp is +inf there, never "rescaled"): sum_chains
  // relies on it. Rows in groups of up to kRowsPerPass, each step for all of them before the
  // next (the max scans, then the exps, then the selects), so the rows' independent chains sit
  // side by side in the instruction stream.
  alignas(64) float mp[kRowsPerPass][kKeyTile], args[kRowsPerPass][kKeyTile], e[kRowsPerPass][kKeyTile];
  for (int32_t rb = 0; rb < nrows; rb += kRowsPerPass) {
    const int32_t nb = std::min(kRowsPerPass, nrows - rb);
    for (int32_t q = 0; q < nb; ++q) {  // the max chain: a short log-step scan
      const int32_t r = rb + q;
      const float* scr = sc + r * kKeyTile;
      float m = m_io[r];
      if (!any_gt_or_nan(scr, i0, i1, m)) {
        // No key of the tile raises the running max (most tiles once a context is a few tiles
        // long): the max before every key is m, so args = sc - m on [i0, i1) and -inf outside,
        // the same bits as the scan's; mp = +inf makes every lane "not rescaled" (ms = 1,
        // w = exp) in the select below.
        const TS_V mv = TS_SET1(m);
        for (int off = 0; off < kKeyTile; off += W) {
          TS_STOREU(mp[q] + off, inf);
          TS_STOREU(args[q] + off, vsel_in(off, i0, i1, TS_SUB(TS_LOADU(scr + off), mv), TS_SET1(-INFINITY)));
        }
        continue;
      }
      if (!prefix_max_tile(scr, i0, i1, m, mp[q], &m)) {  // a NaN score: the serial chain
        for (int off = 0; off < kKeyTile; off += W) TS_STOREU(mp[q] + off, inf);  // lanes past the range: never "rescaled"
        for (int32_t i = i0; i < i1; ++i) {
          mp[q][i] = m;
          m = std::max(m, scr[i]);
        }
      }
      m_io[r] = m;
      for (int off = 0; off < kKeyTile; off += W) {
        const TS_V x = TS_LOADU(scr + off), pm = TS_LOADU(mp[q] + off);
        TS_STOREU(args[q] + off, vsel_gt(x, pm, TS_SUB(pm, x), TS_SUB(x, pm)));
      }
    }
    for (int32_t q = 0; q < nb; ++q) exp_tile(args[q], e[q]);
    for (int32_t q = 0; q < nb; ++q) {
      const int32_t r = rb + q;
      const float* scr = sc + r * kKeyTile;
      for (int off = 0; off < kKeyTile; off += W) {
        const TS_V x = TS_LOADU(scr + off), pm = TS_LOADU(mp[q] + off), ex = TS_LOADU(e[q] + off);
        TS_STOREU(ms + r * kKeyTile + off, vsel_gt(x, pm, ex, one));
        TS_STOREU(w + r * kKeyTile + off, vsel_gt(x, pm, one, ex));
      }
    }
  }
}

void online_f16(const float* sc, int32_t nrows, int32_t i0, int32_t i1, float* m_io, float* s_io, float* w,
                float* ms) {
  // AVX2 (exp 4 lanes at a time: 4 chains per row) groups up to 8 rows: attention_bench Decode8
  // x0.91-0.97 on Zen 5. AVX-512 groups only from 5 rows (Qwen's 7: x0.96); SmolLM2's 3-row
  // groups ran x1.05 grouped, so up to 4 rows it keeps one row per pass.
  if (W == 8 || nrows >= 5) {
    online_f16_weights<8>(sc, nrows, i0, i1, m_io, w, ms);
  } else {
    online_f16_weights<1>(sc, nrows, i0, i1, m_io, w, ms);
  }
  for (int32_t r0 = 0; r0 < nrows; r0 += 8) {
    const float* mr = ms + r0 * kKeyTile;
    const float* wr = w + r0 * kKeyTile;
    float* sr = s_io + r0;
    switch (std::min(8, nrows - r0)) {
      case 1: sum_chains<1>(mr, wr, i0, i1, sr); break;
      case 2: sum_chains<2>(mr, wr, i0, i1, sr); break;
      case 3: sum_chains<3>(mr, wr, i0, i1, sr); break;
      case 4: sum_chains<4>(mr, wr, i0, i1, sr); break;
      case 5: sum_chains<5>(mr, wr, i0, i1, sr); break;
      case 6: sum_chains<6>(mr, wr, i0, i1, sr); break;
      case 7: sum_chains<7>(mr, wr, i0, i1, sr); break;
      default: sum_chains<8>(mr, wr, i0, i1, sr); break;
    }
  }
}

// R rows (a compile-time count, so each row's running max and sum stay in a register and the
// row loops unroll): the serial max chains run key by key with the rows innermost, so the rows'
// chains (one std::max or one add per key each, latency-bound) overlap instead of running one
// row after another; likewise the sum chains. The weights are one vector exp per row, the R
// rescales one vector exp together. Every row sees the reference's operations in its order.
alignas(64) constexpr float kLaneIndex[kKeyTile] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

template <int R>
inline void online_f32_rows(const float* sc, int32_t i0, int32_t i1, float* m_io, float* s_io, float* w,
                            float* rescale) {
  float m[R], s[R];
  alignas(64) float args[kKeyTile] = {}, rs[kKeyTile];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) m[r] = m_io[r];
  for (int32_t i = i0; i < i1; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) m[r] = std::max(m[r], sc[r * kKeyTile + i]);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) args[r] = m_io[r] - m[r];
  exp_tile(args, rs);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    // exp(sc - m') on the lanes in [i0, i1), exp(0) elsewhere: a lane past the tile's keys may
    // hold a stale slot's score, whose exp could be subnormal (a microcode assist per lane in
    // the double-to-float conversion: measured ~5% of an engine_bench decode step).
    alignas(64) float a[kKeyTile];
    const TS_V mv = TS_SET1(m[r]), lo = TS_SET1(static_cast<float>(i0) - 0.5f), hi = TS_SET1(static_cast<float>(i1) - 0.5f);
#pragma GCC unroll 2
    for (int off = 0; off < kKeyTile; off += W) {
      const TS_V lane = TS_LOADU(kLaneIndex + off), zero = TS_SETZERO();
      const TS_V x = TS_SUB(TS_LOADU(sc + r * kKeyTile + off), mv);
      TS_STOREU(a + off, vsel_gt(lane, lo, vsel_gt(hi, lane, x, zero), zero));
    }
    exp_tile(a, w + r * kKeyTile);
    s[r] = s_io[r] * rs[r];
  }
  for (int32_t i = i0; i < i1; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) s[r] += w[r * kKeyTile + i];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    m_io[r] = m[r];
    s_io[r] = s[r];
    rescale[r] = rs[r];
  }
}

void online_f32(const float* sc, int32_t nrows, int32_t i0, int32_t i1, float* m_io, float* s_io, float* w,
                float* rescale) {
  constexpr int kRows = 4;  // rows per pass (4 chains cover the max / add latency)
  for (int32_t r = 0; r < nrows; r += kRows) {
    const float* scr = sc + static_cast<int64_t>(r) * kKeyTile;
    float* wr = w + static_cast<int64_t>(r) * kKeyTile;
    switch (std::min<int32_t>(kRows, nrows - r)) {
      case 1: online_f32_rows<1>(scr, i0, i1, m_io + r, s_io + r, wr, rescale + r); break;
      case 2: online_f32_rows<2>(scr, i0, i1, m_io + r, s_io + r, wr, rescale + r); break;
      case 3: online_f32_rows<3>(scr, i0, i1, m_io + r, s_io + r, wr, rescale + r); break;
      default: online_f32_rows<4>(scr, i0, i1, m_io + r, s_io + r, wr, rescale + r); break;
    }
  }
}

void cvt_f16(const uint16_t* src, float* dst, int32_t n) {
  int32_t i = 0;
  for (; i + W <= n; i += W) TS_STOREU(dst + i, TS_CVTPH(TS_LOADH(src + i)));
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void load_kt_f16(const uint16_t* k, int32_t stride, int32_t hd, float* kt) {
  for (int32_t d = 0; d < hd; ++d)
    for (int off = 0; off < kKeyTile; off += W) TS_STOREU(kt + d * kKeyTile + off, TS_CVTPH(load_halves(k + d * stride + off)));
}

void load_kt_q8(const int8_t* k, int32_t stride, const float* scale, int32_t hd, float* kt) {
  for (int32_t d = 0; d < hd; ++d)
    for (int off = 0; off < kKeyTile; off += W)
      TS_STOREU(kt + d * kKeyTile + off, TS_MUL(TS_LOADU(scale + off), load_i8(k + d * stride + off)));
}

void load_v_q8(const int8_t* v, const float* scale, int32_t n, int32_t hd, float* vt) {
  for (int32_t i = 0; i < n; ++i) {
    const int8_t* src = v + static_cast<int64_t>(i) * hd;
    float* dst = vt + static_cast<int64_t>(i) * hd;
    const TS_V d = TS_SET1(scale[i]);
    int32_t e = 0;
    for (; e + W <= hd; e += W) TS_STOREU(dst + e, TS_MUL(d, load_i8(src + e)));
    for (; e < hd; ++e) dst[e] = scale[i] * src[e];
  }
}

void cvt_to_f16(const float* src, uint16_t* dst, int32_t n) {
  int32_t i = 0;
  for (; i + W <= n; i += W) store_halves(dst + i, TS_CVTPS(TS_LOADU(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

// All kKeyTile lanes of R query rows in one pass when the head is a multiple of 32 (no double
// tail), K vector o of dimension d from kload(d, o): each K vector is loaded once for the R
// rows' FMAs, and each broadcast query value feeds the FMAs of every lane group of the tile
// (AVX2: two vectors of 8 keys). Per lane the accumulators, their order and the final tree are
// scores_lanes' exactly (bit-identical, whichever exact load). NC = hd / 32 when it is a
// compile-time count (1, 2, 4: head_dim 32, 64, 128), so the chunk loop unrolls (hd 64 runs
// it twice: a loop of two iterations per l and row cost ~2x its FMAs, AVX2 perf); 0: runtime.
template <int R, int NC, typename KLoad>
inline void scores_tile_rows_by(const float* q, KLoad kload, int32_t hd_rt, float scale, float* out) {
  constexpr int NO = kKeyTile / W;
  const int32_t hd = NC > 0 ? NC * 32 : hd_rt;
  alignas(64) float rr[R][8][kKeyTile];
  for (int l = 0; l < 8; ++l) {
    TS_V a[R][4][NO];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j)
#pragma GCC unroll 2
        for (int o = 0; o < NO; ++o) a[r][j][o] = TS_SETZERO();
#pragma GCC unroll 4
    for (int32_t c = 0; c < hd; c += 32) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        TS_V kv[NO];
#pragma GCC unroll 2
        for (int o = 0; o < NO; ++o) kv[o] = kload(c + 8 * j + l, o);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const TS_V qv = TS_SET1(q[r * hd + c + 8 * j + l]);
#pragma GCC unroll 2
          for (int o = 0; o < NO; ++o) a[r][j][o] = TS_FMADD(qv, kv[o], a[r][j][o]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int o = 0; o < NO; ++o)
        TS_STOREU(rr[r][l] + o * W, TS_ADD(TS_ADD(a[r][0][o], a[r][2][o]), TS_ADD(a[r][1][o], a[r][3][o])));
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) {
      const int off = o * W;
      const TS_V t0 = TS_ADD(TS_LOADU(rr[r][0] + off), TS_LOADU(rr[r][4] + off));
      const TS_V t1 = TS_ADD(TS_LOADU(rr[r][1] + off), TS_LOADU(rr[r][5] + off));
      const TS_V t2 = TS_ADD(TS_LOADU(rr[r][2] + off), TS_LOADU(rr[r][6] + off));
      const TS_V t3 = TS_ADD(TS_LOADU(rr[r][3] + off), TS_LOADU(rr[r][7] + off));
      TS_STOREU(out + r * kKeyTile + off, TS_MUL(TS_ADD(TS_ADD(t0, t1), TS_ADD(t2, t3)), TS_SET1(scale)));
    }
}

// nrows query rows in passes of up to kMaxRows (scores_tile_rows_by for each pass).
template <int kMaxRows, int NC, typename KLoad>
void scores_row_passes_nc(const float* q, int32_t nrows, KLoad kload, int32_t hd, float scale, float* out) {
  for (int32_t r0 = 0; r0 < nrows; r0 += kMaxRows) {
    const float* qr = q + static_cast<size_t>(r0) * hd;
    float* o = out + r0 * kKeyTile;
    switch (std::min(kMaxRows, nrows - r0)) {
      case 1: scores_tile_rows_by<1, NC>(qr, kload, hd, scale, o); break;
      case 2: if constexpr (kMaxRows >= 2) scores_tile_rows_by<2, NC>(qr, kload, hd, scale, o); break;
      case 3: if constexpr (kMaxRows >= 3) scores_tile_rows_by<3, NC>(qr, kload, hd, scale, o); break;
      default: if constexpr (kMaxRows >= 4) scores_tile_rows_by<4, NC>(qr, kload, hd, scale, o); break;
    }
  }
}

// hd % 32 == 0: the common head sizes with a compile-time chunk count.
template <int kMaxRows, typename KLoad>
void scores_row_passes(const float* q, int32_t nrows, KLoad kload, int32_t hd, float scale, float* out) {
  switch (hd) {
    case 32: scores_row_passes_nc<kMaxRows, 1>(q, nrows, kload, hd, scale, out); break;
    case 64: scores_row_passes_nc<kMaxRows, 2>(q, nrows, kload, hd, scale, out); break;
    case 128: scores_row_passes_nc<kMaxRows, 4>(q, nrows, kload, hd, scale, out); break;
    default: scores_row_passes_nc<kMaxRows, 0>(q, nrows, kload, hd, scale, out); break;
  }
}

void scores_ggml(const float* q, const float* kt, int32_t hd, float scale, float* out) {
  if (hd % 32 == 0) {
    scores_row_passes<1>(q, 1, [kt](int32_t d, int o) { return TS_LOADU(kt + d * kKeyTile + o * W); }, hd, scale, out);
    return;
  }
  for (int off = 0; off < kKeyTile; off += W) scores_lanes(q, kt, hd, scale, out, off);
}

// Rows in passes of up to 4 (AVX-512: 4 x 4 accumulators fit the 32 registers); AVX2's 16
// registers hold one row's 4 x 2 only, so it keeps one row per pass.
void scores_rows(const float* q, int32_t nrows, const float* kt, int32_t hd, float scale, float* out) {
  constexpr int kMaxRows = W == 16 ? 4 : 1;
  if (hd % 32 != 0) {
    for (int32_t r = 0; r < nrows; ++r) scores_ggml(q + static_cast<size_t>(r) * hd, kt, hd, scale, out + r * kKeyTile);
    return;
  }
  // From the transposed f32 tile kt ([hd][kKeyTile]).
  scores_row_passes<kMaxRows>(
      q, nrows, [kt](int32_t d, int o) { return TS_LOADU(kt + d * kKeyTile + o * W); }, hd, scale, out);
}

// In registers on the AVX-512 table for whole-32 heads (up to 4 rows a pass, as scores_rows);
// otherwise (AVX2 keeps one row per pass, so it would convert K once per row) the tile is
// converted once and scored by scores_rows.
void scores_rows_f16k(const float* q, int32_t nrows, const uint16_t* k, int32_t stride, int32_t hd, float scale,
                      float* out) {
  // Through an f32 tile of K, converted once: off the AVX-512 whole-32 path, and for many passes
  // (prefill blocks of 48 rows), where one conversion loaded by every pass is cheaper than one
  // per pass (attention_bench x0.95). Not for a decode group (Qwen's 7 rows: the tile's store and
  // reload cost more, x1.2).
  if (W != 16 || hd % 32 != 0 || nrows > 8) {
    thread_local std::vector<float> kt;
    if (kt.size() < static_cast<size_t>(hd) * kKeyTile) kt.resize(static_cast<size_t>(hd) * kKeyTile);
    load_kt_f16(k, stride, hd, kt.data());
    scores_rows(q, nrows, kt.data(), hd, scale, out);
    return;
  }
  // Straight from the page: each K vector is converted in a register once for the pass's rows,
  // so no f32 tile is stored and reloaded (the conversion is exact: the f32 tile's scores).
  scores_row_passes<4>(
      q, nrows,
      [k, stride](int32_t d, int o) { return TS_CVTPH(TS_LOADH(k + static_cast<int64_t>(d) * stride + o * W)); }, hd,
      scale, out);
}

// The accumulators, acc [nrows][hd], split three ways so that every loop over keys carries
// several independent rounding chains (each chain's latency, not throughput, bounds a key):
//  1. dimensions [0, hd4): blocks of 4 vectors x 2 rows (8 chains);
//  2. dimensions [hd4, hdw): the remaining whole vectors of every row, up to kChains (row,
//     offset) chains at once;
//  3. dimensions [hdw, hd) (nt < W of them per row, all of head_dim when it is narrower than
//     a vector): packed across rows, lane l of packed vector p holding flattened element
//     e = p * W + l (row e / nt, dimension hdw + e % nt), so narrow heads (stories260K's 8)
//     run at vector width instead of one element at a time.
// Every element still sees the reference's sequence of operations: per key, the rescale (a
// lane whose row has ms == 1 is multiplied by 1, exact on the fp16 values the chain holds),
// then the fused multiply-add, each rounded to fp16 (acc_f16) or not (acc_f32).
constexpr int kChains = 8;

template <bool kF16>
inline TS_V acc_step(TS_V a, TS_V vv, TS_V wv) {
  return kF16 ? r16(TS_FMADD(vv, wv, a)) : TS_FMADD(wv, vv, a);
}

// acc_step with V read by the FMA itself from memory (an f32 tile): GCC otherwise hoists the
// row-invariant V loads out of the row loop and, short of registers, spills accumulators.
// Inline asm keeps the load a memory operand (vfmadd231ps: a = w * v + a, the same fma).
template <bool kF16>
inline TS_V acc_step_mem(TS_V a, const float* v, TS_V wv) {
#if defined(__GNUC__)
  asm("vfmadd231ps %[v], %[w], %[a]" : [a] "+x"(a) : [w] "x"(wv), [v] "m"(*reinterpret_cast<const TS_V*>(v)));
  return kF16 ? r16(a) : a;
#else
  return acc_step<kF16>(a, TS_LOADU(v), wv);
#endif
}

// Part 1: R rows x NV vectors starting at dimension d (R * NV = 8 chains: 2 rows x 4 vectors,
// or a row left over from the pairs as 1 x 8 when the head is that wide, so that it too keeps
// 8 rounding chains in flight instead of 4; with 32 registers also 3 rows x 4 vectors = 12 for
// odd groups; per element the operations are the same).
// V as f32 (a converted tile) or straight from an F16 page (uint16_t: each vector converted in
// registers, once per key for the R rows; exact, so the same bits).
inline TS_V load_v(const float* p) { return TS_LOADU(p); }
inline TS_V load_v(const uint16_t* p) { return TS_CVTPH(TS_LOADH(p)); }

template <bool kF16, int R, int NV = 4, typename VT = float>
void acc_block4(float* acc, const VT* v, const float* w, const float* ms, const float* rescale, int32_t i0,
                int32_t i1, int32_t hd, int32_t d) {
  // The NV * R accumulators must stay in registers (an array GCC leaves on the stack puts a
  // store-to-load forward in every chain step): fixed-trip loops, unrolled.
  TS_V a[R][NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) a[r][c] = TS_LOADU(acc + r * hd + d + c * W);
    if (!kF16) {
      const TS_V rs = TS_SET1(rescale[r]);
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) a[r][c] = TS_MUL(a[r][c], rs);
    }
  }
  // AVX2 (16 registers) with 3 rows x 4 vectors = 12 chains: V (f32) is read by each FMA from
  // memory (loads are cheap; 4 more registers for V would spill the accumulators).
  constexpr bool kVFromMemory = W == 8 && R * NV > 8;
  static_assert(!kVFromMemory || std::is_same_v<VT, float>);
  for (int32_t i = i0; i < i1; ++i) {
    const VT* vi = v + static_cast<int64_t>(i) * hd + d;
    TS_V vv[NV];
    if constexpr (!kVFromMemory) {
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) vv[c] = load_v(vi + c * W);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (kF16) {
        const float msr = ms[r * kKeyTile + i];
        if (msr != 1.f) {
          const TS_V m = TS_SET1(msr);
#pragma GCC unroll 8
          for (int c = 0; c < NV; ++c) a[r][c] = r16(TS_MUL(a[r][c], m));
        }
      }
      const TS_V wv = TS_SET1(w[r * kKeyTile + i]);
      if constexpr (kVFromMemory) {
#pragma GCC unroll 8
        for (int c = 0; c < NV; ++c) a[r][c] = acc_step_mem<kF16>(a[r][c], vi + c * W, wv);
      } else {
#pragma GCC unroll 8
        for (int c = 0; c < NV; ++c) a[r][c] = acc_step<kF16>(a[r][c], vv[c], wv);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) TS_STOREU(acc + r * hd + d + c * W, a[r][c]);
}

// Part 2: whole vectors of dimensions [d0, d1) of every row, kChains (row, offset) at a time;
// NC chains per pass, a compile-time count so they stay in registers.
template <bool kF16, int NC>
void acc_chains(float* acc, const float* v, const float* w, const float* ms, const float* rescale, int32_t i0,
                int32_t i1, int32_t hd, int32_t d0, int32_t per_row, int32_t c0) {
  TS_V a[NC];
  int32_t row[NC], off[NC];
  for (int c = 0; c < NC; ++c) {
    row[c] = (c0 + c) / per_row;
    off[c] = d0 + (c0 + c) % per_row * W;
    a[c] = TS_LOADU(acc + static_cast<int64_t>(row[c]) * hd + off[c]);
    if (!kF16) a[c] = TS_MUL(a[c], TS_SET1(rescale[row[c]]));
  }
  for (int32_t i = i0; i < i1; ++i) {
    const float* vi = v + static_cast<int64_t>(i) * hd;
    for (int c = 0; c < NC; ++c) {
      if (kF16) {
        const float msr = ms[row[c] * kKeyTile + i];
        if (msr != 1.f) a[c] = r16(TS_MUL(a[c], TS_SET1(msr)));
      }
      a[c] = acc_step<kF16>(a[c], TS_LOADU(vi + off[c]), TS_SET1(w[row[c] * kKeyTile + i]));
    }
  }
  for (int c = 0; c < NC; ++c) TS_STOREU(acc + static_cast<int64_t>(row[c]) * hd + off[c], a[c]);
}

template <bool kF16>
void acc_whole_vectors(float* acc, int32_t nrows, const float* v, const float* w, const float* ms,
                       const float* rescale, int32_t i0, int32_t i1, int32_t hd, int32_t d0, int32_t d1) {
  const int32_t per_row = (d1 - d0) / W, total = nrows * per_row;
  int32_t c0 = 0;
  for (; c0 + kChains <= total; c0 += kChains)
    acc_chains<kF16, kChains>(acc, v, w, ms, rescale, i0, i1, hd, d0, per_row, c0);
  switch (total - c0) {
#define TS_CHAINS_CASE(n) \
  case n: acc_chains<kF16, n>(acc, v, w, ms, rescale, i0, i1, hd, d0, per_row, c0); break;
    TS_CHAINS_CASE(1) TS_CHAINS_CASE(2) TS_CHAINS_CASE(3) TS_CHAINS_CASE(4)
    TS_CHAINS_CASE(5) TS_CHAINS_CASE(6) TS_CHAINS_CASE(7)
#undef TS_CHAINS_CASE
    default: break;
  }
}

// Part 3: dimensions [d0, hd), nt = hd - d0 < W per row, packed across rows (see above).
template <bool kF16>
void acc_packed_tail(float* acc, int32_t nrows, const float* v, const float* w, const float* ms,
                     const float* rescale, int32_t i0, int32_t i1, int32_t hd, int32_t d0) {
  constexpr int kRows = 16;       // rows per pass (stack buffers)
  constexpr int kGroup = 4;       // packed vectors per pass over the keys
  constexpr int kMaxVec = kRows;  // ceil(kRows * nt / W) <= kRows
  const int32_t nt = hd - d0;
  alignas(64) float pk[kMaxVec * W];
  alignas(64) float wt[kKeyTile][kRows], mt[kKeyTile][kRows];
  alignas(64) int32_t iv[kMaxVec][W], iw[kMaxVec][W];
  int32_t rfirst[kMaxVec], nvalid[kMaxVec];
  for (int32_t rb = 0; rb < nrows; rb += kRows) {
    const int32_t nr = std::min<int32_t>(kRows, nrows - rb), ne = nr * nt, np = (ne + W - 1) / W;
    // Pack the accumulators; transpose the weights to [key][row].
    for (int32_t r = 0, e = 0; r < nr; ++r) {
      const float* ar = acc + static_cast<int64_t>(rb + r) * hd + d0;
      const float rs = kF16 ? 1.f : rescale[rb + r];
      for (int32_t dd = 0; dd < nt; ++dd, ++e) pk[e] = kF16 ? ar[dd] : ar[dd] * rs;
    }
    for (int32_t e = ne; e < np * W; ++e) pk[e] = 0.f;
    for (int32_t r = 0; r < nr; ++r)
      for (int32_t i = i0; i < i1; ++i) {
        wt[i][r] = w[(rb + r) * kKeyTile + i];
        if (kF16) mt[i][r] = ms[(rb + r) * kKeyTile + i];
      }
    // Lane maps, walking the flattened elements with (row, dimension) counters (no divisions:
    // this runs once per key tile).
    for (int32_t p = 0, r = 0, dd = 0; p < np; ++p) {
      rfirst[p] = r;
      nvalid[p] = std::min<int32_t>(W, ne - p * W);
      for (int l = 0; l < W; ++l) {
        iv[p][l] = dd;
        iw[p][l] = r - rfirst[p];  // < W: lanes of one W-wide load from row rfirst
        if (++dd == nt) {
          dd = 0;
          ++r;
        }
      }
    }
    // NG packed vectors per pass over the keys, a compile-time count (registers).
    auto pass = [&](auto ng_tag, int32_t p0) {
      constexpr int NG = decltype(ng_tag)::value;
      TS_V a[NG];
      TS_VI xv[NG], xw[NG];
      for (int g = 0; g < NG; ++g) {
        a[g] = TS_LOADU(pk + (p0 + g) * W);
        xv[g] = vloadi(iv[p0 + g]);
        xw[g] = vloadi(iw[p0 + g]);
      }
      for (int32_t i = i0; i < i1; ++i) {
        const TS_V vrow = vload_n(v + static_cast<int64_t>(i) * hd + d0, nt);
        for (int g = 0; g < NG; ++g) {
          // Rows past nr read as 0 (lanes past ne, whose results are dropped).
          const int32_t rf = rfirst[p0 + g];
          if (kF16) {
            const TS_V m = vperm(vload_n(&mt[i][rf], nr - rf), xw[g]);
            if (any_ne_one(m, nvalid[p0 + g])) a[g] = r16(TS_MUL(a[g], m));
          }
          a[g] = acc_step<kF16>(a[g], vperm(vrow, xv[g]), vperm(vload_n(&wt[i][rf], nr - rf), xw[g]));
        }
      }
      for (int g = 0; g < NG; ++g) TS_STOREU(pk + (p0 + g) * W, a[g]);
    };
    int32_t p0 = 0;
    for (; p0 + kGroup <= np; p0 += kGroup) pass(std::integral_constant<int, kGroup>{}, p0);
    switch (np - p0) {
      case 1: pass(std::integral_constant<int, 1>{}, p0); break;
      case 2: pass(std::integral_constant<int, 2>{}, p0); break;
      case 3: pass(std::integral_constant<int, 3>{}, p0); break;
      default: break;
    }
    for (int32_t r = 0, e = 0; r < nr; ++r) {
      float* ar = acc + static_cast<int64_t>(rb + r) * hd + d0;
      for (int32_t dd = 0; dd < nt; ++dd, ++e) ar[dd] = pk[e];
    }
  }
}

// VT = uint16_t (V from an F16 page) only where head_dim is a multiple of 4 * W (part 1 alone).
template <bool kF16, typename VT = float>
void acc_rows(float* acc, int32_t nrows, const VT* v, const float* w, const float* ms, const float* rescale,
              int32_t i0, int32_t i1, int32_t hd) {
  const int32_t hd4 = hd / (4 * W) * (4 * W), hdw = hd / W * W;
  if (hd4 > 0) {
    // ms is null for f32 and rescale for f16: only the one in use is offset.
    auto rows_at = [&](auto rows_tag, int32_t r) {
      constexpr int R = decltype(rows_tag)::value;
      int32_t d = 0;
      if constexpr (R == 1) {
        // A lone row (odd row counts: GQA groups of 3 or 7 heads, split decode items) in 8-vector
        // blocks where the head allows: 4 chains alone would wait on the rounding latency.
        for (; d + 8 * W <= hd4; d += 8 * W)
          acc_block4<kF16, 1, 8, VT>(acc + static_cast<int64_t>(r) * hd, v, w + r * kKeyTile,
                                 kF16 ? ms + r * kKeyTile : nullptr, kF16 ? nullptr : rescale + r, i0, i1, hd, d);
      }
      for (; d < hd4; d += 4 * W)
        acc_block4<kF16, R, 4, VT>(acc + static_cast<int64_t>(r) * hd, v, w + r * kKeyTile, kF16 ? ms + r * kKeyTile : nullptr,
                            kF16 ? nullptr : rescale + r, i0, i1, hd, d);
    };
    int32_t r = 0;
    if constexpr (W == 8 && std::is_same_v<VT, float>) {
      // AVX2, V from an f32 tile: passes of 3 rows (12 fp16 rounding chains; 8 leave the
      // converts latency-bound: ~0.64 vs ~0.50 ns a vector step on Zen 5), then 2 and 1.
      for (; nrows - r >= 3; r += 3) rows_at(std::integral_constant<int, 3>{}, r);
    }
    if constexpr (W >= 16) {
      // 32 vector registers: passes of 4 rows (16 chains) and 3 (12): each V vector is loaded
      // (or converted from fp16) once per key for more rows, and odd groups (SmolLM2's 3 heads,
      // Qwen's 7 = 4 + 3) need no lone row whose 4 chains wait on the rounding latency. Per
      // element the operations are the same.
      while (nrows - r >= 3) {
        const int32_t rem = nrows - r;
        if (rem == 4 || rem >= 7) {
          rows_at(std::integral_constant<int, 4>{}, r);
          r += 4;
        } else {  // 3, 5 = 3 + 2, 6 = 3 + 3
          rows_at(std::integral_constant<int, 3>{}, r);
          r += 3;
        }
      }
    }
    for (; r + 2 <= nrows; r += 2) rows_at(std::integral_constant<int, 2>{}, r);
    for (; r < nrows; ++r) rows_at(std::integral_constant<int, 1>{}, r);
  }
  // Each part applies the f32 rescale to the elements it owns.
  if constexpr (std::is_same_v<VT, float>) {
    if (hdw > hd4) acc_whole_vectors<kF16>(acc, nrows, v, w, ms, rescale, i0, i1, hd, hd4, hdw);
    if (hd > hdw) acc_packed_tail<kF16>(acc, nrows, v, w, ms, rescale, i0, i1, hd, hdw);
  }
}

void acc_f16(float* acc, int32_t nrows, const float* v, const float* w, const float* ms, int32_t i0, int32_t i1,
             int32_t hd) {
  acc_rows<true>(acc, nrows, v, w, ms, nullptr, i0, i1, hd);
}

// acc_f16 with V read from its F16 page (no f32 V tile written and read back) where head_dim
// is a multiple of 4 vectors; otherwise the keys' rows are converted first (the same bits).
void acc_f16_h(float* acc, int32_t nrows, const uint16_t* v, const float* w, const float* ms, int32_t i0, int32_t i1,
               int32_t hd) {
  // In registers for a decode group on AVX-512 (up to 8 rows, 2 passes; Qwen's 7 ran x1.2
  // slower through the tile) and up to 2 rows (one pass) on AVX2: each V vector converted once
  // per key and pass. Prefill blocks (48 rows) convert it once per tile into f32 instead
  // (attention_bench prefill smollm2/512 avx512 x0.9), and AVX2 then runs 3-row passes with V
  // as an FMA memory operand (12 rounding chains instead of 8).
  constexpr int32_t kRegisterRows = W == 16 ? 8 : 2;
  if (hd % (4 * W) == 0 && nrows <= kRegisterRows) {
    acc_rows<true, uint16_t>(acc, nrows, v, w, ms, nullptr, i0, i1, hd);
    return;
  }
  thread_local std::vector<float> vt;
  if (vt.size() < static_cast<size_t>(hd) * kKeyTile) vt.resize(static_cast<size_t>(hd) * kKeyTile);
  cvt_f16(v + static_cast<size_t>(i0) * hd, vt.data() + static_cast<size_t>(i0) * hd, (i1 - i0) * hd);
  acc_f16(acc, nrows, vt.data(), w, ms, i0, i1, hd);
}

void acc_f32(float* acc, int32_t nrows, const float* v, const float* p, const float* rescale, int32_t i0, int32_t i1,
             int32_t hd) {
  acc_rows<false>(acc, nrows, v, p, nullptr, rescale, i0, i1, hd);
}

}  // namespace
}  // namespace ts::model::attn

#include "model/attention_flash_x86.h"

namespace ts::model::attn {

const Kernels& TS_KERNELS_FN() {
  static const Kernels k{.name = TS_KERNELS_NAME, .scores_ggml = scores_ggml, .scores_rows = scores_rows,
                         .scores_rows_f16k = scores_rows_f16k, .online_f16 = online_f16,
                         .online_f32 = online_f32, .exp_tile = exp_tile, .swiglu = swiglu,
                         .cvt_f16 = cvt_f16, .load_kt_f16 = load_kt_f16,
                         .load_kt_q8 = load_kt_q8, .load_v_q8 = load_v_q8, .cvt_to_f16 = cvt_to_f16,
                         .acc_f16 = acc_f16, .acc_f32 = acc_f32, .acc_f16_h = acc_f16_h,
                         .flash_tile = flash_tile};
  return k;
}

}  // namespace ts::model::attn
