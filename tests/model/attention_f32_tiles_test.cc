// The f32 tiles (attention.h uses_f32_tiles, Kernels::flash_tile: prompt chunks of 64+ tokens on
// the default F16 cache, every query on Q8_0 and f32-accumulator F16): exp_flash against libm,
// every SIMD table against the scalar one bit for bit (masks, NaN rows, head tails),
// whole-layer attention against the untiled reference on every tier (prompt chunks beside
// decode tokens), and a prompt's rows the same bits however it is cut into chunks of 64 or more.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "core/thread_pool.h"
#include "model/attention.h"
#include "model/attention_kernels.h"

namespace ts::model {
namespace {

using attn::kFlashKeys;
using attn::kKeyTile;
using attn_test::Batch;
using attn_test::Case;
using attn_test::host_isas;
using attn_test::IsaScope;
using attn_test::make_batch;
using attn_test::randv;
using attn_test::rel_err;
using attn_test::same_bits;
using attn_test::simd_tables;

int64_t ulps(float a, float b) {
  const auto key = [](float x) {
    const int32_t i = std::bit_cast<int32_t>(x);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::llabs(key(a) - key(b));
}

TEST(F32Tiles, ExpFlashWithinTwoUlpOfLibm) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-87.f, 0.f), narrow(-3.f, 0.f);
  std::vector<float> xs = {0.f, -0.f, -1.f, -0.5f, -87.f, -86.99f, -1e-8f, -0x1.62e42ep-1f};
  for (int i = 0; i < 400000; ++i) xs.push_back(i % 2 ? wide(rng) : narrow(rng));
  int64_t worst = 0;
  for (float x : xs) worst = std::max(worst, ulps(attn::exp_flash(x), std::exp(x)));
  EXPECT_LE(worst, 2);
  // Below the clamp: a weight of e^-87, never 0 or NaN; NaN and -inf clamp the same way.
  EXPECT_EQ(attn::exp_flash(-1000.f), attn::exp_flash(-87.f));
  EXPECT_EQ(attn::exp_flash(-INFINITY), attn::exp_flash(-87.f));
  EXPECT_EQ(attn::exp_flash(std::nanf("")), attn::exp_flash(-87.f));
  EXPECT_GT(attn::exp_flash(-87.f), 0.f);
}

// One flash_tile call on random data through every table; the SIMD ones must give the
// scalar's bits in acc, m and s.
void check_tile(int32_t nrows, int32_t hd, int32_t i0, int32_t i1, uint32_t seed, bool nan_row, bool first_tile) {
  std::mt19937 rng(seed);
  const auto q = randv(static_cast<size_t>(nrows) * hd, rng, 0.6f);
  auto kt = randv(static_cast<size_t>(kFlashKeys) * hd, rng);
  auto v = randv(static_cast<size_t>(kFlashKeys) * hd, rng);
  // Keys outside [i0, i1) hold what a stale buffer may: huge and NaN values (must be unused).
  for (int32_t i = 0; i < kFlashKeys; ++i) {
    if (i >= i0 && i < i1) continue;
    for (int32_t d = 0; d < hd; ++d) {
      kt[static_cast<size_t>(i / kKeyTile) * hd * kKeyTile + d * kKeyTile + i % kKeyTile] = d % 2 ? NAN : 1e30f;
      v[static_cast<size_t>(i) * hd + d] = INFINITY;
    }
  }
  std::vector<float> q2 = q;
  if (nan_row) q2[static_cast<size_t>(nrows / 2) * hd + 3] = NAN;
  std::vector<float> m0(nrows), s0(nrows), acc0 = randv(static_cast<size_t>(nrows) * hd, rng, 0.1f);
  for (int32_t r = 0; r < nrows; ++r) {
    m0[r] = first_tile ? -INFINITY : (r % 3 == 0 ? 50.f : -0.5f);  // some rows rescale, some not
    s0[r] = first_tile ? 0.f : 1.5f + r;
    if (first_tile) std::fill(acc0.begin() + r * hd, acc0.begin() + (r + 1) * hd, 0.f);
  }
  const std::string what = "rows " + std::to_string(nrows) + " hd " + std::to_string(hd) + " keys [" +
                           std::to_string(i0) + "," + std::to_string(i1) + ")" + (nan_row ? " nan" : "");
  auto run = [&](const attn::Kernels& k, std::vector<float>& m, std::vector<float>& s, std::vector<float>& acc) {
    m = m0;
    s = s0;
    acc = acc0;
    k.flash_tile(q2.data(), nrows, hd, kt.data(), v.data(), i0, i1, 0.125f, m.data(), s.data(), acc.data());
  };
  std::vector<float> m, s, acc;
  run(attn::scalar_kernels(), m, s, acc);
  for (int32_t r = 0; r < nrows; ++r) {
    const bool poisoned = nan_row && r == nrows / 2;
    for (int32_t d = 0; d < hd; ++d) {
      const float a = acc[static_cast<size_t>(r) * hd + d];
      ASSERT_EQ(std::isnan(a), poisoned) << what << " row " << r;
    }
    if (!poisoned) {
      EXPECT_GT(s[r], 0.f) << what;
    }
  }
  for (const auto* k : simd_tables()) {
    std::vector<float> m2, s2, acc2;
    run(*k, m2, s2, acc2);
    for (int32_t r = 0; r < nrows; ++r) {
      ASSERT_TRUE(same_bits(m[r], m2[r])) << k->name << " " << what << " m row " << r;
      ASSERT_TRUE(same_bits(s[r], s2[r])) << k->name << " " << what << " s row " << r;
    }
    for (size_t i = 0; i < acc.size(); ++i)
      ASSERT_TRUE(same_bits(acc[i], acc2[i]) || (std::isnan(acc[i]) && std::isnan(acc2[i])))
          << k->name << " " << what << " acc " << i << ": " << acc2[i] << " want " << acc[i];
  }
}

TEST(F32Tiles, TileMatchesScalarBitForBit) {
  if (simd_tables().empty()) GTEST_SKIP() << "no SIMD tier on this host";
  uint32_t seed = 1;
  // Row counts around each tier's block (AVX2 3, AVX-512 6) and past it; head sizes with a
  // whole 4-vector chunk, tails of 1-3 vectors (80, 96, 112 on AVX-512; 80 on AVX2).
  for (int32_t nrows : {1, 2, 3, 4, 5, 6, 7, 13, 48})
    for (int32_t hd : {16, 64, 80, 96, 112, 128})
      for (auto [i0, i1] : {std::pair{0, 64}, std::pair{0, 1}, std::pair{5, 37}, std::pair{63, 64}, std::pair{0, 20}}) {
        check_tile(nrows, hd, i0, i1, seed, false, seed % 2 == 0);
        ++seed;
      }
  check_tile(7, 64, 0, 64, 99, true, false);
  check_tile(13, 128, 3, 50, 100, true, true);
}

const std::vector<Case>& tile_cases() {
  static const std::vector<Case> v = {
      // A prompt chunk (f32 tiles) beside a decode token and a 64-token chunk straddling tiles.
      {.n_head = 14, .n_head_kv = 2, .head_dim = 64, .block_size = 16, .window = 0, .seqs = {{0, 70}, {5, 1}, {100, 64}}},
      // Blocks of 4 (keys converted one at a time), head_dim 128, no GQA.
      {.n_head = 4, .n_head_kv = 4, .head_dim = 128, .block_size = 4, .window = 0, .seqs = {{0, 65}, {30, 80}}},
      // Sliding window across tiles; head_dim 80 (a tail chunk).
      {.n_head = 2, .n_head_kv = 1, .head_dim = 80, .block_size = 16, .window = 20, .seqs = {{10, 90}}},
      // Keys past kKvChunk: chunk partials merged.
      {.n_head = 8, .n_head_kv = 4, .head_dim = 64, .block_size = 32, .window = 0, .seqs = {{kKvChunk - 40, 100}}},
      // head_dim 40 (not a multiple of 16): the other paths, whatever the query count.
      {.n_head = 4, .n_head_kv = 2, .head_dim = 40, .block_size = 16, .window = 0, .seqs = {{0, 70}}},
  };
  return v;
}

class F32TilesLayer : public ::testing::TestWithParam<tensor::Isa> {};

TEST_P(F32TilesLayer, MatchesReferenceAndScalarBits) {
  ThreadPool pool(2);
  for (size_t ci = 0; ci < tile_cases().size(); ++ci) {
    const Case& c = tile_cases()[ci];
    for (auto [type, ggml] : {std::pair{KvType::kF16, true}, std::pair{KvType::kF16, false},
                              std::pair{KvType::kF32, false}, std::pair{KvType::kQ8_0, false}}) {
      Batch b = make_batch(c, type, static_cast<uint32_t>(300 + ci));
      b.p.f16_ggml = ggml;
      const size_t n = b.q.size();
      std::vector<float> want(n), scalar(n), got(n), got1(n);
      AttentionScratch s0, s1, s2, s3;
      const std::string what = "case " + std::to_string(ci) + " " + kv_type_name(type) + (ggml ? " ggml" : "");
      {
        IsaScope sc(tensor::Isa::kScalar);
        paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), scalar.data(), s0, &pool);
      }
      IsaScope scope(GetParam());
      paged_attention_reference(b.kv, 1, b.p, b.slices, b.q.data(), want.data(), s1, &pool);
      paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got.data(), s2, &pool);
      paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got1.data(), s3, nullptr);
      // Per-tile online softmax against the reference's two passes: rounding differences only
      // (the ggml rows of the decode token and of head_dim 40 are bit-exact there).
      EXPECT_LT(rel_err(got, want), 2e-5) << what;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(same_bits(got[i], got1[i])) << what << " threads at " << i;
        ASSERT_TRUE(same_bits(got[i], scalar[i])) << what << " scalar tier at " << i;
      }
    }
  }
}

