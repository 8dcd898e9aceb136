// The AMX tier's tile kernels (kernels_amx.cc) on random data: bit-identical to the avx512
// tier's kernels for the same layout (the documented contract: same integer block sums, same
// float steps), and within float-reordering tolerance of the scalar reference and of a double
// product of the dequantized operands. Shapes: rows not a multiple of 16 and groups entered at a
// lane offset (row0), 1..17 and 33..70 tokens (full 16-token tiles plus every remainder tile),
// an odd number of 32-blocks. Skipped, saying why, where the CPU or the OS lacks AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/cpu_features.h"
#include "tensor/fp16.h"
#include "tensor/kernels.h"
#include "tensor/matrix.h"
#include "tensor/repack.h"

namespace ts::tensor::kern {
namespace {

std::string amx_skip_reason() {
  if (!cpu_features().amx_tile || !cpu_features().amx_int8) return "this CPU has no AMX int8 tiles";
  if (!cpu_features().avx512_tier()) return "this CPU has no avx512 tier";
  if (!amx_permission().granted) return amx_permission().why;
  return "";
}

// Rows of `type` (Q8_0 or Q4_0) with random value bytes (every bit pattern: -128 for Q8_0 too)
// and random sane fp16 scales.
std::vector<uint8_t> random_rows(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t blk = type == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  std::vector<uint8_t> w(static_cast<size_t>(rows * (cols / 32)) * blk);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (size_t o = 0; o < w.size(); o += blk) {
    const uint16_t d = fp32_to_fp16(rng() % 2 ? scale(rng) : -scale(rng));
    std::memcpy(w.data() + o, &d, 2);
  }
  return w;
}

// 64-byte aligned, zero-filled memory (what repack_r16 and the aligned tile loads need).
struct Aligned {
  explicit Aligned(size_t n) : bytes(n + 64), raw(bytes, 0) {}
  uint8_t* get() { return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw.data()) + 63) & ~uintptr_t{63}); }
  size_t bytes;
  std::vector<uint8_t> raw;
};

struct Quantized {  // Q8_0 activations of n_tok tokens (the scalar preparation)
  std::vector<int8_t> q8;
  std::vector<float> d8;
  std::vector<int32_t> s8;
  Act act;
};

Quantized quantize(int64_t n_tok, int64_t cols, std::mt19937& rng) {
  Quantized q;
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> x(static_cast<size_t>(n_tok * cols));
  for (float& v : x) v = normal(rng);
  const int64_t nb = cols / 32;
  q.q8.resize(x.size());
  q.d8.resize(static_cast<size_t>(n_tok * nb));
  q.s8.resize(q.d8.size());
  for (int64_t t = 0; t < n_tok; ++t) {
    scalar_kernels().act.q8_0(x.data() + t * cols, cols, q.q8.data() + t * cols, q.d8.data() + t * nb,
                              q.s8.data() + t * nb);
  }
  q.act.n_tok = n_tok;
  q.act.cols = cols;
  q.act.q8 = q.q8.data();
  q.act.d8 = q.d8.data();
  q.act.s8 = q.s8.data();
  return q;
}

// y[t][i] for rows row0 .. row0 + num_rows - 1 of the repacked matrix, with kernel `fn`.
std::vector<float> run(GemmFn fn, const uint8_t* groups, size_t stride, int64_t row0, int64_t num_rows, const Act& act,
                       uint8_t* scratch) {
  std::vector<float> y(static_cast<size_t>(act.n_tok * num_rows), -1.0f);
  GemmArgs g;
  g.w = groups + static_cast<size_t>(row0 / 16) * stride;
  g.stride = stride;
  g.row0 = row0 % 16;
  g.num_rows = num_rows;
  g.act = &act;
  g.y = y.data();
  g.ldy = num_rows;
  g.scratch = scratch;
  fn(g);
  return y;
}

struct Case {
  DType type;
  Layout layout;
};

class AmxTiles : public ::testing::TestWithParam<Case> {};

