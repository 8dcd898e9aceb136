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

}  // namespace
}  // namespace ts::tools
