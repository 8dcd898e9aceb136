// fused_matmuls / fused_gate_up: bit-identical to one Matrix::matmul per part (and the
// element-wise SwiGLU / GeGLU after gate/up) on every ISA tier of this host, for 1-17 tokens
// (the fused single-job path below kMaxFusedTokens and the per-matmul path above it), row
// counts that are not multiples of the 16-row interleave, and mixed weight types.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "model/fused_matmul.h"
#include "model/ops.h"
#include "tensor/dtype.h"
#include "tensor/matrix.h"

namespace ts::model {
namespace {

using tensor::DType;
using tensor::Isa;
using tensor::Matrix;

std::vector<float> randv(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// A rows x cols matrix of `type` from random values; `bytes` keeps the GGUF-layout source alive.
Matrix make(DType type, int64_t rows, int64_t cols, uint32_t seed, std::vector<uint8_t>& bytes) {
  const auto tr = tensor::type_traits(static_cast<uint32_t>(type));
  const size_t rb = tensor::row_bytes(*tr, cols);
  bytes.assign(rb * static_cast<size_t>(rows), 0);
  const std::vector<float> w = randv(static_cast<size_t>(rows * cols), seed);
  for (int64_t r = 0; r < rows; ++r) tensor::quantize_row(type, w.data() + r * cols, bytes.data() + r * rb, cols);
  auto m = Matrix::create(type, bytes.data(), rows, cols);
  EXPECT_TRUE(m.ok());
  return std::move(m).value();
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class IsaScope {
 public:
  explicit IsaScope(Isa isa) { tensor::set_isa(isa); }
  ~IsaScope() { tensor::set_isa(saved_); }

 private:
  Isa saved_ = tensor::active_isa();
};

std::vector<Isa> tiers() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(Isa::kAmx); ++i) {
    if (tensor::isa_available(static_cast<Isa>(i))) v.push_back(static_cast<Isa>(i));
  }
  return v;
}

TEST(FusedMatmul, PartsMatchSeparateMatmulsOnEveryTier) {
  ThreadPool pool(2);
  const int64_t cols = 256;
  for (Isa isa : tiers()) {
    IsaScope scope(isa);  // before create: layouts are chosen per tier
    std::vector<uint8_t> b0, b1, b2;
    // Q-like 200 rows (not a multiple of 16), K/V-like 72 and 40, one of them another type.
    const Matrix q = make(DType::kQ8_0, 200, cols, 1, b0);
    const Matrix k = make(DType::kQ8_0, 72, cols, 2, b1);
    const Matrix v = make(DType::kQ4_0, 40, cols, 3, b2);
    for (int64_t T : {1, 2, 3, 8, 15, 16, 17}) {
      const std::vector<float> x = randv(static_cast<size_t>(T * cols), 10 + static_cast<uint32_t>(T));
      std::vector<float> wq(T * 200), wk(T * 72), wv(T * 40);
      q.matmul(x.data(), T, wq.data(), &pool);
      k.matmul(x.data(), T, wk.data(), &pool);
      v.matmul(x.data(), T, wv.data(), &pool);
      std::vector<float> gq(T * 200, -1.f), gk(T * 72, -1.f), gv(T * 40, -1.f);
      tensor::PreparedActivations prep;
      prep.reset(x.data(), T, cols);
      const MatmulPart parts[] = {{&q, gq.data()}, {&k, gk.data()}, {&v, gv.data()}};
      fused_matmuls(parts, prep, &pool);
      EXPECT_TRUE(same(gq, wq)) << tensor::isa_name(isa) << " T " << T << " q";
      EXPECT_TRUE(same(gk, wk)) << tensor::isa_name(isa) << " T " << T << " k";
      EXPECT_TRUE(same(gv, wv)) << tensor::isa_name(isa) << " T " << T << " v";
      // Without a pool too.
      std::fill(gq.begin(), gq.end(), -1.f);
      prep.reset(x.data(), T, cols);
      fused_matmuls(std::span<const MatmulPart>(parts, 1), prep, nullptr);
      EXPECT_TRUE(same(gq, wq)) << tensor::isa_name(isa) << " T " << T << " q, no pool";
    }
  }
}

TEST(FusedMatmul, GateUpMatchesMatmulsThenActivation) {
  ThreadPool pool(2);
  const int64_t cols = 256, F = 328;  // F not a multiple of 16
  for (Isa isa : tiers()) {
    IsaScope scope(isa);
    std::vector<uint8_t> b0, b1;
    const Matrix gate = make(DType::kQ8_0, F, cols, 4, b0);
    const Matrix up = make(DType::kQ8_0, F, cols, 5, b1);
    for (bool silu : {true, false}) {
      for (int64_t T : {1, 4, 8, 17}) {
        const std::vector<float> x = randv(static_cast<size_t>(T * cols), 20 + static_cast<uint32_t>(T));
        std::vector<float> wa(T * F), wb(T * F);
        gate.matmul(x.data(), T, wa.data(), &pool);
        up.matmul(x.data(), T, wb.data(), &pool);
        if (silu) {
          swiglu(wa.data(), wb.data(), T * F);
        } else {
          geglu_ggml(wa.data(), wb.data(), T * F);
        }
        std::vector<float> ga(T * F, -1.f), gb(T * F, -1.f);
        tensor::PreparedActivations prep;
        prep.reset(x.data(), T, cols);
        fused_gate_up(gate, up, prep, silu, ga.data(), gb.data(), &pool);
        EXPECT_TRUE(same(ga, wa)) << tensor::isa_name(isa) << " T " << T << (silu ? " silu" : " gelu");
      }
    }
  }
}

}  // namespace
}  // namespace ts::model
