#include "tools/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "model/kv_storage.h"
#include "test_util.h"
#include "tools/synth.h"

namespace ts::tools {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

PlanOptions shape_opts(int32_t layers, int32_t kv_heads, int32_t head_dim) {
  PlanOptions o;
  o.model.n_layer = layers;
  o.model.n_head_kv = kv_heads;
  o.model.head_dim = head_dim;
  return o;
}

TEST(Plan, SixtyFourLayersAtOneMillionTokens) {
  // 2 x 64 x 8 x 128 x 2 B = 262,144 B per token; x 10^6 tokens = 262,144,000,000 B = 244.14 GiB.
  EXPECT_EQ(kv_bytes_per_token(64, 8, 128, model::KvType::kF16), 262144u);
  PlanOptions o = shape_opts(64, 8, 128);
  o.memory_bytes = 1024 * kGiB;
  o.headroom = 0;
  o.lengths = {.p50 = 1000000, .p95 = 1000000, .p99 = 1000000};
  auto r = compute_plan(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->percentiles[2].peak_bytes, 2ull * 64 * 8 * 128 * 2 * 1000000);
  EXPECT_EQ(r->percentiles[2].peak_bytes, 262144000000ull);
  EXPECT_NEAR(static_cast<double>(r->percentiles[2].peak_bytes) / kGiB, 244.14, 0.005);
  EXPECT_EQ(format_bytes(r->percentiles[2].peak_bytes), "244.14 GiB");
  EXPECT_EQ(r->percentiles[2].max_seqs, 4);  // 1 TiB / 244.14 GiB = 4.19
  EXPECT_TRUE(r->warnings.empty());
}

TEST(Plan, KvBytesMatchTheEnginesStorageLayout) {
  model::ModelConfig cfg;
  cfg.n_layer = 32;
  cfg.n_head_kv = 8;
  cfg.head_dim = 128;
  // q8_0: 128 int8 values + one 4-byte f32 scale per token per head, for K and V in 32 layers.
  EXPECT_EQ(kv_bytes_per_token(32, 8, 128, model::KvType::kQ8_0), 2u * 32 * 8 * (128 + 4));
  EXPECT_EQ(kv_bytes_per_token(32, 8, 128, model::KvType::kF32), 2u * 32 * 8 * 128 * 4);
  for (auto t : {model::KvType::kF32, model::KvType::kF16, model::KvType::kQ8_0}) {
    EXPECT_EQ(kv_bytes_per_token(32, 8, 128, t) * 16, model::KvStorage::bytes_per_block(cfg, t, 16))
        << model::kv_type_name(t);
  }
  PlanOptions o = shape_opts(32, 8, 128);
  o.kv_type = model::KvType::kQ8_0;
  o.memory_bytes = 24 * kGiB;
  o.lengths = {.p50 = 100, .p95 = 200, .p99 = 300};
  auto r = compute_plan(o);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->notes.empty());
  EXPECT_NE(r->notes[0].find("scale"), std::string::npos);  // says the scales are counted
}

