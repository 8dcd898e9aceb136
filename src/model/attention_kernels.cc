// Scalar reference of the tiled-attention kernels (attention_kernels.h). The SIMD tables must
// match these bit for bit.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/attention_kernels.h"
#include "tensor/fp16.h"
#include "tensor/matrix.h"

// The reference kernels are plain C++; cloned for x86-64-v4 / v3 / baseline so the scalar tier
// runs at compiler-vectorized speed with hardware fp16 conversions and FMA where the CPU has
// them (the arithmetic is the same in every clone: explicit fma calls, no contraction).
#if defined(__GNUC__) && !defined(__clang__)
#define TS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TS_CLONES
#endif

namespace ts::model::attn {

TS_CLONES float exp_ref(float x) {
  using namespace expf_data;
  const uint32_t ix = std::bit_cast<uint32_t>(x);
  const uint32_t abstop = (ix >> 20) & 0x7ff;
  if (abstop >= 0x42b) {  // |x| >= 88 (top bits), or inf / nan
    if (ix == 0xff800000u) return 0.f;
    if (abstop >= 0x7f8) return x + x;
    if (x > kOverflow) return INFINITY;
    if (x < kUnderflow) return 0.f;
    if (x < kMayUnderflow) return 0x1p-149f;
  }
  const double xd = x;
  const double kds = std::fma(kInvLn2N, xd, kShift);
  const uint64_t ki = std::bit_cast<uint64_t>(kds);
  const double kd = kds - kShift;
  const double r = std::fma(kInvLn2N, xd, -kd);
  const double sc = std::bit_cast<double>(kTab[ki & 31] + (ki << 47));
  const double z = std::fma(kC0, r, kC1);
  const double r2 = r * r;
  double y = std::fma(r, kC2, 1.0);
  y = std::fma(z, r2, y);
  return static_cast<float>(y * sc);
}

TS_CLONES float exp_flash(float x) {
  using namespace expflash_data;
  x = x > kMin ? x : kMin;  // NaN: kMin, as the vector max(x, kMin)
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kC[7];
  for (int k = 6; k >= 0; --k) p = std::fma(p, r, kC[k]);
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

namespace {

TS_CLONES void exp_tile(const float* x, float* y) {
  for (int32_t i = 0; i < kKeyTile; ++i) y[i] = exp_ref(x[i]);
}

TS_CLONES void cvt_f16(const uint16_t* src, float* dst, int32_t n) {
  for (int32_t i = 0; i < n; ++i) dst[i] = tensor::fp16_to_fp32(src[i]);
}

TS_CLONES void load_kt_f16(const uint16_t* k, int32_t stride, int32_t hd, float* kt) {
  for (int32_t d = 0; d < hd; ++d)
    for (int32_t i = 0; i < kKeyTile; ++i) kt[d * kKeyTile + i] = tensor::fp16_to_fp32(k[d * stride + i]);
}

TS_CLONES void load_kt_q8(const int8_t* k, int32_t stride, const float* scale, int32_t hd, float* kt) {
  for (int32_t d = 0; d < hd; ++d)
    for (int32_t i = 0; i < kKeyTile; ++i) kt[d * kKeyTile + i] = scale[i] * k[d * stride + i];
}

TS_CLONES void load_v_q8(const int8_t* v, const float* scale, int32_t n, int32_t hd, float* vt) {
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = 0; e < hd; ++e) vt[i * hd + e] = scale[i] * v[i * hd + e];
}

TS_CLONES void cvt_to_f16(const float* src, uint16_t* dst, int32_t n) {
  for (int32_t i = 0; i < n; ++i) dst[i] = tensor::fp32_to_fp16(src[i]);
}

TS_CLONES void swiglu(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] / (1.0f + exp_ref(-a[i])) * b[i];
}

TS_CLONES void online_f16(const float* sc, int32_t nrows, int32_t i0, int32_t i1, float* m_io, float* s_io, float* w,
                float* ms) {
  for (int32_t r = 0; r < nrows; ++r) {
    const float* scr = sc + r * kKeyTile;
    float* wr = w + r * kKeyTile;
    float* mr = ms + r * kKeyTile;
    float m = m_io[r], s = s_io[r];
    for (int32_t i = i0; i < i1; ++i) {
      if (scr[i] > m) {
        mr[i] = exp_ref(m - scr[i]);
        wr[i] = 1.f;
        m = scr[i];
      } else {
        mr[i] = 1.f;
        wr[i] = exp_ref(scr[i] - m);
      }
      s = std::fma(s, mr[i], wr[i]);
    }
    m_io[r] = m;
    s_io[r] = s;
  }
}

TS_CLONES void online_f32(const float* sc, int32_t nrows, int32_t i0, int32_t i1, float* m_io, float* s_io, float* w,
                          float* rescale) {
  for (int32_t r = 0; r < nrows; ++r) {
    const float* scr = sc + r * kKeyTile;
    float* wr = w + r * kKeyTile;
    float m = m_io[r];
    for (int32_t i = i0; i < i1; ++i) m = std::max(m, scr[i]);
    rescale[r] = exp_ref(m_io[r] - m);  // exp(-inf) = 0 on the first tile
    float s = s_io[r] * rescale[r];
    for (int32_t i = i0; i < i1; ++i) {
      wr[i] = exp_ref(scr[i] - m);
      s += wr[i];
    }
    m_io[r] = m;
    s_io[r] = s;
  }
}

// x rounded through fp16 (round to nearest even, as F16C's vcvtps2ph).
inline float rnd16(float x) {
#if defined(__GNUC__) && !defined(__clang__)
  return static_cast<float>(static_cast<_Float16>(x));
#else
  return tensor::round_fp16(x);  // clang 14 has no _Float16 on x86 without AVX512-FP16
#endif
}

// Loops are ordered so the compiler can vectorize across keys (scores) or head_dim (the
// accumulators) without changing any element's sequence of operations.
TS_CLONES void scores_ggml(const float* q, const float* kt, int32_t hd, float scale, float* out) {
  constexpr int K = kKeyTile;
  const int32_t np = hd & ~31;
  float sum[4][8][K] = {};
  for (int32_t c = 0; c < np; c += 32)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l) {
        const int32_t d = c + 8 * j + l;
        for (int i = 0; i < K; ++i) sum[j][l][i] = std::fma(q[d], kt[d * K + i], sum[j][l][i]);
      }
  float r[8][K];
  for (int l = 0; l < 8; ++l)
    for (int i = 0; i < K; ++i) r[l][i] = (sum[0][l][i] + sum[2][l][i]) + (sum[1][l][i] + sum[3][l][i]);
  for (int i = 0; i < K; ++i) {
    float t[4];
    for (int l = 0; l < 4; ++l) t[l] = r[l][i] + r[l + 4][i];
    double acc = (t[0] + t[1]) + (t[2] + t[3]);
    for (int32_t d = np; d < hd; ++d) acc += static_cast<double>(q[d] * kt[d * K + i]);
    out[i] = static_cast<float>(acc) * scale;
  }
}

