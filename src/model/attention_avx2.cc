// AVX2 + FMA + F16C tables of the tiled-attention kernels (attention_kernels.h). Everything below the
// target pragma is compiled for that ISA only and reached after a CPUID check
// (tensor::active_isa()). Bit-identical to the scalar reference in attention_kernels.cc.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "model/attention_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// GCC 12 flags the undefined pass-through operand inside its own vcvtps2ph/vcvtph2ps wrappers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ts::model::attn {
namespace {

constexpr int W = 8;  // lanes per vector

inline __m256 r16(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

inline __m128i load_halves(const uint16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void store_halves(uint16_t* p, __m128i h) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h); }
inline __m256 load_i8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m128 high_half(__m256 x) { return _mm256_extractf128_ps(x, 1); }
inline __m256 combine(__m128 lo, __m128 hi) { return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1); }

inline float rnd16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

// Scores for W keys starting at lane `off` of the transposed tile.
inline void scores_lanes(const float* q, const float* kt, int32_t hd, float scale, float* out, int off) {
  const int32_t np = hd & ~31;
  __m256 r[8];
  for (int l = 0; l < 8; ++l) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int32_t c = 0; c < np; c += 32) {
      a0 = _mm256_fmadd_ps(_mm256_set1_ps(q[c + l]), _mm256_loadu_ps(kt + (c + l) * kKeyTile + off), a0);
      a1 = _mm256_fmadd_ps(_mm256_set1_ps(q[c + 8 + l]), _mm256_loadu_ps(kt + (c + 8 + l) * kKeyTile + off), a1);
      a2 = _mm256_fmadd_ps(_mm256_set1_ps(q[c + 16 + l]), _mm256_loadu_ps(kt + (c + 16 + l) * kKeyTile + off), a2);
      a3 = _mm256_fmadd_ps(_mm256_set1_ps(q[c + 24 + l]), _mm256_loadu_ps(kt + (c + 24 + l) * kKeyTile + off), a3);
    }
    r[l] = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
  }
  __m256 t0 = _mm256_add_ps(r[0], r[4]), t1 = _mm256_add_ps(r[1], r[5]), t2 = _mm256_add_ps(r[2], r[6]), t3 = _mm256_add_ps(r[3], r[7]);
  __m256 res = _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3));
  if (np < hd) {
    // Tail in double, as ggml does past the last multiple of 32.
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(res)), hi = _mm256_cvtps_pd(high_half(res));
    for (int32_t d = np; d < hd; ++d) {
      const __m256 prod = _mm256_mul_ps(_mm256_set1_ps(q[d]), _mm256_loadu_ps(kt + d * kKeyTile + off));
      lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(prod)));
      hi = _mm256_add_pd(hi, _mm256_cvtps_pd(high_half(prod)));
    }
    res = combine(_mm256_cvtpd_ps(lo), _mm256_cvtpd_ps(hi));
  }
  _mm256_storeu_ps(out + off, _mm256_mul_ps(res, _mm256_set1_ps(scale)));
}


