// Every weight type, in every layout Matrix::create can choose (plain GGUF rows, and the R16
// repacks under AVX2 and AVX-512), on every ISA this CPU can run (forced with set_isa), against an
// independent reference: weights from dequantize_row (ggml's float formulas), activations
// rounded/quantized as matrix.h documents, sums in double. The SIMD results are also compared
// with the scalar reference kernels. Weights are random bytes (every bit pattern of the packed
// values and scales) with random fp16 block scales; shapes have rows that are not a multiple of
// 16, 1..17 tokens and several blocks per row. At the end the ISA paths covered are printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tensor/fp16.h"
#include "tensor/matrix.h"
#include "tensor/quants.h"
#include "tensor/repack.h"

namespace ts::tensor {
namespace {

std::set<Isa>& covered() {
  static std::set<Isa> s;
  return s;
}

class CoverageReport : public ::testing::Environment {
 public:
  void TearDown() override {
    if (covered().empty()) return;  // no kernel test ran in this process (a filtered run)
    std::string line = "tensor kernels: ISA paths covered:";
    for (Isa i : covered()) line += std::string(" ") + isa_name(i);
    line += " (this CPU's default: " + std::string(isa_name(detected_isa())) + ", highest: " +
            isa_name(highest_isa()) + ")";
    std::printf("%s\n", line.c_str());
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new CoverageReport);

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_isa(saved); }
};

std::vector<Isa> host_isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(highest_isa()); ++i)
    if (isa_available(static_cast<Isa>(i))) v.push_back(static_cast<Isa>(i));
  return v;
}

// Byte offsets of the fp16 scale fields of one block (set to sane random values; every other
// byte stays random).
std::vector<int> fp16_fields(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS: return {0};
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108};
    case DType::kQ6_K: return {208};
    default: return {};
  }
}

std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const TypeTraits tr = *type_traits(static_cast<uint32_t>(t));
  const size_t rb = row_bytes(tr, cols);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  if (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) {
    for (size_t i = 0; i < static_cast<size_t>(rows * cols); ++i) {
      const float f = normal(rng);
      if (t == DType::kF32) {
        std::memcpy(w.data() + 4 * i, &f, 4);
      } else {
        const uint16_t h = t == DType::kF16 ? fp32_to_fp16(f) : fp32_to_bf16(f);
        std::memcpy(w.data() + 2 * i, &h, 2);
      }
    }
    return w;
  }
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  const auto fields = fp16_fields(t);
  for (size_t blk = 0; blk < w.size() / tr.type_size; ++blk) {
    for (int off : fields) {
      const float v = scale(rng) * ((rng() & 1) ? 1.0f : -1.0f);
      const uint16_t h = fp32_to_fp16(v);
      std::memcpy(w.data() + blk * tr.type_size + off, &h, 2);
    }
  }
  return w;
}

enum class ActKind { kF32, kF16, kBF16, kQ8_0, kQ8_1, kQ8_K };
ActKind act_kind(DType t) {
  switch (t) {
    case DType::kF32: return ActKind::kF32;
    case DType::kF16: return ActKind::kF16;
    case DType::kBF16: return ActKind::kBF16;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kIQ4_NL: return ActKind::kQ8_0;
    case DType::kQ4_1:
    case DType::kQ5_1: return ActKind::kQ8_1;
    default: return ActKind::kQ8_K;
  }
}