TEST(Plan, EightBillionParamsIn24GiB) {
  // Llama-3-8B shape: 32 layers, 8 KV heads, head dim 128, f16 KV -> 131,072 B per token.
  PlanOptions o = shape_opts(32, 8, 128);
  o.model.weight_bytes = weight_bytes_for(8e9, "f16").value();
  EXPECT_EQ(o.model.weight_bytes, 16000000000ull);
  o.memory_bytes = 24 * kGiB;  // 25,769,803,776
  o.headroom = 0.2;
  o.lengths = {.p50 = 1000, .p95 = 4000, .p99 = 8192};
  o.concurrency = 16;
  auto r = compute_plan(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kv_bytes_per_token, 131072u);
  EXPECT_EQ(r->usable_bytes, 20615843020u);           // floor(0.8 x 25,769,803,776)
  EXPECT_EQ(r->kv_budget_bytes, 4615843020);          // minus 16e9 of weights
  // P50: 1000 tokens round up to 63 blocks = 1008 tokens = 132,120,576 B -> 34 fit.
  EXPECT_EQ(r->percentiles[0].peak_bytes, 1008u * 131072);
  EXPECT_EQ(r->percentiles[0].max_seqs, 34);
  // P95: 4000 tokens = 524,288,000 B -> 8 fit; P99: 8192 tokens = 1 GiB -> 4 fit.
  EXPECT_EQ(r->percentiles[1].peak_bytes, 524288000u);
  EXPECT_EQ(r->percentiles[1].max_seqs, 8);
  EXPECT_EQ(r->percentiles[2].peak_bytes, kGiB);
  EXPECT_EQ(r->percentiles[2].max_seqs, 4);
  EXPECT_EQ(r->rec_max_seqs, 34);
  EXPECT_EQ(r->rec_kv_cache_memory, 4402ull << 20);   // 4,615,843,020 B = 4402.03 MiB
  // 16 concurrent requests fit at P50 but not at P95: warned, with the memory they need.
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("--concurrency 16"), std::string::npos);
  EXPECT_NE(r->warnings[0].find("P95"), std::string::npos);
  EXPECT_EQ(r->memory_for_concurrency, static_cast<uint64_t>(std::ceil((16e9 + 16 * 524288000.0) / 0.8)));

  std::string table = format_plan(*r);
  EXPECT_NE(table.find("--kv-cache-memory 4402MiB --max-seqs 34"), std::string::npos) << table;
  auto j = nlohmann::json::parse(plan_json(*r));
  EXPECT_EQ(j["kv_bytes_per_token"], 131072);
  EXPECT_EQ(j["percentiles"][1]["max_seqs"], 8);
  EXPECT_EQ(j["recommended"]["max_seqs"], 34);
}

TEST(Plan, WarnsWhenP99CannotFitOrWeightsDoNot) {
  PlanOptions o = shape_opts(32, 8, 128);
  o.model.weight_bytes = 16000000000ull;
  o.memory_bytes = 24 * kGiB;
  o.lengths = {.p50 = 1000, .p95 = 4000, .p99 = 100000};  // 13.1 GB > 4.6 GB budget
  auto r = compute_plan(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->percentiles[2].max_seqs, 0);
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("P99"), std::string::npos);
  EXPECT_NE(r->warnings[0].find("cannot fit at all"), std::string::npos);

  o.memory_bytes = 16 * kGiB;  // 12.8 GiB usable < 16 GB of weights
  r = compute_plan(o);
  ASSERT_TRUE(r.ok());
  EXPECT_LT(r->kv_budget_bytes, 0);
  EXPECT_EQ(r->rec_max_seqs, 0);
  ASSERT_FALSE(r->warnings.empty());
  EXPECT_NE(r->warnings[0].find("no KV memory"), std::string::npos);
}

