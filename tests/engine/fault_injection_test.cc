// Engine-fault containment: a fault while processing one request (allocation failure, a
// tokenizer exception, NaN logits) ends that request with kError and a kInternal status, while
// the requests beside it in the same batch, and later ones, are served normally.
#include "engine/fault_injection.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "test_util.h"

namespace ts::engine {
namespace {

struct Outcome {
  FinishReason finish = FinishReason::kNone;
  Status error;
  int64_t tokens = 0;
};

Outcome run(RequestHandle& h) {
  Outcome o;
  for (const Event& ev : h.wait_all()) {
    o.tokens += int64_t(ev.token_ids.size());
    if (ev.finish != FinishReason::kNone) {
      o.finish = ev.finish;
      o.error = ev.error;
    }
  }
  return o;
}

Request req(int32_t max_tokens, uint64_t seed) {
  Request r;
  r.prompt_tokens = {1, 400, 401, 402};
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  r.sampling.seed = seed;
  return r;
}

TEST(EngineFaults, OneFaultyRequestEndsAloneAndTheEngineKeepsServing) {
  std::string path = ::ts::testing::shared_path("models/stories260K/stories260K-f32.gguf");
  if (path.empty()) GTEST_SKIP() << "shared test data not found: stories260K-f32.gguf";
  auto m = model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EngineOptions o;
  o.num_kv_blocks = 128;
  o.num_threads = 1;
  auto e = Engine::create(**m, o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  // Seeds 11..13 pick the fault; other requests are healthy.
  set_fault_hook([](const Request& r) {
    switch (r.sampling.seed.value_or(0)) {
      case 11: return Fault::kAllocFailure;
      case 12: return Fault::kTokenizerError;
      case 13: return Fault::kNanLogits;
      default: return Fault::kNone;
    }
  });
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (uint64_t seed : {1, 11, 2, 12, 3, 13}) {
    auto h = (*e)->submit(req(8, seed));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    hs.push_back(*h);
  }
  for (size_t i = 0; i < hs.size(); ++i) {
    Outcome out = run(*hs[i]);
    if (i % 2 == 0) {
      EXPECT_EQ(out.finish, FinishReason::kLength) << "healthy request " << i;
      EXPECT_EQ(out.tokens, 8);
    } else {
      EXPECT_EQ(out.finish, FinishReason::kError) << "faulty request " << i;
      EXPECT_EQ(out.error.code(), StatusCode::kInternal) << out.error.to_string();
      EXPECT_FALSE(out.error.message().empty());
    }
  }
  set_fault_hook({});
  auto after = (*e)->submit(req(4, 13));  // same seed, hook removed: served normally
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(run(**after).finish, FinishReason::kLength);
  for (int i = 0; i < 200 && !(*e)->idle(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ((*e)->stats().kv_blocks_used, 0) << "a failed request leaked KV blocks";
}

}  // namespace
}  // namespace ts::engine