TEST_P(F32TilesLayer, RowsIndependentOfHowThePromptIsChunked) {
  // 192 tokens as one call, and as calls of 64 + 128, 100 + 92 and 128 + 64 (each chunk >= 64):
  // every row the same bits, because the tiles sit at multiples of kFlashKeys whatever the
  // chunk (with a sliding window too, where a chunk's first key is not a tile start).
  IsaScope scope(GetParam());
  ThreadPool pool(2);
  for (auto [type, window] : {std::pair{KvType::kF16, 0}, std::pair{KvType::kQ8_0, 0}, std::pair{KvType::kF16, 50}}) {
    const Case whole{.n_head = 6, .n_head_kv = 2, .head_dim = 64, .block_size = 16, .window = window, .seqs = {{0, 192}}};
    Batch b = make_batch(whole, type, 77);
    const size_t row = static_cast<size_t>(whole.n_head) * whole.head_dim;
    std::vector<float> one(b.q.size());
    AttentionScratch s;
    paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), one.data(), s, &pool);
    for (int32_t cut : {64, 100, 128}) {
      std::vector<float> parts(b.q.size());
      for (auto [start, len] : {std::pair{0, cut}, std::pair{cut, 192 - cut}}) {
        SeqSlice sl{.num_tokens = len, .start_pos = start, .block_table = b.tables[0]};
        paged_attention(b.kv, 1, b.p, std::span<const SeqSlice>(&sl, 1), b.q.data() + start * row,
                        parts.data() + start * row, s, &pool);
      }
      for (size_t i = 0; i < one.size(); ++i)
        ASSERT_TRUE(same_bits(one[i], parts[i])) << kv_type_name(type) << " window " << window << " cut " << cut
                                                 << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, F32TilesLayer, ::testing::ValuesIn(host_isas()),
                         [](const ::testing::TestParamInfo<tensor::Isa>& i) { return std::string(tensor::isa_name(i.param)); });

}  // namespace
}  // namespace ts::model
