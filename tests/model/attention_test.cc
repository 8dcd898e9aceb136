// Tiled attention (attention.cc) against its scalar reference kernels and against the untiled
// reference (attention_reference.cc), on every ISA tier this host can run.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "model/attention.h"
#include "model/attention_kernels.h"
#include "model/model.h"
#include "model_test_util.h"
#include "tensor/fp16.h"
#include "tensor/matrix.h"
#include "test_util.h"

namespace ts::model {
namespace {

using attn::kKeyTile;

std::vector<tensor::Isa> host_isas() {
  std::vector<tensor::Isa> v;
  for (int i = 0; i <= static_cast<int>(tensor::highest_isa()); ++i)
    if (tensor::isa_available(static_cast<tensor::Isa>(i))) v.push_back(static_cast<tensor::Isa>(i));
  return v;
}

struct IsaScope {
  tensor::Isa saved = tensor::active_isa();
  explicit IsaScope(tensor::Isa isa) { tensor::set_isa(isa); }
  ~IsaScope() { tensor::set_isa(saved); }
};

std::vector<const attn::Kernels*> simd_tables() {
  std::vector<const attn::Kernels*> v;
  if (tensor::detected_isa() >= tensor::Isa::kAvx2) v.push_back(&attn::avx2_kernels());
  if (tensor::detected_isa() >= tensor::Isa::kAvx512) v.push_back(&attn::avx512_kernels());
  return v;
}

std::vector<float> randv(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(AttentionKernels, ExpMatchesLibmAndEveryTier) {
  // exp_ref is glibc's expf algorithm (what llama.cpp's flash attention calls): on this host it
  // must agree with std::exp; the SIMD tiers must agree with exp_ref everywhere.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-110.f, 90.f), narrow(-20.f, 0.f);
  std::vector<float> xs = {0.f, -0.f, 1.f, -1.f, 88.72f, 88.73f, -87.4f, -103.0f, -103.5f, -104.f, -1e-8f,
                           1e-30f, INFINITY, -INFINITY, std::nanf(""), 0x1.62e42ep6f, -0x1.9fe368p6f, -0x1.9d1d9ep6f};
  for (int i = 0; i < 200000; ++i) xs.push_back(i % 2 ? wide(rng) : narrow(rng));
  while (xs.size() % kKeyTile) xs.push_back(-2.f);
  int64_t libm_mismatch = 0;
  for (float x : xs) {
    const float a = attn::exp_ref(x), b = std::exp(x);
    if (!same_bits(a, b) && !(std::isnan(a) && std::isnan(b))) ++libm_mismatch;
  }
  // A libm other than glibc >= 2.28 may round a few values differently; glibc must be exact.
  EXPECT_LE(libm_mismatch, static_cast<int64_t>(xs.size() / 10000)) << "exp_ref vs std::exp";
#ifdef __GLIBC__
  EXPECT_EQ(libm_mismatch, 0);
#endif
  for (const auto* k : simd_tables()) {
    for (size_t i = 0; i < xs.size(); i += kKeyTile) {
      float y[kKeyTile];
      k->exp_tile(xs.data() + i, y);
      for (int l = 0; l < kKeyTile; ++l) {
        const float want = attn::exp_ref(xs[i + l]);
        ASSERT_TRUE(same_bits(want, y[l]) || (std::isnan(want) && std::isnan(y[l])))
            << k->name << " exp(" << xs[i + l] << ") = " << y[l] << " want " << want;
      }
    }
  }
}

TEST(AttentionKernels, OnlineSoftmaxMatchesScalarBitForBit) {
  std::mt19937 rng(5);
  for (const auto* k : simd_tables()) {
    for (int rep = 0; rep < 50; ++rep) {
      const int32_t nrows = 1 + rep % 19;  // up to past the 16-row pass of the SIMD tables
      auto sc = randv(static_cast<size_t>(nrows) * kKeyTile, rng, 3.f);
      const int32_t i0 = rep % 5, i1 = kKeyTile - rep % 3;
      std::vector<float> m0(nrows), s0(nrows);
      for (int32_t r = 0; r < nrows; ++r) {
        m0[r] = (rep + r) % 4 == 0 ? -INFINITY : 1.f;
        s0[r] = m0[r] == -INFINITY ? 0.f : 2.5f;
      }
      std::vector<float> w1(sc.size()), ms1(sc.size()), w2(sc.size()), ms2(sc.size());
      std::vector<float> ma = m0, sa = s0, mb = m0, sb = s0;
      attn::scalar_kernels().online_f16(sc.data(), nrows, i0, i1, ma.data(), sa.data(), w1.data(), ms1.data());
      k->online_f16(sc.data(), nrows, i0, i1, mb.data(), sb.data(), w2.data(), ms2.data());
      for (int32_t r = 0; r < nrows; ++r) {
        ASSERT_TRUE(same_bits(ma[r], mb[r]) && same_bits(sa[r], sb[r])) << k->name << " row " << r;
        for (int32_t i = i0; i < i1; ++i)
          ASSERT_TRUE(same_bits(w1[r * kKeyTile + i], w2[r * kKeyTile + i]) &&
                      same_bits(ms1[r * kKeyTile + i], ms2[r * kKeyTile + i]))
              << k->name;
      }
    }
  }
}

// The f32-accumulator softmax step over a block of rows (GQA groups of 1, 3, 7 rows and more,
// past one 16-row block) and key ranges with tails at both ends, against the scalar reference
// bit for bit: m, s, the rescales and the weights in range.
void check_online_f32(const attn::Kernels& k, const std::vector<float>& sc, int32_t nrows, int32_t i0, int32_t i1,
                      const std::vector<float>& m0, const std::vector<float>& s0, const char* what) {
  auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || same_bits(a, b); };
  std::vector<float> w1(sc.size()), w2(sc.size()), r1(nrows, -1.f), r2(nrows, -2.f);
  std::vector<float> ma = m0, sa = s0, mb = m0, sb = s0;
  attn::scalar_kernels().online_f32(sc.data(), nrows, i0, i1, ma.data(), sa.data(), w1.data(), r1.data());
  k.online_f32(sc.data(), nrows, i0, i1, mb.data(), sb.data(), w2.data(), r2.data());
  for (int32_t r = 0; r < nrows; ++r) {
    ASSERT_TRUE(same(ma[r], mb[r]) && same(sa[r], sb[r]) && same(r1[r], r2[r]))
        << k.name << " " << what << " rows " << nrows << " [" << i0 << ", " << i1 << ") row " << r << ": m " << mb[r]
        << " vs " << ma[r] << ", s " << sb[r] << " vs " << sa[r] << ", rescale " << r2[r] << " vs " << r1[r];
    for (int32_t i = i0; i < i1; ++i)
      ASSERT_TRUE(same(w1[r * kKeyTile + i], w2[r * kKeyTile + i]))
          << k.name << " " << what << " rows " << nrows << " row " << r << " key " << i;
  }
}

TEST(AttentionKernels, OnlineSoftmaxF32RowsMatchScalarBitForBit) {
  std::mt19937 rng(7);
  const int32_t row_counts[] = {1, 2, 3, 7, 9, 16, 17, 21, 33};
  const std::pair<int32_t, int32_t> ranges[] = {{0, kKeyTile}, {0, 1}, {0, 5}, {3, kKeyTile}, {4, 11}, {15, 16}};
  for (const auto* k : simd_tables()) {
    for (const int32_t nrows : row_counts) {
      for (const auto& [i0, i1] : ranges) {
        auto sc = randv(static_cast<size_t>(nrows) * kKeyTile, rng, 8.f);
        std::vector<float> m0(nrows), s0(nrows);
        for (int32_t r = 0; r < nrows; ++r) {
          // First tile (-inf, 0), a running max above every score, and one inside their range.
          m0[r] = r % 3 == 0 ? -INFINITY : (r % 3 == 1 ? 20.f : 0.5f);
          s0[r] = m0[r] == -INFINITY ? 0.f : 1.f + 0.25f * r;
        }
        check_online_f32(*k, sc, nrows, i0, i1, m0, s0, "random");
      }
    }
  }
}

// The SIMD running max is a prefix scan: ties (equal scores, +0 against -0), -inf scores and a
// NaN score (the serial fallback) must still give the scalar reference's values.
TEST(AttentionKernels, OnlineSoftmaxScanKeepsTiesZerosAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || same_bits(a, b); };
  for (const auto* k : simd_tables()) {
    for (int variant = 0; variant < 5; ++variant) {
      const int32_t nrows = 5;
      std::vector<float> sc(static_cast<size_t>(nrows) * kKeyTile);
      for (size_t i = 0; i < sc.size(); ++i) {
        const int v = static_cast<int>(i * 7 % 5);  // few distinct values: many ties
        sc[i] = v == 0 ? (i % 2 ? -0.f : 0.f) : (v == 4 ? -INFINITY : static_cast<float>(v) * 0.5f);
      }
      if (variant == 1) sc[2 * kKeyTile + 6] = nan;
      if (variant == 2) std::fill(sc.begin(), sc.begin() + kKeyTile, -INFINITY);  // a row of -inf scores
      if (variant == 4) {  // rows whose maximum is a tie: only zeros of both signs, or one repeated value
        for (int32_t r = 0; r < 4; ++r)
          for (int32_t i = 0; i < kKeyTile; ++i) sc[r * kKeyTile + i] = r == 3 ? 1.f : ((i + r) % 2 ? -0.f : 0.f);
      }
      const int32_t i0 = variant == 3 ? 5 : 0, i1 = variant == 3 ? 9 : kKeyTile;
      std::vector<float> m0 = {-INFINITY, 0.f, -0.f, 0.5f, -INFINITY}, s0 = {0.f, 1.f, 2.f, 3.f, 0.f};
      std::vector<float> w1(sc.size()), ms1(sc.size()), w2(sc.size()), ms2(sc.size());
      std::vector<float> ma = m0, sa = s0, mb = m0, sb = s0;
      attn::scalar_kernels().online_f16(sc.data(), nrows, i0, i1, ma.data(), sa.data(), w1.data(), ms1.data());
      k->online_f16(sc.data(), nrows, i0, i1, mb.data(), sb.data(), w2.data(), ms2.data());
      check_online_f32(*k, sc, nrows, i0, i1, m0, s0, "ties/zeros/NaN");
      for (int32_t r = 0; r < nrows; ++r) {
        ASSERT_TRUE(same(ma[r], mb[r]) && same(sa[r], sb[r]))
            << k->name << " variant " << variant << " row " << r << ": m " << mb[r] << " vs " << ma[r];
        for (int32_t i = i0; i < i1; ++i)
          ASSERT_TRUE(same(w1[r * kKeyTile + i], w2[r * kKeyTile + i]) && same(ms1[r * kKeyTile + i], ms2[r * kKeyTile + i]))
              << k->name << " variant " << variant << " row " << r << " key " << i;
      }
    }
  }
}

TEST(AttentionKernels, Fp16ConversionsMatchScalar) {
  std::mt19937 rng(13);
  auto x = randv(203, rng, 3000.f);  // includes values past fp16's range (inf) and tiny ones
  x[0] = 1e-7f;
  x[1] = -6e-8f;
  x[2] = 70000.f;
  std::vector<uint16_t> want(x.size()), got(x.size());
  attn::scalar_kernels().cvt_to_f16(x.data(), want.data(), static_cast<int32_t>(x.size()));
  std::vector<float> back(x.size()), back2(x.size());
  attn::scalar_kernels().cvt_f16(want.data(), back.data(), static_cast<int32_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same_bits(back[i], tensor::round_fp16(x[i]))) << i;
  for (const auto* k : simd_tables()) {
    k->cvt_to_f16(x.data(), got.data(), static_cast<int32_t>(x.size()));
    ASSERT_EQ(got, want) << k->name;
    k->cvt_f16(want.data(), back2.data(), static_cast<int32_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same_bits(back[i], back2[i])) << k->name << " " << i;
  }
}

// q8_0 K/V tiles: every table's dequantization equals scale * value (one rounding), for head
// sizes below, at and past the vector widths and partial tiles.
TEST(AttentionKernels, Q8TilesMatchScalarBitForBit) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> q(-128, 127);
  for (int32_t hd : {8, 24, 64, 72}) {
    const int32_t stride = 32;  // block size of the transposed K page
    std::vector<int8_t> kpage(static_cast<size_t>(hd) * stride), vrows(static_cast<size_t>(kKeyTile) * hd);
    for (auto& x : kpage) x = static_cast<int8_t>(q(rng));
    for (auto& x : vrows) x = static_cast<int8_t>(q(rng));
    auto scale = randv(kKeyTile, rng, 0.05f);
    scale[3] = 0.f;
    std::vector<float> kt_want(static_cast<size_t>(hd) * kKeyTile), kt_got(kt_want.size());
    attn::scalar_kernels().load_kt_q8(kpage.data() + 16, stride, scale.data(), hd, kt_want.data());
    for (int32_t d = 0; d < hd; ++d)
      for (int32_t i = 0; i < kKeyTile; ++i)
        ASSERT_TRUE(same_bits(kt_want[d * kKeyTile + i], scale[i] * static_cast<float>(kpage[d * stride + 16 + i])));
    for (int32_t n : {1, 5, kKeyTile}) {
      std::vector<float> v_want(static_cast<size_t>(kKeyTile) * hd, -1.f), v_got(v_want.size(), -1.f);
      attn::scalar_kernels().load_v_q8(vrows.data(), scale.data(), n, hd, v_want.data());
      for (int32_t i = 0; i < kKeyTile; ++i)
        for (int32_t e = 0; e < hd; ++e)
          ASSERT_TRUE(same_bits(v_want[i * hd + e], i < n ? scale[i] * static_cast<float>(vrows[i * hd + e]) : -1.f))
              << "hd " << hd << " n " << n;
      for (const auto* k : simd_tables()) {
        std::fill(v_got.begin(), v_got.end(), -1.f);
        k->load_v_q8(vrows.data(), scale.data(), n, hd, v_got.data());
        for (size_t i = 0; i < v_got.size(); ++i) ASSERT_TRUE(same_bits(v_want[i], v_got[i])) << k->name << " hd " << hd << " n " << n << " at " << i;
      }
    }
    for (const auto* k : simd_tables()) {
      k->load_kt_q8(kpage.data() + 16, stride, scale.data(), hd, kt_got.data());
      for (size_t i = 0; i < kt_got.size(); ++i) ASSERT_TRUE(same_bits(kt_want[i], kt_got[i])) << k->name << " hd " << hd;
    }
  }
}

