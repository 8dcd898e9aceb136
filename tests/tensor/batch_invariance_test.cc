// Batch invariance: a token's output row must not depend on how many other tokens share its
// matmul, where it sits in the batch, or which kernel variant the batch size selects (tile
// sizes, decoded panels, the AVX-512 activation interleave, token panels of a prefill GEMM).
// Greedy decoding across batch compositions and speculative decoding's verification rely on
// it, so the comparison is bit for bit, on every ISA this CPU runs and every layout.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tensor/fp16.h"
#include "tensor/matrix.h"

namespace ts::tensor {
namespace {

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_isa(saved); }
};

// Random blocks with sane fp16 scales at every 16-bit word that could be one: the values do
// not matter here, only that every path sees the same finite inputs.
std::vector<uint8_t> weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const TypeTraits tr = *type_traits(static_cast<uint32_t>(t));
  std::vector<uint8_t> w(row_bytes(tr, cols) * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 1 < w.size(); i += 2) {
    const uint16_t h = static_cast<uint16_t>((rng() & 0x83FF) | 0x2000);  // |v| < 2^-5, finite
    std::memcpy(w.data() + i, &h, 2);
  }
  return w;
}

struct Case {
  DType type;
  int64_t cols;
  const char* suffix = "";  // tells apart cases of one type
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(type_name(static_cast<uint32_t>(info.param.type))) + info.param.suffix;
}

class BatchInvariance : public ::testing::TestWithParam<Case> {};

TEST_P(BatchInvariance, RowsDoNotDependOnTheBatch) {
  const Case c = GetParam();
  const int64_t rows = 37, n_all = 41;
  const auto w = weights(c.type, rows, c.cols, 7u + static_cast<uint32_t>(c.type));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_all * c.cols));
  for (float& v : x) v = normal(rng);
  IsaGuard guard;
  ThreadPool pool(2);
  for (int i = 0; i <= static_cast<int>(highest_isa()); ++i) {
    set_isa(static_cast<Isa>(i));
    for (bool repack : {false, true}) {
      auto m = Matrix::create(c.type, w.data(), rows, c.cols, MatrixOptions{.allow_repack = repack});
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      if (repack && !m->repacked()) continue;
      const std::string what = std::string(type_name(static_cast<uint32_t>(c.type))) + " " +
                               isa_name(static_cast<Isa>(i)) + (m->repacked() ? " r16" : " plain");
      std::vector<float> all(static_cast<size_t>(n_all * rows));
      m->matmul(x.data(), n_all, all.data(), &pool);
      // Sub-batches of every size class the kernels branch on, at several offsets.
      for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 32, 33}) {
        for (int64_t t0 : {int64_t{0}, int64_t{1}, n_all - n}) {
          std::vector<float> y(static_cast<size_t>(n * rows), std::nanf(""));
          m->matmul(x.data() + t0 * c.cols, n, y.data(), (n % 2) ? &pool : nullptr);
          ASSERT_EQ(0, std::memcmp(y.data(), all.data() + t0 * rows, y.size() * 4))
              << what << ": tokens [" << t0 << ", " << t0 + n << ") differ from the same tokens in a batch of " << n_all;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BatchInvariance,
                         ::testing::Values(Case{DType::kF32, 80}, Case{DType::kF16, 88}, Case{DType::kBF16, 72},
                                           Case{DType::kQ8_0, 96},
                                           // Wide enough for the AVX-512 two-group decode tile
                                           // (r16_il_pair_tile: 5-8 tokens, >= 3328 columns).
                                           Case{DType::kQ8_0, 3360, "_wide"}, Case{DType::kQ4_0, 96}, Case{DType::kQ4_1, 96},
                                           Case{DType::kQ5_0, 96}, Case{DType::kQ5_1, 96}, Case{DType::kIQ4_NL, 160},
                                           Case{DType::kQ2_K, 768}, Case{DType::kQ3_K, 768}, Case{DType::kQ4_K, 768},
                                           Case{DType::kQ5_K, 768}, Case{DType::kQ6_K, 768},
                                           Case{DType::kIQ4_XS, 768}),
                         case_name);

}  // namespace
}  // namespace ts::tensor
