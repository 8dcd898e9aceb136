// Admission without up-front reservation (issue 11, "the first request works"): max_model_len
// is capped to what the KV pool holds for one sequence (with one log line), a request asking for
// the whole context is admitted with only its prompt's blocks, sequences grow block by block,
// and when the pool runs short the scheduler preempts instead of refusing. Real stories260K.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::engine {
namespace {

using namespace std::chrono_literals;

constexpr const char* kStories = "models/stories260K/stories260K-f32.gguf";  // context 128

model::Model* stories() {
  static std::unique_ptr<model::Model> m;
  if (m) return m.get();
  const std::string path = ::ts::testing::shared_path(kStories);
  if (path.empty()) return nullptr;
  auto loaded = model::Model::load(path);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return nullptr;
  m = std::move(loaded).value();
  return m.get();
}

EngineOptions small_pool(int32_t blocks) {
  EngineOptions o;
  o.num_kv_blocks = blocks;
  o.block_size = 16;
  o.max_seqs = 8;
  o.max_batch_tokens = 64;
  o.num_threads = 1;
  o.seed = 7;
  return o;
}

Request req(std::vector<int32_t> prompt, int32_t max_tokens) {
  Request r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;  // run to the length limit
  return r;
}

std::vector<int32_t> prompt_of(const model::Model& m, int n) {
  auto ids = m.tokenizer().encode("Once upon a time, there was a little girl named Lily. She loved to "
                                  "play outside in the park with her friends.",
                                  false, false);
  std::vector<int32_t> p{m.tokenizer().bos_id()};
  for (int i = 0; i < n - 1; ++i) p.push_back(ids[static_cast<size_t>(i) % ids.size()]);
  return p;
}

struct Result1 {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  int32_t preemptions = 0;
};

Result1 collect(RequestHandle& h) {
  Result1 r;
  for (const Event& ev : h.wait_all()) {
    r.tokens.insert(r.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish != FinishReason::kNone) r.finish = ev.finish;
    if (ev.request_done) r.preemptions = ev.timings.num_preemptions;
  }
  return r;
}

TEST(EngineAdmission, MaxModelLenCappedToThePoolWithOneLogLine) {
  model::Model* m = stories();
  if (m == nullptr) GTEST_SKIP() << "shared test data not found: " << kStories;
  ASSERT_EQ(m->config().n_ctx_train, 128);
  ::testing::internal::CaptureStderr();
  auto e = Engine::create(*m, small_pool(4));  // 64 tokens of KV
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ((*e)->max_model_len(), 64);
  EXPECT_TRUE((*e)->max_model_len_capped_by_kv());
  EXPECT_NE(log.find("max_model_len capped from 128 to 64 tokens"), std::string::npos) << log;
  size_t lines = 0;
  for (size_t pos = 0; (pos = log.find("capped", pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_EQ(lines, 1u) << log;

  // A pool larger than the context changes nothing and logs nothing about it.
  ::testing::internal::CaptureStderr();
  auto big = Engine::create(*m, small_pool(64));
  const std::string log2 = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(big.ok());
  EXPECT_EQ((*big)->max_model_len(), 128);
  EXPECT_FALSE((*big)->max_model_len_capped_by_kv());
  EXPECT_EQ(log2.find("capped"), std::string::npos) << log2;
}

TEST(EngineAdmission, WholeContextRequestIsAdmittedWithItsPromptBlocksOnly) {
  model::Model* m = stories();
  if (m == nullptr) GTEST_SKIP() << "shared test data not found: " << kStories;
  EngineOptions o = small_pool(8);
  o.start_thread = false;
  auto e = Engine::create(*m, o);
  ASSERT_TRUE(e.ok());
  const auto prompt = prompt_of(*m, 20);
  // The default output length: everything the context leaves.
  auto h = (*e)->submit(req(prompt, (*e)->max_model_len() - 20));
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_TRUE((*e)->step());
  // 20 prompt tokens -> 2 blocks, not the 8 the full length will need.
  EXPECT_EQ((*e)->stats().kv_blocks_used, 2);
  int steps = 0;
  int32_t max_used = 0;
  while ((*e)->step()) {
    max_used = std::max(max_used, (*e)->stats().kv_blocks_used);
    ASSERT_LT(++steps, 1000);
  }
  const Result1 r = collect(**h);
  EXPECT_EQ(r.finish, FinishReason::kLength);
  EXPECT_EQ(static_cast<int32_t>(r.tokens.size()), 128 - 20);
  EXPECT_EQ(max_used, 8);  // grew to the whole pool, one block at a time
  EXPECT_EQ((*e)->stats().kv_blocks_used, 0);
}

TEST(EngineAdmission, ConcurrentWholeContextRequestsPreemptInsteadOfRefusing) {
  model::Model* m = stories();
  if (m == nullptr) GTEST_SKIP() << "shared test data not found: " << kStories;
  const int kRequests = 4;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kRequests; ++i) prompts.push_back(prompt_of(*m, 5 + 6 * i));
  // Each alone first (the reference), on a pool that fits it exactly.
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    auto e = Engine::create(*m, small_pool(8));
    ASSERT_TRUE(e.ok());
    auto h = (*e)->submit(req(p, 128 - static_cast<int32_t>(p.size())));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    alone.push_back(collect(**h).tokens);
  }
  // All four together: together they need 4x the pool; none is refused.
  auto e = Engine::create(*m, small_pool(8));
  ASSERT_TRUE(e.ok());
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const auto& p : prompts) {
    auto h = (*e)->submit(req(p, 128 - static_cast<int32_t>(p.size())));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    hs.push_back(*h);
  }
  int64_t preemptions = 0;
  for (int i = 0; i < kRequests; ++i) {
    const Result1 r = collect(*hs[static_cast<size_t>(i)]);
    EXPECT_EQ(r.finish, FinishReason::kLength) << "request " << i;
    EXPECT_EQ(r.tokens, alone[static_cast<size_t>(i)]) << "request " << i;
    preemptions += r.preemptions;
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ((*e)->stats().num_preemptions, preemptions);
  for (int i = 0; i < 200 && (*e)->stats().kv_blocks_used != 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ((*e)->stats().kv_blocks_used, 0);
}

TEST(EngineAdmission, RequestThatCanNeverFitSaysHowMuchWould) {
  model::Model* m = stories();
  if (m == nullptr) GTEST_SKIP() << "shared test data not found: " << kStories;
  auto e = Engine::create(*m, small_pool(2));  // 32 tokens of KV
  ASSERT_TRUE(e.ok());
  ASSERT_EQ((*e)->max_model_len(), 32);
  auto r = (*e)->submit(req({1, 2, 3}, 40));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("max_tokens can be at most 29"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("capped by the KV cache"), std::string::npos);
  auto long_prompt = (*e)->submit(req(std::vector<int32_t>(40, 5), 1));
  ASSERT_FALSE(long_prompt.ok());
  EXPECT_NE(long_prompt.status().message().find("at most 31 prompt tokens fit"), std::string::npos)
      << long_prompt.status().message();
  // What fits is accepted.
  auto ok = (*e)->submit(req({1, 2, 3}, 29));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(collect(**ok).tokens.size(), 29u);
}

}  // namespace
}  // namespace ts::engine
