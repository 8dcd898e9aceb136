// Matrix::create splits the repack of a large matrix over threads (MatrixOptions::repack_threads,
// each thread a contiguous run of 16-row groups): for every weight type with an owned layout,
// a matrix above kParallelRepackBytes whose rows end inside a group decodes, row by row, to the
// same bits with 1, 3 and 7 threads as the GGUF rows themselves (the plain, unrepacked matrix),
// and a matmul gives the same bytes for every thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tensor/matrix.h"

namespace ts::tensor {
namespace {

class ParallelRepack : public ::testing::TestWithParam<DType> {};

TEST_P(ParallelRepack, EveryThreadCountGivesTheGgufRows) {
  if (detected_isa() < Isa::kAvx2) GTEST_SKIP() << "no repacked layouts on this CPU";
  const DType type = GetParam();
  const auto traits = type_traits(static_cast<uint32_t>(type));
  ASSERT_TRUE(traits);
  const int64_t cols = 512;
  const size_t rb = row_bytes(*traits, cols);
  // Enough rows for the split (the repacked size is about the GGUF size) and a partial group.
  const int64_t rows = static_cast<int64_t>((kParallelRepackBytes + kParallelRepackBytes / 2) / rb) / 16 * 16 + 5;
  std::mt19937 rng(static_cast<uint32_t>(type) + 11);
  std::vector<uint8_t> src(rb * static_cast<size_t>(rows));
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  // No fp16 / bf16 / f32 infinities or NaNs at any 2-byte position (scales and values alike).
  for (size_t i = 0; i + 1 < src.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, src.data() + i, 2);
    if ((h & 0x7C00) == 0x7C00 || (h & 0x7F80) == 0x7F80) h &= ~uint16_t{0x4000};
    std::memcpy(src.data() + i, &h, 2);
  }
  auto plain = Matrix::create(type, src.data(), rows, cols, MatrixOptions{.allow_repack = false});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  std::vector<float> want(static_cast<size_t>(cols)), got(want.size());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(3 * cols));
  for (float& v : x) v = normal(rng);
  std::vector<float> y_first;
  for (int threads : {1, 3, 7}) {
    SCOPED_TRACE("repack_threads " + std::to_string(threads));
    auto m = Matrix::create(type, src.data(), rows, cols, MatrixOptions{.repack_threads = threads});
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_TRUE(m->owns_weights());
    for (int64_t r = 0; r < rows; ++r) {
      plain->dequantize_row(r, want.data());
      m->dequantize_row(r, got.data());
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "row " << r;
    }
    std::vector<float> y(static_cast<size_t>(3 * rows));
    m->matmul(x.data(), 3, y.data(), nullptr);
    if (y_first.empty()) {
      y_first = y;
    } else {
      ASSERT_EQ(0, std::memcmp(y_first.data(), y.data(), y.size() * sizeof(float)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ParallelRepack,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K,
                                           DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS),
                         [](const auto& info) { return type_name(static_cast<uint32_t>(info.param)); });

}  // namespace
}  // namespace ts::tensor
