// Each attention kernel table (AVX2, AVX-512) against the scalar one, bit for bit where the
// golden path needs it: exp, online softmax, fp16 conversions, q8_0 tiles, scores (per row, per
// GQA group, from an F16 page), the accumulators, and a group split into parts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "model/attention_kernels.h"
#include "tensor/fp16.h"

namespace ts::model {
namespace {

using attn::kKeyTile;
using attn_test::randv;
using attn_test::same_bits;
using attn_test::simd_tables;

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
        // Running maxima below the tile's scores, none (the first tile), and at or above every
        // score in range (the SIMD tables' no-rescale shortcut; equal to one: a tie, not a
        // new max).
        const float* scr = sc.data() + static_cast<size_t>(r) * kKeyTile;
        const float top = *std::max_element(scr + i0, scr + i1);
        const float choices[4] = {-INFINITY, 1.f, top + 20.f, top};
        m0[r] = choices[(rep + r) % 4];
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

// Runs fill(kernels, out) for every SIMD table and the scalar one, each into an output first set
// to -1, and asserts every value has want's bits (what names the case in a failure).
template <typename Fill>
void expect_every_table_bits(const std::vector<float>& want, const std::string& what, Fill fill) {
  std::vector<const attn::Kernels*> all = simd_tables();
  all.push_back(&attn::scalar_kernels());
  std::vector<float> got(want.size());
  for (const auto* k : all) {
    std::fill(got.begin(), got.end(), -1.f);
    fill(*k, got.data());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_TRUE(same_bits(want[i], got[i])) << k->name << " " << what << " at " << i << ": " << got[i] << " vs "
                                              << want[i];
  }
}

// Several query rows against one tile (a GQA group; the AVX-512 table runs up to 4 rows per
// pass, so 1-9 rows cover whole and partial passes): each row bit for bit the scalar
// single-row scores, on whole-32 heads (the multi-row path) and others (the per-row fallback).
TEST(AttentionKernels, ScoreRowsMatchSingleRowScalarBitForBit) {
  std::mt19937 rng(11);
  for (int32_t hd : {32, 64, 96, 128, 40, 8}) {
    for (int32_t nrows = 1; nrows <= 9; ++nrows) {
      auto q = randv(static_cast<size_t>(nrows) * hd, rng), kt = randv(static_cast<size_t>(hd) * kKeyTile, rng);
      for (float& x : kt) x = tensor::round_fp16(x);
      std::vector<float> want(static_cast<size_t>(nrows) * kKeyTile);
      for (int32_t r = 0; r < nrows; ++r)
        attn::scalar_kernels().scores_ggml(q.data() + r * hd, kt.data(), hd, 0.125f, want.data() + r * kKeyTile);
      expect_every_table_bits(want, "hd " + std::to_string(hd) + " rows " + std::to_string(nrows),
                              [&](const attn::Kernels& k, float* got) {
                                k.scores_rows(q.data(), nrows, kt.data(), hd, 0.125f, got);
                              });
    }
  }
}

// Scores straight from an F16 page tile (transposed, stride = block size 16 or 32 with the
// tile at slot 0 or 16) against load_kt_f16 + the scalar single-row scores, bit for bit, on
// every table, whole-32 heads (AVX-512's in-register path) and others.
TEST(AttentionKernels, ScoreRowsFromF16PageMatchScalarBitForBit) {
  std::mt19937 rng(12);
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
        std::vector<float> want(static_cast<size_t>(nrows) * kKeyTile);
        for (int32_t r = 0; r < nrows; ++r)
          attn::scalar_kernels().scores_ggml(q.data() + r * hd, kt.data(), hd, 0.125f, want.data() + r * kKeyTile);
        expect_every_table_bits(
            want, "hd " + std::to_string(hd) + " stride " + std::to_string(stride) + " rows " + std::to_string(nrows),
            [&](const attn::Kernels& k, float* got) {
              k.scores_rows_f16k(q.data(), nrows, page.data() + slot0, stride, hd, 0.125f, got);
            });
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
    for (int32_t nrows : {1, 2, 3, 4, 5, 7, 17, 48}) {
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

}  // namespace
}  // namespace ts::model
