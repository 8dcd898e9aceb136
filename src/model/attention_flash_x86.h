// The f32 prefill tile (Kernels::flash_tile) for AVX2 and AVX-512, included by
// attention_x86_impl.h (so by attention_avx2.cc and attention_avx512.cc under their target
// pragmas, with the TS_* macros defined). Bit-identical to the scalar flash_tile in
// attention_kernels.cc: every lane runs the scalar's operations in its order. Not a public
// header.
//
// Blocks of kFlashRows rows: the scores of a block are a small GEMM (each K vector loaded once
// for the block's rows, each query value one broadcast for the tile's key vectors), then the
// softmax row by row at vector width, then the block's accumulators take the tile's keys
// (each V vector loaded once per key for the block's rows, a chunk of 4 vectors of head_dim at
// a time). AVX-512: 6 rows x 4 vectors (24 accumulators of 32 registers); AVX2: 3 x 4 (12 of 16).
namespace ts::model::attn {
namespace {

constexpr int kFlashRows = W == 16 ? 6 : 3;
constexpr int kFlashQV = 4;                                // key vectors per score pass
constexpr int kFlashNV = kFlashKeys / W;                   // vectors per row of scores

#if TS_W == 16
inline __m512 fl_max(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
inline __m512 fl_round(__m512 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline __m512 fl_pow2(__m512 n) {  // 2^n for integral n in [-126, 127]
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
// Lanes base..base+W-1 whose index is in [i0, i1): x; others: y.
inline __m512 fl_in(int32_t base, int32_t i0, int32_t i1, __m512 x, __m512 y) {
  const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(base),
                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 in = _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(i0)) & _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32(i1));
  return _mm512_mask_blend_ps(in, y, x);
}
inline bool fl_any_nan(__m512 x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0; }
inline float fl_first(__m512 x) { return _mm512_cvtss_f32(x); }
inline float fl_hmax(__m512 x) {  // exact on non-NaN values in any order
  __m256 h = _mm256_max_ps(_mm512_castps512_ps256(x), high_half(x));
  __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_max_ps(q, _mm_movehl_ps(q, q));
  q = _mm_max_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}
// sum64 of the tile's weights p[0..kFlashNV): lanes j of (p0 + p1) + (p2 + p3) are u[j], then
// halves added: u[j] + u[j + 8], + 4, + 2, + 1.
inline float fl_sum64(const __m512* p) {
  const __m512 u = _mm512_add_ps(_mm512_add_ps(p[0], p[1]), _mm512_add_ps(p[2], p[3]));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(u), high_half(u));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}
#else
inline __m256 fl_max(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
inline __m256 fl_round(__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline __m256 fl_pow2(__m256 n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline __m256 fl_in(int32_t base, int32_t i0, int32_t i1, __m256 x, __m256 y) {
  const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(i0 - 1)),
                                      _mm256_cmpgt_epi32(_mm256_set1_epi32(i1), idx));
  return _mm256_blendv_ps(y, x, _mm256_castsi256_ps(in));
}
inline bool fl_any_nan(__m256 x) { return _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0; }
inline float fl_first(__m256 x) { return _mm256_cvtss_f32(x); }
inline float fl_hmax(__m256 x) {
  __m128 q = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  q = _mm_max_ps(q, _mm_movehl_ps(q, q));
  q = _mm_max_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}
// p[v] holds keys 8v..8v+7: u[0..8) = (p0 + p2) + (p4 + p6), u[8..16) = (p1 + p3) + (p5 + p7).
inline float fl_sum64(const __m256* p) {
  const __m256 lo = _mm256_add_ps(_mm256_add_ps(p[0], p[2]), _mm256_add_ps(p[4], p[6]));
  const __m256 hi = _mm256_add_ps(_mm256_add_ps(p[1], p[3]), _mm256_add_ps(p[5], p[7]));
  const __m256 h = _mm256_add_ps(lo, hi);
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}
#endif

// exp_flash at vector width (attention_kernels.h).
inline TS_V fl_exp(TS_V x) {
  using namespace expflash_data;
  x = fl_max(x, TS_SET1(kMin));  // max(NaN, kMin) = kMin: the second operand
  const TS_V n = fl_round(TS_MUL(x, TS_SET1(kLog2e)));
  TS_V r = TS_FMADD(n, TS_SET1(-kLn2Hi), x);
  r = TS_FMADD(n, TS_SET1(-kLn2Lo), r);
  TS_V p = TS_SET1(kC[7]);
  #pragma GCC unroll 8
  for (int k = 6; k >= 0; --k) p = TS_FMADD(p, r, TS_SET1(kC[k]));
  return TS_MUL(p, fl_pow2(n));
}

// Scores of R rows for key vectors [vb, vb + QV) of the tile (W keys each) into sc[r][..].
template <int R, int QV>
inline void flash_scores_at(const float* q, int32_t hd, const float* kt, float scale, float* sc, int vb) {
  const float* kp[QV];
  #pragma GCC unroll 8
  for (int g = 0; g < QV; ++g) {
    const int kb = (vb + g) * W;  // first key of the vector
    kp[g] = kt + static_cast<size_t>(kb / kKeyTile) * hd * kKeyTile + kb % kKeyTile;
  }
  TS_V x[R][QV];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int g = 0; g < QV; ++g) x[r][g] = TS_SETZERO();
  for (int32_t d = 0; d < hd; ++d) {
    TS_V kv[QV];
    #pragma GCC unroll 8
    for (int g = 0; g < QV; ++g) kv[g] = TS_LOADU(kp[g] + static_cast<size_t>(d) * kKeyTile);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const TS_V qb = TS_SET1(q[static_cast<size_t>(r) * hd + d]);
      #pragma GCC unroll 8
      for (int g = 0; g < QV; ++g) x[r][g] = TS_FMADD(qb, kv[g], x[r][g]);
    }
  }
  const TS_V sv = TS_SET1(scale);
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int g = 0; g < QV; ++g) TS_STOREU(sc + r * kFlashKeys + (vb + g) * W, TS_MUL(x[r][g], sv));
}