// y_ref[t][r] in double and the sum of |products| (the tolerance scale).
void reference(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const std::vector<float>& x,
               int64_t n_tok, std::vector<double>* y, std::vector<double>* mag) {
  const TypeTraits tr = *type_traits(static_cast<uint32_t>(t));
  const size_t rb = row_bytes(tr, cols);
  const int64_t nb = cols / 32;
  std::vector<float> xr(static_cast<size_t>(n_tok * cols));
  std::vector<float> s1(static_cast<size_t>(n_tok * (nb > 0 ? nb : 1)));
  for (int64_t tok = 0; tok < n_tok; ++tok) {
    const float* xt = x.data() + tok * cols;
    float* out = xr.data() + tok * cols;
    switch (act_kind(t)) {
      case ActKind::kF32: std::memcpy(out, xt, static_cast<size_t>(cols) * 4); break;
      case ActKind::kF16:
        for (int64_t k = 0; k < cols; ++k) out[k] = round_fp16(xt[k]);
        break;
      case ActKind::kBF16:
        for (int64_t k = 0; k < cols; ++k) out[k] = bf16_to_fp32(fp32_to_bf16(xt[k]));
        break;
      case ActKind::kQ8_0:
      case ActKind::kQ8_1: {
        std::vector<int8_t> q(static_cast<size_t>(cols));
        std::vector<float> d(static_cast<size_t>(nb));
        std::vector<int32_t> s(static_cast<size_t>(nb));
        quantize_act_q8_0(xt, cols, q.data(), d.data(), s.data());
        quantize_act_q8_1_sums(xt, cols, s.data(), s1.data() + tok * nb);
        for (int64_t k = 0; k < cols; ++k) out[k] = float(q[k]) * d[k / 32];
        break;
      }
      case ActKind::kQ8_K: {
        std::vector<BlockQ8_K> q(static_cast<size_t>(cols / 256));
        quantize_act_q8_k(xt, cols, q.data());
        for (int64_t k = 0; k < cols; ++k) out[k] = float(q[k / 256].qs[k % 256]) * q[k / 256].d;
        break;
      }
    }
  }
  y->assign(static_cast<size_t>(n_tok * rows), 0.0);
  mag->assign(static_cast<size_t>(n_tok * rows), 0.0);
  std::vector<float> wr(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w.data() + rb * static_cast<size_t>(r);
    dequantize_row(t, row, wr.data(), cols);
    for (int64_t tok = 0; tok < n_tok; ++tok) {
      double s = 0, m = 0;
      const float* xt = xr.data() + tok * cols;
      for (int64_t k = 0; k < cols; ++k) {
        double wk = wr[k];
        if (act_kind(t) == ActKind::kQ8_1) {
          // ggml's q4_1/q5_1 x q8_1 dot: d*q against the Q8_1 values, m against the block sum s.
          uint16_t mh;
          std::memcpy(&mh, row + (k / 32) * tr.type_size + 2, 2);
          wk -= fp16_to_fp32(mh);
          if (k % 32 == 0) {
            const double ms = double(fp16_to_fp32(mh)) * s1[static_cast<size_t>(tok * nb + k / 32)];
            s += ms;
            m += std::fabs(ms);
          }
        }
        s += wk * xt[k];
        m += std::fabs(wk * xt[k]);
      }
      (*y)[static_cast<size_t>(tok * rows + r)] = s;
      (*mag)[static_cast<size_t>(tok * rows + r)] = m;
    }
  }
}

std::vector<float> activations(int64_t n_tok, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_tok * cols));
  for (float& v : x) v = normal(rng);
  for (size_t i = 0; i < x.size(); i += 11) x[i] = float(int(x[i] * 8)) * 0.25f + 0.125f;  // ties
  for (int64_t k = 32; k < 64 && k < cols; ++k) x[static_cast<size_t>(k)] = 0.0f;  // a zero block in token 0
  return x;
}

// Whether a type's kernel on `isa` (its R16 layout if `repacked`, else the plain one) gives the
// scalar reference's bits: ggml's x86 8-lane float order (Q4_1, Q5_0, Q5_1: kernels_scalar.cc
// hsum8) or llama.cpp's repacked x86 order for Q4_0 and IQ4_NL (each block exactly, one FMA)
// everywhere; Q5_0 in the opt-in block order (Q50Order::kBlock) everywhere but in the plain AVX2
// tier's Q5_0_R16 kernels, which stay in ggml's order (within the summation tolerance).
bool scalar_bits(DType t, Isa isa, bool repacked) {
  if (t == DType::kQ5_0 && q5_0_order() == Q50Order::kBlock) return isa != Isa::kAvx2 || !repacked;
  return t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kIQ4_NL || t == DType::kQ4_0;
}

struct Case {
  DType type;
  int64_t cols;
};

std::vector<Case> all_cases() {
  return {{DType::kF32, 80},     {DType::kF16, 88},     {DType::kBF16, 72},    {DType::kQ8_0, 96},
          {DType::kQ4_0, 96},    {DType::kQ4_1, 96},    {DType::kQ5_0, 96},    {DType::kQ5_1, 96},
          {DType::kIQ4_NL, 160}, {DType::kQ2_K, 768},   {DType::kQ3_K, 768},   {DType::kQ4_K, 768},
          {DType::kQ5_K, 768},   {DType::kQ6_K, 768},   {DType::kIQ4_XS, 768}};
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(type_name(static_cast<uint32_t>(info.param.type)));
}

