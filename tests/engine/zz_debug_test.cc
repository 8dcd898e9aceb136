#include "engine/engine.h"
#include <gtest/gtest.h>
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
namespace ts::engine {
namespace {
std::vector<int32_t> gen(model::Model& m, std::vector<int32_t> p, int n, bool cache, int budget) {
  EngineOptions o; o.num_kv_blocks = 64; o.max_seqs = 16; o.max_batch_tokens = budget; o.num_threads = 1;
  o.enable_prefix_cache = cache; o.start_thread = false;
  auto e = std::move(Engine::create(m, o)).value();
  Request r; r.prompt_tokens = p; r.sampling.max_tokens = n; r.sampling.temperature = 0; r.sampling.ignore_eos = true;
  auto h = *e->submit(r);
  while (e->step()) {}
  std::vector<int32_t> out;
  for (auto& ev : h->wait_all()) out.insert(out.end(), ev.token_ids.begin(), ev.token_ids.end());
  return out;
}
TEST(Dbg, Recompute) {
  auto m = std::move(model::Model::load(testing::shared_path("models/stories260K/stories260K-f32.gguf"))).value();
  std::vector<int32_t> p{1, 403, 407, 261, 378};
  auto full = gen(*m, p, 60, false, 64);
  for (int budget : {64, 16, 7}) {
    std::vector<int32_t> p2 = p; p2.insert(p2.end(), full.begin(), full.begin() + 40);
    auto rest = gen(*m, p2, 20, false, budget);
    EXPECT_EQ(rest, std::vector<int32_t>(full.begin() + 40, full.end())) << "budget " << budget;
  }
}
}  // namespace
}  // namespace ts::engine
namespace ts::engine { namespace {
TEST(Dbg, SmallPool) {
  auto m = std::move(model::Model::load(testing::shared_path("models/stories260K/stories260K-f32.gguf"))).value();
  for (bool cache : {false, true}) {
    EngineOptions o; o.num_kv_blocks = 10; o.max_seqs = 16; o.max_batch_tokens = 64; o.num_threads = 1;
    o.enable_prefix_cache = cache; o.start_thread = false;
    auto e = std::move(Engine::create(m.get()[0], o)).value();
    std::vector<std::shared_ptr<RequestHandle>> hs; std::vector<std::vector<int32_t>> ps;
  const std::string text =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
      "One day, she saw a big red ball under a tree. She wanted to play with it, but a dog came and "
      "took the ball. Lily was sad. Her mom said, \"Let's go find the dog.\" They walked and walked "
      "until they found the dog sleeping next to the ball. Lily smiled and hugged the dog.";
  auto ids = m->tokenizer().encode(text, false, false);
    for (int i = 0; i < 8; ++i) {
      Request r; r.prompt_tokens = {1};
    const size_t len = 1 + static_cast<size_t>((i * 7) % 45);
    const size_t off = static_cast<size_t>((i * 13) % 40);
    for (size_t k = 0; k < len && off + k < ids.size(); ++k) r.prompt_tokens.push_back(ids[off + k]);
      r.sampling.max_tokens = 48; r.sampling.temperature = 0; r.sampling.ignore_eos = true;
      ps.push_back(r.prompt_tokens); hs.push_back(*e->submit(r));
    }
    while (e->step()) {}
    printf("cache %d preemptions %ld\n", cache, (long)e->stats().num_preemptions);
    for (int i = 0; i < 8; ++i) {
      std::vector<int32_t> out;
      for (auto& ev : hs[i]->wait_all()) out.insert(out.end(), ev.token_ids.begin(), ev.token_ids.end());
      EXPECT_EQ(out, gen(*m, ps[i], 48, false, 64)) << "cache " << cache << " req " << i;
    }
  }
}
}}
