#include "tensor/matrix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensor/fp16.h"
#include "tensor/quants.h"

namespace ts::tensor {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Weights of `type` built from random floats.
std::vector<uint8_t> make_weights(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  auto tr = *type_traits(static_cast<uint32_t>(type));
  const size_t rb = row_bytes(tr, cols);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  auto f = random_floats(static_cast<size_t>(rows * cols), seed, 0.5f);
  for (int64_t r = 0; r < rows; ++r) quantize_row(type, f.data() + r * cols, w.data() + rb * r, cols);
  return w;
}

// Restores the process-wide ISA after a test changes it.
class IsaGuard {
 public:
  IsaGuard() : saved_(active_isa()) {}
  ~IsaGuard() { set_isa(saved_); }

 private:
  Isa saved_;
};

// Independent reference: weights dequantized to floats, activations rounded/quantized the
// way matrix.h documents and then dequantized, dot products in double.
std::vector<float> reference(DType type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                             const std::vector<float>& x, int64_t n_tok) {
  auto tr = *type_traits(static_cast<uint32_t>(type));
  const size_t rb = row_bytes(tr, cols);
  std::vector<float> xr(x.size());
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* xt = x.data() + t * cols;
    float* out = xr.data() + t * cols;
    switch (type) {
      case DType::kF32: std::copy(xt, xt + cols, out); break;
      case DType::kF16:
        for (int64_t k = 0; k < cols; ++k) out[k] = round_fp16(xt[k]);
        break;
      case DType::kBF16:
        for (int64_t k = 0; k < cols; ++k) out[k] = bf16_to_fp32(fp32_to_bf16(xt[k]));
        break;
      case DType::kQ8_0:
      case DType::kQ4_0: {
        std::vector<int8_t> q(cols);
        std::vector<float> d(cols / 32);
        std::vector<int32_t> s(cols / 32);
        quantize_act_q8_0(xt, cols, q.data(), d.data(), s.data());
        for (int64_t k = 0; k < cols; ++k) out[k] = float(q[k]) * d[k / 32];
        break;
      }
      default: {
        std::vector<BlockQ8_K> q(cols / 256);
        quantize_act_q8_k(xt, cols, q.data());
        for (int64_t k = 0; k < cols; ++k) out[k] = float(q[k / 256].qs[k % 256]) * q[k / 256].d;
        break;
      }
    }
  }
  std::vector<float> y(static_cast<size_t>(rows * n_tok));
  std::vector<float> wr(cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(type, w.data() + rb * r, wr.data(), cols);
    for (int64_t t = 0; t < n_tok; ++t) {
      double s = 0;
      for (int64_t k = 0; k < cols; ++k) s += double(wr[k]) * xr[t * cols + k];
      y[t * rows + r] = float(s);
    }
  }
  return y;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (float v : want) scale = std::max(scale, double(std::fabs(v)));
  const double tol = rel * std::max(scale, 1.0);
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!(std::fabs(double(got[i]) - want[i]) <= tol)) {
      ADD_FAILURE() << what << ": y[" << i << "] = " << got[i] << ", want " << want[i];
      ++bad;
    }
  }
}

struct Shape {
  DType type;
  int64_t rows, cols;
};

std::vector<Shape> shapes() {
  return {
      {DType::kF32, 37, 172},  {DType::kF32, 64, 8},    {DType::kF32, 5, 3},     {DType::kF16, 37, 172},
      {DType::kF16, 33, 61},   {DType::kBF16, 37, 172}, {DType::kBF16, 17, 7},   {DType::kQ8_0, 37, 96},
      {DType::kQ8_0, 50, 288}, {DType::kQ8_0, 16, 64},  {DType::kQ8_0, 3, 32},   {DType::kQ4_0, 37, 96},
      {DType::kQ4_0, 19, 288}, {DType::kQ4_K, 37, 256}, {DType::kQ4_K, 21, 768}, {DType::kQ6_K, 37, 256},
      {DType::kQ6_K, 21, 768},
  };
}

const char* name(DType t) { return type_traits(static_cast<uint32_t>(t))->name.data(); }