class EveryKernel : public ::testing::TestWithParam<Case> {};

// Rows [row_begin, row_end) of every token: each ISA and layout against the reference and the
// scalar kernels, for 1..17 and 35 tokens.
void check_every_kernel(const Case& c) {
  const int64_t rows = 37;  // two full 16-row groups and a partial one
  const auto w = random_weights(c.type, rows, c.cols, 1234u + static_cast<uint32_t>(c.type));
  IsaGuard guard;
  ThreadPool pool(2);
  // Every batch size 1..17 (the kernels split token tiles of 1-8 and passes of 1-4 differently by
  // size), 16+ also reaching the AMX tiles and the AVX2 int16 panels, and 35.
  for (int64_t n_tok : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 35}) {
    const auto x = activations(n_tok, c.cols, static_cast<uint32_t>(n_tok) * 7u + 1u);
    std::vector<double> ref, mag;
    reference(c.type, w, rows, c.cols, x, n_tok, &ref, &mag);
    std::vector<float> scalar_y;
    for (Isa isa : host_isas()) {
      set_isa(isa);
      covered().insert(isa);
      for (bool repack : {false, true}) {
        auto m = Matrix::create(c.type, w.data(), rows, c.cols, MatrixOptions{.allow_repack = repack});
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        if (repack && !m->repacked()) continue;  // no repacked layout for this type / ISA
        const std::string what = std::string(type_name(static_cast<uint32_t>(c.type))) + " " + isa_name(isa) +
                                 (m->repacked() ? " r16" : " plain") + " n_tok " + std::to_string(n_tok);
        std::vector<float> y(static_cast<size_t>(n_tok * rows), std::nanf(""));
        m->matmul(x.data(), n_tok, y.data(), (n_tok % 2) ? &pool : nullptr);
        for (size_t i = 0; i < y.size(); ++i) {
          const double tol = 2e-5 * mag[i] + 1e-6;
          ASSERT_NEAR(y[i], ref[i], tol) << what << " row " << i % rows << " tok " << i / rows;
        }
        if (isa == Isa::kScalar && !repack) {
          scalar_y = y;
        } else if (scalar_bits(c.type, isa, m->repacked())) {
          // Same float operations in the same order as the scalar reference (and ggml).
          ASSERT_EQ(0, std::memcmp(y.data(), scalar_y.data(), y.size() * 4)) << what << ": not bit-identical to scalar";
        } else {
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], scalar_y[i], 1e-5 * mag[i] + 1e-6) << what << " vs scalar, i " << i;
          }
        }
        if (::testing::Test::HasFatalFailure()) return;
        // A row range that starts inside a 16-row group and ends inside another.
        const int64_t rb = 5, re = rows - 3;
        std::vector<float> ys(static_cast<size_t>(n_tok * (re - rb)), std::nanf(""));
        m->matmul_rows(x.data(), n_tok, ys.data(), rb, re, &pool);
        for (int64_t tok = 0; tok < n_tok; ++tok) {
          for (int64_t r = rb; r < re; ++r) {
            const size_t i = static_cast<size_t>(tok * rows + r);
            ASSERT_NEAR(ys[static_cast<size_t>(tok * (re - rb) + (r - rb))], ref[i], 2e-5 * mag[i] + 1e-6)
                << what << " rows [" << rb << ", " << re << ") r " << r;
          }
        }
      }
    }
  }
}

TEST_P(EveryKernel, MatchesReferenceOnEveryIsaAndLayout) { check_every_kernel(GetParam()); }