TEST(AttentionKernels, ScoresMatchScalarBitForBit) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD tier on this host";
  std::mt19937 rng(7);
  for (int32_t hd : {32, 40, 64, 80, 96, 128, 256}) {
    // fp16-valued inputs, as the F16 path feeds them, and plain floats.
    for (bool f16 : {true, false}) {
      auto q = randv(hd, rng), kt = randv(static_cast<size_t>(hd) * kKeyTile, rng);
      if (f16) {
        for (float& x : q) x = tensor::round_fp16(x);
        for (float& x : kt) x = tensor::round_fp16(x);
      }
      float want[kKeyTile], got[kKeyTile];
      attn::scalar_kernels().scores_ggml(q.data(), kt.data(), hd, 0.125f, want);
      // The scalar table is ggml's dot: check one lane against a direct evaluation.
      double direct = 0;
      for (int32_t d = 0; d < hd; ++d) direct += static_cast<double>(q[d]) * kt[d * kKeyTile + 3];
      EXPECT_NEAR(want[3], direct * 0.125, 1e-4 * (1 + std::fabs(direct)));
      for (const auto* k : tables) {
        k->scores_ggml(q.data(), kt.data(), hd, 0.125f, got);
        for (int i = 0; i < kKeyTile; ++i)
          ASSERT_TRUE(same_bits(want[i], got[i])) << k->name << " hd " << hd << " lane " << i << ": " << got[i]
                                                  << " vs " << want[i];
      }
    }
  }
}

