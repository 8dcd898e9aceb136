// PreparedActivations: one input quantized once for several matrices gives exactly what the
// plain matmul gives, on every ISA this CPU runs; forms are made once and reused. Also: the R16
// layouts are chosen on the AVX2 tier too.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tensor/fp16.h"
#include "tensor/kernels.h"
#include "tensor/matrix.h"

namespace ts::tensor {
namespace {

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_isa(saved); }
};

std::vector<Isa> host_isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(highest_isa()); ++i) v.push_back(static_cast<Isa>(i));
  return v;
}

// Random blocks with small finite fp16 words (every 16-bit word has a low exponent), so every
// scale is finite whatever the type's field offsets.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t n = row_bytes(*type_traits(static_cast<uint32_t>(t)), cols) * static_cast<size_t>(rows);
  std::vector<uint8_t> w(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 1 < n; i += 2) {
    const uint16_t h = static_cast<uint16_t>((rng() & 0x83FF) | 0x2000);
    std::memcpy(w.data() + i, &h, 2);
  }
  return w;
}

std::vector<float> random_x(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

const DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K,
                           DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS};

TEST(PreparedActivations, SharedInputEqualsPlainMatmulForEveryTypeAndIsa) {
  IsaGuard guard;
  ThreadPool pool(2);
  const int64_t cols = 512;
  for (Isa isa : host_isas()) {
    set_isa(isa);
    for (DType t : kAllTypes) {
      // Three matrices of one type over the same input, like Q/K/V (rows not a multiple of 16).
      std::vector<std::vector<uint8_t>> src;
      std::vector<Matrix> mats;
      for (int64_t rows : {37, 21, 16}) {
        src.push_back(random_weights(t, rows, cols, 7u + static_cast<uint32_t>(rows) + static_cast<uint32_t>(t)));
        auto m = Matrix::create(t, src.back().data(), rows, cols);
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        mats.push_back(std::move(m).value());
      }
      for (int64_t n_tok : {1, 5, 17}) {
        const auto x = random_x(n_tok * cols, 100u + static_cast<uint32_t>(n_tok));
        PreparedActivations prep;
        prep.reset(x.data(), n_tok, cols);
        int forms = -1;
        for (const Matrix& m : mats) {
          std::vector<float> want(static_cast<size_t>(n_tok * m.rows())), got(want.size(), -1.0f);
          m.matmul(x.data(), n_tok, want.data(), &pool);
          m.matmul(prep, got.data(), n_tok > 4 ? &pool : nullptr);
          const std::string what = std::string(type_name(static_cast<uint32_t>(t))) + " " + isa_name(isa) +
                                   " rows " + std::to_string(m.rows()) + " n_tok " + std::to_string(n_tok);
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << what;
          // The first matrix makes the forms, the others reuse them.
          if (forms < 0) forms = prep.num_prepared();
          EXPECT_EQ(prep.num_prepared(), forms) << what;
        }
        // F32 uses the floats as they are; every other type needs one form (Q8_0 under AVX-512
        // with >= 4 tokens: also its tile interleave; Q4_1/Q5_1: the Q8_1 sums too, and Q5_1 on
        // the SIMD tiers from kGgmlPanelMinTokensMin tokens the ggml panels' unsigned copy).
        if (t == DType::kF32) {
          EXPECT_EQ(forms, 0);
        } else {
          const bool min_panels = t == DType::kQ5_1 && isa != Isa::kScalar &&
                                  n_tok >= kern::kGgmlPanelMinTokensMin;
          EXPECT_GE(forms, 1) << type_name(static_cast<uint32_t>(t));
          EXPECT_LE(forms, min_panels ? 3 : 2) << type_name(static_cast<uint32_t>(t)) << " " << isa_name(isa);
        }
      }
    }
  }
}

// Decode-sized batches with many values are prepared split over the pool by column chunks
// (matrix.cc kMinParallelPrepValues): the forms, and so the results, equal the calling thread's
// own preparation for every type and ISA, also where the last chunk is partial.
TEST(PreparedActivations, PoolSplitPreparationEqualsSerialForEveryTypeAndIsa) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : host_isas()) {
    set_isa(isa);
    for (DType t : kAllTypes) {
      const int64_t block = type_traits(static_cast<uint32_t>(t))->block_size;
      // 2304 = 4.5 chunks of 512 (K-quants: 9 x 256); 2336 = 73 blocks of 32 (last chunk 288).
      for (int64_t cols : {int64_t{2304}, int64_t{2336}}) {
        if (cols % block != 0) continue;
        const int64_t rows = 37;
        const auto w = random_weights(t, rows, cols, 11u + static_cast<uint32_t>(t) + static_cast<uint32_t>(cols));
        auto m = Matrix::create(t, w.data(), rows, cols);
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        for (int64_t n_tok : {8, 15}) {
          const auto x = random_x(n_tok * cols, 200u + static_cast<uint32_t>(n_tok));
          std::vector<float> want(static_cast<size_t>(n_tok * rows)), got(want.size(), -1.0f);
          m->matmul(x.data(), n_tok, want.data(), nullptr);
          PreparedActivations prep;
          prep.reset(x.data(), n_tok, cols);
          m->prepare(prep, &pool);
          const int forms = prep.num_prepared();
          m->matmul(prep, got.data(), nullptr);
          const std::string what = std::string(type_name(static_cast<uint32_t>(t))) + " " + isa_name(isa) +
                                   " cols " + std::to_string(cols) + " n_tok " + std::to_string(n_tok);
          EXPECT_EQ(prep.num_prepared(), forms) << what;  // matmul made nothing new
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << what;
        }
      }
    }
  }
}

