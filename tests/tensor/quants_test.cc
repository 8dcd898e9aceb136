#include "tensor/quants.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/fp16.h"
#include "tensor/matrix.h"

namespace ts::tensor {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double rms(const std::vector<float>& a) {
  double s = 0;
  for (float x : a) s += double(x) * x;
  return std::sqrt(s / double(a.size()));
}

double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s / double(a.size()));
}

TEST(QuantsTest, Q8_0DequantizeHandBuiltBlock) {
  BlockQ8_0 b;
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  float out[32];
  dequantize_row(DType::kQ8_0, &b, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * float(j - 16));
}

TEST(QuantsTest, Q8_0QuantizeFollowsGgmlReference) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = float(j) - 10.0f;  // amax 21 at j = 31
  BlockQ8_0 b;
  quantize_row(DType::kQ8_0, x.data(), &b, 32);
  const float d = 21.0f / 127.0f;
  EXPECT_EQ(b.d, fp32_to_fp16(d));
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], static_cast<int8_t>(std::round(x[j] * (1.0f / d)))) << j;
  EXPECT_EQ(b.qs[31], 127);
}

TEST(QuantsTest, Q4_0UsesSignedMaxOverMinusEight) {
  std::vector<float> x(32, 0.0f);
  x[3] = -4.0f;  // largest magnitude, negative: d = -4 / -8 = 0.5, q = x/d + 8
  x[20] = 1.0f;
  x[7] = 3.0f;
  BlockQ4_0 b;
  quantize_row(DType::kQ4_0, x.data(), &b, 32);
  EXPECT_EQ(fp16_to_fp32(b.d), 0.5f);
  EXPECT_EQ(b.qs[3] & 0xF, 0);          // -4/0.5 + 8 = 0
  EXPECT_EQ(b.qs[7] & 0xF, 14);         // 3/0.5 + 8 = 14
  EXPECT_EQ(b.qs[4] >> 4, 10);          // element 20: 1/0.5 + 8 = 10
  EXPECT_EQ(b.qs[0] & 0xF, 8);          // zero
  float out[32];
  dequantize_row(DType::kQ4_0, &b, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], x[j]) << j;
  // Positive max maps to -8 (clamped at 15 on the other side).
  x.assign(32, 0.0f);
  x[0] = 8.0f;
  x[1] = -8.0f;
  quantize_row(DType::kQ4_0, x.data(), &b, 32);
  EXPECT_EQ(fp16_to_fp32(b.d), -1.0f);
  EXPECT_EQ(b.qs[0] & 0xF, 0);   // 8 / -1 + 8 = 0
  EXPECT_EQ(b.qs[1] & 0xF, 15);  // -8 / -1 + 8 = 16 -> clamped to 15
}

TEST(QuantsTest, Q4_KDequantizeDecodesSixBitScales) {
  BlockQ4_K b;
  std::memset(&b, 0, sizeof(b));
  b.d = fp32_to_fp16(1.0f);
  b.dmin = fp32_to_fp16(0.5f);
  // Sub-block 1: scale 3, min 2 (bytes 1 and 5, low 6 bits).
  b.scales[1] = 3;
  b.scales[5] = 2;
  // Sub-block 6: scale = low nibble of byte 10 | top two bits of byte 2 << 4 = 5 | (2 << 4) = 37;
  //              min   = high nibble of byte 10 | top two bits of byte 6 << 4 = 7 | (1 << 4) = 23.
  b.scales[10] = 0x75;
  b.scales[2] = 0x80;
  b.scales[6] = 0x40;
  // Element 32 + 5 belongs to sub-block 1 (high nibbles of qs[0..31]); element 192 + 9 to sub-block 6.
  b.qs[5] = 0x90;         // high nibble 9
  b.qs[96 + 9] = 0x0C;    // low nibble 12 (sub-block 6 = chunk 3 low)
  std::vector<float> out(256);
  dequantize_row(DType::kQ4_K, &b, out.data(), 256);
  EXPECT_EQ(out[32 + 5], 1.0f * 3 * 9 - 0.5f * 2);
  EXPECT_EQ(out[192 + 9], 1.0f * 37 * 12 - 0.5f * 23);
  EXPECT_EQ(out[192 + 10], -0.5f * 23);
  EXPECT_EQ(out[0], 0.0f);  // sub-block 0: scale 0, min 0
  uint8_t sc, m;
  q4k_scale_min(6, b.scales, &sc, &m);
  EXPECT_EQ(sc, 37);
  EXPECT_EQ(m, 23);
}