TEST(Plan, RejectsBadInput) {
  PlanOptions o = shape_opts(0, 8, 128);
  o.memory_bytes = kGiB;
  o.lengths = {.p50 = 1, .p95 = 2, .p99 = 3};
  EXPECT_EQ(compute_plan(o).status().code(), StatusCode::kInvalidArgument);
  o = shape_opts(1, 1, 1);
  o.memory_bytes = kGiB;
  o.lengths = {.p50 = 5, .p95 = 2, .p99 = 3};
  EXPECT_EQ(compute_plan(o).status().code(), StatusCode::kInvalidArgument);
  o.lengths = {.p50 = 1, .p95 = 2, .p99 = 3};
  o.headroom = 1.0;
  EXPECT_EQ(compute_plan(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(weight_bytes_for(1e9, "q9_9").ok());
}

TEST(Plan, WeightBytesPerType) {
  EXPECT_EQ(weight_bytes_for(8e9, "f32").value(), 32000000000ull);
  EXPECT_EQ(weight_bytes_for(8e9, "bf16").value(), 16000000000ull);
  EXPECT_EQ(weight_bytes_for(8e9, "q8_0").value(), 8500000000ull);   // 34 B per 32 weights
  EXPECT_EQ(weight_bytes_for(8e9, "q4_0").value(), 4500000000ull);   // 18 B per 32 weights
  EXPECT_EQ(weight_bytes_for(8e9, "q4_k").value(), 4500000000ull);   // 144 B per 256 weights
}

TEST(Plan, LengthsFromPlainAndReplayFiles) {
  std::string plain = "# context lengths\n";
  for (int i = 100; i >= 1; --i) plain += std::to_string(i) + "\n";
  auto d = parse_lengths(plain);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->count, 100);
  EXPECT_EQ(d->p50, 51);   // 50.5 rounded up
  EXPECT_EQ(d->p95, 96);   // 95.05
  EXPECT_EQ(d->p99, 100);  // 99.01
  EXPECT_EQ(d->max, 100);

  auto r = parse_lengths(
      "{\"offset\": 0, \"input_tokens\": 100, \"output_tokens\": 20, \"tier\": \"batch\"}\n"
      "\n"
      "{\"offset\": 1.5, \"input_tokens\": 300, \"output_tokens\": 60}\r\n");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->count, 2);
  EXPECT_EQ(r->p50, 240);  // (120 + 360) / 2
  EXPECT_EQ(r->max, 360);

  auto bad = parse_lengths("12\nabc\n");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
  EXPECT_FALSE(parse_lengths("# nothing\n").ok());
  EXPECT_FALSE(parse_lengths("0\n").ok());
}

TEST(Plan, ModelShapeFromGguf) {
  SynthOptions s{.arch = "llama", .n_layer = 3, .n_embd = 64, .n_head = 4, .n_head_kv = 2, .n_ff = 128,
                 .n_ctx = 512, .vocab_size = 300, .type = tensor::DType::kF16, .seed = 3};
  std::string path = ::ts::testing::temp_dir() + "/plan.gguf";
  ASSERT_TRUE(synthesize(s, path).ok());
  auto shape = model_shape_from_gguf(path);
  ASSERT_TRUE(shape.ok()) << shape.status().to_string();
  EXPECT_EQ(shape->n_layer, 3);
  EXPECT_EQ(shape->n_head_kv, 2);
  EXPECT_EQ(shape->head_dim, 16);
  EXPECT_EQ(shape->n_ctx_train, 512);
  auto f = gguf::GgufFile::open(path).value();
  uint64_t sum = 0;
  for (const auto& t : f->tensors()) sum += t.num_bytes;
  EXPECT_EQ(shape->weight_bytes, sum);
  EXPECT_GT(sum, 3u * 64 * 64 * 2);  // at least the attention matrices
  EXPECT_EQ(model_shape_from_gguf(path + ".missing").status().code(), StatusCode::kNotFound);

  PlanOptions o;
  o.model = *shape;
  o.memory_bytes = 64ull << 20;
  o.headroom = 0.1;
  o.lengths = {.p50 = 256, .p95 = 512, .p99 = 1024};
  auto r = compute_plan(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kv_bytes_per_token, 2u * 3 * 2 * 16 * 2);
  bool warned_ctx = false;
  for (const auto& w : r->warnings) warned_ctx |= w.find("trained context 512") != std::string::npos;
  EXPECT_TRUE(warned_ctx);
}