// Several query rows against one tile (a GQA group; the AVX-512 table runs up to 4 rows per
// pass, so 1-9 rows cover whole and partial passes): each row bit for bit the scalar
// single-row scores, on whole-32 heads (the multi-row path) and others (the per-row fallback).
TEST(AttentionKernels, ScoreRowsMatchSingleRowScalarBitForBit) {
  std::mt19937 rng(11);
  const auto tables = simd_tables();
  for (int32_t hd : {32, 64, 96, 128, 40, 8}) {
    for (int32_t nrows = 1; nrows <= 9; ++nrows) {
      auto q = randv(static_cast<size_t>(nrows) * hd, rng), kt = randv(static_cast<size_t>(hd) * kKeyTile, rng);
      for (float& x : kt) x = tensor::round_fp16(x);
      std::vector<float> want(static_cast<size_t>(nrows) * kKeyTile), got(want.size(), -1.f);
      for (int32_t r = 0; r < nrows; ++r)
        attn::scalar_kernels().scores_ggml(q.data() + r * hd, kt.data(), hd, 0.125f, want.data() + r * kKeyTile);
      std::vector<const attn::Kernels*> all = tables;
      all.push_back(&attn::scalar_kernels());
      for (const auto* k : all) {
        std::fill(got.begin(), got.end(), -1.f);
        k->scores_rows(q.data(), nrows, kt.data(), hd, 0.125f, got.data());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_TRUE(same_bits(want[i], got[i])) << k->name << " hd " << hd << " rows " << nrows << " at " << i
                                                  << ": " << got[i] << " vs " << want[i];
      }
    }
  }
}

