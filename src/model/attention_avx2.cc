// AVX2 + FMA + F16C tables of the tiled-attention kernels (attention_kernels.h): the vector macros and
// ISA-specific helpers (exp, SwiGLU), then the shared body in attention_x86_impl.h. Everything
// below the target pragma is compiled for that ISA only and reached after a CPUID check
// (tensor::active_isa()). Bit-identical to the scalar reference in attention_kernels.cc.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>
#include <vector>

#include "model/attention_kernels.h"
#include "tensor/fp16.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// GCC 12 flags the undefined pass-through operand inside its own vcvtps2ph/vcvtph2ps wrappers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TS_LOADH load_halves
#define TS_W 8
#define TS_V __m256
#define TS_VD __m256d
#define TS_CVTPH _mm256_cvtph_ps
#define TS_CVTPS _mm256_cvtps_ph
#define TS_SETZERO _mm256_setzero_ps
#define TS_FMADD _mm256_fmadd_ps
#define TS_SET1 _mm256_set1_ps
#define TS_LOADU _mm256_loadu_ps
#define TS_ADD _mm256_add_ps
#define TS_MUL _mm256_mul_ps
#define TS_STOREU _mm256_storeu_ps
#define TS_CVTPD _mm256_cvtps_pd
#define TS_LOWHALF _mm256_castps256_ps128
#define TS_HIGHHALF high_half
#define TS_ADDPD _mm256_add_pd
#define TS_COMBINE combine
#define TS_CVTPDPS _mm256_cvtpd_ps
#define TS_KERNELS_FN avx2_kernels
#define TS_KERNELS_NAME "avx2"

namespace ts::model::attn {
namespace {

inline __m128i load_halves(const uint16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void store_halves(uint16_t* p, __m128i h) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h); }
inline __m256 load_i8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
#define TS_SUB _mm256_sub_ps
// (a > b ? x : y) per lane, ordered compare (NaN: y), as the scalar "if (a > b)".
inline __m256 vsel_gt(__m256 a, __m256 b, __m256 x, __m256 y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
// Running max of online_f16 without a serial chain: mp[i] = the reference's m before key i
// (i0 <= i < i1; other lanes +inf) and the returned m after key i1 - 1, where each step is
// m = (x > m ? x : m). That step is associative on non-NaN values (ties keep the earlier one,
// as the serial form does), so a log-step prefix scan with _mm256_max_ps(later, earlier) gives
// the same bits (two 8-lane scans, the high one continued from the low one's last lane).
// Returns false (nothing written) when a score in range is NaN: the caller runs the serial loop.
inline __m256 shift_lanes_up(__m256 v, int k, __m256 fill) {  // lane i <- lane i - k, fill below
  const __m256i idx = _mm256_sub_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(k));
  const __m256 moved = _mm256_permutevar8x32_ps(v, _mm256_max_epi32(idx, _mm256_setzero_si256()));
  return _mm256_blendv_ps(moved, fill, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_setzero_si256(), idx)));
}
inline __m256 scan8(__m256 v, __m256 ninf) {
  v = _mm256_max_ps(v, shift_lanes_up(v, 1, ninf));
  v = _mm256_max_ps(v, shift_lanes_up(v, 2, ninf));
  return _mm256_max_ps(v, shift_lanes_up(v, 4, ninf));
}
inline bool prefix_max_tile(const float* x, int32_t i0, int32_t i1, float m0, float* mp, float* m_out) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY), m0v = _mm256_set1_ps(m0);
  __m256 in[2], xv[2];
  int nan = 0;
  for (int h = 0; h < 2; ++h) {
    const __m256i l = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * h));
    in[h] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(i1), l),
                                                 _mm256_cmpgt_epi32(l, _mm256_set1_epi32(i0 - 1))));
    xv[h] = _mm256_blendv_ps(ninf, _mm256_loadu_ps(x + 8 * h), in[h]);
    nan |= _mm256_movemask_ps(_mm256_and_ps(in[h], _mm256_cmp_ps(xv[h], xv[h], _CMP_UNORD_Q)));
  }
  if (nan != 0) return false;
  const __m256 lo = scan8(xv[0], ninf);
  const __m256 carry = _mm256_permutevar8x32_ps(lo, _mm256_set1_epi32(7));
  const __m256 hi = _mm256_max_ps(scan8(xv[1], ninf), carry);
  // Exclusive prefix: lane i <- inclusive lane i - 1 (lane 8 from the low half's last lane).
  const __m256 ex_lo = shift_lanes_up(lo, 1, ninf), ex_hi = shift_lanes_up(hi, 1, carry);
  _mm256_storeu_ps(mp, _mm256_blendv_ps(pinf, _mm256_max_ps(ex_lo, m0v), in[0]));
  _mm256_storeu_ps(mp + 8, _mm256_blendv_ps(pinf, _mm256_max_ps(ex_hi, m0v), in[1]));
  alignas(32) float inc[16];
  _mm256_store_ps(inc, _mm256_max_ps(lo, m0v));
  _mm256_store_ps(inc + 8, _mm256_max_ps(hi, m0v));
  *m_out = inc[i1 - 1];
  return true;
}
// Lanes off..off+7: a where the lane index is in [i0, i1), else b.
inline __m256 vsel_in(int off, int32_t i0, int32_t i1, __m256 a, __m256 b) {
  const __m256i l = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(off));
  const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(i1), l),
                                      _mm256_cmpgt_epi32(l, _mm256_set1_epi32(i0 - 1)));
  return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(in));
}
// True when a lane of x in [i0, i1) is > m or NaN (a score that would move the running max, or
// take the serial path).
inline bool any_gt_or_nan(const float* x, int32_t i0, int32_t i1, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  const int gt = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x), mv, _CMP_NLE_UQ)) |
                 _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + 8), mv, _CMP_NLE_UQ)) << 8;
  return (gt & ((1 << i1) - 1) & ~((1 << i0) - 1)) != 0;
}
// Narrow-head helpers (attention_x86_impl.h, acc_packed_tail).
#define TS_VI __m256i
inline __m256i vloadi(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256 vload_n(const float* p, int32_t n) {  // p[0..n), zeros past n (nothing read there)
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
inline __m256 vperm(__m256 x, __m256i idx) { return _mm256_permutevar8x32_ps(x, idx); }
inline bool any_ne_one(__m256 x, int32_t n) {  // among lanes [0, n)
  return (_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(1.f), _CMP_NEQ_UQ)) & ((1 << n) - 1)) != 0;
}
inline __m128 high_half(__m256 x) { return _mm256_extractf128_ps(x, 1); }
inline __m256 combine(__m128 lo, __m128 hi) { return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1); }


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

}  // namespace
}  // namespace ts::model::attn

#include "model/attention_x86_impl.h"

#pragma GCC diagnostic pop
#pragma GCC pop_options