TEST(PreparedActivations, MixedTypesAndResetFollowTheInput) {
  IsaGuard guard;
  const int64_t cols = 256, rows = 19, n_tok = 6;
  for (Isa isa : host_isas()) {
    set_isa(isa);
    // fp16 and bf16 share a buffer; Q8_0 / Q8_1 / Q8_K forms sit side by side.
    const DType order[] = {DType::kQ4_1, DType::kQ8_0, DType::kF16, DType::kBF16, DType::kQ4_K, DType::kF16, DType::kQ5_1};
    std::vector<std::vector<uint8_t>> src;
    std::vector<Matrix> mats;
    for (DType t : order) {
      src.push_back(random_weights(t, rows, cols, 50u + static_cast<uint32_t>(t)));
      auto m = Matrix::create(t, src.back().data(), rows, cols);
      ASSERT_TRUE(m.ok());
      mats.push_back(std::move(m).value());
    }
    auto x = random_x(n_tok * cols, 3);
    PreparedActivations prep;
    for (int round = 0; round < 2; ++round) {
      prep.reset(x.data(), n_tok, cols);
      for (size_t i = 0; i < mats.size(); ++i) {
        std::vector<float> want(static_cast<size_t>(n_tok * rows)), got(want.size(), -1.0f);
        mats[i].matmul(x.data(), n_tok, want.data(), nullptr);
        mats[i].matmul(prep, got.data(), nullptr);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
            << isa_name(isa) << " round " << round << " matrix " << i << " " << type_name(static_cast<uint32_t>(order[i]));
      }
      EXPECT_EQ(prep.n_tok(), n_tok);
      EXPECT_EQ(prep.data(), x.data());
      // New contents in the same buffer: after reset() the results follow them.
      for (float& v : x) v = -0.5f * v + 0.25f;
    }
    // Row sub-ranges from the prepared input.
    prep.reset(x.data(), n_tok, cols);
    std::vector<float> full(static_cast<size_t>(n_tok * rows)), part(static_cast<size_t>(n_tok * 9));
    mats[1].matmul(x.data(), n_tok, full.data(), nullptr);
    mats[1].matmul_rows(prep, part.data(), 5, 14, nullptr);
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t r = 5; r < 14; ++r) EXPECT_EQ(part[static_cast<size_t>(t * 9 + r - 5)], full[static_cast<size_t>(t * rows + r)]);
    }
  }
}

// A prefill-sized matmul runs as a blocked GEMM over activation panels (~256 KB of int8
// activations: 32 tokens at 8192 columns). Its result must be exactly that of separate matmuls
// over the panels' token ranges (same kernels on the same activations), so a panel offset
// mistake (another panel's activations or outputs) shows up bit for bit.
TEST(PreparedActivations, BlockedPrefillEqualsPerPanelMatmuls) {
  IsaGuard guard;
  ThreadPool pool(2);
  const int64_t cols = 8192, rows = 20, n_tok = 37, panel = 32;
  const auto x = random_x(n_tok * cols, 77);
  for (Isa isa : host_isas()) {
    set_isa(isa);
    for (DType t : kAllTypes) {
      const auto w = random_weights(t, rows, cols, 5u + static_cast<uint32_t>(t));
      auto m = Matrix::create(t, w.data(), rows, cols);
      ASSERT_TRUE(m.ok());
      std::vector<float> whole(static_cast<size_t>(n_tok * rows)), parts(whole.size());
      m->matmul(x.data(), n_tok, whole.data(), &pool);
      m->matmul(x.data(), panel, parts.data(), &pool);
      m->matmul(x.data() + panel * cols, n_tok - panel, parts.data() + panel * rows, &pool);
      ASSERT_EQ(0, std::memcmp(whole.data(), parts.data(), whole.size() * 4))
          << type_name(static_cast<uint32_t>(t)) << " " << isa_name(isa);
    }
  }
}

TEST(PreparedActivations, Avx2TierRepacksEveryR16Type) {
  if (detected_isa() < Isa::kAvx2) GTEST_SKIP() << "CPU has no AVX2";
  IsaGuard guard;
  for (DType t : kAllTypes) {
    const bool r16 = t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ5_0 || t == DType::kIQ4_NL ||
                     t == DType::kQ4_K || t == DType::kQ6_K || t == DType::kQ4_1 || t == DType::kQ5_1 ||
                     t == DType::kQ5_K || t == DType::kQ3_K || t == DType::kQ2_K || t == DType::kIQ4_XS ||
                     t == DType::kF32 || t == DType::kF16;
    const auto w = random_weights(t, 20, 256, 1);
    for (Isa isa : host_isas()) {
      set_isa(isa);
      auto m = Matrix::create(t, w.data(), 20, 256);
      ASSERT_TRUE(m.ok());
      EXPECT_EQ(m->repacked(), r16 && isa >= Isa::kAvx2) << type_name(static_cast<uint32_t>(t)) << " " << isa_name(isa);
    }
  }
}

}  // namespace
}  // namespace ts::tensor
