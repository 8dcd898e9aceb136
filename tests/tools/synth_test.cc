#include "tools/synth.h"

#include <gtest/gtest.h>

#include <cmath>

#include "gguf/gguf.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::tools {
namespace {

using tensor::DType;

TEST(Synth, GeneratedVocabLlamaLoadsAndRuns) {
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    SynthOptions o{.arch = "llama", .n_layer = 2, .n_embd = 256, .n_head = 4, .n_head_kv = 2, .n_ff = 512,
                   .n_ctx = 256, .vocab_size = 512, .type = t, .seed = 7};
    std::string path = ::ts::testing::temp_dir() + "/m.gguf";
    ASSERT_TRUE(synthesize(o, path).ok()) << tensor::type_name(static_cast<uint32_t>(t));
    auto m = model::Model::load(path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const auto& c = (*m)->config();
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.n_head_kv, 2);
    EXPECT_EQ(c.n_vocab, 512);
    EXPECT_FALSE(c.tied_output);
    const auto* q = (*m)->gguf().find_tensor("blk.1.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, static_cast<uint32_t>(t));
    auto ids = (*m)->tokenizer().encode("hello world", true, false);
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids[0], 1);
    auto kv = model::KvStorage::create(c, model::KvType::kF16, 16, 4).value();
    std::vector<int32_t> table = {0, 1, 2, 3};
    model::SeqSlice s{.num_tokens = static_cast<int32_t>(ids.size()), .start_pos = 0, .block_table = table, .num_logits = 1};
    std::vector<float> logits(512);
    ASSERT_TRUE((*m)->forward({.tokens = ids, .seqs = std::span<const model::SeqSlice>(&s, 1)}, kv, logits.data(), nullptr).ok());
    float sum = 0;
    for (float x : logits) sum += std::fabs(x);
    EXPECT_GT(sum, 0.f);
    EXPECT_TRUE(std::isfinite(sum));
  }
}

TEST(Synth, SameSeedSameBytesDifferentSeedDifferent) {
  SynthOptions o{.n_layer = 1, .n_embd = 64, .n_head = 2, .n_head_kv = 2, .n_ff = 128, .vocab_size = 400,
                 .type = DType::kQ8_0, .seed = 3};
  std::string d = ::ts::testing::temp_dir();
  ASSERT_TRUE(synthesize(o, d + "/a.gguf").ok());
  ASSERT_TRUE(synthesize(o, d + "/b.gguf").ok());
  o.seed = 4;
  ASSERT_TRUE(synthesize(o, d + "/c.gguf").ok());
  EXPECT_EQ(::ts::testing::read_file(d + "/a.gguf"), ::ts::testing::read_file(d + "/b.gguf"));
  EXPECT_NE(::ts::testing::read_file(d + "/a.gguf"), ::ts::testing::read_file(d + "/c.gguf"));
}

TEST(Synth, OddRowLengthFallsBackToF16) {
  SynthOptions o{.n_layer = 1, .n_embd = 64, .n_head = 8, .n_head_kv = 4, .n_ff = 172, .vocab_size = 512,
                 .type = DType::kQ8_0};
  std::string path = ::ts::testing::temp_dir() + "/odd.gguf";
  ASSERT_TRUE(synthesize(o, path).ok());
  auto g = gguf::GgufFile::open(path);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->find_tensor("blk.0.ffn_down.weight")->type, static_cast<uint32_t>(DType::kF16));
  EXPECT_EQ((*g)->find_tensor("blk.0.ffn_up.weight")->type, static_cast<uint32_t>(DType::kQ8_0));
  EXPECT_TRUE(model::Model::load(path).ok());
}

TEST(Synth, Qwen2WithCopiedVocab) {
  TS_REQUIRE_SHARED(vocab, "models/llama.cpp-vocab/ggml-vocab-qwen2.gguf");
  SynthOptions o{.arch = "qwen2", .n_layer = 1, .n_embd = 64, .n_head = 4, .n_head_kv = 2, .n_ff = 128,
                 .rope_base = 1e6f, .tied = true, .vocab_from = vocab, .type = DType::kQ8_0};
  std::string path = ::ts::testing::temp_dir() + "/q.gguf";
  ASSERT_TRUE(synthesize(o, path).ok());
  auto m = model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE((*m)->config().rope_neox);
  EXPECT_TRUE((*m)->config().has_qkv_bias);
  EXPECT_TRUE((*m)->config().tied_output);
  EXPECT_EQ((*m)->config().n_vocab, 151936);
  EXPECT_EQ((*m)->tokenizer().pre_type(), "qwen2");
}

TEST(Synth, BadOptionsAreRefused) {
  SynthOptions o{.n_embd = 65, .n_head = 4, .vocab_size = 400};
  EXPECT_EQ(synthesize(o, "/tmp/x.gguf").code(), StatusCode::kInvalidArgument);
  SynthOptions o2{.vocab_size = 10};
  EXPECT_EQ(synthesize(o2, "/tmp/x.gguf").code(), StatusCode::kInvalidArgument);
  SynthOptions o3{.vocab_from = "/nonexistent.gguf"};
  EXPECT_EQ(synthesize(o3, "/tmp/x.gguf").code(), StatusCode::kNotFound);
}