// Scores straight from an F16 page tile (transposed, stride = block size 16 or 32 with the
// tile at slot 0 or 16) against load_kt_f16 + the scalar single-row scores, bit for bit, on
// every table, whole-32 heads (AVX-512's in-register path) and others.
TEST(AttentionKernels, ScoreRowsFromF16PageMatchScalarBitForBit) {
  std::mt19937 rng(12);
  const auto tables = simd_tables();
  for (int32_t hd : {32, 64, 96, 128, 40, 8}) {
    for (int32_t stride : {16, 32}) {
      for (int32_t nrows = 1; nrows <= 9; ++nrows) {
        const int32_t slot0 = stride == 32 ? 16 : 0;
        auto q = randv(static_cast<size_t>(nrows) * hd, rng), kf = randv(static_cast<size_t>(hd) * stride, rng);
        std::vector<uint16_t> page(kf.size());
        for (size_t i = 0; i < kf.size(); ++i) page[i] = tensor::fp32_to_fp16(kf[i]);
        std::vector<float> kt(static_cast<size_t>(hd) * kKeyTile);
        for (int32_t d = 0; d < hd; ++d)
          for (int32_t i = 0; i < kKeyTile; ++i)
            kt[static_cast<size_t>(d) * kKeyTile + i] = tensor::fp16_to_fp32(page[static_cast<size_t>(d) * stride + slot0 + i]);
        std::vector<float> want(static_cast<size_t>(nrows) * kKeyTile), got(want.size(), -1.f);
        for (int32_t r = 0; r < nrows; ++r)
          attn::scalar_kernels().scores_ggml(q.data() + r * hd, kt.data(), hd, 0.125f, want.data() + r * kKeyTile);
        std::vector<const attn::Kernels*> all = tables;
        all.push_back(&attn::scalar_kernels());
        for (const auto* k : all) {
          std::fill(got.begin(), got.end(), -1.f);
          k->scores_rows_f16k(q.data(), nrows, page.data() + slot0, stride, hd, 0.125f, got.data());
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_TRUE(same_bits(want[i], got[i])) << k->name << " hd " << hd << " stride " << stride << " rows "
                                                    << nrows << " at " << i << ": " << got[i] << " vs " << want[i];
        }
      }
    }
  }
}

TEST(AttentionKernels, AccumulatorsMatchScalarBitForBit) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD tier on this host";
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  // Narrow heads (4, 8, 12: packed across rows), whole-vector and odd tails (16..80), rows
  // past the packed tail's 16-row pass (17).
  for (int32_t hd : {4, 8, 12, 16, 24, 40, 64, 72, 80, 128}) {
    for (int32_t nrows : {1, 2, 3, 7, 17}) {
      auto v = randv(static_cast<size_t>(hd) * kKeyTile, rng);
      for (float& x : v) x = tensor::round_fp16(x);
      std::vector<float> w(static_cast<size_t>(nrows) * kKeyTile), ms(w.size()), rescale(nrows);
      for (size_t i = 0; i < w.size(); ++i) {
        w[i] = u(rng);
        ms[i] = i % 3 == 0 ? u(rng) : 1.f;  // some keys raise the running max
      }
      for (float& x : rescale) x = u(rng);
      auto acc0 = randv(static_cast<size_t>(hd) * nrows, rng);
      for (float& x : acc0) x = tensor::round_fp16(x);
      for (auto [i0, i1] : {std::pair{0, kKeyTile}, std::pair{3, 11}, std::pair{5, 6}}) {
        std::vector<float> want = acc0, want32 = acc0;
        attn::scalar_kernels().acc_f16(want.data(), nrows, v.data(), w.data(), ms.data(), i0, i1, hd);
        attn::scalar_kernels().acc_f32(want32.data(), nrows, v.data(), w.data(), rescale.data(), i0, i1, hd);
        // V as an F16 page's rows (acc_f16_h): the keys outside [i0, i1) hold NaN, never read.
        std::vector<uint16_t> vh(v.size());
        for (size_t i = 0; i < v.size(); ++i)
          vh[i] = static_cast<int32_t>(i / hd) >= i0 && static_cast<int32_t>(i / hd) < i1 ? tensor::fp32_to_fp16(v[i]) : 0x7E00;
        for (const auto* k : std::vector<const attn::Kernels*>{&attn::scalar_kernels(), tables[0], tables.back()}) {
          std::vector<float> goth = acc0;
          k->acc_f16_h(goth.data(), nrows, vh.data(), w.data(), ms.data(), i0, i1, hd);
          for (size_t d = 0; d < goth.size(); ++d)
            ASSERT_TRUE(same_bits(want[d], goth[d])) << k->name << " f16 page hd " << hd << " rows " << nrows << " at " << d;
        }
        for (const auto* k : tables) {
          std::vector<float> got = acc0, got32 = acc0;
          k->acc_f16(got.data(), nrows, v.data(), w.data(), ms.data(), i0, i1, hd);
          k->acc_f32(got32.data(), nrows, v.data(), w.data(), rescale.data(), i0, i1, hd);
          for (size_t d = 0; d < got.size(); ++d) {
            ASSERT_TRUE(same_bits(want[d], got[d])) << k->name << " f16 hd " << hd << " rows " << nrows << " at " << d;
            ASSERT_TRUE(same_bits(want32[d], got32[d])) << k->name << " f32 hd " << hd << " rows " << nrows << " at " << d;
          }
        }
        // The fp16 accumulator really is fp16, and the keys moved it.
        for (float x : want) EXPECT_TRUE(same_bits(x, tensor::round_fp16(x)));
        EXPECT_NE(want, acc0);
      }
    }
  }
}

// A batch of sequences with KV already written for positions [0, start_pos + num_tokens).
struct Case {
  int32_t n_head, n_head_kv, head_dim, block_size, window;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (start_pos, num_tokens)
};