// Q5_0 in the opt-in block order (Q50Order::kBlock): the same checks (the AVX-VNNI tiles and,
// from 8 tokens, chunk panels), plus the large batches the AVX-512 pair passes take (Act::q8_il
// from 16 tokens), with odd column counts; and the mode
// changes the scalar reference's bits (the block sums are not ggml's 8 lanes), so a kernel that
// ignored it would fail the bit-for-bit checks.
TEST(Q5_0BlockOrder, EveryKernelFollowsIt) {
  struct OrderGuard {
    Q50Order saved = q5_0_order();
    ~OrderGuard() { set_q5_0_order(saved); }
  } order_guard;
  for (int64_t cols : {96, 320, 1120}) {
    set_q5_0_order(Q50Order::kBlock);
    check_every_kernel({DType::kQ5_0, cols});
    if (HasFatalFailure()) return;
  }
  IsaGuard guard;
  ThreadPool pool(2);
  const int64_t rows = 37, cols = 1120;
  const auto w = random_weights(DType::kQ5_0, rows, cols, 515u);
  for (int64_t n_tok : {16, 40, 130}) {
    const auto x = activations(n_tok, cols, static_cast<uint32_t>(n_tok) + 5u);
    std::vector<double> ref, mag;
    reference(DType::kQ5_0, w, rows, cols, x, n_tok, &ref, &mag);
    set_isa(Isa::kScalar);
    auto ms = Matrix::create(DType::kQ5_0, w.data(), rows, cols);
    ASSERT_TRUE(ms.ok());
    std::vector<float> want(static_cast<size_t>(n_tok * rows)), ggml(want.size());
    set_q5_0_order(Q50Order::kGgml);
    ms->matmul(x.data(), n_tok, ggml.data(), nullptr);
    set_q5_0_order(Q50Order::kBlock);
    ms->matmul(x.data(), n_tok, want.data(), nullptr);
    ASSERT_NE(0, std::memcmp(want.data(), ggml.data(), want.size() * 4)) << "the orders gave the same bits";
    for (Isa isa : host_isas()) {
      set_isa(isa);
      auto m = Matrix::create(DType::kQ5_0, w.data(), rows, cols);
      ASSERT_TRUE(m.ok());
      std::vector<float> y(want.size(), std::nanf(""));
      m->matmul(x.data(), n_tok, y.data(), &pool);
      const std::string what = std::string(isa_name(isa)) + " n_tok " + std::to_string(n_tok);
      if (scalar_bits(DType::kQ5_0, isa, m->repacked())) {
        ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << what << ": not the scalar block order's bits";
      } else {
        for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5 * mag[i] + 1e-6) << what << " i " << i;
      }
    }
  }
}

// Matrix::dequantize_row (embedding lookups; decoded from the repacked layout when there is
// one) equals dequantize_row of the GGUF bytes, bit for bit, on every ISA.
TEST_P(EveryKernel, DequantizeRowSurvivesRepacking) {
  const Case c = GetParam();
  const int64_t rows = 21;
  const auto w = random_weights(c.type, rows, c.cols, 99u + static_cast<uint32_t>(c.type));
  const size_t rb = row_bytes(*type_traits(static_cast<uint32_t>(c.type)), c.cols);
  IsaGuard guard;
  std::vector<float> a(static_cast<size_t>(c.cols)), b(static_cast<size_t>(c.cols));
  for (Isa isa : host_isas()) {
    set_isa(isa);
    auto m = Matrix::create(c.type, w.data(), rows, c.cols);
    ASSERT_TRUE(m.ok());
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(c.type, w.data() + rb * static_cast<size_t>(r), a.data(), c.cols);
      m->dequantize_row(r, b.data());
      for (float v : a) ASSERT_TRUE(std::isfinite(v));
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << isa_name(isa) << " row " << r;
    }
  }
}