TEST(MatrixTest, ScalarMatchesIndependentReference) {
  IsaGuard guard;
  set_isa(Isa::kScalar);
  for (const Shape& s : shapes()) {
    auto w = make_weights(s.type, s.rows, s.cols, 11);
    auto m = Matrix::create(s.type, w.data(), s.rows, s.cols);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m->rows(), s.rows);
    EXPECT_EQ(m->cols(), s.cols);
    EXPECT_EQ(m->type(), s.type);
    EXPECT_EQ(m->weight_bytes(), w.size());
    for (int64_t n_tok : {1, 3, 9}) {
      auto x = random_floats(static_cast<size_t>(n_tok * s.cols), 100 + uint32_t(n_tok));
      std::vector<float> y(static_cast<size_t>(n_tok * s.rows), -1.0f);
      m->matmul(x.data(), n_tok, y.data(), nullptr);
      expect_close(y, reference(s.type, w, s.rows, s.cols, x, n_tok), 2e-5,
                   std::string(name(s.type)) + " " + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                       " n_tok=" + std::to_string(n_tok));
    }
  }
}

TEST(MatrixTest, QuantizedResultIsCloseToExactProduct) {
  // Guards against a consistent error in both the kernel and the reference (e.g. a wrong scale):
  // the relative RMS error against the exact float product must be what the format allows.
  IsaGuard guard;
  set_isa(Isa::kScalar);
  const int64_t rows = 64, cols = 512, n_tok = 4;
  auto f = random_floats(rows * cols, 5, 0.5f);
  auto x = random_floats(n_tok * cols, 6);
  struct Case {
    DType type;
    double max_rel;
  };
  for (Case c : {Case{DType::kF16, 2e-3}, Case{DType::kBF16, 1e-2}, Case{DType::kQ8_0, 2e-2},
                 Case{DType::kQ4_0, 0.15}, Case{DType::kQ4_K, 0.12}, Case{DType::kQ6_K, 0.04}}) {
    auto tr = *type_traits(static_cast<uint32_t>(c.type));
    std::vector<uint8_t> w(row_bytes(tr, cols) * rows);
    for (int64_t r = 0; r < rows; ++r) quantize_row(c.type, f.data() + r * cols, w.data() + row_bytes(tr, cols) * r, cols);
    auto m = Matrix::create(c.type, w.data(), rows, cols);
    ASSERT_TRUE(m.ok());
    std::vector<float> y(rows * n_tok);
    m->matmul(x.data(), n_tok, y.data(), nullptr);
    double err2 = 0, ref2 = 0;
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        double exact = 0;
        for (int64_t k = 0; k < cols; ++k) exact += double(f[r * cols + k]) * x[t * cols + k];
        err2 += (y[t * rows + r] - exact) * (y[t * rows + r] - exact);
        ref2 += exact * exact;
      }
    }
    const double rel = std::sqrt(err2 / ref2);
    EXPECT_LT(rel, c.max_rel) << tr.name;
    EXPECT_GT(rel, 0.0) << tr.name << ": a lossy type cannot be exact";
  }
}