// Scores of R rows for key vectors [v0, v1) (those holding keys of the rows' range: a diagonal
// or window-edge tile skips the vectors wholly outside it), up to kFlashQV vectors a pass.
template <int R>
inline void flash_scores(const float* q, int32_t hd, const float* kt, float scale, float* sc, int v0, int v1) {
  for (int vb = v0; vb < v1; vb += kFlashQV) {
    switch (std::min(kFlashQV, v1 - vb)) {
      case 4: flash_scores_at<R, 4>(q, hd, kt, scale, sc, vb); break;
      case 3: flash_scores_at<R, 3>(q, hd, kt, scale, sc, vb); break;
      case 2: flash_scores_at<R, 2>(q, hd, kt, scale, sc, vb); break;
      default: flash_scores_at<R, 1>(q, hd, kt, scale, sc, vb); break;
    }
  }
}

// acc[r][c0 .. c0 + NV*W) += p[r][i] * V[i][same] for i in [i0, i1), R rows.
template <int R, int NV>
inline void flash_pv(const float* p, const float* v, int32_t hd, int32_t c0, int32_t i0, int32_t i1, float* acc) {
  TS_V a[R][NV];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) a[r][j] = TS_LOADU(acc + static_cast<size_t>(r) * hd + c0 + j * W);
  for (int32_t i = i0; i < i1; ++i) {
    const float* vi = v + static_cast<size_t>(i) * hd + c0;
    TS_V vv[NV];
    #pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) vv[j] = TS_LOADU(vi + j * W);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const TS_V pb = TS_SET1(p[r * kFlashKeys + i]);
      #pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) a[r][j] = TS_FMADD(pb, vv[j], a[r][j]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) TS_STOREU(acc + static_cast<size_t>(r) * hd + c0 + j * W, a[r][j]);
}