TEST(QuantsTest, Q6_KDequantizeDecodesSplitBits) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof(b));
  b.d = fp32_to_fp16(0.25f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j - 8);
  // Element 128 + 64 + 17 (second half, third quarter, l = 17): low 4 bits = ql[64 + 17] >> 4,
  // high 2 bits = (qh[32 + 17] >> 4) & 3, scale index 8 + 1 + 4 = 13 (16-value group 13).
  b.ql[64 + 17] = 0xB0;     // 11
  b.qh[32 + 17] = 0x20;     // bits 4..5 = 2 -> value 11 | 32 = 43, minus 32 = 11
  std::vector<float> out(256);
  dequantize_row(DType::kQ6_K, &b, out.data(), 256);
  EXPECT_EQ(out[128 + 64 + 17], 0.25f * float(13 - 8) * 11.0f);
  EXPECT_EQ(out[0], 0.25f * float(0 - 8) * -32.0f);  // all-zero bits -> q = -32
}

TEST(QuantsTest, RoundTripErrorIsSmallForEveryType) {
  const int64_t n = 1024;
  const auto x = random_floats(n, 7);
  struct Case {
    DType type;
    double max_rel_rms;
  };
  for (const Case& c : {Case{DType::kF32, 0.0}, Case{DType::kF16, 1e-3}, Case{DType::kBF16, 5e-3},
                        Case{DType::kQ8_0, 0.01}, Case{DType::kQ4_0, 0.12}, Case{DType::kQ4_K, 0.09},
                        Case{DType::kQ6_K, 0.03}}) {
    auto tr = *type_traits(static_cast<uint32_t>(c.type));
    std::vector<uint8_t> buf(row_bytes(tr, n));
    quantize_row(c.type, x.data(), buf.data(), n);
    std::vector<float> y(n);
    dequantize_row(c.type, buf.data(), y.data(), n);
    EXPECT_LE(rms_diff(x, y), c.max_rel_rms * rms(x)) << tr.name;
  }
}

TEST(QuantsTest, Q4_KHandlesAllPositiveAndConstantBlocks) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = 2.0f + 0.01f * float(i % 32);  // min > 0
  std::vector<uint8_t> buf(144);
  quantize_row(DType::kQ4_K, x.data(), buf.data(), 256);
  std::vector<float> y(256);
  dequantize_row(DType::kQ4_K, buf.data(), y.data(), 256);
  EXPECT_LE(rms_diff(x, y), 0.05);
  std::vector<float> zeros(256, 0.0f);
  quantize_row(DType::kQ4_K, zeros.data(), buf.data(), 256);
  dequantize_row(DType::kQ4_K, buf.data(), y.data(), 256);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  std::vector<uint8_t> buf6(210);
  quantize_row(DType::kQ6_K, zeros.data(), buf6.data(), 256);
  dequantize_row(DType::kQ6_K, buf6.data(), y.data(), 256);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(QuantsTest, ActQ8_0RoundsHalfToEvenWithFp16Scale) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // amax 127 -> id = 1
  x[1] = 0.5f;
  x[2] = 1.5f;
  x[3] = 2.5f;
  x[4] = -2.5f;
  x[5] = -3.7f;
  int8_t q[32];
  float d;
  int32_t s;
  quantize_act_q8_0(x.data(), 32, q, &d, &s);
  EXPECT_EQ(d, 1.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[2], 2);
  EXPECT_EQ(q[3], 2);
  EXPECT_EQ(q[4], -2);
  EXPECT_EQ(q[5], -4);
  EXPECT_EQ(s, 127 + 0 + 2 + 2 - 2 - 4);
  // The scale is stored rounded to fp16.
  x[0] = 1.0f;
  quantize_act_q8_0(x.data(), 32, q, &d, &s);  // amax = 3.7
  EXPECT_EQ(d, round_fp16(3.7f / 127.0f));
}

TEST(QuantsTest, ActQ8_KUsesSignedMaxAndBlockSums) {
  auto x = random_floats(512, 3);
  x[100] = -9.0f;  // the largest magnitude, negative -> iscale = -127 / -9 > 0, q = -127
  std::vector<BlockQ8_K> y(2);
  quantize_act_q8_k(x.data(), 512, y.data());
  EXPECT_EQ(y[0].qs[100], -127);
  EXPECT_FLOAT_EQ(y[0].d, 1.0f / (-127.0f / -9.0f));
  for (int b = 0; b < 2; ++b) {
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += y[b].qs[16 * j + i];
      EXPECT_EQ(y[b].bsums[j], s);
    }
    for (int i = 0; i < 256; ++i) {
      EXPECT_NEAR(float(y[b].qs[i]) * y[b].d, x[256 * b + i], std::fabs(y[b].d) * 0.5f + 1e-6f);
    }
  }
  // A positive max maps to -127 (negative scale), like ggml.
  std::vector<float> z(256, 0.0f);
  z[5] = 4.0f;
  z[6] = -1.0f;
  quantize_act_q8_k(z.data(), 256, y.data());
  EXPECT_EQ(y[0].qs[5], -127);
  EXPECT_LT(y[0].d, 0.0f);
  std::vector<float> zeros(256, 0.0f);
  quantize_act_q8_k(zeros.data(), 256, y.data());
  EXPECT_EQ(y[0].d, 0.0f);
  EXPECT_EQ(y[0].bsums[3], 0);
}

}  // namespace
}  // namespace ts::tensor