TEST(MatrixTest, EverySimdPathMatchesScalar) {
  IsaGuard guard;
  std::vector<Isa> isas;
  if (detected_isa() >= Isa::kAvx2) isas.push_back(Isa::kAvx2);
  if (detected_isa() >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  if (isa_available(Isa::kAmx)) isas.push_back(Isa::kAmx);
  if (isas.empty()) GTEST_SKIP() << "CPU has no AVX2";
  ThreadPool pool(2);
  for (const Shape& s : shapes()) {
    auto w = make_weights(s.type, s.rows, s.cols, 21);
    // 37 (odd: on the pool) also covers the activation preparation split over threads (n_tok >= 16).
    // 16+ tokens: the AMX tier's tile kernels (64: full tiles, 37: two and a remainder tile).
    for (int64_t n_tok : {1, 2, 3, 4, 5, 6, 7, 8, 9, 64, 37}) {
      auto x = random_floats(static_cast<size_t>(n_tok * s.cols), 200 + uint32_t(n_tok));
      set_isa(Isa::kScalar);
      auto ms = Matrix::create(s.type, w.data(), s.rows, s.cols);
      ASSERT_TRUE(ms.ok());
      std::vector<float> want(static_cast<size_t>(n_tok * s.rows));
      ms->matmul(x.data(), n_tok, want.data(), nullptr);
      for (Isa isa : isas) {
        for (bool repack : {false, true}) {
          set_isa(isa);
          auto m = Matrix::create(s.type, w.data(), s.rows, s.cols, MatrixOptions{.allow_repack = repack});
          ASSERT_TRUE(m.ok());
          // R16 layouts (every type here but BF16, F32 / F16 interleaved by column) serve both
          // SIMD tiers (AVX2 and AVX-512).
          EXPECT_EQ(m->repacked(), repack && isa >= Isa::kAvx2 && s.type != DType::kBF16);
          std::vector<float> got(want.size(), -7.0f);
          m->matmul(x.data(), n_tok, got.data(), n_tok % 2 ? &pool : nullptr);
          expect_close(got, want, 2e-5,
                       std::string(isa_name(isa)) + (m->repacked() ? " r16 " : " ") + name(s.type) + " " +
                           std::to_string(s.rows) + "x" + std::to_string(s.cols) + " n_tok=" + std::to_string(n_tok));
        }
      }
    }
  }
}

TEST(MatrixTest, RepackedMatrixWorksUnderEveryIsa) {
  IsaGuard guard;
  if (detected_isa() < Isa::kAvx2) GTEST_SKIP() << "repacking needs AVX2";
  struct Case {
    DType type;
    int64_t rows, cols;
  };
  // Odd number of Q8_0 blocks and partial last groups.
  for (Case c : {Case{DType::kQ8_0, 45, 160}, Case{DType::kQ4_K, 45, 512}, Case{DType::kQ4_K, 7, 256},
                 Case{DType::kQ6_K, 45, 512}, Case{DType::kQ6_K, 7, 256}, Case{DType::kQ4_0, 45, 160},
                 Case{DType::kQ4_0, 7, 64}}) {
    auto w = make_weights(c.type, c.rows, c.cols, 3);
    const size_t rb = row_bytes(*type_traits(static_cast<uint32_t>(c.type)), c.cols);
    set_isa(detected_isa());
    auto m = Matrix::create(c.type, w.data(), c.rows, c.cols);
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(m->repacked());
    EXPECT_EQ(m->weight_bytes(), w.size());
    std::vector<float> row(c.cols), want_row(c.cols);
    for (int64_t r = 0; r < c.rows; ++r) {
      m->dequantize_row(r, row.data());
      dequantize_row(c.type, w.data() + r * rb, want_row.data(), c.cols);
      ASSERT_EQ(row, want_row) << name(c.type) << " row " << r;
    }
    for (int64_t n_tok : {1, 3, 6, 21}) {
      auto x = random_floats(n_tok * c.cols, 9);
      auto want = reference(c.type, w, c.rows, c.cols, x, n_tok);
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
        set_isa(isa);
        std::vector<float> y(n_tok * c.rows);
        m->matmul(x.data(), n_tok, y.data(), nullptr);
        expect_close(y, want, 2e-5, std::string("r16 ") + name(c.type) + " under " + isa_name(active_isa()));
      }
    }
  }
}