// Each new architecture synthesizes into a file the model code loads with the intended shape and
// runs; presets give the real models' shapes.
TEST(Synth, EveryArchitectureLoadsAndRuns) {
  struct Case {
    SynthOptions o;
  };
  const std::vector<SynthOptions> cases = {
      {.arch = "qwen3", .n_layer = 2, .n_embd = 64, .n_head = 4, .n_head_kv = 2, .n_ff = 128, .tied = true,
       .vocab_size = 400, .type = DType::kQ8_0, .head_dim = 32},
      {.arch = "qwen3moe", .n_layer = 2, .n_embd = 64, .n_head = 4, .n_head_kv = 2, .n_ff = 128, .vocab_size = 400,
       .type = DType::kQ8_0, .head_dim = 32, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 32},
      {.arch = "gemma3", .n_layer = 6, .n_embd = 64, .n_head = 4, .n_head_kv = 1, .n_ff = 128, .vocab_size = 400,
       .type = DType::kF16, .head_dim = 32, .sliding_window = 4},
      {.arch = "phi3", .n_layer = 2, .n_embd = 96, .n_head = 4, .n_head_kv = 4, .n_ff = 128, .vocab_size = 400,
       .type = DType::kF16},
  };
  for (const SynthOptions& o : cases) {
    std::string path = ::ts::testing::temp_dir() + "/" + o.arch + ".gguf";
    ASSERT_TRUE(synthesize(o, path).ok()) << o.arch;
    auto m = model::Model::load(path);
    ASSERT_TRUE(m.ok()) << o.arch << ": " << m.status().to_string();
    const auto& c = (*m)->config();
    EXPECT_EQ(c.arch, o.arch);
    EXPECT_EQ(c.head_dim, o.head_dim > 0 ? o.head_dim : o.n_embd / o.n_head) << o.arch;
    EXPECT_EQ(c.n_expert, o.n_expert);
    EXPECT_EQ(c.n_expert_used, o.n_expert_used);
    EXPECT_EQ(c.sliding_window, o.sliding_window);
    auto kv = model::KvStorage::create(c, model::KvType::kF16, 16, 2).value();
    std::vector<int32_t> table = {0, 1}, ids = {1, 300, 301, 302, 303, 304, 305};
    model::SeqSlice sl{.num_tokens = 7, .start_pos = 0, .block_table = table, .num_logits = 1};
    std::vector<float> logits(c.n_vocab);
    ASSERT_TRUE((*m)->forward({.tokens = ids, .seqs = std::span<const model::SeqSlice>(&sl, 1)}, kv, logits.data(), nullptr).ok());
    float sum = 0;
    for (float x : logits) sum += std::fabs(x);
    EXPECT_TRUE(std::isfinite(sum) && sum > 0) << o.arch;
  }
}

TEST(Synth, PresetsHaveTheRealShapes) {
  SynthOptions o;
  ASSERT_TRUE(apply_synth_preset("qwen3-0.6b", o).ok());
  EXPECT_EQ(o.arch, "qwen3");
  EXPECT_EQ(o.n_layer, 28);
  EXPECT_EQ(o.n_embd, 1024);
  EXPECT_EQ(o.n_head, 16);
  EXPECT_EQ(o.n_head_kv, 8);
  EXPECT_EQ(o.head_dim, 128);
  EXPECT_EQ(o.n_ff, 3072);
  EXPECT_TRUE(o.tied);
  ASSERT_TRUE(apply_synth_preset("qwen3-30b-a3b", o).ok());
  EXPECT_EQ(o.arch, "qwen3moe");
  EXPECT_EQ(o.n_embd, 2048);
  EXPECT_EQ(o.n_head, 32);
  EXPECT_EQ(o.n_head_kv, 4);
  EXPECT_EQ(o.n_expert, 128);
  EXPECT_EQ(o.n_expert_used, 8);
  EXPECT_EQ(o.n_ff_exp, 768);
  ASSERT_TRUE(apply_synth_preset("gemma3-1b", o).ok());
  EXPECT_EQ(o.arch, "gemma3");
  EXPECT_EQ(o.n_layer, 26);
  EXPECT_EQ(o.n_embd, 1152);
  EXPECT_EQ(o.n_head, 4);
  EXPECT_EQ(o.n_head_kv, 1);
  EXPECT_EQ(o.head_dim, 256);
  EXPECT_EQ(o.n_ff, 6912);
  EXPECT_EQ(o.sliding_window, 512);
  EXPECT_EQ(apply_synth_preset("gpt-5", o).code(), StatusCode::kInvalidArgument);
  // A one-layer Qwen3-30B-A3B layer with fewer experts stays small enough for a test.
  ASSERT_TRUE(apply_synth_preset("qwen3-30b-a3b", o).ok());
  o.n_layer = 1;
  o.n_expert = 4;
  o.n_expert_used = 2;
  o.vocab_size = 300;
  o.type = DType::kQ8_0;
  std::string path = ::ts::testing::temp_dir() + "/a3b.gguf";
  ASSERT_TRUE(synthesize(o, path).ok());
  auto g = gguf::GgufFile::open(path).value();
  const auto* up = g->find_tensor("blk.0.ffn_up_exps.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->shape, (std::vector<int64_t>{2048, 768, 4}));
  EXPECT_TRUE(model::Model::load(path).ok());
}

TEST(Synth, BadArchitectureOptionsAreRefused) {
  SynthOptions moe{.arch = "qwen3moe", .vocab_size = 400, .n_expert = 4, .n_expert_used = 5, .n_ff_exp = 16};
  EXPECT_EQ(synthesize(moe, "/tmp/x.gguf").code(), StatusCode::kInvalidArgument);
  SynthOptions dense{.arch = "llama", .vocab_size = 400, .n_expert = 4};
  EXPECT_EQ(synthesize(dense, "/tmp/x.gguf").code(), StatusCode::kInvalidArgument);
  SynthOptions unknown{.arch = "rwkv", .vocab_size = 400};
  EXPECT_EQ(synthesize(unknown, "/tmp/x.gguf").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ts::tools