struct Batch {
  KvStorage kv;
  std::vector<std::vector<int32_t>> tables;
  std::vector<SeqSlice> slices;
  std::vector<float> q;
  AttentionParams p;
  int64_t T = 0;
};

Batch make_batch(const Case& c, KvType type, uint32_t seed) {
  ModelConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = c.n_head;
  cfg.n_head_kv = c.n_head_kv;
  cfg.head_dim = c.head_dim;
  int32_t blocks_needed = 0;
  for (auto [sp, nt] : c.seqs) blocks_needed += (sp + nt + c.block_size - 1) / c.block_size;
  Batch b{.kv = std::move(KvStorage::create(cfg, type, c.block_size, blocks_needed + 1).value())};
  b.p = {.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
         .scale = 1.f / std::sqrt(static_cast<float>(c.head_dim)), .window = c.window};
  std::mt19937 rng(seed);
  // Block ids handed out in a shuffled order so tables are not contiguous.
  std::vector<int32_t> ids(static_cast<size_t>(blocks_needed + 1));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (auto [sp, nt] : c.seqs) {
    std::vector<int32_t> t;
    for (int32_t i = 0; i < (sp + nt + c.block_size - 1) / c.block_size; ++i) t.push_back(ids[next++]);
    b.tables.push_back(std::move(t));
  }
  const int64_t KD = int64_t{c.n_head_kv} * c.head_dim;
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    const auto [sp, nt] = c.seqs[i];
    // Earlier positions and this step's tokens, written through the real writer (layer 1).
    SeqSlice all{.num_tokens = sp + nt, .start_pos = 0, .block_table = b.tables[i]};
    auto k = randv(static_cast<size_t>((sp + nt) * KD), rng), v = randv(static_cast<size_t>((sp + nt) * KD), rng);
    write_kv(b.kv, 1, std::span<const SeqSlice>(&all, 1), k.data(), v.data());
    b.T += nt;
  }
  for (size_t i = 0; i < c.seqs.size(); ++i)
    b.slices.push_back({.num_tokens = c.seqs[i].second, .start_pos = c.seqs[i].first, .block_table = b.tables[i]});
  b.q = randv(static_cast<size_t>(b.T * c.n_head * c.head_dim), rng, 2.f);
  return b;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> v = {
      // head_dim 64 / 128, GQA ratios 1 / 2 / 7, 1..17 queries, chunk and block boundaries.
      {.n_head = 14, .n_head_kv = 2, .head_dim = 64, .block_size = 16, .window = 0, .seqs = {{0, 17}, {5, 1}, {31, 2}}},
      {.n_head = 4, .n_head_kv = 4, .head_dim = 128, .block_size = 4, .window = 0, .seqs = {{0, 1}, {15, 16}, {16, 3}}},
      {.n_head = 8, .n_head_kv = 4, .head_dim = 64, .block_size = 32, .window = 0, .seqs = {{40, 33}, {0, 9}}},
      {.n_head = 7, .n_head_kv = 1, .head_dim = 128, .block_size = 16, .window = 0, .seqs = {{47, 1}, {0, 40}}},
      // Sliding window shorter than a tile and across tiles; an odd head_dim (80, tail in double).
      {.n_head = 4, .n_head_kv = 2, .head_dim = 64, .block_size = 8, .window = 5, .seqs = {{0, 23}, {30, 1}}},
      {.n_head = 2, .n_head_kv = 1, .head_dim = 80, .block_size = 16, .window = 20, .seqs = {{10, 37}}},
  };
  return v;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return num / (den > 0 ? den : 1);
}

class TiledAttention : public ::testing::TestWithParam<tensor::Isa> {};

TEST_P(TiledAttention, MatchesUntiledReference) {
  IsaScope scope(GetParam());
  ThreadPool pool(2);
  for (size_t ci = 0; ci < cases().size(); ++ci) {
    const Case& c = cases()[ci];
    // F16 with both V accumulators (ggml's fp16 one: bit-exact emulation; f32: the default).
    for (auto [type, ggml] : {std::pair{KvType::kF16, true}, std::pair{KvType::kF16, false},
                              std::pair{KvType::kF32, false}, std::pair{KvType::kQ8_0, false}}) {
      Batch b = make_batch(c, type, static_cast<uint32_t>(100 + ci));
      b.p.f16_ggml = ggml;
      const size_t n = b.q.size();
      std::vector<float> want(n), got(n), got1(n);
      AttentionScratch s1, s2, s3;
      paged_attention_reference(b.kv, 1, b.p, b.slices, b.q.data(), want.data(), s1, &pool);
      paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got.data(), s2, &pool);
      paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got1.data(), s3, nullptr);
      const std::string what = "case " + std::to_string(ci) + " " + kv_type_name(type) + (ggml ? " ggml" : "");
      if (ggml) {
        // The llama.cpp emulation is per query: tiling must not change a single bit.
        for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << what << " at " << i;
      } else {
        // Online vs two-pass softmax: rounding-level differences only.
        EXPECT_LT(rel_err(got, want), 2e-5) << what;
      }
      // Thread count never changes the result.
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(got[i], got1[i])) << what << " threads at " << i;
    }
  }
}

TEST_P(TiledAttention, SameBitsOnEveryIsa) {
  // Reference run on the scalar tier; the tier under test must reproduce it exactly.
  const Case& c = cases()[0];
  for (auto [type, ggml] : {std::pair{KvType::kF16, true}, std::pair{KvType::kF16, false}, std::pair{KvType::kQ8_0, false}}) {
    Batch b = make_batch(c, type, 5);
    b.p.f16_ggml = ggml;
    std::vector<float> scalar(b.q.size()), got(b.q.size());
    AttentionScratch s;
    {
      IsaScope sc(tensor::Isa::kScalar);
      paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), scalar.data(), s, nullptr);
    }
    IsaScope scope(GetParam());
    paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got.data(), s, nullptr);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(scalar[i], got[i])) << kv_type_name(type) << " " << i;
  }
}