// exp_ref on 16 lanes: the double-precision core four lanes at a time, then glibc's special cases.
inline __m128 exp4v(__m128 xf) {
  using namespace expf_data;
  const __m256d inv = _mm256_set1_pd(kInvLn2N), shift = _mm256_set1_pd(kShift);
  const long long* tab = reinterpret_cast<const long long*>(kTab);
  {
    const __m256d xd = _mm256_cvtps_pd(xf);
    const __m256d kds = _mm256_fmadd_pd(inv, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kds);
    const __m256d kd = _mm256_sub_pd(kds, shift);
    const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    const __m256i t = _mm256_add_epi64(
        _mm256_i64gather_epi64(tab, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8), _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d yv = _mm256_fmadd_pd(r, _mm256_set1_pd(kC2), _mm256_set1_pd(1.0));
    yv = _mm256_fmadd_pd(z, r2, yv);
    __m128 res = _mm256_cvtpd_ps(_mm256_mul_pd(yv, _mm256_castsi256_pd(t)));
    const __m128 under = _mm_cmp_ps(xf, _mm_set1_ps(kUnderflow), _CMP_LT_OQ);
    const __m128 may = _mm_andnot_ps(under, _mm_cmp_ps(xf, _mm_set1_ps(kMayUnderflow), _CMP_LT_OQ));
    const __m128 over = _mm_cmp_ps(xf, _mm_set1_ps(kOverflow), _CMP_GT_OQ);
    const __m128 nan = _mm_cmp_ps(xf, xf, _CMP_UNORD_Q);
    res = _mm_blendv_ps(res, _mm_setzero_ps(), under);
    res = _mm_blendv_ps(res, _mm_set1_ps(0x1p-149f), may);
    res = _mm_blendv_ps(res, _mm_set1_ps(INFINITY), over);
    res = _mm_blendv_ps(res, _mm_add_ps(xf, xf), nan);
    return res;
  }
}

void exp_tile(const float* x, float* y) {
  for (int g = 0; g < kKeyTile; g += 4) _mm_storeu_ps(y + g, exp4v(_mm_loadu_ps(x + g)));
}

void swiglu(float* a, const float* b, int64_t n) {
  int64_t i = 0;
  const __m128 one = _mm_set1_ps(1.f);
  for (; i + 4 <= n; i += 4) {
    const __m128 g = _mm_loadu_ps(a + i);
    const __m128 e = exp4v(_mm_sub_ps(_mm_setzero_ps(), g));
    _mm_storeu_ps(a + i, _mm_mul_ps(_mm_div_ps(g, _mm_add_ps(one, e)), _mm_loadu_ps(b + i)));
  }
  for (; i < n; ++i) a[i] = a[i] / (1.0f + exp_ref(-a[i])) * b[i];
}

void online_f16(const float* sc, int32_t nrows, int32_t i0, int32_t i1, float* m_io, float* s_io, float* w,
                float* ms) {
  constexpr int kRows = 16;  // rows per pass (stack buffers)
  alignas(64) float args[kRows][kKeyTile], e[kRows][kKeyTile];
  bool resc[kRows][kKeyTile];
  for (int32_t r0 = 0; r0 < nrows; r0 += kRows) {
    const int32_t nr = std::min<int32_t>(kRows, nrows - r0);
    for (int32_t r = 0; r < nr; ++r) {
      const float* scr = sc + (r0 + r) * kKeyTile;
      float m = m_io[r0 + r];
      for (int32_t i = 0; i < kKeyTile; ++i) args[r][i] = 0.f;
      for (int32_t i = i0; i < i1; ++i) {
        resc[r][i] = scr[i] > m;
        if (resc[r][i]) {
          args[r][i] = m - scr[i];
          m = scr[i];
        } else {
          args[r][i] = scr[i] - m;
        }
      }
      m_io[r0 + r] = m;
      exp_tile(args[r], e[r]);
    }
    float s[kRows];
    for (int32_t r = 0; r < nr; ++r) s[r] = s_io[r0 + r];
    // Keys outer, rows inner: the rows' sum chains run side by side.
    for (int32_t i = i0; i < i1; ++i)
      for (int32_t r = 0; r < nr; ++r) {
        float* wr = w + (r0 + r) * kKeyTile;
        float* mr = ms + (r0 + r) * kKeyTile;
        mr[i] = resc[r][i] ? e[r][i] : 1.f;
        wr[i] = resc[r][i] ? 1.f : e[r][i];
        s[r] = std::fma(s[r], mr[i], wr[i]);
      }
    for (int32_t r = 0; r < nr; ++r) s_io[r0 + r] = s[r];
  }
}

float online_f32(const float* sc, int32_t i0, int32_t i1, float* m_io, float* s_io, float* w) {
  alignas(64) float args[kKeyTile] = {}, e[kKeyTile];
  float m = *m_io;
  for (int32_t i = i0; i < i1; ++i) m = std::max(m, sc[i]);
  for (int32_t i = i0; i < i1; ++i) args[i] = sc[i] - m;
  exp_tile(args, e);
  const float rescale = exp_ref(*m_io - m);
  float s = *s_io * rescale;
  for (int32_t i = i0; i < i1; ++i) {
    w[i] = e[i];
    s += w[i];
  }
  *m_io = m;
  *s_io = s;
  return rescale;
}

void cvt_f16(const uint16_t* src, float* dst, int32_t n) {
  int32_t i = 0;
  for (; i + W <= n; i += W) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(load_halves(src + i)));
  for (; i < n; ++i) dst[i] = static_cast<float>(std::bit_cast<_Float16>(src[i]));
}

