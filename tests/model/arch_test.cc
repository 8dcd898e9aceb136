// Per-architecture pieces: every architecture's tiny model gives the same logits whether a
// prompt is prefilled at once or decoded token by token and whatever the batch; sliding-window
// attention against a reference; ggml's fp16-table GELU; refusals of inconsistent files.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/attention.h"
#include "model/model.h"
#include "model/ops.h"
#include "model_test_util.h"
#include "tensor/fp16.h"
#include "test_util.h"
#include "tiny_gguf.h"

namespace ts::model {
namespace {

using testing::TinySpec;

std::string tmp_model(const TinySpec& s) {
  return testing::write_tiny(s, ::ts::testing::temp_dir() + "/" + s.arch + ".gguf");
}

TinySpec spec_for(const std::string& arch) {
  if (arch == "qwen3") return {.arch = arch, .head_dim = 16};  // head_dim != embd / heads (8)
  if (arch == "qwen3moe") return {.arch = arch, .head_dim = 16, .experts = 4, .experts_used = 2, .ff_exp = 16};
  if (arch == "gemma3") return {.arch = arch, .layers = 6, .head_dim = 16, .window = 4};
  return {.arch = arch};
}

class EveryArch : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryArch, PrefillEqualsStepByStepDecode) {
  auto m = Model::load(tmp_model(spec_for(GetParam())));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;
  EXPECT_EQ(model.config().arch, GetParam());
  const int V = model.config().n_vocab;
  const std::vector<int32_t> prompt = {1, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40};  // > 2 windows for gemma3
  testing::SoloRunner all(model, KvType::kF32, 4, 4);
  auto full = all.feed(prompt, 0, static_cast<int32_t>(prompt.size()), nullptr);
  testing::SoloRunner step(model, KvType::kF32, 4, 4);
  ThreadPool pool(2);
  for (size_t i = 0; i < prompt.size(); ++i) {
    auto one = step.feed({prompt[i]}, static_cast<int32_t>(i), 1, &pool);
    for (int v = 0; v < V; ++v) ASSERT_NEAR(one[v], full[i * V + v], 2e-4) << GetParam() << " pos " << i;
  }
  float norm = 0;
  for (float x : full) norm += std::fabs(x);
  EXPECT_TRUE(std::isfinite(norm) && norm > 0);
}

INSTANTIATE_TEST_SUITE_P(Archs, EveryArch,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// LongRoPE: rope_factors_long apply when the context exceeds original_context_length, the short
// ones otherwise. Constant factors f divide every angle, which equals linear scaling by f.
TEST(LongRope, PicksLongOrShortFactorsByContext) {
  const int half = 4;  // phi3 tiny: head_dim 8
  TinySpec s{.arch = "phi3"};
  s.extra_const["rope_factors_long.weight"] = {half, 4.0f};
  s.extra_const["rope_factors_short.weight"] = {half, 1.0f};
  s.meta_override["phi3.rope.scaling.original_context_length"] = gguf::Value::make_u32(64);
  const std::string path = testing::write_tiny(s, ::ts::testing::temp_dir() + "/phi3-longrope.gguf");
  TinySpec lin{.arch = "phi3"};
  lin.meta_override["phi3.rope.scaling.type"] = gguf::Value::make_string("linear");
  lin.meta_override["phi3.rope.scaling.factor"] = gguf::Value::make_f32(4.0f);
  const std::string lin_path = testing::write_tiny(lin, ::ts::testing::temp_dir() + "/phi3-linear.gguf");
  const std::string plain_path = testing::write_tiny(TinySpec{.arch = "phi3"}, ::ts::testing::temp_dir() + "/phi3.gguf");
  const std::vector<int32_t> prompt = {1, 50, 51, 52, 53, 54, 55, 56};
  auto run = [&](const std::string& p, int32_t n_ctx) {
    auto m = Model::load(p, {.n_ctx = n_ctx});
    if (!m.ok()) throw std::runtime_error(m.status().to_string());
    testing::SoloRunner r(**m, KvType::kF32, 4, 4);
    return r.feed(prompt, 0, 1, nullptr);
  };
  auto long_f = run(path, 256), short_f = run(path, 64), linear = run(lin_path, 256), plain = run(plain_path, 256);
  double d_long_lin = 0, d_short_plain = 0, d_long_short = 0;
  for (size_t i = 0; i < long_f.size(); ++i) {
    d_long_lin = std::max(d_long_lin, double{std::fabs(long_f[i] - linear[i])});
    d_short_plain = std::max(d_short_plain, double{std::fabs(short_f[i] - plain[i])});
    d_long_short = std::max(d_long_short, double{std::fabs(long_f[i] - short_f[i])});
  }
  EXPECT_LT(d_long_lin, 1e-4);
  EXPECT_LT(d_short_plain, 1e-6);
  EXPECT_GT(d_long_short, 1e-2);  // the factors matter
  // rope.scaling.attn_factor scales cos/sin (llama.cpp's attn_factor), so it changes the logits.
  TinySpec af = s;
  af.meta_override["phi3.rope.scaling.attn_factor"] = gguf::Value::make_f32(1.19f);
  const std::string af_path = testing::write_tiny(af, ::ts::testing::temp_dir() + "/phi3-af.gguf");
  auto m = Model::load(af_path, {.n_ctx = 256});
  ASSERT_TRUE(m.ok());
  EXPECT_FLOAT_EQ((*m)->config().rope_attn_factor, 1.19f);
  auto with_af = run(af_path, 256);
  double d_af = 0;
  for (size_t i = 0; i < long_f.size(); ++i) d_af = std::max(d_af, double{std::fabs(with_af[i] - long_f[i])});
  EXPECT_GT(d_af, 1e-3);
}

TEST(SlidingWindow, LayerPatternAndWindowMask) {
  auto m = Model::load(tmp_model(spec_for("gemma3")));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.sliding_window, 4);
  for (int l = 0; l < 5; ++l) EXPECT_TRUE(c.layer_is_swa(l)) << l;
  EXPECT_FALSE(c.layer_is_swa(5));  // every 6th layer is global
  EXPECT_EQ(c.attn_first_pos(0, 10), 7);
  EXPECT_EQ(c.attn_first_pos(5, 10), 0);
  EXPECT_EQ(c.num_swa_layers(), 5);
  // Window-only storage (16-token blocks): the global layer holds ceil(100 / 16) = 7 blocks, each
  // of the 5 sliding-window layers the 2 blocks its 4-token window can span.
  EXPECT_EQ(window_only_kv_bytes(c, KvType::kF32, 100), kv_bytes_per_token(c, KvType::kF32) / 6 * 16 * (7 + 5 * 2));
}

// paged_attention with a window against a direct computation over the last `window` positions.
TEST(SlidingWindow, AttentionMatchesReference) {
  ModelConfig cfg;
  cfg.n_layer = 1;
  cfg.n_head = 2;
  cfg.n_head_kv = 1;
  cfg.head_dim = 8;
  const int bs = 4, n = 11, W = 5, HD = 8;
  auto kv = KvStorage::create(cfg, KvType::kF32, bs, 3).value();
  const std::vector<int32_t> table = {2, 0, 1};
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> k(n * HD), v(n * HD), q(n * 2 * HD);
  for (auto* vec : {&k, &v, &q})
    for (auto& x : *vec) x = d(rng);
  const SeqSlice s{.num_tokens = n, .start_pos = 0, .block_table = table, .num_logits = 1};
  write_kv(kv, 0, std::span<const SeqSlice>(&s, 1), k.data(), v.data());
  std::vector<float> out(n * 2 * HD);
  AttentionScratch scratch;
  const float scale = 0.3f;
  paged_attention(kv, 0, {.n_head = 2, .n_head_kv = 1, .head_dim = HD, .scale = scale, .window = W},
                  std::span<const SeqSlice>(&s, 1), q.data(), out.data(), scratch, nullptr);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < 2; ++h) {
      const float* qt = q.data() + (t * 2 + h) * HD;
      const int lo = std::max(0, t - W + 1);
      std::vector<double> p;
      double mx = -1e30, sum = 0;
      for (int j = lo; j <= t; ++j) {
        double sc = 0;
        for (int i = 0; i < HD; ++i) sc += double{qt[i]} * k[j * HD + i];
        p.push_back(sc * scale);
        mx = std::max(mx, p.back());
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int i = 0; i < HD; ++i) {
        double ref = 0;
        for (int j = lo; j <= t; ++j) ref += p[j - lo] / sum * v[j * HD + i];
        EXPECT_NEAR(out[(t * 2 + h) * HD + i], ref, 1e-5) << "t " << t << " h " << h;
      }
    }
  }
}

