// AVX-512 tables of the tiled-attention kernels (attention_kernels.h): the vector macros and
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
#pragma GCC target("avx512f,avx512dq,avx512vl,avx2,fma,f16c")
// GCC 12 flags the undefined pass-through operand inside its own vcvtps2ph/vcvtph2ps wrappers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TS_LOADH load_halves
#define TS_W 16
#define TS_V __m512
#define TS_VD __m512d
#define TS_CVTPH _mm512_cvtph_ps
#define TS_CVTPS _mm512_cvtps_ph
#define TS_SETZERO _mm512_setzero_ps
#define TS_FMADD _mm512_fmadd_ps
#define TS_SET1 _mm512_set1_ps
#define TS_LOADU _mm512_loadu_ps
#define TS_ADD _mm512_add_ps
#define TS_MUL _mm512_mul_ps
#define TS_STOREU _mm512_storeu_ps
#define TS_CVTPD _mm512_cvtps_pd
#define TS_LOWHALF _mm512_castps512_ps256
#define TS_HIGHHALF high_half
#define TS_ADDPD _mm512_add_pd
#define TS_COMBINE combine
#define TS_CVTPDPS _mm512_cvtpd_ps
#define TS_KERNELS_FN avx512_kernels
#define TS_KERNELS_NAME "avx512"

namespace ts::model::attn {
namespace {

inline __m256i load_halves(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store_halves(uint16_t* p, __m256i h) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h); }
inline __m512 load_i8(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
#define TS_SUB _mm512_sub_ps
// (a > b ? x : y) per lane, ordered compare (NaN: y), as the scalar "if (a > b)".
inline __m512 vsel_gt(__m512 a, __m512 b, __m512 x, __m512 y) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), y, x);
}
// Running max of online_f16 without a serial chain: mp[i] = the reference's m before key i
// (i0 <= i < i1; other lanes +inf) and the returned m after key i1 - 1, where each step is
// m = (x > m ? x : m). That step is associative on non-NaN values (ties keep the earlier one,
// as the serial form does), so a log-step prefix scan with _mm512_max_ps(later, earlier) gives
// the same bits. Returns false (nothing written) when a score in range is NaN: the caller
// runs the serial loop then.
inline bool prefix_max_tile(const float* x, int32_t i0, int32_t i1, float m0, float* mp, float* m_out) {
  const __mmask16 in = static_cast<__mmask16>(((1u << i1) - 1) & ~((1u << i0) - 1));
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  const __m512 xv = _mm512_mask_loadu_ps(ninf, in, x);
  if (_mm512_mask_cmp_ps_mask(in, xv, xv, _CMP_UNORD_Q) != 0) return false;
  __m512 incl = xv;
  incl = _mm512_max_ps(incl, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(incl), _mm512_castps_si512(ninf), 15)));
  incl = _mm512_max_ps(incl, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(incl), _mm512_castps_si512(ninf), 14)));
  incl = _mm512_max_ps(incl, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(incl), _mm512_castps_si512(ninf), 12)));
  incl = _mm512_max_ps(incl, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(incl), _mm512_castps_si512(ninf), 8)));
  const __m512 m0v = _mm512_set1_ps(m0);
  const __m512 excl = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(incl), _mm512_castps_si512(ninf), 15));
  _mm512_storeu_ps(mp, _mm512_mask_blend_ps(in, _mm512_set1_ps(INFINITY), _mm512_max_ps(excl, m0v)));
  alignas(64) float inc[16];
  _mm512_store_ps(inc, _mm512_max_ps(incl, m0v));
  *m_out = inc[i1 - 1];
  return true;
}
// True when a lane of x in [i0, i1) is > m or NaN (a score that would move the running max, or
// take the serial path).
inline bool any_gt_or_nan(const float* x, int32_t i0, int32_t i1, float m) {
  const __mmask16 in = static_cast<__mmask16>(((1u << i1) - 1) & ~((1u << i0) - 1));
  return _mm512_mask_cmp_ps_mask(in, _mm512_loadu_ps(x), _mm512_set1_ps(m), _CMP_NLE_UQ) != 0;
}
// Lanes off..off+W-1: a where the lane index is in [i0, i1), else b.
inline __m512 vsel_in(int off, int32_t i0, int32_t i1, __m512 a, __m512 b) {
  const __mmask16 in = static_cast<__mmask16>((((1u << i1) - 1) & ~((1u << i0) - 1)) >> off);
  return _mm512_mask_blend_ps(in, b, a);
}
// Narrow-head helpers (attention_x86_impl.h, acc_packed_tail).
#define TS_VI __m512i
inline __m512i vloadi(const int32_t* p) { return _mm512_loadu_si512(p); }
inline __m512 vload_n(const float* p, int32_t n) {  // p[0..n), zeros past n (nothing read there)
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
}
inline __m512 vperm(__m512 x, __m512i idx) { return _mm512_permutexvar_ps(idx, x); }
inline bool any_ne_one(__m512 x, int32_t n) {  // among lanes [0, n)
  return _mm512_mask_cmp_ps_mask(static_cast<__mmask16>((1u << n) - 1), x, _mm512_set1_ps(1.f), _CMP_NEQ_UQ) != 0;
}
inline __m256 high_half(__m512 x) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)); }
inline __m512 combine(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}