TEST(MatrixTest, MatmulRowsComputesTheSubrange) {
  ThreadPool pool(2);
  for (DType t : {DType::kF32, DType::kQ8_0, DType::kQ4_K}) {
    const int64_t rows = 100, cols = 256;
    auto w = make_weights(t, rows, cols, 4);
    auto m = Matrix::create(t, w.data(), rows, cols);
    ASSERT_TRUE(m.ok());
    const int64_t n_tok = 3;
    auto x = random_floats(n_tok * cols, 8);
    std::vector<float> full(n_tok * rows);
    m->matmul(x.data(), n_tok, full.data(), &pool);
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 100}, {5, 37}, {16, 32}, {99, 100}, {3, 4}, {40, 40}}) {
      const int64_t n = e - b;
      std::vector<float> part(n_tok * n + 1, 123.0f);
      m->matmul_rows(x.data(), n_tok, part.data(), b, e, &pool);
      for (int64_t tk = 0; tk < n_tok; ++tk) {
        for (int64_t r = 0; r < n; ++r) {
          EXPECT_NEAR(part[tk * n + r], full[tk * rows + b + r], 1e-5 * (1 + std::fabs(full[tk * rows + b + r])))
              << name(t) << " rows [" << b << "," << e << ") t=" << tk << " r=" << r;
        }
      }
      EXPECT_EQ(part.back(), 123.0f) << "wrote past the sub-range";
    }
  }
}

TEST(MatrixTest, ThreadedEqualsSingleThreadedOnLargeMatrix) {
  ThreadPool pool(2);
  const int64_t rows = 333, cols = 1024;
  for (DType t : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ6_K}) {
    auto w = make_weights(t, rows, cols, 12);
    auto m = Matrix::create(t, w.data(), rows, cols);
    ASSERT_TRUE(m.ok());
    for (int64_t n_tok : {1, 8, 33}) {  // 33: activation preparation split over the pool too
      auto x = random_floats(n_tok * cols, 13);
      std::vector<float> a(n_tok * rows), b(n_tok * rows);
      m->matmul(x.data(), n_tok, a.data(), nullptr);
      m->matmul(x.data(), n_tok, b.data(), &pool);
      expect_close(b, a, 1e-6, std::string("threads ") + name(t));
    }
  }
}

TEST(MatrixTest, DequantizeRowMatchesRowHelper) {
  for (const Shape& s : shapes()) {
    auto w = make_weights(s.type, s.rows, s.cols, 17);
    auto m = Matrix::create(s.type, w.data(), s.rows, s.cols);
    ASSERT_TRUE(m.ok());
    auto tr = *type_traits(static_cast<uint32_t>(s.type));
    std::vector<float> got(s.cols), want(s.cols);
    for (int64_t r : {int64_t{0}, s.rows / 2, s.rows - 1}) {
      m->dequantize_row(r, got.data());
      dequantize_row(s.type, w.data() + row_bytes(tr, s.cols) * r, want.data(), s.cols);
      EXPECT_EQ(got, want) << name(s.type) << " row " << r;
    }
  }
}

TEST(MatrixTest, CreateRejectsBadShapesAndTypes) {
  std::vector<uint8_t> buf(4096);
  auto a = Matrix::create(DType::kQ8_0, buf.data(), 4, 48);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  auto b = Matrix::create(DType::kQ4_K, buf.data(), 2, 128);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  auto c = Matrix::create(DType::kIQ2_XXS, buf.data(), 2, 256);  // a type without kernels
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  auto d = Matrix::create(DType::kF32, buf.data(), 0, 32);
  EXPECT_FALSE(d.ok());
}

TEST(MatrixTest, IsaSelectionIsClampedToTheCpu) {
  IsaGuard guard;
  set_isa(Isa::kAvx512);
  EXPECT_LE(static_cast<int>(active_isa()), static_cast<int>(detected_isa()));
  set_isa(Isa::kScalar);
  EXPECT_EQ(active_isa(), Isa::kScalar);
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
}

TEST(MatrixTest, F32SmallExactValues) {
  const float w[6] = {1, 2, 3, 4, 5, 6};  // 2 x 3
  auto m = Matrix::create(DType::kF32, w, 2, 3);
  ASSERT_TRUE(m.ok());
  const float x[6] = {1, 0, -1, 0.5f, 0.25f, 2};
  float y[4];
  m->matmul(x, 2, y, nullptr);
  EXPECT_FLOAT_EQ(y[0], 1 - 3);
  EXPECT_FLOAT_EQ(y[1], 4 - 6);
  EXPECT_FLOAT_EQ(y[2], 0.5f + 0.5f + 6);
  EXPECT_FLOAT_EQ(y[3], 2 + 1.25f + 12);
}

}  // namespace
}  // namespace ts::tensor