TEST(TiledAttention, LongContextSplitsKeysIntoChunks) {
  // Contexts past kKvChunk: keys split into chunks whose partials are merged. Queries whose
  // context fits in the first chunk stay bit-exact (F16) even inside a straddling tile; the
  // others agree with the single-pass reference to rounding; threads change nothing.
  const Case c{.n_head = 4, .n_head_kv = 1, .head_dim = 64, .block_size = 16, .window = 0,
               .seqs = {{kKvChunk - 24, 40}, {2 * kKvChunk + 50, 1}}};
  ThreadPool pool(2);
  for (auto [type, ggml] : {std::pair{KvType::kF16, true}, std::pair{KvType::kF16, false}, std::pair{KvType::kQ8_0, false}}) {
    Batch b = make_batch(c, type, 21);
    b.p.f16_ggml = ggml;
    const size_t n = b.q.size();
    std::vector<float> want(n), got(n), got1(n);
    AttentionScratch s1, s2, s3;
    paged_attention_reference(b.kv, 1, b.p, b.slices, b.q.data(), want.data(), s1, &pool);
    paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got.data(), s2, &pool);
    paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got1.data(), s3, nullptr);
    const size_t row = static_cast<size_t>(c.n_head) * c.head_dim;
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(got[i], got1[i])) << kv_type_name(type) << " threads " << i;
    // F16: both sides round an fp16 accumulator after every key (2^-11 relative each), over
    // ~2000 keys in one pass vs two chunks; measured 2.7e-3 of the largest output.
    EXPECT_LT(rel_err(got, want), ggml ? 1e-2 : 2e-5) << kv_type_name(type);
    if (ggml) {
      // Tokens 0..23 of the first sequence have context <= kKvChunk.
      for (size_t i = 0; i < 24 * row; ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << "in-chunk query at " << i;
      // And the split is real: some later query differs in the last bits from one pass.
      bool differs = false;
      for (size_t i = 24 * row; i < n; ++i) differs |= !same_bits(got[i], want[i]);
      EXPECT_TRUE(differs);
    }
  }
}

TEST(TiledAttention, F16AccumulatorsDifferOnlyByRounding) {
  // The same F16 cache through both V accumulators: different bits (the fp16 one rounds after
  // every key), the same values to fp16 rounding.
  const Case& c = cases()[0];
  Batch b = make_batch(c, KvType::kF16, 31);
  std::vector<float> f32acc(b.q.size()), f16acc(b.q.size());
  AttentionScratch s;
  b.p.f16_ggml = false;
  paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), f32acc.data(), s, nullptr);
  b.p.f16_ggml = true;
  paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), f16acc.data(), s, nullptr);
  size_t differ = 0;
  for (size_t i = 0; i < f32acc.size(); ++i) differ += !same_bits(f32acc[i], f16acc[i]);
  EXPECT_GT(differ, f32acc.size() / 4);
  EXPECT_LT(rel_err(f32acc, f16acc), 1e-2);
}

TEST(TiledAttention, Q8KvCloseToF32Kv) {
  // 8-bit KV (one scale per token per head) stays within quantization error of f32 KV.
  const Case& c = cases()[0];
  Batch a = make_batch(c, KvType::kF32, 9), b = make_batch(c, KvType::kQ8_0, 9);
  std::vector<float> oa(a.q.size()), ob(b.q.size());
  AttentionScratch s;
  paged_attention(a.kv, 1, a.p, a.slices, a.q.data(), oa.data(), s, nullptr);
  paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), ob.data(), s, nullptr);
  const double e = rel_err(ob, oa);
  EXPECT_LT(e, 0.05);
  EXPECT_GT(e, 0.0);  // it really is quantized
}

// stories260K end to end (head_dim 8: the packed narrow-head kernels) on every ISA tier:
// with F32 KV the greedy ids are llama.cpp's reference ids, and F16 KV (the engine default,
// the fp16-accumulator path) gives the same ids on every tier.
TEST(NarrowHeads, Stories260KGreedyOnEveryIsa) {
  TS_REQUIRE_SHARED(path, "models/stories260K/stories260K-f32.gguf");
  TS_REQUIRE_SHARED(ref, "models/stories260K/expected/greedy_once_upon_a_time_n64.ids");
  const auto expect = testing::read_ids(ref);
  constexpr int kPrompt = 5;
  ASSERT_GT(static_cast<int>(expect.size()), kPrompt);
  const std::vector<int32_t> prompt(expect.begin(), expect.begin() + kPrompt), want(expect.begin() + kPrompt, expect.end());
  std::vector<int32_t> first_f16;
  ThreadPool pool(2);
  for (tensor::Isa isa : host_isas()) {
    IsaScope scope(isa);
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_EQ((*m)->config().head_dim, 8);
    testing::SoloRunner f32(**m, KvType::kF32, 32);
    EXPECT_EQ(f32.greedy(prompt, static_cast<int>(want.size()), &pool), want) << tensor::isa_name(isa);
    testing::SoloRunner f16(**m, KvType::kF16, 32);
    const auto got = f16.greedy(prompt, static_cast<int>(want.size()), &pool);
    if (first_f16.empty()) {
      first_f16 = got;
    } else {
      EXPECT_EQ(got, first_f16) << tensor::isa_name(isa);
    }
  }
}