void load_kt_f16(const uint16_t* k, int32_t stride, int32_t hd, float* kt) {
  for (int32_t d = 0; d < hd; ++d)
    for (int off = 0; off < kKeyTile; off += W) _mm256_storeu_ps(kt + d * kKeyTile + off, _mm256_cvtph_ps(load_halves(k + d * stride + off)));
}

void load_kt_q8(const int8_t* k, int32_t stride, const float* scale, int32_t hd, float* kt) {
  for (int32_t d = 0; d < hd; ++d)
    for (int off = 0; off < kKeyTile; off += W)
      _mm256_storeu_ps(kt + d * kKeyTile + off, _mm256_mul_ps(_mm256_loadu_ps(scale + off), load_i8(k + d * stride + off)));
}

void cvt_to_f16(const float* src, uint16_t* dst, int32_t n) {
  int32_t i = 0;
  for (; i + W <= n; i += W) store_halves(dst + i, _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = std::bit_cast<uint16_t>(static_cast<_Float16>(src[i]));
}

void scores_ggml(const float* q, const float* kt, int32_t hd, float scale, float* out) {
  for (int off = 0; off < kKeyTile; off += W) scores_lanes(q, kt, hd, scale, out, off);
}

// R rows (query heads) at once: 4 * R independent fp16 rounding chains hide their latency.
template <int R>
void acc_f16_rows(float* acc, const float* v, const float* w, const float* ms, int32_t i0, int32_t i1, int32_t hd) {
  int32_t d = 0;
  for (; d + 4 * W <= hd; d += 4 * W) {
    __m256 a[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) a[r][c] = _mm256_loadu_ps(acc + r * hd + d + c * W);
    for (int32_t i = i0; i < i1; ++i) {
      const float* vi = v + static_cast<int64_t>(i) * hd + d;
      const __m256 v0 = _mm256_loadu_ps(vi), v1 = _mm256_loadu_ps(vi + W), v2 = _mm256_loadu_ps(vi + 2 * W), v3 = _mm256_loadu_ps(vi + 3 * W);
      for (int r = 0; r < R; ++r) {
        const float msr = ms[r * kKeyTile + i];
        if (msr != 1.f) {
          const __m256 m = _mm256_set1_ps(msr);
          for (int c = 0; c < 4; ++c) a[r][c] = r16(_mm256_mul_ps(a[r][c], m));
        }
        const __m256 wv = _mm256_set1_ps(w[r * kKeyTile + i]);
        a[r][0] = r16(_mm256_fmadd_ps(v0, wv, a[r][0]));
        a[r][1] = r16(_mm256_fmadd_ps(v1, wv, a[r][1]));
        a[r][2] = r16(_mm256_fmadd_ps(v2, wv, a[r][2]));
        a[r][3] = r16(_mm256_fmadd_ps(v3, wv, a[r][3]));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm256_storeu_ps(acc + r * hd + d + c * W, a[r][c]);
  }
  for (int r = 0; r < R; ++r) {
    float* ar = acc + r * hd;
    const float* wr = w + r * kKeyTile;
    const float* mr = ms + r * kKeyTile;
    for (int32_t dd = d; dd + W <= hd; dd += W) {
      __m256 a = _mm256_loadu_ps(ar + dd);
      for (int32_t i = i0; i < i1; ++i) {
        if (mr[i] != 1.f) a = r16(_mm256_mul_ps(a, _mm256_set1_ps(mr[i])));
        a = r16(_mm256_fmadd_ps(_mm256_loadu_ps(v + static_cast<int64_t>(i) * hd + dd), _mm256_set1_ps(wr[i]), a));
      }
      _mm256_storeu_ps(ar + dd, a);
    }
    for (int32_t dd = d + (hd - d) / W * W; dd < hd; ++dd) {
      float a = ar[dd];
      for (int32_t i = i0; i < i1; ++i) {
        if (mr[i] != 1.f) a = rnd16(a * mr[i]);
        a = rnd16(std::fma(v[i * hd + dd], wr[i], a));
      }
      ar[dd] = a;
    }
  }
}

void acc_f16(float* acc, int32_t nrows, const float* v, const float* w, const float* ms, int32_t i0, int32_t i1,
             int32_t hd) {
  int32_t r = 0;
  for (; r + 2 <= nrows; r += 2)
    acc_f16_rows<2>(acc + static_cast<int64_t>(r) * hd, v, w + r * kKeyTile, ms + r * kKeyTile, i0, i1, hd);
  for (; r < nrows; ++r)
    acc_f16_rows<1>(acc + static_cast<int64_t>(r) * hd, v, w + r * kKeyTile, ms + r * kKeyTile, i0, i1, hd);
}

template <int R>
void acc_f32_rows(float* acc, const float* v, const float* p, const float* rescale, int32_t i0, int32_t i1,
                  int32_t hd) {
  int32_t d = 0;
  for (; d + 4 * W <= hd; d += 4 * W) {
    __m256 a[R][4];
    for (int r = 0; r < R; ++r) {
      const __m256 rs = _mm256_set1_ps(rescale[r]);
      for (int c = 0; c < 4; ++c) a[r][c] = _mm256_mul_ps(_mm256_loadu_ps(acc + r * hd + d + c * W), rs);
    }
    for (int32_t i = i0; i < i1; ++i) {
      const float* vi = v + static_cast<int64_t>(i) * hd + d;
      const __m256 v0 = _mm256_loadu_ps(vi), v1 = _mm256_loadu_ps(vi + W), v2 = _mm256_loadu_ps(vi + 2 * W), v3 = _mm256_loadu_ps(vi + 3 * W);
      for (int r = 0; r < R; ++r) {
        const __m256 pv = _mm256_set1_ps(p[r * kKeyTile + i]);
        a[r][0] = _mm256_fmadd_ps(pv, v0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(pv, v1, a[r][1]);
        a[r][2] = _mm256_fmadd_ps(pv, v2, a[r][2]);
        a[r][3] = _mm256_fmadd_ps(pv, v3, a[r][3]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm256_storeu_ps(acc + r * hd + d + c * W, a[r][c]);
  }
  for (int r = 0; r < R; ++r) {
    float* ar = acc + r * hd;
    const float* pr = p + r * kKeyTile;
    const __m256 rs = _mm256_set1_ps(rescale[r]);
    int32_t dd = d;
    for (; dd + W <= hd; dd += W) {
      __m256 a = _mm256_mul_ps(_mm256_loadu_ps(ar + dd), rs);
      for (int32_t i = i0; i < i1; ++i) a = _mm256_fmadd_ps(_mm256_set1_ps(pr[i]), _mm256_loadu_ps(v + static_cast<int64_t>(i) * hd + dd), a);
      _mm256_storeu_ps(ar + dd, a);
    }
    for (; dd < hd; ++dd) {
      float a = ar[dd] * rescale[r];
      for (int32_t i = i0; i < i1; ++i) a = std::fma(pr[i], v[i * hd + dd], a);
      ar[dd] = a;
    }
  }
}

void acc_f32(float* acc, int32_t nrows, const float* v, const float* p, const float* rescale, int32_t i0, int32_t i1,
             int32_t hd) {
  int32_t r = 0;
  for (; r + 2 <= nrows; r += 2)
    acc_f32_rows<2>(acc + static_cast<int64_t>(r) * hd, v, p + r * kKeyTile, rescale + r, i0, i1, hd);
  for (; r < nrows; ++r)
    acc_f32_rows<1>(acc + static_cast<int64_t>(r) * hd, v, p + r * kKeyTile, rescale + r, i0, i1, hd);
}

}  // namespace

const Kernels& avx2_kernels() {
  static const Kernels k{.name = "avx2", .scores_ggml = scores_ggml, .online_f16 = online_f16,
                         .online_f32 = online_f32, .exp_tile = exp_tile, .swiglu = swiglu,
                         .cvt_f16 = cvt_f16, .load_kt_f16 = load_kt_f16,
                         .load_kt_q8 = load_kt_q8, .cvt_to_f16 = cvt_to_f16,
                         .acc_f16 = acc_f16, .acc_f32 = acc_f32};
  return k;
}

}  // namespace ts::model::attn

#pragma GCC diagnostic pop
#pragma GCC pop_options