// The scalar reference kernels of the R16 layouts (they run when the ISA is lowered after a
// matrix was repacked) against the SIMD ones of every tier that repacks: bit for bit for the
// ggml-ordered types and the column-interleaved float layouts (one FMA chain per output),
// within the summation-order tolerance for the others.
TEST_P(EveryKernel, ScalarR16KernelsMatchTheSimdOnes) {
  const Case c = GetParam();
  const int64_t rows = 37;
  const auto w = random_weights(c.type, rows, c.cols, 77u + static_cast<uint32_t>(c.type));
  IsaGuard guard;
  for (Isa isa : host_isas()) {
    if (isa == Isa::kScalar) continue;
    set_isa(isa);
    auto m = Matrix::create(c.type, w.data(), rows, c.cols);
    ASSERT_TRUE(m.ok());
    if (!m->repacked()) return;  // no R16 layout for this type
    for (int64_t n_tok : {1, 5, 17}) {
      const auto x = activations(n_tok, c.cols, static_cast<uint32_t>(n_tok) + 3u);
      std::vector<double> ref, mag;
      reference(c.type, w, rows, c.cols, x, n_tok, &ref, &mag);
      std::vector<float> simd(static_cast<size_t>(n_tok * rows)), scalar(simd.size());
      set_isa(isa);
      m->matmul(x.data(), n_tok, simd.data(), nullptr);
      set_isa(Isa::kScalar);  // the layout stays; its scalar kernel runs
      m->matmul(x.data(), n_tok, scalar.data(), nullptr);
      const std::string what = std::string(type_name(static_cast<uint32_t>(c.type))) + " r16 " + isa_name(isa) +
                               " n_tok " + std::to_string(n_tok);
      for (size_t i = 0; i < simd.size(); ++i) {
        ASSERT_NEAR(scalar[i], ref[i], 2e-5 * mag[i] + 1e-6) << what << " scalar vs reference, i " << i;
      }
      if (scalar_bits(c.type, isa, true) || c.type == DType::kF32 || c.type == DType::kF16) {
        // ggml's order, or (F32_R16 / F16_R16) one FMA chain per output.
        ASSERT_EQ(0, std::memcmp(simd.data(), scalar.data(), simd.size() * 4)) << what << ": not bit-identical";
      } else {
        for (size_t i = 0; i < simd.size(); ++i) ASSERT_NEAR(simd[i], scalar[i], 1e-5 * mag[i] + 1e-6) << what << " i " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, EveryKernel, ::testing::ValuesIn(all_cases()), case_name);

// The ggml panel kernels of Q5_0_R16 / Q4_1_R16 / Q5_1_R16 (Act::q8u) start at a batch size per
// tier (kGgmlPanelMinTokens*: 128 for Q5_0 on the plain AVX2 tier, past the batches above; 16
// for Q5_1 on every tier, while Q4_1 reads its records in place at every size; Q5_0 on the
// AVX-VNNI tier runs its Act::x16t panels at every size instead), IQ4_NL_R16's Q4_0-style chunk
// panels from 8 tokens on the ymm tiers and its pair passes from 16 on AVX-512: at 11, 130 and
// 300 tokens, with a row range inside the groups, every tier gives the scalar reference kernel's
// bits.
// Rows of 320 columns run whole; rows of 1120 (35 blocks, past kGgmlPanelWhole) in chunks of
// kGgmlPanelChunk blocks over spans of kGgmlPanelSpan tokens on the ymm tiers.
TEST(GgmlPanels, LargeBatchesMatchScalarBitForBit) {
  IsaGuard guard;
  ThreadPool pool(2);
  static_assert(1120 / 32 > kern::kGgmlPanelWhole && 1120 / 32 % kern::kGgmlPanelChunk != 0);
  for (DType type : {DType::kQ5_0, DType::kIQ4_NL, DType::kQ4_1, DType::kQ5_1})
  for (int64_t cols : {320, 1120}) {
    const int64_t rows = 37;
    const auto w = random_weights(type, rows, cols, 4242u + static_cast<uint32_t>(type));
    for (int64_t n_tok : {11, 130, 300}) {
      const auto x = activations(n_tok, cols, static_cast<uint32_t>(n_tok) + 17u);
      set_isa(Isa::kScalar);
      auto ms = Matrix::create(type, w.data(), rows, cols);
      ASSERT_TRUE(ms.ok());
      std::vector<float> want(static_cast<size_t>(n_tok * rows));
      ms->matmul(x.data(), n_tok, want.data(), nullptr);
      std::vector<double> ref, mag;
      reference(type, w, rows, cols, x, n_tok, &ref, &mag);
      for (Isa isa : host_isas()) {
        if (isa == Isa::kScalar) continue;
        set_isa(isa);
        covered().insert(isa);
        auto m = Matrix::create(type, w.data(), rows, cols);
        ASSERT_TRUE(m.ok());
        const std::string what = std::string(type_name(static_cast<uint32_t>(type))) + " " + isa_name(isa) + " cols " +
                                 std::to_string(cols) + " n_tok " + std::to_string(n_tok);
        std::vector<float> y(want.size(), std::nanf(""));
        m->matmul(x.data(), n_tok, y.data(), &pool);
        const int64_t rb = 3, re = 35;
        std::vector<float> ys(static_cast<size_t>(n_tok * (re - rb)), std::nanf(""));
        m->matmul_rows(x.data(), n_tok, ys.data(), rb, re, &pool);
        if (!scalar_bits(type, isa, true)) {  // Q5_0 in the block order on the plain AVX2 tier
          for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5 * mag[i] + 1e-6) << what << " i " << i;
          continue;
        }
        ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << what;
        for (int64_t t = 0; t < n_tok; ++t) {
          ASSERT_EQ(0, std::memcmp(&ys[static_cast<size_t>(t * (re - rb))], &want[static_cast<size_t>(t * rows + rb)],
                                   static_cast<size_t>(re - rb) * 4))
              << what << " rows [3, 35) tok " << t;
        }
      }
    }
  }
}

// Known answers, worked out by hand from the ggml block layouts (guards against a layout
// misreading shared by the dequantizer and the kernels).
// The Q5_K / Q3_K / Q2_K / IQ4_XS R16 records keep every bit of their rows: each row's block,
// read back from a repacked group (scales re-packed from their decoded bytes), is the GGUF
// block byte for byte, padding rows included in a partial last group.
TEST(KQuantR16, RecordsGiveBackEveryBlock) {
  struct Case {
    DType type;
    kern::Layout layout;
    size_t block_bytes;
  };
  const Case cases[] = {{DType::kQ5_K, kern::Layout::kQ5_K_R16, sizeof(BlockQ5_K)},
                        {DType::kQ3_K, kern::Layout::kQ3_K_R16, sizeof(BlockQ3_K)},
                        {DType::kQ2_K, kern::Layout::kQ2_K_R16, sizeof(BlockQ2_K)},
                        {DType::kIQ4_XS, kern::Layout::kIQ4_XS_R16, sizeof(BlockIQ4_XS)}};
  const int64_t rows = 37, cols = 768, nb = cols / 256;
  for (const Case& c : cases) {
    const auto w = random_weights(c.type, rows, cols, 31u + static_cast<uint32_t>(c.type));
    const size_t rb = w.size() / rows, gs = r16_group_stride(c.layout, cols);
    std::vector<uint8_t> packed(gs * 3 + 64, 0);
    uint8_t* dst = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(packed.data()) + 63) & ~uintptr_t{63});
    repack_r16(c.layout, w.data(), rb, rows, cols, dst);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t blk[sizeof(BlockQ5_K)] = {};
        kquant_r16_block(c.layout, dst + static_cast<size_t>(r / 16) * gs, static_cast<int>(r % 16), b, blk);
        ASSERT_EQ(0, std::memcmp(blk, w.data() + static_cast<size_t>(r) * rb + b * c.block_bytes, c.block_bytes))
            << type_name(static_cast<uint32_t>(c.type)) << " row " << r << " block " << b;
      }
    }
  }
}