// A GQA group's rows through the kernels whole and in parts (the query-head parts of a decode
// item split over threads; the f16 and f32 accumulators, both softmax steps and the scores):
// every row's bits must not depend on which rows share the call.
TEST(AttentionKernels, SplitRowsMatchWholeGroupBitForBit) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<const attn::Kernels*> all = simd_tables();
  all.push_back(&attn::scalar_kernels());
  for (const auto* k : all) {
    for (int32_t hd : {32, 64, 80, 128}) {
      for (int32_t group : {2, 3, 7}) {
        auto q = randv(static_cast<size_t>(group) * hd, rng), kt = randv(static_cast<size_t>(hd) * kKeyTile, rng);
        auto v = randv(static_cast<size_t>(kKeyTile) * hd, rng);
        for (float& x : kt) x = tensor::round_fp16(x);
        for (float& x : v) x = tensor::round_fp16(x);
        auto acc0 = randv(static_cast<size_t>(group) * hd, rng);
        for (float& x : acc0) x = tensor::round_fp16(x);
        std::vector<float> m0(group), s0(group);
        for (int32_t r = 0; r < group; ++r) {
          m0[r] = r % 2 ? 0.25f : -INFINITY;
          s0[r] = r % 2 ? 1.5f : 0.f;
        }
        const int32_t i0 = group % 3, i1 = kKeyTile - group % 2;
        struct Out {
          std::vector<float> sc, m, s, w, ms, acc;
        };
        // One pass over rows [r0, r1) into the whole-group buffers of `o`.
        auto run = [&](bool f16, int32_t r0, int32_t r1, Out& o) {
          const int32_t n = r1 - r0;
          k->scores_rows(q.data() + r0 * hd, n, kt.data(), hd, 0.125f, o.sc.data() + r0 * kKeyTile);
          if (f16) {
            k->online_f16(o.sc.data() + r0 * kKeyTile, n, i0, i1, o.m.data() + r0, o.s.data() + r0,
                          o.w.data() + r0 * kKeyTile, o.ms.data() + r0 * kKeyTile);
            k->acc_f16(o.acc.data() + r0 * hd, n, v.data(), o.w.data() + r0 * kKeyTile, o.ms.data() + r0 * kKeyTile, i0,
                       i1, hd);
          } else {
            std::vector<float> rescale(n);
            k->online_f32(o.sc.data() + r0 * kKeyTile, n, i0, i1, o.m.data() + r0, o.s.data() + r0,
                          o.w.data() + r0 * kKeyTile, rescale.data());
            k->acc_f32(o.acc.data() + r0 * hd, n, v.data(), o.w.data() + r0 * kKeyTile, rescale.data(), i0, i1, hd);
          }
        };
        auto fresh = [&] {
          const size_t t = static_cast<size_t>(group) * kKeyTile;
          return Out{std::vector<float>(t), m0, s0, std::vector<float>(t), std::vector<float>(t), acc0};
        };
        for (bool f16 : {true, false}) {
          Out whole = fresh();
          run(f16, 0, group, whole);
          // Every split point, and single rows.
          for (int32_t cut = 1; cut < group; ++cut) {
            Out parts = fresh();
            run(f16, 0, cut, parts);
            run(f16, cut, group, parts);
            Out singles = fresh();
            for (int32_t r = 0; r < group; ++r) run(f16, r, r + 1, singles);
            for (const Out* o : {&parts, &singles}) {
              for (size_t i = 0; i < whole.acc.size(); ++i)
                ASSERT_TRUE(same_bits(whole.acc[i], o->acc[i]))
                    << k->name << (f16 ? " f16" : " f32") << " hd " << hd << " group " << group << " cut " << cut << " at " << i;
              for (int32_t r = 0; r < group; ++r)
                ASSERT_TRUE(same_bits(whole.m[r], o->m[r]) && same_bits(whole.s[r], o->s[r])) << k->name << " row " << r;
            }
          }
        }
      }
    }
  }
}

// Decode steps (one token per sequence) of 1-9 sequences: the items span KV heads, split by
// query heads when there are too few, and their composition follows the thread count; the
// F16 path must still give the untiled reference's bits and every thread count the same bits.
TEST_P(TiledAttention, DecodeItemsAnyThreadCountSameBits) {
  IsaScope scope(GetParam());
  ThreadPool pool2(2), pool3(3), pool4(4);
  struct Shape {
    int32_t n_head, n_head_kv, head_dim, window;
  };
  const Shape shapes[] = {{9, 3, 64, 0}, {14, 2, 64, 0}, {4, 4, 32, 0}, {8, 2, 64, 40}};
  uint32_t seed = 300;
  for (const Shape& sh : shapes) {
    for (int32_t nseq : {1, 2, 3, 4, 5, 8, 9}) {
      Case c{.n_head = sh.n_head, .n_head_kv = sh.n_head_kv, .head_dim = sh.head_dim, .block_size = 16,
             .window = sh.window, .seqs = {}};
      for (int32_t i = 0; i < nseq; ++i) c.seqs.push_back({(37 * i + 11 * nseq) % 150 + i, 1});
      for (auto [type, ggml] : {std::pair{KvType::kF16, true}, std::pair{KvType::kF16, false}, std::pair{KvType::kQ8_0, false}}) {
        Batch b = make_batch(c, type, seed++);
        b.p.f16_ggml = ggml;
        const size_t n = b.q.size();
        std::vector<float> want(n), ref(n);
        AttentionScratch s0, s1;
        paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), want.data(), s0, nullptr);
        paged_attention_reference(b.kv, 1, b.p, b.slices, b.q.data(), ref.data(), s1, &pool2);
        const std::string what = std::to_string(sh.n_head) + "/" + std::to_string(sh.n_head_kv) + " seqs " +
                                 std::to_string(nseq) + " " + kv_type_name(type);
        if (b.p.f16_ggml) {
          for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(want[i], ref[i])) << what << " vs reference at " << i;
        } else {
          EXPECT_LT(rel_err(want, ref), 2e-5) << what;
        }
        for (ThreadPool* pool : {&pool2, &pool3, &pool4}) {
          std::vector<float> got(n, -1.f);
          AttentionScratch s;
          paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got.data(), s, pool);
          for (size_t i = 0; i < n; ++i)
            ASSERT_TRUE(same_bits(want[i], got[i])) << what << " " << pool->num_threads() << " threads at " << i;
        }
      }
    }
  }
}

