// Batched / threaded element-wise ops (ops.h *_rows, add_inplace, pooled swiglu/geglu), the
// vector SwiGLU and RoPE: bit-identical to the single-row scalar forms on every ISA tier of
// this host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
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

TEST(OpsBatched, RopeEveryTierMatchesScalarFormula) {
  // Both pair layouts, head sizes whose half is a multiple of 8 (the vector form) and not (8, 20).
  const tensor::Isa saved = tensor::active_isa();
  for (bool neox : {false, true}) {
    for (int hd : {8, 20, 64, 80, 128}) {
      const int heads = 3, half = hd / 2;
      const auto x0 = randv(static_cast<size_t>(heads) * hd, 10 + hd);
      const auto cs = randv(half, 20 + hd), sn = randv(half, 30 + hd);
      std::vector<float> want = x0;
      for (int h = 0; h < heads; ++h) {
        float* v = want.data() + h * hd;
        for (int i = 0; i < half; ++i) {
          float& a = v[neox ? i : 2 * i];
          float& b = v[neox ? i + half : 2 * i + 1];
          const float na = a * cs[i] - b * sn[i], nb = a * sn[i] + b * cs[i];
          a = na;
          b = nb;
        }
      }
      for (tensor::Isa isa : {tensor::Isa::kScalar, tensor::Isa::kAvx2}) {
        if (!tensor::isa_available(isa)) continue;
        tensor::set_isa(isa);
        std::vector<float> got = x0;
        apply_rope(got.data(), heads, hd, neox, cs.data(), sn.data());
        EXPECT_TRUE(same(got, want)) << tensor::isa_name(isa) << " neox " << neox << " hd " << hd;
      }
    }
  }
  tensor::set_isa(saved);
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

// The reference RMSNorm: squares summed in double in four interleaved lanes (lane j takes the
// elements i = j mod 4 below n & ~3, the tail goes to lane 0), combined (l0 + l1) + (l2 + l3);
// then out = x * scale * w in float. Every tier must give exactly these bits (greedy ids must
// not depend on the tier), for lengths with and without a tail and values across magnitudes.
std::vector<float> ref_rms_norm(const std::vector<float>& x, const std::vector<float>& w, float eps) {
  const int64_t n = static_cast<int64_t>(x.size());
  double l[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) l[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  for (; i < n; ++i) l[0] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double sum = (l[0] + l[1]) + (l[2] + l[3]);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
  std::vector<float> out(x.size());
  for (int64_t k = 0; k < n; ++k) out[k] = x[k] * scale * w[k];
  return out;
}

TEST(OpsBatched, RmsNormEveryTierMatchesTheReferenceOrder) {
  ThreadPool pool(2);
  const tensor::Isa saved = tensor::active_isa();
  for (int ti = 0; ti <= static_cast<int>(tensor::Isa::kAmx); ++ti) {
    const auto isa = static_cast<tensor::Isa>(ti);
    if (!tensor::isa_available(isa)) continue;
    tensor::set_isa(isa);
    for (int64_t n : {1, 3, 4, 5, 7, 8, 33, 576, 897}) {
      // Magnitudes from 1e-3 to 1e3 in one row: rounding of the double sum and of the float
      // scale both matter.
      auto x = randv(n, 40 + static_cast<uint32_t>(n));
      for (int64_t i = 0; i < n; ++i) x[i] *= std::pow(10.0f, static_cast<float>(i % 7) - 3.0f);
      const auto w = randv(n, 50 + static_cast<uint32_t>(n));
      const auto h = randv(n, 60 + static_cast<uint32_t>(n), 3.f);
      const std::string what = std::string(tensor::isa_name(isa)) + " n " + std::to_string(n);
      std::vector<float> got(n, -1.f);
      rms_norm(x.data(), w.data(), got.data(), n, 1e-5f);
      EXPECT_TRUE(same(got, ref_rms_norm(x, w, 1e-5f))) << what;
      // Rows (enough of them to be split over the pool) and the fused residual add.
      const int64_t T = std::max<int64_t>(3, 40000 / n);
      std::vector<float> xs(T * n), hs(T * n), want(T * n), sum(T * n);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < n; ++i) {
          xs[t * n + i] = x[i] * static_cast<float>(t % 5 + 1);
          hs[t * n + i] = h[i] - static_cast<float>(t % 3);
        }
      }
      // want: rms_norm of each row; sum / added: x + h and the norm of that, per row.
      std::vector<float> added(T * n);
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<float> xt(xs.begin() + t * n, xs.begin() + (t + 1) * n);
        const auto r = ref_rms_norm(xt, w, 1e-5f);
        std::copy(r.begin(), r.end(), want.begin() + t * n);
        std::vector<float> st(n);
        for (int64_t i = 0; i < n; ++i) st[i] = xt[i] + hs[t * n + i];
        const auto rs = ref_rms_norm(st, w, 1e-5f);
        std::copy(st.begin(), st.end(), sum.begin() + t * n);
        std::copy(rs.begin(), rs.end(), added.begin() + t * n);
      }
      std::vector<float> rows_out(T * n, -1.f);
      rms_norm_rows(xs.data(), w.data(), rows_out.data(), T, n, 1e-5f, &pool);
      EXPECT_TRUE(same(rows_out, want)) << what << " rows";
      std::vector<float> xa = xs, ha = hs;
      add_rms_norm_rows(xa.data(), ha.data(), w.data(), ha.data(), T, n, 1e-5f, &pool);  // out aliases h
      EXPECT_TRUE(same(xa, sum)) << what << " residual";
      EXPECT_TRUE(same(ha, added)) << what << " add + norm";
    }
  }
  tensor::set_isa(saved);
}

}  // namespace
}  // namespace ts::model
