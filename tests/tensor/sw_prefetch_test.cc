// Software prefetch knob (matrix.h set_sw_prefetch): the mode decides where the R16 kernels
// prefetch, never what they compute. Every weight type, repacked and plain, on every ISA tier
// this CPU runs, at the batch sizes the rule branches on: outputs with prefetch forced on and
// forced off (and auto) are bit-identical. Plus the policy itself and the mode parser.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tensor/cpu_features.h"
#include "tensor/matrix.h"

namespace ts::tensor {
namespace {

struct Guard {
  Isa isa = active_isa();
  SwPrefetch mode = sw_prefetch_mode();
  ~Guard() {
    set_isa(isa);
    set_sw_prefetch(mode);
  }
};

// Random bytes with a finite small fp16 at every even offset (scales stay sane wherever they are).
std::vector<uint8_t> weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const TypeTraits tr = *type_traits(static_cast<uint32_t>(t));
  std::vector<uint8_t> w(row_bytes(tr, cols) * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 1 < w.size(); i += 2) {
    const uint16_t h = static_cast<uint16_t>((rng() & 0x83FF) | 0x2000);
    std::memcpy(w.data() + i, &h, 2);
  }
  return w;
}

struct Case {
  DType type;
  int64_t cols;
};

class SwPrefetchModes : public ::testing::TestWithParam<Case> {};

TEST_P(SwPrefetchModes, OnAndOffGiveIdenticalOutputs) {
  const Case c = GetParam();
  // Rows not a multiple of 16 and enough groups (200 rows: 13) that the prefetches of one
  // group reach into the next, split over 2 threads.
  const int64_t rows = 200;
  const auto w = weights(c.type, rows, c.cols, 11u + static_cast<uint32_t>(c.type));
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t max_tok = 17;
  std::vector<float> x(static_cast<size_t>(max_tok * c.cols));
  for (float& v : x) v = normal(rng);
  Guard guard;
  ThreadPool pool(2);
  int compared = 0;
  for (int i = 0; i <= static_cast<int>(highest_isa()); ++i) {
    if (!isa_available(static_cast<Isa>(i))) continue;
    set_isa(static_cast<Isa>(i));
    for (bool repack : {true, false}) {
      auto m = Matrix::create(c.type, w.data(), rows, c.cols, MatrixOptions{.allow_repack = repack});
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      if (repack && !m->repacked()) continue;
      for (int64_t n : {1, 2, 3, 4, 5, 8, 17}) {
        std::vector<float> y[3];
        const SwPrefetch modes[3] = {SwPrefetch::kOn, SwPrefetch::kOff, SwPrefetch::kAuto};
        for (int k = 0; k < 3; ++k) {
          set_sw_prefetch(modes[k]);
          y[k].assign(static_cast<size_t>(n * rows), std::nanf(""));
          m->matmul(x.data(), n, y[k].data(), &pool);
        }
        const std::string what = std::string(type_name(static_cast<uint32_t>(c.type))) + " " +
                                 isa_name(static_cast<Isa>(i)) + (m->repacked() ? " r16" : " plain") + " n=" +
                                 std::to_string(n);
        for (float v : y[0]) ASSERT_FALSE(std::isnan(v)) << what << ": an output was not written";
        EXPECT_EQ(0, std::memcmp(y[0].data(), y[1].data(), y[0].size() * 4)) << what << ": prefetch on vs off";
        EXPECT_EQ(0, std::memcmp(y[0].data(), y[2].data(), y[0].size() * 4)) << what << ": prefetch on vs auto";
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Types, SwPrefetchModes,
                         ::testing::Values(Case{DType::kQ8_0, 576}, Case{DType::kQ8_0, 96}, Case{DType::kQ4_0, 576},
                                           Case{DType::kQ4_1, 96}, Case{DType::kQ5_0, 96}, Case{DType::kQ5_1, 96},
                                           Case{DType::kIQ4_NL, 160}, Case{DType::kQ4_K, 768},
                                           Case{DType::kQ6_K, 768}, Case{DType::kF16, 88}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(type_name(static_cast<uint32_t>(info.param.type))) + "_" +
                                  std::to_string(info.param.cols);
                         });

TEST(SwPrefetchPolicy, ForcedModesApplyEverywhere) {
  Guard guard;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
    for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
      for (int64_t n : {1, 3, 4, 5, 8, 64}) {
        set_sw_prefetch(SwPrefetch::kOn);
        EXPECT_TRUE(sw_prefetch_enabled(isa, t, n));
        set_sw_prefetch(SwPrefetch::kOff);
        EXPECT_FALSE(sw_prefetch_enabled(isa, t, n));
      }
    }
  }
}

TEST(SwPrefetchPolicy, AutoFollowsTheVendorRule) {
  Guard guard;
  set_sw_prefetch(SwPrefetch::kAuto);
  const bool amd = cpu_features().amd;
  for (int64_t n = 1; n <= 9; ++n) {
    // AMD: off for Q8_0 at small batches on the avx512 / avxvnni tiers; on elsewhere.
    EXPECT_EQ(sw_prefetch_enabled(Isa::kAvx512, DType::kQ8_0, n), !amd || n > kSwPrefetchOffAvx512Tokens) << n;
    EXPECT_EQ(sw_prefetch_enabled(Isa::kAvxVnni, DType::kQ8_0, n), !amd || n > kSwPrefetchOffAvxVnniTokens) << n;
    EXPECT_TRUE(sw_prefetch_enabled(Isa::kAvx2, DType::kQ8_0, n)) << n;
    EXPECT_TRUE(sw_prefetch_enabled(Isa::kAvx512, DType::kQ4_K, n)) << n;
    EXPECT_TRUE(sw_prefetch_enabled(Isa::kAvx512, DType::kQ6_K, n)) << n;
  }
  EXPECT_TRUE(sw_prefetch_enabled(Isa::kAvx512, DType::kQ8_0, 512));
}

TEST(SwPrefetchPolicy, ParsesModeNames) {
  EXPECT_EQ(*parse_sw_prefetch("auto"), SwPrefetch::kAuto);
  EXPECT_EQ(*parse_sw_prefetch("ON"), SwPrefetch::kOn);
  EXPECT_EQ(*parse_sw_prefetch("off"), SwPrefetch::kOff);
  auto bad = parse_sw_prefetch("sometimes");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, on or off"), std::string::npos);
  for (SwPrefetch m : {SwPrefetch::kAuto, SwPrefetch::kOn, SwPrefetch::kOff})
    EXPECT_EQ(*parse_sw_prefetch(sw_prefetch_name(m)), m);
}

}  // namespace
}  // namespace ts::tensor