TS_CLONES void scores_rows(const float* q, int32_t nrows, const float* kt, int32_t hd, float scale, float* out) {
  for (int32_t r = 0; r < nrows; ++r) scores_ggml(q + static_cast<size_t>(r) * hd, kt, hd, scale, out + static_cast<size_t>(r) * kKeyTile);
}

TS_CLONES void scores_rows_f16k(const float* q, int32_t nrows, const uint16_t* k, int32_t stride, int32_t hd,
                                float scale, float* out) {
  thread_local std::vector<float> kt;
  if (kt.size() < static_cast<size_t>(hd) * kKeyTile) kt.resize(static_cast<size_t>(hd) * kKeyTile);
  load_kt_f16(k, stride, hd, kt.data());
  scores_rows(q, nrows, kt.data(), hd, scale, out);
}

TS_CLONES void acc_f16(float* acc, int32_t nrows, const float* v, const float* w, const float* ms, int32_t i0,
                       int32_t i1, int32_t hd) {
  for (int32_t r = 0; r < nrows; ++r) {
    float* a = acc + r * hd;
    const float* wr = w + r * kKeyTile;
    const float* mr = ms + r * kKeyTile;
    for (int32_t i = i0; i < i1; ++i) {
      const float* vi = v + i * hd;
      if (mr[i] != 1.f)
        for (int32_t d = 0; d < hd; ++d) a[d] = rnd16(a[d] * mr[i]);
      for (int32_t d = 0; d < hd; ++d) a[d] = rnd16(std::fma(vi[d], wr[i], a[d]));
    }
  }
}