TEST(KnownAnswers, Q5_0HighBitsAndQ4_1Min) {
  BlockQ5_0 q5{};
  q5.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) q5.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const uint32_t qh = 0x8000'0001u;  // value 0 and value 31 have the 5th bit
  std::memcpy(q5.qh, &qh, 4);
  float y[32];
  dequantize_row(DType::kQ5_0, &q5, y, 32);
  EXPECT_EQ(y[0], 0.5f * (16 - 16));       // nibble 0 | 16
  EXPECT_EQ(y[1], 0.5f * (1 - 16));        // nibble 1, no high bit
  EXPECT_EQ(y[16], 0.5f * (15 - 16));      // high nibble of qs[0] = 15
  EXPECT_EQ(y[31], 0.5f * ((0 | 16) - 16));  // high nibble of qs[15] = 0, bit 31 set
  BlockQ4_1 q4{};
  q4.d = fp32_to_fp16(2.0f);
  q4.m = fp32_to_fp16(-3.0f);
  q4.qs[3] = 0x52;
  dequantize_row(DType::kQ4_1, &q4, y, 32);
  EXPECT_EQ(y[3], 2.0f * 2 - 3.0f);
  EXPECT_EQ(y[19], 2.0f * 5 - 3.0f);
  EXPECT_EQ(y[0], -3.0f);
}

