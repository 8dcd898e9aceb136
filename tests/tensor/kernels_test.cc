// SIMD activation preparation must be bit-identical to the scalar reference (the mat-mul
// results of different ISAs then differ only by float summation order).
#include "tensor/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensor/matrix.h"

namespace ts::tensor::kern {
namespace {

std::vector<const KernelTable*> simd_tables() {
  std::vector<const KernelTable*> v;
  if (detected_isa() >= Isa::kAvx2 && avx2_kernels()) v.push_back(avx2_kernels());
  if (isa_available(Isa::kAvxVnni) && avxvnni_kernels()) v.push_back(avxvnni_kernels());
  if (detected_isa() >= Isa::kAvx512 && avx512_kernels()) v.push_back(avx512_kernels());
  return v;
}

// Random values with hard cases: exact .5 ties after scaling, zeros, repeated max magnitude of
// both signs, tiny and huge values.
std::vector<float> tricky(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  for (size_t i = 0; i < n; i += 7) v[i] = float(int(v[i] * 4)) * 0.5f + 0.5f;  // halves
  if (n >= 64) {
    for (size_t i = 32; i < 64; ++i) v[i] = 0.0f;  // an all-zero Q8_0 block
  }
  if (n >= 512) {
    for (size_t i = 256; i < 512; ++i) v[i] = float(int(i % 9) - 4);  // ties on the max: -4 first, then 4
    v[300] = 1e-30f;
  }
  return v;
}

TEST(KernelsTest, ActivationPrepIsBitIdenticalToScalar) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD ISA on this CPU";
  const KernelTable& ref = scalar_kernels();
  for (int64_t n : {int64_t{256}, int64_t{512}, int64_t{1024}}) {
    auto x = tricky(static_cast<size_t>(n), uint32_t(n));
    for (const KernelTable* kt : tables) {
      // fp16 / bf16 rounding (odd lengths exercise the tails).
      for (int64_t len : {n, n - 5}) {
        std::vector<float> a(len), b(len);
        ref.act.round_f16(x.data(), a.data(), len);
        kt->act.round_f16(x.data(), b.data(), len);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "round_f16 n=" << len;
        ref.act.round_bf16(x.data(), a.data(), len);
        kt->act.round_bf16(x.data(), b.data(), len);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "round_bf16 n=" << len;
      }
      std::vector<int8_t> qa(n), qb(n);
      std::vector<float> da(n / 32), db(n / 32);
      std::vector<int32_t> sa(n / 32), sb(n / 32);
      ref.act.q8_0(x.data(), n, qa.data(), da.data(), sa.data());
      kt->act.q8_0(x.data(), n, qb.data(), db.data(), sb.data());
      EXPECT_EQ(qa, qb);
      EXPECT_EQ(da, db);
      EXPECT_EQ(sa, sb);
      // Q8_0 at lengths whose block count is not a multiple of the 8-block groups (tails of
      // 1..7 blocks), with all-zero and single-value blocks, from an odd offset.
      for (int64_t len : {int64_t{32}, int64_t{96}, int64_t{288}, int64_t{480}, n + 224}) {
        std::vector<float> xs(static_cast<size_t>(len) + 1);
        for (int64_t i = 0; i < len; ++i) xs[static_cast<size_t>(i) + 1] = x[static_cast<size_t>(i % n)] * (1.0f + static_cast<float>(i / n));
        if (len >= 96) {
          for (int i = 0; i < 32; ++i) xs[1 + 32 + static_cast<size_t>(i)] = 0.0f;                  // block 1: zeros
          for (int i = 0; i < 32; ++i) xs[1 + 64 + static_cast<size_t>(i)] = i == 7 ? -3.5f : 0.0f;  // block 2: one value
        }
        std::vector<int8_t> q1(len), q2(len);
        std::vector<float> d1(len / 32), d2(len / 32, -1.f);
        std::vector<int32_t> s1(len / 32), s2(len / 32, -1);
        ref.act.q8_0(xs.data() + 1, len, q1.data(), d1.data(), s1.data());
        kt->act.q8_0(xs.data() + 1, len, q2.data(), d2.data(), s2.data());
        EXPECT_EQ(q1, q2) << "q8_0 n=" << len;
        EXPECT_EQ(d1, d2) << "q8_0 n=" << len;
        EXPECT_EQ(s1, s2) << "q8_0 n=" << len;
      }
      std::vector<BlockQ8_K> ka(n / 256), kb(n / 256);
      ref.act.q8_k(x.data(), n, ka.data());
      kt->act.q8_k(x.data(), n, kb.data());
      for (size_t i = 0; i < ka.size(); ++i) {
        EXPECT_EQ(ka[i].d, kb[i].d) << "block " << i;
        EXPECT_EQ(0, std::memcmp(ka[i].qs, kb[i].qs, sizeof(ka[i].qs))) << "block " << i;
        EXPECT_EQ(0, std::memcmp(ka[i].bsums, kb[i].bsums, sizeof(ka[i].bsums))) << "block " << i;
      }
      // Q8_K takes its scale's sign from the first element of largest magnitude: blocks where
      // both signs reach it (within one 8-value group and across groups, either sign first),
      // one where the only such element is the last value, and an all-zero block.
      std::vector<float> xk(6 * 256);
      for (size_t i = 0; i < xk.size(); ++i) xk[i] = x[i % x.size()] * 0.5f;
      const float big = 9.0f;
      xk[0 * 256 + 3] = -big, xk[0 * 256 + 5] = big;
      xk[1 * 256 + 2] = big, xk[1 * 256 + 6] = -big;
      xk[2 * 256 + 17] = -big, xk[2 * 256 + 200] = big;
      xk[3 * 256 + 64] = big, xk[3 * 256 + 255] = -big;
      xk[4 * 256 + 255] = -big;
      std::fill(xk.begin() + 5 * 256, xk.end(), 0.0f);
      std::vector<BlockQ8_K> ta(6), tb(6);
      ref.act.q8_k(xk.data(), 6 * 256, ta.data());
      kt->act.q8_k(xk.data(), 6 * 256, tb.data());
      for (size_t i = 0; i < ta.size(); ++i) {
        EXPECT_EQ(ta[i].d, tb[i].d) << "tie block " << i;
        EXPECT_EQ(0, std::memcmp(ta[i].qs, tb[i].qs, sizeof(ta[i].qs))) << "tie block " << i;
        EXPECT_EQ(0, std::memcmp(ta[i].bsums, tb[i].bsums, sizeof(ta[i].bsums))) << "tie block " << i;
      }
      // d = max / -127: negative where +9 came first, positive where -9 did.
      EXPECT_GT(tb[0].d, 0.0f);
      EXPECT_LT(tb[1].d, 0.0f);
      EXPECT_GT(tb[2].d, 0.0f);
      EXPECT_LT(tb[3].d, 0.0f);
      EXPECT_GT(tb[4].d, 0.0f);
      EXPECT_EQ(tb[5].d, 0.0f);
    }
  }
}

TEST(KernelsTest, Bf16RoundingHandlesSpecialValues) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD ISA on this CPU";
  std::vector<float> x = {std::numeric_limits<float>::infinity(), -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256,
                          std::numeric_limits<float>::quiet_NaN(), 3.4e38f, 1e-40f, -2.5f};
  for (const KernelTable* kt : tables) {
    std::vector<float> a(x.size()), b(x.size());
    scalar_kernels().act.round_bf16(x.data(), a.data(), int64_t(x.size()));
    kt->act.round_bf16(x.data(), b.data(), int64_t(x.size()));
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
    EXPECT_EQ(a[2], 1.0f);              // tie rounds to even
    EXPECT_EQ(a[3], 1.0f + 4.0f / 256);  // tie rounds to even (up)
    EXPECT_TRUE(std::isnan(a[4]));
  }
}

}  // namespace
}  // namespace ts::tensor::kern
