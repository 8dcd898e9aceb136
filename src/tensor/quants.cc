#include "tensor/quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/fp16.h"

namespace ts::tensor {

namespace {

// Round half to even (the current rounding mode), like ggml's nearest_int and
// _mm256_round_ps(_MM_ROUND_NEAREST).
inline int nearest(float f) { return static_cast<int>(std::nearbyint(f)); }

// Fits a scale s for integers l in [-nmax, nmax-1] minimising sum (x - s*l)^2 over a small
// set of starting scales (least-squares refit after each rounding). Returns s (0 for an
// all-zero group).
float fit_signed_scale(const float* x, int n, int nmax) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-15f) return 0;
  float best_scale = max / static_cast<float>(-nmax);
  float best_score = -1;
  for (int step = -9; step <= 9; ++step) {
    float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    double sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
      sumlx += static_cast<double>(l) * x[i];
      suml2 += static_cast<double>(l) * l;
    }
    if (suml2 <= 0) continue;
    double score = sumlx * sumlx / suml2;  // error = sum x^2 - score
    if (score > best_score) {
      best_score = static_cast<float>(score);
      best_scale = static_cast<float>(sumlx / suml2);
    }
  }
  return best_scale;
}

// Fits value ~= scale*l - min with l in [0, nmax], scale >= 0, min >= 0 (ggml's Q4_K
// convention: the offset is subtracted and never positive in x terms). Returns scale; *min_out.
float fit_affine_scale(const float* x, int n, int nmax, float* min_out) {
  float xmin = x[0], xmax = x[0];
  for (int i = 1; i < n; ++i) {
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  if (xmin > 0) xmin = 0;
  if (xmax <= xmin) {
    *min_out = -xmin;
    return 0;
  }
  float best_scale = (xmax - xmin) / static_cast<float>(nmax);
  float best_min = -xmin;
  double best_err = 0;
  for (int i = 0; i < n; ++i) {
    int l = std::clamp(nearest((x[i] - xmin) / best_scale), 0, nmax);
    double e = x[i] - (best_scale * l + xmin);
    best_err += e * e;
  }
  for (int step = 0; step <= 20; ++step) {
    float iscale = (static_cast<float>(nmax) - 1.0f + 0.1f * static_cast<float>(step)) / (xmax - xmin);
    double sl = 0, sl2 = 0, sx = 0, slx = 0;
    int ls[256];
    for (int i = 0; i < n; ++i) {
      int l = std::clamp(nearest(iscale * (x[i] - xmin)), 0, nmax);
      ls[i] = l;
      sl += l;
      sl2 += static_cast<double>(l) * l;
      sx += x[i];
      slx += static_cast<double>(l) * x[i];
    }
    // Least squares for x ~= a*l + b.
    double det = n * sl2 - sl * sl;
    if (det <= 0) continue;
    double a = (n * slx - sl * sx) / det;
    double b = (sl2 * sx - sl * slx) / det;
    if (b > 0) {  // offset must be <= 0
      b = 0;
      a = sl2 > 0 ? slx / sl2 : 0;
    }
    if (a <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      double e = x[i] - (a * ls[i] + b);
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_scale = static_cast<float>(a);
      best_min = static_cast<float>(-b);
    }
  }
  *min_out = best_min;
  return best_scale;
}

}  // namespace

void quantize_act_q8_0(const float* x, int64_t n, int8_t* qs, float* d, int32_t* sum) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    float amax = 0;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float id = amax != 0 ? 127.f / amax : 0.f;
    d[b] = round_fp16(amax / 127.f);
    int32_t s = 0;
    for (int j = 0; j < kQK8_0; ++j) {
      int q = nearest(xb[j] * id);
      qs[b * kQK8_0 + j] = static_cast<int8_t>(q);
      s += q;
    }
    sum[b] = s;
  }
}

