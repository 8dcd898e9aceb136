// RoPE scaling read from metadata: llama3 frequency factors computed from rope.scaling.* keys
// must act exactly like the same factors stored as a rope_freqs tensor; linear scaling changes
// long-position outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "gguf/gguf.h"
#include "model/model.h"
#include "test_util.h"
#include "tools/synth.h"

namespace ts::tools {
namespace {

// Copies `src` into a new file with extra metadata and, optionally, a rope_freqs tensor.
void rewrite(const std::string& src, const std::string& dst,
             const std::vector<std::pair<std::string, gguf::Value>>& extra, const std::vector<float>* freqs) {
  auto f = gguf::GgufFile::open(src).value();
  gguf::GgufWriter w;
  for (const auto& [k, v] : f->metadata()) w.set(k, v);
  for (const auto& [k, v] : extra) w.set(k, v);
  for (const auto& t : f->tensors()) {
    ASSERT_TRUE(w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.num_bytes)).ok());
  }
  if (freqs) {
    std::vector<uint8_t> b(freqs->size() * 4);
    std::memcpy(b.data(), freqs->data(), b.size());
    ASSERT_TRUE(w.add_tensor("rope_freqs.weight", 0, {static_cast<int64_t>(freqs->size())}, b).ok());
  }
  ASSERT_TRUE(w.write(dst).ok());
}

std::vector<float> last_logits(const std::string& path, int n_tokens) {
  auto m = model::Model::load(path);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  auto& model = **m;
  auto kv = model::KvStorage::create(model.config(), model::KvType::kF32, 16, 64).value();
  std::vector<int32_t> table(64);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> tokens;
  for (int i = 0; i < n_tokens; ++i) tokens.push_back(3 + (i * 7) % 300);
  model::SeqSlice s{.num_tokens = n_tokens, .start_pos = 0, .block_table = table, .num_logits = 1};
  std::vector<float> logits(model.config().n_vocab);
  EXPECT_TRUE(model.forward({.tokens = tokens, .seqs = std::span<const model::SeqSlice>(&s, 1)}, kv, logits.data(), nullptr).ok());
  return logits;
}

TEST(RopeScaling, Llama3FactorsShape) {
  model::ModelConfig c;
  c.head_dim = 128;
  c.rope_base = 500000.f;
  c.rope_scale_factor = 8.f;
  c.rope_low_freq_factor = 1.f;
  c.rope_high_freq_factor = 4.f;
  c.rope_orig_ctx = 8192;
  auto f = model::llama3_rope_factors(c);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_FLOAT_EQ(f.front(), 1.f);   // highest frequency: unchanged
  EXPECT_FLOAT_EQ(f.back(), 8.f);    // lowest frequency: divided by the factor
  for (size_t i = 1; i < f.size(); ++i) {
    EXPECT_GE(f[i], f[i - 1]);
    EXPECT_GE(f[i], 1.f);
    EXPECT_LE(f[i], 8.f);
  }
  // Wavelength 2*pi*base^(2i/d) passes 8192/4 = 2048 between i = 28 and 29 and 8192 between
  // i = 34 and 35 (by hand: 500000^(i/64) = 326 at i = 28.2, = 1304 at i = 34.98).
  EXPECT_FLOAT_EQ(f[28], 1.f);
  EXPECT_GT(f[29], 1.f);
  EXPECT_LT(f[34], 8.f);
  EXPECT_FLOAT_EQ(f[35], 8.f);
}

TEST(RopeScaling, MetadataFactorsEqualTensorFactorsAndChangeOutputs) {
  std::string d = ::ts::testing::temp_dir();
  SynthOptions o{.arch = "llama", .n_layer = 1, .n_embd = 256, .n_head = 2, .n_head_kv = 2, .n_ff = 256,
                 .n_ctx = 4096, .rope_base = 500000.f, .vocab_size = 400, .type = tensor::DType::kF32, .seed = 5, .std = 0.2f};
  ASSERT_TRUE(synthesize(o, d + "/base.gguf").ok());
  rewrite(d + "/base.gguf", d + "/meta.gguf",
          {{"llama.rope.scaling.type", gguf::Value::make_string("llama3")},
           {"llama.rope.scaling.factor", gguf::Value::make_f32(8.f)},
           {"llama.rope.scaling.original_context_length", gguf::Value::make_u32(64)}},
          nullptr);
  auto meta = model::Model::load(d + "/meta.gguf");
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();
  auto factors = model::llama3_rope_factors((*meta)->config());
  rewrite(d + "/base.gguf", d + "/tensor.gguf", {}, &factors);
  auto a = last_logits(d + "/meta.gguf", 200);
  auto b = last_logits(d + "/tensor.gguf", 200);
  auto base = last_logits(d + "/base.gguf", 200);
  double max_ab = 0, max_base = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_ab = std::max(max_ab, static_cast<double>(std::fabs(a[i] - b[i])));
    max_base = std::max(max_base, static_cast<double>(std::fabs(a[i] - base[i])));
  }
  EXPECT_EQ(max_ab, 0.0);
  EXPECT_GT(max_base, 1e-3);

  rewrite(d + "/base.gguf", d + "/linear.gguf",
          {{"llama.rope.scaling.type", gguf::Value::make_string("linear")},
           {"llama.rope.scaling.factor", gguf::Value::make_f32(4.f)}},
          nullptr);
  auto lin = model::Model::load(d + "/linear.gguf");
  ASSERT_TRUE(lin.ok());
  EXPECT_EQ((*lin)->config().rope_scaling, model::RopeScaling::kLinear);
  auto l = last_logits(d + "/linear.gguf", 200);
  double max_lin = 0;
  for (size_t i = 0; i < l.size(); ++i) max_lin = std::max(max_lin, static_cast<double>(std::fabs(l[i] - base[i])));
  EXPECT_GT(max_lin, 1e-3);

  rewrite(d + "/base.gguf", d + "/yarn.gguf", {{"llama.rope.scaling.type", gguf::Value::make_string("yarn")}}, nullptr);
  auto y = model::Model::load(d + "/yarn.gguf");
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("yarn"), std::string::npos);
}

}  // namespace
}  // namespace ts::tools
