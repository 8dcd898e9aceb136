// stories260K: a real pretrained Llama; greedy ids and logits against reference outputs.
#include <gtest/gtest.h>

#include <cmath>

#include "model/model.h"
#include "model_test_util.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::model {
namespace {

using testing::read_float_lines;
using testing::read_ids;
using testing::SoloRunner;

TEST(Stories, LogitsMatchFloat64Reference) {
  TS_REQUIRE_SHARED(path, "models/stories260K/stories260K-f32.gguf");
  TS_REQUIRE_SHARED(ref, "models/stories260K/expected/logits_once_upon_a_time.txt");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ThreadPool pool(2);
  SoloRunner run(**m);
  std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  auto logits = run.feed(prompt, 0, 5, &pool);
  auto expect = read_float_lines(ref);
  ASSERT_EQ(expect.size(), 5u);
  float max_diff = 0;
  for (int k = 0; k < 5; ++k) {
    ASSERT_EQ(expect[k].size(), 512u);
    for (int i = 0; i < 512; ++i) max_diff = std::max(max_diff, std::fabs(logits[k * 512 + i] - expect[k][i]));
  }
  EXPECT_LE(max_diff, 1e-4f);
}

TEST(Stories, TokenizesPromptLikeReference) {
  TS_REQUIRE_SHARED(path, "models/stories260K/stories260K-f32.gguf");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto ids = (*m)->tokenizer().encode("Once upon a time", true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
}

void check_greedy(const std::string& model_rel, const std::string& ids_rel, int prompt_len, int limit) {
  TS_REQUIRE_SHARED(path, model_rel);
  TS_REQUIRE_SHARED(ref, ids_rel);
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto expect = read_ids(ref);
  ASSERT_GT(static_cast<int>(expect.size()), prompt_len);
  if (limit > 0 && static_cast<int>(expect.size()) > prompt_len + limit) expect.resize(prompt_len + limit);
  std::vector<int32_t> prompt(expect.begin(), expect.begin() + prompt_len);
  ThreadPool pool(2);
  SoloRunner run(**m, KvType::kF32, 32);
  auto got = run.greedy(prompt, static_cast<int>(expect.size()) - prompt_len, &pool);
  std::vector<int32_t> want(expect.begin() + prompt_len, expect.end());
  EXPECT_EQ(got, want);
}

TEST(Stories, GreedyOnceUponATimeF32) {
  check_greedy("models/stories260K/stories260K-f32.gguf",
               "models/stories260K/expected/greedy_once_upon_a_time_n64.ids", 5, 0);
}
TEST(Stories, GreedyFromBosF32) {
  check_greedy("models/stories260K/stories260K-f32.gguf", "models/stories260K/expected/greedy_bos_n256.ids", 1, 0);
}
TEST(Stories, GreedyOnceUponATimeF16) {
  check_greedy("models/stories260K/stories260K-f16.gguf",
               "models/stories260K/expected/greedy_once_upon_a_time_n64.ids", 5, 0);
}

TEST(Stories, BatchOfSequencesEqualsEachAlone) {
  TS_REQUIRE_SHARED(path, "models/stories260K/stories260K-f32.gguf");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> prompts = {{1, 403, 407, 261, 378}, {1, 261}, {1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316}};
  // Alone.
  std::vector<std::vector<float>> alone;
  for (auto& p : prompts) {
    SoloRunner r(model, KvType::kF16, 8);
    alone.push_back(r.feed(p, 0, 1, &pool));
  }
  // Together, in one forward pass with disjoint block tables.
  auto kv = KvStorage::create(model.config(), KvType::kF16, 16, 24).value();
  std::vector<std::vector<int32_t>> tables = {{0, 1}, {5, 7}, {9, 3}};
  std::vector<int32_t> tokens;
  std::vector<SeqSlice> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    tokens.insert(tokens.end(), prompts[i].begin(), prompts[i].end());
    seqs.push_back({.num_tokens = static_cast<int32_t>(prompts[i].size()), .start_pos = 0,
                    .block_table = tables[i], .num_logits = 1});
  }
  std::vector<float> logits(3 * 512);
  ASSERT_TRUE(model.forward({.tokens = tokens, .seqs = seqs}, kv, logits.data(), &pool).ok());
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int v = 0; v < 512; ++v) ASSERT_NEAR(logits[i * 512 + v], alone[i][v], 1e-4) << "seq " << i;
}

TEST(Stories, ForwardRejectsBadBatches) {
  TS_REQUIRE_SHARED(path, "models/stories260K/stories260K-f32.gguf");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok());
  auto kv = KvStorage::create((*m)->config(), KvType::kF32, 16, 2).value();
  std::vector<int32_t> table = {0};
  std::vector<int32_t> tokens(17, 5);
  SeqSlice s{.num_tokens = 17, .start_pos = 0, .block_table = table, .num_logits = 1};
  std::vector<float> logits(512);
  Status st = (*m)->forward({.tokens = tokens, .seqs = std::span<const SeqSlice>(&s, 1)}, kv, logits.data(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> bad = {9999};
  s = {.num_tokens = 1, .start_pos = 0, .block_table = table, .num_logits = 1};
  st = (*m)->forward({.tokens = bad, .seqs = std::span<const SeqSlice>(&s, 1)}, kv, logits.data(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

TEST(Stories, MissingAndCorruptModelsAreRefused) {
  auto r = Model::load("/nonexistent.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  TS_REQUIRE_SHARED(vocab, "models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf");
  auto v = Model::load(vocab);  // vocab-only: no tensors
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("token_embd"), std::string::npos) << v.status().message();
}

}  // namespace
}  // namespace ts::model