// The prologue (bias/RoPE/KV store in the model) must run exactly once per (sequence, KV head)
// and before anything reads that head's queries or new K/V, whether paged_attention runs it
// inside the decode items or first. Here the queries start as garbage and the new tokens' K/V
// slots hold garbage: the prologue copies the real queries of its heads in and stores the real
// K/V. Any item that attended before its prologue would read garbage; the result must equal
// attention over the real inputs bit for bit, on every thread count, run after run.
TEST_P(TiledAttention, PrologueRunsOnceBeforeItsHeadsAttend) {
  IsaScope scope(GetParam());
  ThreadPool pool2(2), pool3(3), pool4(4);
  struct Scenario {
    Case c;
    const char* what;
  };
  std::vector<Scenario> scenarios;
  for (int32_t nseq : {1, 2, 3, 5, 8}) {
    Case smol{.n_head = 9, .n_head_kv = 3, .head_dim = 64, .block_size = 16, .window = 0, .seqs = {}};
    Case qwen{.n_head = 14, .n_head_kv = 2, .head_dim = 64, .block_size = 16, .window = 0, .seqs = {}};
    for (int32_t i = 0; i < nseq; ++i) {
      smol.seqs.push_back({20 + 13 * i, 1});
      qwen.seqs.push_back({70 - 7 * i, 1});
    }
    scenarios.push_back({smol, "smollm2 decode"});
    scenarios.push_back({qwen, "qwen decode"});
  }
  // Not fusable: a prompt chunk beside decode tokens, and a context past one key chunk.
  scenarios.push_back({{.n_head = 9, .n_head_kv = 3, .head_dim = 64, .block_size = 16, .window = 0,
                        .seqs = {{30, 1}, {0, 21}, {5, 1}}}, "mixed"});
  scenarios.push_back({{.n_head = 4, .n_head_kv = 2, .head_dim = 32, .block_size = 16, .window = 0,
                        .seqs = {{kKvChunk + 40, 1}, {9, 1}, {12, 1}}}, "long"});
  uint32_t seed = 700;
  for (const Scenario& sc : scenarios) {
    for (KvType type : {KvType::kF16, KvType::kF32, KvType::kQ8_0}) {
      const Case& c = sc.c;
      // Real new K/V for each step token, written through write_kv for the expected result.
      std::mt19937 rng(seed + 1);
      const int64_t KD = int64_t{c.n_head_kv} * c.head_dim, QD = int64_t{c.n_head} * c.head_dim;
      Batch want_b = make_batch(c, type, seed), got_b = make_batch(c, type, seed);
      ++seed;
      auto knew = randv(static_cast<size_t>(want_b.T * KD), rng), vnew = randv(static_cast<size_t>(want_b.T * KD), rng);
      write_kv(want_b.kv, 1, want_b.slices, knew.data(), vnew.data());
      std::vector<float> want(want_b.q.size());
      AttentionScratch s0;
      paged_attention(want_b.kv, 1, want_b.p, want_b.slices, want_b.q.data(), want.data(), s0, nullptr);
      std::vector<int64_t> first;
      for (int64_t t = 0; const SeqSlice& s : got_b.slices) {
        first.push_back(t);
        t += s.num_tokens;
      }
      const int32_t g = c.n_head / c.n_head_kv;
      for (int rep = 0; rep < 6; ++rep) {
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3, &pool4}) {
          const std::vector<float> garbage(static_cast<size_t>(got_b.T * KD), 1000.f);
          write_kv(got_b.kv, 1, got_b.slices, garbage.data(), garbage.data());
          std::vector<float> q(got_b.q.size(), std::numeric_limits<float>::quiet_NaN());
          std::vector<std::atomic<int>> calls(c.seqs.size() * c.n_head_kv);
          struct Ctx {
            Batch* b;
            const std::vector<float>* real_q;
            std::vector<float>* q;
            const std::vector<float>*knew, *vnew;
            const std::vector<int64_t>* first;
            std::vector<std::atomic<int>>* calls;
            int64_t KD, QD;
            int32_t g, hd, nkv;
          } ctx{&got_b, &got_b.q, &q, &knew, &vnew, &first, &calls, KD, QD, g, c.head_dim, c.n_head_kv};
          const AttentionPrologue pro{
              .fn = [](void* p, int32_t si, int32_t kb, int32_t ke) {
                Ctx& x = *static_cast<Ctx*>(p);
                const SeqSlice& s = x.b->slices[static_cast<size_t>(si)];
                const int64_t t0 = (*x.first)[static_cast<size_t>(si)];
                for (int64_t t = t0; t < t0 + s.num_tokens; ++t) {
                  const int64_t q0 = t * x.QD + int64_t{kb} * x.g * x.hd, q1 = t * x.QD + int64_t{ke} * x.g * x.hd;
                  std::copy(x.real_q->begin() + q0, x.real_q->begin() + q1, x.q->begin() + q0);
                }
                write_kv(x.b->kv, 1, std::span<const SeqSlice>(&s, 1), x.knew->data() + t0 * x.KD, x.vnew->data() + t0 * x.KD, kb, ke);
                for (int32_t h = kb; h < ke; ++h) (*x.calls)[static_cast<size_t>(si) * x.nkv + h].fetch_add(1);
              },
              .ctx = &ctx};
          std::vector<float> got(q.size(), -1.f);
          AttentionScratch s;
          paged_attention(got_b.kv, 1, got_b.p, got_b.slices, q.data(), got.data(), s, pool, &pro);
          const std::string what = std::string(sc.what) + " seqs " + std::to_string(c.seqs.size()) + " " +
                                   kv_type_name(type) + " threads " + std::to_string(pool ? pool->num_threads() : 1);
          for (size_t i = 0; i < calls.size(); ++i) ASSERT_EQ(calls[i].load(), 1) << what << " (seq, kv head) " << i;
          for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << what << " at " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, TiledAttention, ::testing::ValuesIn(host_isas()),
                         [](const ::testing::TestParamInfo<tensor::Isa>& i) { return std::string(tensor::isa_name(i.param)); });

}  // namespace
}  // namespace ts::model