// exp_ref on 16 lanes: the double-precision core on two halves of 8, then glibc's special cases.
// The 32-entry 2^(i/32) table lives in four registers and is indexed with two two-source
// permutes and a blend on index bit 4 (the same table values as a gather, at 4 uops instead of
// a gather's ~12 with their load-port pressure).
inline __m512 exp16v(__m512 xf) {
  using namespace expf_data;
  const __m512d inv = _mm512_set1_pd(kInvLn2N), shift = _mm512_set1_pd(kShift);
  const __m512i tab0 = _mm512_loadu_si512(kTab), tab1 = _mm512_loadu_si512(kTab + 8);
  const __m512i tab2 = _mm512_loadu_si512(kTab + 16), tab3 = _mm512_loadu_si512(kTab + 24);
  __m256 halves[2];
  for (int h = 0; h < 2; ++h) {
    const __m512d xd = _mm512_cvtps_pd(h ? high_half(xf) : _mm512_castps512_ps256(xf));
    const __m512d kds = _mm512_fmadd_pd(inv, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kds);
    const __m512d kd = _mm512_sub_pd(kds, shift);
    const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    const __m512i lo = _mm512_permutex2var_epi64(tab0, ki, tab1);  // entries (ki & 15) of 0..15
    const __m512i hi = _mm512_permutex2var_epi64(tab2, ki, tab3);  // entries (ki & 15) of 16..31
    const __m512i entry = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    const __m512i t = _mm512_add_epi64(entry, _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(kC0), r, _mm512_set1_pd(kC1));
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d yv = _mm512_fmadd_pd(r, _mm512_set1_pd(kC2), _mm512_set1_pd(1.0));
    yv = _mm512_fmadd_pd(z, r2, yv);
    halves[h] = _mm512_cvtpd_ps(_mm512_mul_pd(yv, _mm512_castsi512_pd(t)));
  }
  __m512 res = combine(halves[0], halves[1]);
  const __mmask16 under = _mm512_cmp_ps_mask(xf, _mm512_set1_ps(kUnderflow), _CMP_LT_OQ);
  const __mmask16 may = _mm512_cmp_ps_mask(xf, _mm512_set1_ps(kMayUnderflow), _CMP_LT_OQ) & ~under;
  const __mmask16 over = _mm512_cmp_ps_mask(xf, _mm512_set1_ps(kOverflow), _CMP_GT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(xf, xf, _CMP_UNORD_Q);
  res = _mm512_mask_mov_ps(res, under, _mm512_setzero_ps());
  res = _mm512_mask_mov_ps(res, may, _mm512_set1_ps(0x1p-149f));
  res = _mm512_mask_mov_ps(res, over, _mm512_set1_ps(INFINITY));
  res = _mm512_mask_mov_ps(res, nan, _mm512_add_ps(xf, xf));
  return res;
}

void exp_tile(const float* x, float* y) { _mm512_storeu_ps(y, exp16v(_mm512_loadu_ps(x))); }

void swiglu(float* a, const float* b, int64_t n) {
  int64_t i = 0;
  const __m512 one = _mm512_set1_ps(1.f);
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(a + i);
    const __m512 e = exp16v(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_storeu_ps(a + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(b + i)));
  }
  for (; i < n; ++i) a[i] = a[i] / (1.0f + exp_ref(-a[i])) * b[i];
}

}  // namespace
}  // namespace ts::model::attn

#include "model/attention_x86_impl.h"

#pragma GCC diagnostic pop
#pragma GCC pop_options