TEST(Gemma3, FinalLogitSoftcapping) {
  TinySpec plain = spec_for("gemma3");
  plain.std = 1.0f;  // large logits, so the cap bites
  TinySpec capped = plain;
  capped.meta_override["gemma3.final_logit_softcapping"] = gguf::Value::make_f32(3.0f);
  auto a = Model::load(testing::write_tiny(plain, ::ts::testing::temp_dir() + "/g.gguf"));
  auto b = Model::load(testing::write_tiny(capped, ::ts::testing::temp_dir() + "/gc.gguf"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*b)->config().final_logit_softcap, 3.0f);
  const std::vector<int32_t> prompt = {1, 60, 61, 62};
  testing::SoloRunner ra(**a, KvType::kF32, 4, 4), rb(**b, KvType::kF32, 4, 4);
  auto la = ra.feed(prompt, 0, 1, nullptr), lb = rb.feed(prompt, 0, 1, nullptr);
  float max_raw = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    max_raw = std::max(max_raw, std::fabs(la[i]));
    EXPECT_NEAR(lb[i], 3.0f * std::tanh(la[i] / 3.0f), 1e-4);
  }
  EXPECT_GT(max_raw, 3.0f);
}

TEST(Ops, GeluTableMatchesGgmlDefinition) {
  for (float x : {-12.f, -3.3f, -0.51f, 0.f, 0.013f, 1.7f, 6.25f, 9.99f, 11.f}) {
    float a = x;
    const float b = 2.f;
    geglu_ggml(&a, &b, 1);
    float want;
    if (x <= -10.f) want = 0.f;
    else if (x >= 10.f) want = x * b;
    else want = tensor::round_fp16(gelu_tanh(tensor::round_fp16(x))) * b;
    EXPECT_EQ(a, want) << x;
    if (x > -10.f && x < 10.f) {
      EXPECT_NEAR(a, gelu_tanh(x) * b, 2e-2 * (1 + std::fabs(x))) << x;
    }
  }
}

