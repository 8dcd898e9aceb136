// After load, a repacked model keeps one copy of its weights: the mapped file pages of every
// repacked tensor are given back (issue #10 item 2; the page-level proof is in
// tests/tensor/matrix_release_test.cc).
#include <gtest/gtest.h>

#include "model/model.h"
#include "tensor/matrix.h"
#include "test_util.h"

namespace ts::model {
namespace {

TEST(WeightMemory, RepackedModelReleasesItsMappedSourcePages) {
  TS_REQUIRE_SHARED(path, "golden/models/tiny-llama3-q8_0.gguf");
  if (tensor::active_isa() < tensor::Isa::kAvx2) GTEST_SKIP() << "no repacked layouts on this ISA";
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const WeightMemory wm = (*m)->weight_memory();
  // Every matrix of this file (Q8_0 + Q4_0) is repacked at the same bytes per weight; whole
  // pages of each source range are released (partial edge pages stay).
  EXPECT_GT(wm.resident, size_t{15} << 20);
  EXPECT_GT(wm.released, wm.resident * 9 / 10) << "resident " << wm.resident << " released " << wm.released;
}

// F16 matrices keep their layout but are copied into the huge-page arena too (tensor/matrix.h
// MatrixOptions), so their mapped pages go as well; on the scalar tier (no arena) they read the
// mapping in place and nothing is released.
TEST(WeightMemory, FloatModelCopiesIntoTheArenaAndReleasesTheMapping) {
  TS_REQUIRE_SHARED(path, "golden/models/tiny-qwen2-f16.gguf");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const WeightMemory wm = (*m)->weight_memory();
  EXPECT_GT(wm.resident, 0u);
  if (tensor::active_isa() < tensor::Isa::kAvx2) {
    EXPECT_EQ(wm.released, 0u);  // read in place
  } else {
    EXPECT_GT(wm.released, wm.resident * 9 / 10) << "resident " << wm.resident << " released " << wm.released;
  }
}

}  // namespace
}  // namespace ts::model