TS_CLONES void acc_f16_h(float* acc, int32_t nrows, const uint16_t* v, const float* w, const float* ms, int32_t i0,
                         int32_t i1, int32_t hd) {
  thread_local std::vector<float> vt;
  if (vt.size() < static_cast<size_t>(hd) * kKeyTile) vt.resize(static_cast<size_t>(hd) * kKeyTile);
  cvt_f16(v + static_cast<size_t>(i0) * hd, vt.data() + static_cast<size_t>(i0) * hd, (i1 - i0) * hd);
  acc_f16(acc, nrows, vt.data(), w, ms, i0, i1, hd);
}

TS_CLONES void acc_f32(float* acc, int32_t nrows, const float* v, const float* p, const float* rescale, int32_t i0,
                       int32_t i1, int32_t hd) {
  for (int32_t r = 0; r < nrows; ++r) {
    float* a = acc + r * hd;
    const float* pr = p + r * kKeyTile;
    for (int32_t d = 0; d < hd; ++d) a[d] *= rescale[r];
    for (int32_t i = i0; i < i1; ++i) {
      const float* vi = v + i * hd;
      for (int32_t d = 0; d < hd; ++d) a[d] = std::fma(pr[i], vi[d], a[d]);
    }
  }
}

// The fixed summation tree of flash_tile's softmax sum over one tile.
inline float sum64(const float* p) {
  float u[16];
  for (int j = 0; j < 16; ++j) u[j] = (p[j] + p[j + 16]) + (p[j + 32] + p[j + 48]);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) u[j] = u[j] + u[j + w];
  return u[0];
}

TS_CLONES void flash_tile(const float* q, int32_t nrows, int32_t hd, const float* kt, const float* v, int32_t i0,
                          int32_t i1, float scale, float* m, float* s, float* acc) {
  static_assert(kFlashKeys == 64, "sum64 is the 64-key tree");
  float sc[kFlashKeys], p[kFlashKeys];
  for (int32_t r = 0; r < nrows; ++r) {
    const float* qr = q + static_cast<size_t>(r) * hd;
    float* a = acc + static_cast<size_t>(r) * hd;
    bool nan = false;
    float t = -INFINITY;
    for (int32_t i = i0; i < i1; ++i) {
      const float* k = kt + static_cast<size_t>(i / kKeyTile) * hd * kKeyTile + i % kKeyTile;
      float x = 0.f;
      for (int32_t d = 0; d < hd; ++d) x = std::fma(qr[d], k[d * kKeyTile], x);
      sc[i] = x * scale;
      nan |= std::isnan(sc[i]);
      t = sc[i] > t ? sc[i] : t;
    }
    if (nan) {
      std::fill(a, a + hd, NAN);
      continue;
    }
    const float mn = t > m[r] ? t : m[r];
    if (mn > m[r]) {
      const float e = exp_flash(m[r] - mn);
      s[r] *= e;
      for (int32_t d = 0; d < hd; ++d) a[d] *= e;
    }
    m[r] = mn;
    for (int32_t i = 0; i < kFlashKeys; ++i) p[i] = i >= i0 && i < i1 ? exp_flash(sc[i] - mn) : 0.f;
    s[r] += sum64(p);
    for (int32_t i = i0; i < i1; ++i) {
      const float* vi = v + static_cast<size_t>(i) * hd;
      for (int32_t d = 0; d < hd; ++d) a[d] = std::fma(p[i], vi[d], a[d]);
    }
  }
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{.name = "scalar", .scores_ggml = scores_ggml, .scores_rows = scores_rows,
                         .scores_rows_f16k = scores_rows_f16k, .online_f16 = online_f16,
                         .online_f32 = online_f32, .exp_tile = exp_tile, .swiglu = swiglu,
                         .cvt_f16 = cvt_f16, .load_kt_f16 = load_kt_f16,
                         .load_kt_q8 = load_kt_q8, .load_v_q8 = load_v_q8, .cvt_to_f16 = cvt_to_f16,
                         .acc_f16 = acc_f16, .acc_f32 = acc_f32, .acc_f16_h = acc_f16_h,
                         .flash_tile = flash_tile};
  return k;
}

const Kernels& active_kernels() {
  switch (tensor::active_isa()) {
    case tensor::Isa::kAmx:
    case tensor::Isa::kAvx512: return avx512_kernels();
    case tensor::Isa::kAvxVnni:
    case tensor::Isa::kAvx2: return avx2_kernels();
    case tensor::Isa::kScalar: break;
  }
  return scalar_kernels();
}

}  // namespace ts::model::attn