TEST(KnownAnswers, IQ4Tables) {
  BlockIQ4_NL nl{};
  nl.d = fp32_to_fp16(1.0f);
  nl.qs[0] = 0xF0;  // value 0 -> index 0 (-127), value 16 -> index 15 (113)
  float y[256];
  dequantize_row(DType::kIQ4_NL, &nl, y, 32);
  EXPECT_EQ(y[0], -127.0f);
  EXPECT_EQ(y[16], 113.0f);
  EXPECT_EQ(y[1], -127.0f);
  BlockIQ4_XS xs{};
  xs.d = fp32_to_fp16(1.0f);
  // Sub-block 1: low 4 bits in the high nibble of scales_l[0], high 2 bits at scales_h bits 2..3:
  // ls = 0x5 | (2 << 4) = 37 -> scale 5.
  xs.scales_l[0] = 0x50;
  xs.scales_h = 2 << 2;
  xs.qs[16] = 0x98;  // sub-block 1, values 32 (index 8 -> 1) and 48 (index 9 -> 13)
  dequantize_row(DType::kIQ4_XS, &xs, y, 256);
  EXPECT_EQ(y[32], 5.0f * 1);
  EXPECT_EQ(y[48], 5.0f * 13);
  EXPECT_EQ(y[0], -32.0f * -127);  // sub-block 0: ls 0 -> scale -32
}

TEST(KnownAnswers, Q3KScalesAndHighBits) {
  BlockQ3_K b{};
  b.d = fp32_to_fp16(1.0f);
  // Scale 0: low 4 bits scales[0] & 0xF = 3, high 2 bits scales[8] & 3 = 2 -> 35 - 32 = 3.
  // Scale 9: low 4 bits scales[1] >> 4 = 6, high 2 bits (scales[9] >> 4) & 3 = 1 -> 22 - 32 = -10.
  b.scales[0] = 0x03;
  b.scales[8] = 0x02;
  b.scales[1] = 0x60;
  b.scales[9] = 0x10;
  b.qs[0] = 0x03;        // value 0: low bits 3; value 32 (shift 2): 0
  b.hmask[0] = 0x01;     // value 0 has the 3rd bit (no -4); value 32 (bit 1) does not
  b.qs[32 + 16] = 0x0C;  // value 128 + 16 (sub-block 9, shift 0): low bits 0; value 176 (shift 2): 3
  b.hmask[16] = 0x10;    // value 128 + 16: bit 4 set (no -4)
  float y[256];
  dequantize_row(DType::kQ3_K, &b, y, 256);
  EXPECT_EQ(y[0], 3.0f * 3);
  EXPECT_EQ(y[32], -32.0f * -4);   // sub-block 2: scale 0 - 32; no 3rd bit: 0 - 4
  EXPECT_EQ(y[144], 0.0f);         // 3rd bit set: 0
  EXPECT_EQ(y[145], -10.0f * -4);  // value 128 + 17: no 3rd bit
  EXPECT_EQ(y[176], -32.0f * -1);  // value 128 + 48 (shift 2 of qs[48]): 3 - 4, sub-block 11 scale -32
}

TEST(IsaRequest, ResolvesAndClampsWithAWarning) {
  auto best = resolve_isa("");
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->isa, detected_isa());
  EXPECT_TRUE(best->warning.empty());
  auto s = resolve_isa("SCALAR");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->isa, Isa::kScalar);
  auto amx = resolve_isa("amx");  // opt-in where usable; else clamped, with the reason
  ASSERT_TRUE(amx.ok());
  EXPECT_NE(detected_isa(), Isa::kAmx);  // never the default
  if (isa_available(Isa::kAmx)) {
    EXPECT_EQ(amx->isa, Isa::kAmx);
    EXPECT_TRUE(amx->warning.empty()) << amx->warning;
  } else {
    EXPECT_EQ(amx->isa, detected_isa());
    EXPECT_NE(amx->warning.find("amx"), std::string::npos);
    EXPECT_NE(amx->warning.find(std::string("using ") + isa_name(detected_isa())), std::string::npos);
  }
  auto bad = resolve_isa("sse9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sse9"), std::string::npos);
  IsaGuard guard;
  set_isa(Isa::kAmx);
  EXPECT_EQ(active_isa(), isa_available(Isa::kAmx) ? Isa::kAmx : detected_isa());
}

