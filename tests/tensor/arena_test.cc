// Repacked matrices share 2 MB-aligned huge-page slabs (matrix.cc make_arena): matrices of
// mixed sizes (some bigger than a slab) created and destroyed in a shuffled order, interleaved
// with new ones, each keep computing exactly what a plain (not repacked) matrix over the same
// bytes computes, and report their own resident bytes. Exercises the slab bookkeeping (a slab
// is unmapped when its last matrix goes, including the current one) where a use-after-unmap
// would fault or change results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "tensor/matrix.h"

namespace ts::tensor {
namespace {

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_isa(saved); }
};

struct Entry {
  std::vector<uint8_t> src;
  Matrix repacked, plain;
  int64_t rows = 0, cols = 0;
};

std::unique_ptr<Entry> make(std::mt19937& rng, int64_t rows, int64_t cols) {
  auto e = std::make_unique<Entry>();
  e->rows = rows;
  e->cols = cols;
  const size_t rb = row_bytes(*type_traits(static_cast<uint32_t>(DType::kQ8_0)), cols);
  e->src.resize(rb * static_cast<size_t>(rows));
  for (size_t i = 0; i + 1 < e->src.size(); i += 2) {
    const uint16_t h = static_cast<uint16_t>((rng() & 0x83FF) | 0x2000);  // finite fp16 scales anywhere
    std::memcpy(e->src.data() + i, &h, 2);
  }
  auto r = Matrix::create(DType::kQ8_0, e->src.data(), rows, cols);
  auto p = Matrix::create(DType::kQ8_0, e->src.data(), rows, cols, MatrixOptions{.allow_repack = false});
  EXPECT_TRUE(r.ok() && p.ok());
  e->repacked = std::move(r).value();
  e->plain = std::move(p).value();
  return e;
}

void expect_same(const Entry& e, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(2 * e.cols));
  for (float& v : x) v = normal(rng);
  std::vector<float> y1(static_cast<size_t>(2 * e.rows)), y2(y1.size());
  e.repacked.matmul(x.data(), 2, y1.data(), nullptr);
  e.plain.matmul(x.data(), 2, y2.data(), nullptr);
  // Same values up to float summation order (the R16 and plain kernels sum differently).
  for (size_t i = 0; i < y1.size(); ++i) ASSERT_NEAR(y1[i], y2[i], 1e-3f * (1.0f + std::fabs(y2[i]))) << i;
}

TEST(RepackArena, MatricesOutliveTheirNeighboursInAnyOrder) {
  if (detected_isa() < Isa::kAvx2) GTEST_SKIP() << "no repacked layouts on this CPU";
  IsaGuard guard;
  set_isa(detected_isa());
  std::mt19937 rng(9);
  // 0.02-1.4 MB matrices (many share a 32 MB slab) and 17-18 MB ones (a slab of their own).
  const int64_t shapes[][2] = {{48, 256}, {576, 576}, {1536, 576}, {200, 1024}, {16384, 1024}, {37, 96}, {17000, 1024}};
  std::vector<std::unique_ptr<Entry>> live;
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 12; ++i) {
      const auto& s = shapes[rng() % (sizeof(shapes) / sizeof(shapes[0]))];
      live.push_back(make(rng, s[0], s[1]));
      ASSERT_TRUE(live.back()->repacked.repacked());
      EXPECT_GE(live.back()->repacked.resident_bytes(), live.back()->repacked.weight_bytes());
    }
    std::shuffle(live.begin(), live.end(), rng);
    for (const auto& e : live) expect_same(*e, rng);
    live.resize(live.size() / 3);  // drop two thirds, in shuffled order
    for (const auto& e : live) expect_same(*e, rng);
  }
  live.clear();  // every slab goes, the current one included
  auto e = make(rng, 576, 576);  // and a fresh one starts
  expect_same(*e, rng);
}

}  // namespace
}  // namespace ts::tensor