template <int R>
inline void flash_pv_rows(const float* p, const float* v, int32_t hd, int32_t i0, int32_t i1, float* acc) {
  int32_t c0 = 0;
  for (; c0 + 4 * W <= hd; c0 += 4 * W) flash_pv<R, 4>(p, v, hd, c0, i0, i1, acc);
  switch ((hd - c0) / W) {
    case 3: flash_pv<R, 3>(p, v, hd, c0, i0, i1, acc); break;
    case 2: flash_pv<R, 2>(p, v, hd, c0, i0, i1, acc); break;
    case 1: flash_pv<R, 1>(p, v, hd, c0, i0, i1, acc); break;
    default: break;
  }
}

template <int R>
void flash_block(const float* q, int32_t hd, const float* kt, const float* v, int32_t i0, int32_t i1, float scale,
                 float* m, float* s, float* acc) {
  alignas(64) float sc[R * kFlashKeys];
  alignas(64) float p[R * kFlashKeys];
  const int v0 = i0 / W, v1 = (i1 + W - 1) / W;  // key vectors holding keys of [i0, i1)
  flash_scores<R>(q, hd, kt, scale, sc, v0, v1);
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    TS_V x[kFlashNV];
    bool nan = false;
    TS_V t = TS_SET1(-INFINITY);
    #pragma GCC unroll 8
    for (int j = 0; j < kFlashNV; ++j) {
      if (j < v0 || j >= v1) {  // no key of the range: not computed, weight 0
        x[j] = TS_SET1(-INFINITY);
        continue;
      }
      x[j] = fl_in(j * W, i0, i1, TS_LOADU(sc + r * kFlashKeys + j * W), TS_SET1(-INFINITY));
      nan |= fl_any_nan(x[j]);
      t = fl_max(t, x[j]);
    }
    float* a = acc + static_cast<size_t>(r) * hd;
    if (nan) {
      for (int32_t d = 0; d < hd; ++d) a[d] = NAN;
      #pragma GCC unroll 8
      for (int j = 0; j < kFlashNV; ++j) TS_STOREU(p + r * kFlashKeys + j * W, TS_SETZERO());
      continue;
    }
    const float tm = fl_hmax(t);
    const float mn = tm > m[r] ? tm : m[r];
    if (mn > m[r]) {
      const TS_V e = fl_exp(TS_SET1(m[r] - mn));
      s[r] *= fl_first(e);
      for (int32_t d = 0; d < hd; d += W) TS_STOREU(a + d, TS_MUL(TS_LOADU(a + d), e));
    }
    m[r] = mn;
    const TS_V mv = TS_SET1(mn);
    TS_V pw[kFlashNV];
    #pragma GCC unroll 8
    for (int j = 0; j < kFlashNV; ++j) {
      pw[j] = j < v0 || j >= v1 ? TS_SETZERO() : fl_in(j * W, i0, i1, fl_exp(TS_SUB(x[j], mv)), TS_SETZERO());
      TS_STOREU(p + r * kFlashKeys + j * W, pw[j]);
    }
    s[r] += fl_sum64(pw);
  }
  flash_pv_rows<R>(p, v, hd, i0, i1, acc);
}

void flash_tile(const float* q, int32_t nrows, int32_t hd, const float* kt, const float* v, int32_t i0, int32_t i1,
                float scale, float* m, float* s, float* acc) {
  int32_t r = 0;
  const auto at = [&](auto rows) {
    constexpr int R = decltype(rows)::value;
    flash_block<R>(q + static_cast<size_t>(r) * hd, hd, kt, v, i0, i1, scale, m + r, s + r,
                   acc + static_cast<size_t>(r) * hd);
    r += R;
  };
  while (nrows - r >= kFlashRows) at(std::integral_constant<int, kFlashRows>{});
  switch (nrows - r) {
    case 5: if constexpr (kFlashRows > 5) at(std::integral_constant<int, 5>{}); break;
    case 4: if constexpr (kFlashRows > 4) at(std::integral_constant<int, 4>{}); break;
    case 3: if constexpr (kFlashRows > 3) at(std::integral_constant<int, 3>{}); break;
    case 2: at(std::integral_constant<int, 2>{}); break;
    case 1: at(std::integral_constant<int, 1>{}); break;
    default: break;
  }
}

}  // namespace
}  // namespace ts::model::attn