// The avxvnni tier (AVX2 + vpdpbusd on ymm): forced where the CPU has AVX-VNNI, its Q8_0_R16,
// Q4_0_R16 and K-quant R16 kernels give the AVX2 kernels' bits (same integer block sums, same float steps) for 1..17
// tokens and a few larger batches and rows that are not a multiple of 16; elsewhere a request for it falls back to avx2.
TEST(IsaRequest, AvxVnniTierMatchesAvx2BitForBit) {
  IsaGuard guard;
  auto r = resolve_isa("AVXVNNI");
  ASSERT_TRUE(r.ok());
  if (!isa_available(Isa::kAvxVnni)) {
    if (detected_isa() >= Isa::kAvx2) {
      EXPECT_EQ(r->isa, Isa::kAvx2);
      EXPECT_NE(r->warning.find("AVX-VNNI"), std::string::npos);
      set_isa(Isa::kAvxVnni);
      EXPECT_EQ(active_isa(), Isa::kAvx2);
    }
    GTEST_SKIP() << "this CPU has no AVX-VNNI";
  }
  EXPECT_EQ(r->isa, Isa::kAvxVnni);
  EXPECT_TRUE(r->warning.empty());
  const int64_t rows = 45;
  // 96: 3 blocks, an odd block count per pair record. 1600 (50 blocks) and 2080 (65): Q8_0 runs
  // in K-chunks of 32 blocks (gemm_q8_0_r16_il_vnni, kVnniKChunk), the last one partial.
  struct Shape {
    DType type;
    int64_t cols;
  };
  std::vector<Shape> shapes;
  for (int64_t cols : {int64_t{96}, int64_t{1600}, int64_t{2080}})
    for (DType type : {DType::kQ8_0, DType::kQ4_0}) shapes.push_back({type, cols});
  // Q4_K / Q6_K from 8 tokens, Q5_K / Q3_K / Q2_K / IQ4_XS at every size: the K-quant panels with
  // vpdpbusd sums and one vpmulld per sub-block (IQ4_XS: values + 128 against the AVX2 tier's
  // signed values with vpsignb).
  for (int64_t cols : {int64_t{256}, int64_t{1536}})
    for (DType type : {DType::kQ4_K, DType::kQ6_K, DType::kQ5_K, DType::kQ3_K, DType::kQ2_K, DType::kIQ4_XS})
      shapes.push_back({type, cols});
  for (const auto& [type, cols] : shapes) {
    const auto w = random_weights(type, rows, cols, 5u);
    // 16+ tokens: Q8_0 runs the interleaved-activation kernel (gemm_q8_0_r16_il_vnni) against
    // the AVX2 int16 panel kernel; 23, 31, 45 end in partial 8-token tiles of 7, 7 and 5 tokens;
    // 130 spans two token panels at 2080 columns (matrix.cc token_panel).
    for (int64_t n_tok : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 23, 24, 31, 45, 130}) {
      const auto x = activations(n_tok, cols, static_cast<uint32_t>(n_tok) + 11u);
      std::vector<float> y[2];
      const Isa isas[2] = {Isa::kAvx2, Isa::kAvxVnni};
      for (int k = 0; k < 2; ++k) {
        set_isa(isas[k]);
        ASSERT_EQ(active_isa(), isas[k]);
        auto m = Matrix::create(type, w.data(), rows, cols);
        ASSERT_TRUE(m.ok());
        ASSERT_TRUE(m->repacked());
        y[k].resize(static_cast<size_t>(n_tok * rows));
        m->matmul(x.data(), n_tok, y[k].data(), nullptr);
      }
      const std::string what = std::string(type_name(static_cast<uint32_t>(type))) + " cols " + std::to_string(cols) +
                               " n_tok " + std::to_string(n_tok);
      ASSERT_EQ(0, std::memcmp(y[0].data(), y[1].data(), y[0].size() * 4)) << what;
      // And the values are real: the reference agrees within the summation-order tolerance.
      std::vector<double> ref, mag;
      reference(type, w, rows, cols, x, n_tok, &ref, &mag);
      for (size_t i = 0; i < y[1].size(); ++i) ASSERT_NEAR(y[1][i], ref[i], 2e-5 * mag[i] + 1e-6) << what;
    }
  }
}

}  // namespace
}  // namespace ts::tensor