TEST_P(AmxTiles, MatchAvx512BitForBitAndTheReference) {
  const std::string why = amx_skip_reason();
  if (!why.empty()) GTEST_SKIP() << "AMX tier not testable here: " << why;
  ASSERT_NE(amx_tile_kernels(), nullptr);
  ASSERT_NE(amx_kernels(), nullptr);
  const Case c = GetParam();
  const int li = static_cast<int>(c.layout);
  const GemmFn amx = amx_tile_kernels()->gemm[li];
  const GemmFn amx_dispatch = amx_kernels()->gemm[li];
  const GemmFn avx512 = avx512_kernels()->gemm[li];
  const GemmFn scalar = scalar_kernels().gemm[li];
  std::mt19937 rng(11u + static_cast<uint32_t>(c.type));
  std::vector<int64_t> toks;
  for (int64_t t = 1; t <= 17; ++t) toks.push_back(t);
  for (int64_t t : {33, 40, 47, 48, 49, 63, 64, 70}) toks.push_back(t);
  int checked = 0;
  for (int64_t cols : {int64_t{32}, int64_t{96}, int64_t{320}}) {
    const int64_t rows = 45;  // 3 groups, the last one partial
    const auto src = random_rows(c.type, rows, cols, rng);
    const size_t rb = src.size() / static_cast<size_t>(rows);
    const size_t stride = r16_group_stride(c.layout, cols);
    Aligned packed(stride * 3);
    repack_r16(c.layout, src.data(), rb, rows, cols, packed.get());
    Aligned scratch(panel_scratch_bytes(cols));
    std::vector<float> wrow(static_cast<size_t>(cols));
    for (int64_t n_tok : toks) {
      const Quantized q = quantize(n_tok, cols, rng);
      for (auto [row0, num_rows] : {std::pair<int64_t, int64_t>{0, rows}, {3, 38}, {17, 9}}) {
        const auto ya = run(amx, packed.get(), stride, row0, num_rows, q.act, scratch.get());
        const auto yv = run(avx512, packed.get(), stride, row0, num_rows, q.act, scratch.get());
        const auto yd = run(amx_dispatch, packed.get(), stride, row0, num_rows, q.act, scratch.get());
        const auto ys = run(scalar, packed.get(), stride, row0, num_rows, q.act, nullptr);
        ASSERT_EQ(0, std::memcmp(ya.data(), yv.data(), ya.size() * 4))
            << "amx != avx512: cols " << cols << " n_tok " << n_tok << " row0 " << row0;
        ASSERT_EQ(0, std::memcmp(yd.data(), yv.data(), yd.size() * 4)) << "dispatching table, n_tok " << n_tok;
        for (int64_t i = 0; i < num_rows; ++i) {
          dequantize_row(c.type, src.data() + static_cast<size_t>(row0 + i) * rb, wrow.data(), cols);
          for (int64_t t = 0; t < n_tok; ++t) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < cols; ++k) {
              const double p = double(wrow[k]) * q.d8[t * (cols / 32) + k / 32] * q.q8[t * cols + k];
              ref += p;
              mag += std::fabs(p);
            }
            const float got = ya[t * num_rows + i];
            const double tol = 1e-5 * mag + 1e-30;
            ASSERT_NEAR(got, ref, tol) << "cols " << cols << " n_tok " << n_tok << " row " << row0 + i << " tok " << t;
            ASSERT_NEAR(got, ys[t * num_rows + i], tol) << "vs scalar: row " << row0 + i << " tok " << t;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

INSTANTIATE_TEST_SUITE_P(Layouts, AmxTiles,
                         ::testing::Values(Case{DType::kQ8_0, Layout::kQ8_0_R16}, Case{DType::kQ4_0, Layout::kQ4_0_R16}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(type_name(static_cast<uint32_t>(info.param.type)));
                         });

// Where the host has AMX, the tier is available (opt-in: never the default, it measured no
// faster), requested without a warning, and named at start-up; elsewhere a request for it says
// why it is unavailable.
TEST(AmxTier, AvailableWhereTheHostHasIt) {
  const std::string why = amx_skip_reason();
  auto r = resolve_isa("amx");
  ASSERT_TRUE(r.ok());
  if (!why.empty()) {
    EXPECT_EQ(amx_kernels(), nullptr);
    EXPECT_NE(r->isa, Isa::kAmx);
    EXPECT_NE(r->warning.find("amx"), std::string::npos) << r->warning;
    GTEST_SKIP() << "AMX tier unavailable here (" << why << "); the request clamps: " << r->warning;
  }
  EXPECT_EQ(detected_isa(), Isa::kAvx512);
  EXPECT_EQ(highest_isa(), Isa::kAmx);
  EXPECT_TRUE(isa_available(Isa::kAmx));
  EXPECT_NE(isa_summary().find("amx (opt-in"), std::string::npos) << isa_summary();
  EXPECT_EQ(r->isa, Isa::kAmx);
  EXPECT_TRUE(r->warning.empty()) << r->warning;
  const Isa saved = active_isa();
  set_isa(Isa::kAmx);
  EXPECT_EQ(isa_summary().rfind("kernels: amx (", 0), 0u) << isa_summary();
  set_isa(saved);
}

}  // namespace
}  // namespace ts::tensor::kern
