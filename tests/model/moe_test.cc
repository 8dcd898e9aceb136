// MoE routing and the batched per-expert FFN against a scalar reference written independently
// (double precision, full sort, one token at a time), plus batch invariance of a whole MoE model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "model/model.h"
#include "model/moe.h"
#include "model_test_util.h"
#include "test_util.h"
#include "tiny_gguf.h"

namespace ts::model {
namespace {

// Reference routing: softmax in double, experts sorted by (prob desc, id asc), top-k.
void ref_route(const std::vector<float>& logits, int n_expert, int k, bool norm, std::vector<int>& ids,
               std::vector<double>& w) {
  std::vector<double> p(n_expert);
  double m = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (int e = 0; e < n_expert; ++e) sum += (p[e] = std::exp(logits[e] - m));
  for (double& x : p) x /= sum;
  std::vector<int> order(n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  ids.assign(order.begin(), order.begin() + k);
  w.clear();
  double ws = 0;
  for (int id : ids) ws += p[id];
  for (int id : ids) w.push_back(norm ? p[id] / ws : p[id]);
}

TEST(MoeRouting, KnownLogits) {
  const float logits[] = {0.f, 1.f, 3.f, 2.f};
  int32_t ids[2];
  float w[2];
  route_top_k(logits, 1, 4, 2, true, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
  route_top_k(logits, 1, 4, 2, false, ids, w);
  const double z = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);  // raw softmax probabilities when not renormalized
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-6);
  // Ties go to the lower expert id.
  const float tie[] = {1.f, 5.f, 5.f, 5.f};
  route_top_k(tie, 1, 4, 2, true, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(w[0], 0.5, 1e-6);
}

TEST(MoeRouting, MatchesReferenceOnRandomLogits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.f, 2.f);
  const int n_expert = 128, k = 8, T = 50;
  std::vector<float> logits(T * n_expert);
  for (auto& x : logits) x = d(rng);
  std::vector<int32_t> ids(T * k);
  std::vector<float> w(T * k);
  route_top_k(logits.data(), T, n_expert, k, true, ids.data(), w.data());
  for (int t = 0; t < T; ++t) {
    std::vector<int> rid;
    std::vector<double> rw;
    ref_route(std::vector<float>(logits.begin() + t * n_expert, logits.begin() + (t + 1) * n_expert), n_expert, k,
              true, rid, rw);
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(ids[t * k + j], rid[j]) << "token " << t << " slot " << j;
      EXPECT_NEAR(w[t * k + j], rw[j], 1e-6);
    }
  }
}

TEST(MoeFfn, BatchedPerExpertPassMatchesScalarReference) {
  const int E = 32, F = 16, X = 8, K = 2, T = 9;
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.f, 0.5f);
  auto rnd = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  };
  const auto router = rnd(X * E), gate = rnd(size_t{X} * F * E), up = rnd(size_t{X} * F * E),
             down = rnd(size_t{X} * E * F), x = rnd(T * E);
  MoeWeights w;
  w.router = tensor::Matrix::create(tensor::DType::kF32, router.data(), X, E).value();
  for (int e = 0; e < X; ++e) {
    w.gate.push_back(tensor::Matrix::create(tensor::DType::kF32, gate.data() + e * F * E, F, E).value());
    w.up.push_back(tensor::Matrix::create(tensor::DType::kF32, up.data() + e * F * E, F, E).value());
    w.down.push_back(tensor::Matrix::create(tensor::DType::kF32, down.data() + e * E * F, E, F).value());
  }
  std::vector<float> out(T * E);
  MoeScratch scratch;
  ThreadPool pool(2);
  moe_ffn(w, {.n_embd = E, .n_ff_exp = F, .n_expert_used = K, .norm_weights = true}, x.data(), T, out.data(),
          scratch, &pool);
  std::set<int> used;
  for (int t = 0; t < T; ++t) {
    const float* xt = x.data() + t * E;
    std::vector<float> logits(X);
    for (int e = 0; e < X; ++e) {
      double s = 0;
      for (int c = 0; c < E; ++c) s += double{router[e * E + c]} * xt[c];
      logits[e] = static_cast<float>(s);
    }
    std::vector<int> ids;
    std::vector<double> wts;
    ref_route(logits, X, K, true, ids, wts);
    std::vector<double> ref(E, 0.0);
    for (int j = 0; j < K; ++j) {
      const int e = ids[j];
      used.insert(e);
      std::vector<double> h(F);
      for (int f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (int c = 0; c < E; ++c) {
          g += double{gate[(static_cast<size_t>(e) * F + f) * E + c]} * xt[c];
          u += double{up[(static_cast<size_t>(e) * F + f) * E + c]} * xt[c];
        }
        h[f] = g / (1 + std::exp(-g)) * u;
      }
      for (int c = 0; c < E; ++c) {
        double s = 0;
        for (int f = 0; f < F; ++f) s += double{down[(static_cast<size_t>(e) * E + c) * F + f]} * h[f];
        ref[c] += wts[j] * s;
      }
    }
    for (int c = 0; c < E; ++c) EXPECT_NEAR(out[t * E + c], ref[c], 1e-4 * (1 + std::fabs(ref[c]))) << t << "," << c;
  }
  EXPECT_GE(used.size(), 4u) << "the test should route tokens to several experts";
}

// One batch of two sequences (so experts see tokens from both) gives the same logits as each
// sequence alone.
TEST(MoeModel, BatchCompositionDoesNotChangeLogits) {
  const std::string path = testing::write_tiny(
      {.arch = "qwen3moe", .head_dim = 16, .experts = 8, .experts_used = 2, .ff_exp = 16},
      ::ts::testing::temp_dir() + "/moe.gguf");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;
  EXPECT_EQ(model.config().n_expert, 8);
  EXPECT_TRUE(model.config().expert_weights_norm);
  const int V = model.config().n_vocab;
  const std::vector<int32_t> a = {1, 40, 41, 42, 43, 44, 45}, b = {1, 90, 91, 92};
  testing::SoloRunner ra(model), rb(model);
  auto la = ra.feed(a, 0, static_cast<int32_t>(a.size()), nullptr);
  auto lb = rb.feed(b, 0, static_cast<int32_t>(b.size()), nullptr);

  auto kv = KvStorage::create(model.config(), KvType::kF32, 16, 4).value();
  const std::vector<int32_t> ta = {0, 1}, tb = {2, 3};
  std::vector<int32_t> tokens = a;
  tokens.insert(tokens.end(), b.begin(), b.end());
  const SeqSlice seqs[] = {{.num_tokens = 7, .start_pos = 0, .block_table = ta, .num_logits = 7},
                           {.num_tokens = 4, .start_pos = 0, .block_table = tb, .num_logits = 4}};
  std::vector<float> both(11 * V);
  ThreadPool pool(2);
  ASSERT_TRUE(model.forward({.tokens = tokens, .seqs = seqs}, kv, both.data(), &pool).ok());
  for (int i = 0; i < 7 * V; ++i) ASSERT_NEAR(both[i], la[i], 1e-4) << i;
  for (int i = 0; i < 4 * V; ++i) ASSERT_NEAR(both[7 * V + i], lb[i], 1e-4) << i;
}

}  // namespace
}  // namespace ts::model