void quantize_act_q8_k(const float* x, int64_t n, BlockQ8_K* y) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    BlockQ8_K& out = y[b];
    float amax = 0, max = 0;
    for (int j = 0; j < kQK_K; ++j) {
      float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0) {
      out.d = 0;
      std::memset(out.qs, 0, sizeof(out.qs));
      std::memset(out.bsums, 0, sizeof(out.bsums));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) out.qs[j] = static_cast<int8_t>(std::min(127, nearest(iscale * x[j])));
    for (int j = 0; j < kQK_K / 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += out.qs[j * 16 + i];
      out.bsums[j] = static_cast<int16_t>(s);
    }
    out.d = 1 / iscale;
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < kQK8_0; ++j) y[b * kQK8_0 + j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    float* yb = y + b * kQK4_0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      yb[j] = static_cast<float>((x[b].qs[j] & 0xF) - 8) * d;
      yb[j + kQK4_0 / 2] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    const uint8_t* q = x[b].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      q4k_scale_min(2 * c, x[b].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4k_scale_min(2 * c + 1, x[b].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const uint8_t* ql = x[b].ql;
    const uint8_t* qh = x[b].qh;
    const int8_t* sc = x[b].scales;
    for (int c = 0; c < 2; ++c, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void quantize_act_q8_1_sums(const float* x, int64_t n, const int32_t* sum, float* s) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    float amax = 0;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    s[b] = round_fp16(amax / 127.f * static_cast<float>(sum[b]));
  }
}

// ---- Dequantizers of the other ggml types (the formulas of ggml's dequantize_row_*) --------

namespace {
// 5th bit of value j (0..31) of a Q5_0/Q5_1 block.
inline int q5_high(const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return static_cast<int>((h >> j) & 1) << 4;
}
}  // namespace

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(x[b].qs[j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(x[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(((x[b].qs[j] & 0xF) | q5_high(x[b].qh, j)) - 16) * d;
      y[j + 16] = static_cast<float>(((x[b].qs[j] >> 4) | q5_high(x[b].qh, j + 16)) - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0xF) | q5_high(x[b].qh, j)) * d + m;
      y[j + 16] = static_cast<float>((x[b].qs[j] >> 4) | q5_high(x[b].qh, j + 16)) * d + m;
    }
  }
}

void dequantize_row_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    const uint8_t* q = x[b].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = x[b].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_row_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    int8_t sc[16];
    q3k_scales(x[b].scales, sc);
    const uint8_t* q = x[b].qs;
    uint8_t m = 1;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d * static_cast<float>(sc[is++]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((x[b].hmask[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    const uint8_t* ql = x[b].qs;
    for (int c = 0; c < 4; ++c, ql += 32) {
      for (int h = 0; h < 2; ++h) {
        uint8_t sc, m;
        q4k_scale_min(2 * c + h, x[b].scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        const int bit = 2 * c + h;
        for (int l = 0; l < 32; ++l) {
          const int v = (h ? ql[l] >> 4 : ql[l] & 0xF) | (((x[b].qh[l] >> bit) & 1) << 4);
          *y++ = d1 * static_cast<float>(v) - m1;
        }
      }
    }
  }
}

void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIQ4NLValues[x[b].qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kIQ4NLValues[x[b].qs[j] >> 4]);
    }
  }
}

void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const uint8_t* qs = x[b].qs;
    for (int ib = 0; ib < 8; ++ib, qs += 16, y += 32) {
      const float dl = d * static_cast<float>(iq4xs_scale(x[b], ib));
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIQ4NLValues[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kIQ4NLValues[qs[j] >> 4]);
      }
    }
  }
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    float amax = 0;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.f;
    const float id = d != 0 ? 1.f / d : 0.f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
  }
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float* xb = x + b * kQK4_0;
    float amax = 0, max = 0;
    for (int j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0 ? 1.f / d : 0.f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      // Truncation after +8.5 is ggml's rounding; values lie in [0.5, 16.5].
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(xb[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(xb[j + 16] * id + 8.5f)));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      scales[j] = fit_affine_scale(x + 32 * j, 32, 15, &mins[j]);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    BlockQ4_K& out = y[b];
    out.d = fp32_to_fp16(max_scale / 63.f);
    out.dmin = fp32_to_fp16(max_min / 63.f);
    const float d = fp16_to_fp32(out.d), dmin = fp16_to_fp32(out.dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(d > 0 ? std::clamp(nearest(scales[j] / d), 0, 63) : 0);
      mn[j] = static_cast<uint8_t>(dmin > 0 ? std::clamp(nearest(mins[j] / dmin), 0, 63) : 0);
    }
    for (int j = 0; j < 4; ++j) {
      out.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
      out.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
      out.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
    uint8_t q[kQK_K];
    for (int j = 0; j < 8; ++j) {
      const float ds = d * sc[j], dm = dmin * mn[j];
      for (int i = 0; i < 32; ++i) {
        q[32 * j + i] = static_cast<uint8_t>(ds > 0 ? std::clamp(nearest((x[32 * j + i] + dm) / ds), 0, 15) : 0);
      }
    }
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        out.qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
      }
    }
  }
}

void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float scales[16];
    float amax = 0, max = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_signed_scale(x + 16 * j, 16, 32);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max = scales[j];
      }
    }
    BlockQ6_K& out = y[b];
    out.d = fp32_to_fp16(max / -128.f);
    const float d = fp16_to_fp32(out.d);
    for (int j = 0; j < 16; ++j) {
      out.scales[j] = static_cast<int8_t>(d != 0 ? std::clamp(nearest(scales[j] / d), -128, 127) : 0);
    }
    uint8_t q[kQK_K];
    for (int j = 0; j < 16; ++j) {
      const float ds = d * out.scales[j];
      for (int i = 0; i < 16; ++i) {
        q[16 * j + i] = static_cast<uint8_t>(ds != 0 ? std::clamp(nearest(x[16 * j + i] / ds), -32, 31) + 32 : 32);
      }
    }
    for (int c = 0; c < 2; ++c) {
      const uint8_t* qc = q + 128 * c;
      uint8_t* ql = out.ql + 64 * c;
      uint8_t* qh = out.qh + 32 * c;
      for (int l = 0; l < 32; ++l) {
        const int q1 = qc[l], q2 = qc[l + 32], q3 = qc[l + 64], q4 = qc[l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

}  // namespace ts::tensor
