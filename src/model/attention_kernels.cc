// Scalar reference of the tiled-attention kernels (attention_kernels.h). The SIMD tables must
// match these bit for bit.
#include <cmath>

#include "model/attention_kernels.h"

namespace ts::model::attn {
namespace {

// x rounded through fp16 (round to nearest even, as F16C's vcvtps2ph).
inline float rnd16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

void scores_ggml(const float* q, const float* kt, int32_t hd, float scale, float* out) {
  const int32_t np = hd & ~31;
  for (int32_t i = 0; i < kKeyTile; ++i) {
    float sum[4][8] = {};
    for (int32_t c = 0; c < np; c += 32)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 8; ++l) {
          const int32_t d = c + 8 * j + l;
          sum[j][l] = std::fma(q[d], kt[d * kKeyTile + i], sum[j][l]);
        }
    float r[8];
    for (int l = 0; l < 8; ++l) r[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
    float t[4];
    for (int l = 0; l < 4; ++l) t[l] = r[l] + r[l + 4];
    double acc = (t[0] + t[1]) + (t[2] + t[3]);
    for (int32_t d = np; d < hd; ++d) acc += static_cast<double>(q[d] * kt[d * kKeyTile + i]);
    out[i] = static_cast<float>(acc) * scale;
  }
}

void acc_f16(float* acc, const float* v, const float* w, const float* ms, int32_t i0, int32_t i1, int32_t hd) {
  for (int32_t d = 0; d < hd; ++d) {
    float a = acc[d];
    for (int32_t i = i0; i < i1; ++i) {
      if (ms[i] != 1.f) a = rnd16(a * ms[i]);
      a = rnd16(std::fma(v[i * hd + d], w[i], a));
    }
    acc[d] = a;
  }
}

void acc_f32(float* acc, const float* v, const float* p, int32_t i0, int32_t i1, int32_t hd, float rescale) {
  for (int32_t d = 0; d < hd; ++d) {
    float a = acc[d] * rescale;
    for (int32_t i = i0; i < i1; ++i) a = std::fma(p[i], v[i * hd + d], a);
    acc[d] = a;
  }
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{.name = "scalar", .scores_ggml = scores_ggml, .acc_f16 = acc_f16, .acc_f32 = acc_f32};
  return k;
}

}  // namespace ts::model::attn
