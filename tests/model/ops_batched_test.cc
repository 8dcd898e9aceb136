// Batched / threaded element-wise ops (ops.h *_rows, add_inplace, pooled swiglu/geglu) and the
// vector SwiGLU: bit-identical to the single-row scalar forms on every ISA tier of this host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/attention_kernels.h"
#include "model/ops.h"
#include "tensor/matrix.h"

namespace ts::model {
namespace {

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(OpsBatched, SwigluEveryTierMatchesScalarFormula) {
  // Includes large |g| (exp overflow / underflow) and odd lengths (vector tails).
  for (int64_t n : {1, 7, 16, 33, 1000}) {
    auto a0 = randv(n, 1, 8.f), b = randv(n, 2);
    a0[0] = -120.f;
    if (n > 1) a0[1] = 100.f;
    std::vector<float> want = a0;
    for (int64_t i = 0; i < n; ++i) want[i] = want[i] / (1.0f + std::exp(-want[i])) * b[i];
    std::vector<const attn::Kernels*> tables = {&attn::scalar_kernels()};
    if (tensor::detected_isa() >= tensor::Isa::kAvx2) tables.push_back(&attn::avx2_kernels());
    if (tensor::detected_isa() >= tensor::Isa::kAvx512) tables.push_back(&attn::avx512_kernels());
    for (const auto* k : tables) {
      std::vector<float> got = a0;
      k->swiglu(got.data(), b.data(), n);
      EXPECT_TRUE(same(got, want)) << k->name << " n " << n;
    }
  }
}

TEST(OpsBatched, RowFormsMatchSingleRowWhateverTheSplit) {
  ThreadPool pool(2);
  const int64_t T = 37, n = 896;  // enough rows to be split over the pool
  auto x0 = randv(T * n, 3), h0 = randv(T * n, 4), w = randv(n, 5);
  // rms_norm_rows vs rms_norm per row.
  std::vector<float> want(T * n), got(T * n);
  for (int64_t t = 0; t < T; ++t) rms_norm(x0.data() + t * n, w.data(), want.data() + t * n, n, 1e-6f);
  rms_norm_rows(x0.data(), w.data(), got.data(), T, n, 1e-6f, &pool);
  EXPECT_TRUE(same(got, want));
  // add_rms_norm_rows (out aliasing h) vs add then norm.
  std::vector<float> xa = x0, ha = h0, xb = x0, hb = h0;
  for (int64_t i = 0; i < T * n; ++i) xa[i] += ha[i];
  for (int64_t t = 0; t < T; ++t) rms_norm(xa.data() + t * n, w.data(), ha.data() + t * n, n, 1e-6f);
  add_rms_norm_rows(xb.data(), hb.data(), w.data(), hb.data(), T, n, 1e-6f, &pool);
  EXPECT_TRUE(same(xa, xb));
  EXPECT_TRUE(same(ha, hb));
  // add_inplace, pooled swiglu / geglu vs unpooled.
  std::vector<float> xc = x0;
  add_inplace(xc.data(), h0.data(), T * n, &pool);
  for (int64_t i = 0; i < T * n; ++i) ASSERT_EQ(xc[i], x0[i] + h0[i]);
  std::vector<float> s1 = x0, s2 = x0, g1 = x0, g2 = x0;
  swiglu(s1.data(), h0.data(), T * n);
  swiglu(s2.data(), h0.data(), T * n, &pool);
  EXPECT_TRUE(same(s1, s2));
  geglu_ggml(g1.data(), h0.data(), T * n);
  geglu_ggml(g2.data(), h0.data(), T * n, &pool);
  EXPECT_TRUE(same(g1, g2));
  EXPECT_FALSE(same(s1, x0));
}

}  // namespace
}  // namespace ts::model