// A MoE file: plan keeps all experts resident but notes what one token reads, and KV per token
// comes from the model code's formula.
TEST(Plan, MoeModelFromGguf) {
  SynthOptions s{.arch = "qwen3moe", .n_layer = 2, .n_embd = 64, .n_head = 4, .n_head_kv = 2, .n_ff = 128,
                 .n_ctx = 512, .vocab_size = 300, .type = tensor::DType::kQ8_0, .head_dim = 32, .n_expert = 8,
                 .n_expert_used = 2, .n_ff_exp = 32};
  std::string path = ::ts::testing::temp_dir() + "/moe.gguf";
  ASSERT_TRUE(synthesize(s, path).ok());
  auto shape = model_shape_from_gguf(path);
  ASSERT_TRUE(shape.ok()) << shape.status().to_string();
  EXPECT_EQ(shape->head_dim, 32);
  EXPECT_EQ(shape->n_expert, 8);
  EXPECT_EQ(shape->n_expert_used, 2);
  ASSERT_GT(shape->active_weight_bytes, 0u);
  EXPECT_LT(shape->active_weight_bytes, shape->weight_bytes);
  // Experts: 3 tensors x 2 layers x 8 experts x 32 x 64 q8_0 weights; a token reads 2 of 8.
  const uint64_t expert_bytes = 3ull * 2 * 8 * 32 * 64 / 32 * 34;
  EXPECT_EQ(shape->weight_bytes - shape->active_weight_bytes, expert_bytes / 8 * 6 + (300ull * 64 / 32 * 34) / 300 * 299);
  PlanOptions o;
  o.model = *shape;
  o.memory_bytes = 64ull << 20;
  o.lengths = {.p50 = 256, .p95 = 512, .p99 = 512};
  auto r = compute_plan(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kv_bytes_per_token, 2u * 2 * 2 * 32 * 2);
  bool noted = false;
  for (const auto& n : r->notes) noted |= n.find("8 experts, 2 used per token") != std::string::npos;
  EXPECT_TRUE(noted);
}

// A gemma3 file (sliding-window layers): per-request KV comes from the model code's window-only
// layout: the global layers grow with the context, the sliding-window layers hold their window.
TEST(Plan, SlidingWindowModelHoldsOnlyTheWindow) {
  SynthOptions s{.arch = "gemma3", .n_layer = 12, .n_embd = 64, .n_head = 4, .n_head_kv = 1, .n_ff = 128,
                 .n_ctx = 8192, .vocab_size = 300, .head_dim = 32, .sliding_window = 64};
  std::string path = ::ts::testing::temp_dir() + "/gemma3-plan.gguf";
  ASSERT_TRUE(synthesize(s, path).ok());
  auto shape = model_shape_from_gguf(path);
  ASSERT_TRUE(shape.ok()) << shape.status().to_string();
  EXPECT_EQ(shape->n_swa_layers, 10);  // 2 of 12 layers are global
  EXPECT_EQ(shape->sliding_window, 64);
  PlanOptions o;
  o.model = *shape;
  o.memory_bytes = 64ull << 20;
  o.lengths = {.p50 = 1000, .p95 = 4000, .p99 = 8000};
  auto r = compute_plan(o);
  ASSERT_TRUE(r.ok());
  const uint64_t layer_token = 2u * 1 * 32 * 2;  // K and V, 1 KV head of 32, f16
  EXPECT_EQ(r->kv_bytes_per_token, 12 * layer_token);
  // Groups of 2 layers: 1 global group, 5 window groups of ceil(63 / 16) + 1 = 5 blocks each.
  EXPECT_EQ(r->kv_full_bytes_per_token, 2 * layer_token);
  EXPECT_EQ(r->kv_window_bytes_per_seq, 5u * 5 * 2 * 16 * layer_token);
  EXPECT_EQ(r->percentiles[1].peak_bytes, (4000u / 16 * 2 + 5 * 5 * 2) * 16 * layer_token);
  EXPECT_EQ(r->percentiles[1].peak_bytes,
            model::kv_footprint(12, 10, 64, 1, 32, model::KvType::kF16, 16).bytes_for_tokens(4000));
  // Far below every layer holding every position.
  EXPECT_LT(r->percentiles[2].peak_bytes * 5, 8000 * r->kv_bytes_per_token);
  bool noted = false;
  for (const auto& n : r->notes) noted |= n.find("keep only their window") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_NE(plan_json(*r).find("\"kv_window_bytes_per_seq\""), std::string::npos);
}

}  // namespace
}  // namespace ts::tools