// --- refusals: each inconsistent file is refused at load with the reason, never a crash ---

void expect_refused(const TinySpec& s, const std::string& reason) {
  auto m = Model::load(tmp_model(s));
  ASSERT_FALSE(m.ok()) << "loaded a bad file; wanted: " << reason;
  EXPECT_NE(m.status().message().find(reason), std::string::npos) << m.status().to_string();
}

TEST(Refusal, UnknownArchitecture) {
  TinySpec s{.arch = "mamba9"};
  auto m = Model::load(tmp_model(s));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("architecture 'mamba9' is not supported"), std::string::npos);
  EXPECT_NE(m.status().message().find("qwen3moe"), std::string::npos);  // lists what is supported
}

TEST(Refusal, ExpertCountDisagreesWithTensorDims) {
  TinySpec s = spec_for("qwen3moe");
  s.meta_override["qwen3moe.expert_count"] = gguf::Value::make_u32(64);  // tensors hold 4 experts
  expect_refused(s, "expert_count 64");
  TinySpec t = spec_for("qwen3moe");  // one layer's stacked experts have the wrong count
  t.shape_override["blk.1.ffn_up_exps.weight"] = {32, 16, 3};
  expect_refused(t, "blk.1.ffn_up_exps.weight");
}

TEST(Refusal, ExpertsUsedExceedsExperts) {
  TinySpec s = spec_for("qwen3moe");
  s.meta_override["qwen3moe.expert_used_count"] = gguf::Value::make_u32(9);
  expect_refused(s, "expert_used_count 9 exceeds expert_count 4");
}

TEST(Refusal, HugeExpertCountIsRefusedBeforeAllocating) {
  TinySpec s = spec_for("qwen3moe");
  s.meta_override["qwen3moe.expert_count"] = gguf::Value::make_u32(1u << 23);
  expect_refused(s, "expert_count");
}

TEST(Refusal, HeadDimDisagreesWithQWidth) {
  TinySpec s = spec_for("qwen3");
  s.meta_override["qwen3.attention.key_length"] = gguf::Value::make_u32(24);  // q rows are 4 x 16
  expect_refused(s, "attn_q.weight");
  TinySpec t = spec_for("qwen3");
  t.meta_override["qwen3.attention.key_length"] = gguf::Value::make_u32(24);
  auto m = Model::load(tmp_model(t));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("head_dim 24"), std::string::npos) << m.status().to_string();
}

TEST(Refusal, QkNormWidthDisagreesWithHeadDim) {
  TinySpec s = spec_for("gemma3");
  s.shape_override["blk.0.attn_q_norm.weight"] = {8};
  expect_refused(s, "attn_q_norm");
}

TEST(Refusal, FusedQkvWidthWrong) {
  TinySpec s{.arch = "phi3"};
  s.shape_override["blk.0.attn_qkv.weight"] = {32, 96};  // (4 + 2 x 2) x 8 = 64 rows expected
  expect_refused(s, "attn_qkv.weight");
  TinySpec t{.arch = "phi3"};
  t.shape_override["blk.0.ffn_up.weight"] = {32, 64};  // gate|up must be 2 x 64
  expect_refused(t, "fused gate|up");
}

TEST(Refusal, MissingArchitectureTensor) {
  TinySpec s = spec_for("gemma3");
  s.skip.insert("blk.3.post_ffw_norm.weight");
  expect_refused(s, "blk.3.post_ffw_norm.weight");
}

TEST(Refusal, EmbeddingWidthWrong) {
  TinySpec s{.arch = "llama"};
  s.shape_override["token_embd.weight"] = {48, testing::kTinyVocab};
  expect_refused(s, "token_embd.weight");
}

}  // namespace
}  // namespace ts::model
