// Speculative decoding through the real engine on the real stories260K model (f32 target; its
// f16 copy as the draft model): output must be token-identical to non-speculative output at
// every batch composition (greedy, and seeded sampling), with stop strings, max_tokens,
// logprobs, constraints, n > 1, preemption and cancellation; the KV pool ends intact and the
// prefix cache only ever holds verified tokens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <thread>

#include "engine/engine.h"
#include "model/model.h"
#include "structured/constraint.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::engine {
namespace {

using namespace std::chrono_literals;

constexpr const char* kStories = "models/stories260K/stories260K-f32.gguf";
constexpr const char* kStoriesF16 = "models/stories260K/stories260K-f16.gguf";

model::Model* load_cached(const std::string& path) {
  static std::map<std::string, std::unique_ptr<model::Model>> models;
  auto& m = models[path];
  if (!m) {
    auto r = model::Model::load(path);
    if (!r.ok()) {
      ADD_FAILURE() << "load " << path << ": " << r.status().to_string();
      return nullptr;
    }
    m = std::move(r).value();
  }
  return m.get();
}

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  Usage usage;
  std::vector<LogprobEntry> logprobs;
  bool operator==(const Output& o) const {
    if (tokens != o.tokens || text != o.text || finish != o.finish ||
        usage.completion_tokens != o.usage.completion_tokens || logprobs.size() != o.logprobs.size()) {
      return false;
    }
    for (size_t i = 0; i < logprobs.size(); ++i) {
      if (logprobs[i].sampled.token != o.logprobs[i].sampled.token ||
          std::abs(logprobs[i].sampled.logprob - o.logprobs[i].sampled.logprob) > 1e-4f ||
          logprobs[i].top.size() != o.logprobs[i].top.size()) {
        return false;
      }
    }
    return true;
  }
};

std::vector<Output> collect(RequestHandle& h) {
  std::vector<Output> outs(static_cast<size_t>(h.num_choices()));
  for (const Event& ev : h.wait_all()) {
    Output& o = outs.at(static_cast<size_t>(ev.index));
    o.tokens.insert(o.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    o.text += ev.text;
    o.logprobs.insert(o.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.finish != FinishReason::kNone) o.finish = ev.finish;
    if (ev.request_done) for (auto& x : outs) x.usage = ev.usage;
  }
  return outs;
}

EngineOptions opts(SpecMode mode, int32_t max_batch_tokens = 128, int32_t blocks = 256) {
  EngineOptions o;
  o.num_kv_blocks = blocks;
  o.max_seqs = 16;
  o.max_batch_tokens = max_batch_tokens;
  o.num_threads = 1;
  o.seed = 77;
  o.start_thread = false;
  o.spec.mode = mode;
  o.spec.draft_tokens = 5;
  o.spec.ngram = {.ngram_min = 1, .ngram_max = 3};
  o.spec.cost_model = false;  // wall-clock independent: every eligible sequence drafts
  if (mode == SpecMode::kDraft) o.spec.draft_model = load_cached(testing::shared_path(kStoriesF16));
  return o;
}

// Runs the requests on a fresh engine stepped by this thread: all submitted at once (`staggered`
// = 0) or one more every `staggered` steps (different batch compositions).
struct RunResult {
  std::vector<std::vector<Output>> outs;
  EngineStats stats;
};
RunResult run(model::Model& m, EngineOptions o, const std::vector<Request>& reqs, int staggered = 0,
              int cancel_index = -1, int cancel_after_steps = 0) {
  RunResult res;
  auto e = Engine::create(m, o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return res;
  std::vector<std::shared_ptr<RequestHandle>> hs;
  size_t next = 0;
  int steps = 0;
  while (next < reqs.size() || !(*e)->idle()) {
    if (next < reqs.size() && (staggered == 0 || steps % staggered == 0)) {
      for (; next < reqs.size(); ++next) {
        auto h = (*e)->submit(reqs[next]);
        EXPECT_TRUE(h.ok()) << h.status().to_string();
        if (!h.ok()) return res;
        hs.push_back(*h);
        if (staggered != 0) { ++next; break; }
      }
    }
    if (cancel_index >= 0 && steps == cancel_after_steps && cancel_index < static_cast<int>(hs.size())) {
      hs[static_cast<size_t>(cancel_index)]->cancel();
    }
    (*e)->step();
    ++steps;
    EXPECT_LT(steps, 100000);
    if (steps >= 100000) break;
  }
  for (auto& h : hs) res.outs.push_back(collect(*h));
  res.stats = (*e)->stats();
  EXPECT_EQ(res.stats.kv_blocks_used, 0) << "blocks still referenced";
  EXPECT_EQ(res.stats.num_running, 0);
  return res;
}

// Prompts over a repetitive story (drafts from the prompt get accepted) and fresh text.
std::vector<Request> story_requests(const model::Model& m, int count, int32_t max_tokens, float temperature) {
  const std::string story =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
      "One day, she saw a big red ball under a tree. Lily was sad. Her mom said, \"Let's go find the ball.\" ";
  const auto ids = m.tokenizer().encode(story + story, false, false);
  std::vector<Request> out;
  for (int i = 0; i < count; ++i) {
    Request r;
    r.prompt_tokens = {m.tokenizer().bos_id()};
    // stories260K's context is 128 tokens: prompt + max_tokens must fit.
    const size_t room = static_cast<size_t>(127 - max_tokens);
    const size_t len = std::min(room, 3 + static_cast<size_t>((i * 17) % (ids.size() - 3)));
    r.prompt_tokens.insert(r.prompt_tokens.end(), ids.begin(), ids.begin() + static_cast<long>(len));
    r.sampling.max_tokens = max_tokens;
    r.sampling.temperature = temperature;
    r.sampling.top_p = temperature > 0 ? 0.9f : 1.0f;
    r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = i % 3 == 0;
    r.sampling.top_logprobs = i % 3 == 0 ? 2 : 0;
    out.push_back(std::move(r));
  }
  return out;
}

void expect_same(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_EQ(a.outs.size(), b.outs.size());
  for (size_t i = 0; i < a.outs.size(); ++i) {
    ASSERT_EQ(a.outs[i].size(), b.outs[i].size());
    for (size_t c = 0; c < a.outs[i].size(); ++c) {
      EXPECT_TRUE(a.outs[i][c] == b.outs[i][c])
          << what << ": request " << i << " choice " << c << "\n off: " << a.outs[i][c].text
          << "\n spec: " << b.outs[i][c].text;
    }
  }
}

void equivalence(SpecMode mode, float temperature, int32_t threads = 1) {
  TS_REQUIRE_SHARED(path, kStories);
  TS_REQUIRE_SHARED(f16, kStoriesF16);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  // Sanitizer builds run ~20x slower: fewer requests and mixes there (the same code paths).
  const bool slow = std::getenv("TS_SANITIZER_BUILD") != nullptr;
  const auto reqs = story_requests(*m, slow ? 4 : 8, slow ? 32 : 48, temperature);
  // Batch mixes: one at a time, all together, staggered arrivals, a tight token budget (chunked
  // prefill beside decodes, drafts cut short by the budget).
  struct Mix { int32_t budget; int staggered; int32_t max_seqs; };
  std::vector<Mix> mixes{Mix{128, 0, 1}, Mix{128, 0, 16}, Mix{128, 3, 16}, Mix{24, 2, 16}};
  if (slow || threads > 1) mixes = {Mix{128, 3, 16}, Mix{24, 2, 16}};
  for (const Mix mix : mixes) {
    EngineOptions off = opts(SpecMode::kOff, mix.budget);
    off.max_seqs = mix.max_seqs;
    off.num_threads = threads;
    EngineOptions on = opts(mode, mix.budget);
    on.max_seqs = mix.max_seqs;
    on.num_threads = threads;
    const std::string what = std::string(spec_mode_name(mode)) + " budget " + std::to_string(mix.budget) +
                             " staggered " + std::to_string(mix.staggered) + " max_seqs " +
                             std::to_string(mix.max_seqs);
    const RunResult a = run(*m, off, reqs, mix.staggered);
    const RunResult b = run(*m, on, reqs, mix.staggered);
    expect_same(a, b, what);
    EXPECT_EQ(a.stats.spec_num_drafts, 0);
    EXPECT_GT(b.stats.spec_num_drafts, 0) << what;
    EXPECT_GT(b.stats.spec_num_accepted_tokens, 0) << what;
    EXPECT_LE(b.stats.spec_num_accepted_tokens, b.stats.spec_num_draft_tokens);
    EXPECT_EQ(a.stats.generation_tokens_total, b.stats.generation_tokens_total) << what;
    EXPECT_LT(b.stats.num_steps, a.stats.num_steps) << what;  // accepted drafts save steps
    int64_t by_pos = 0;
    for (int64_t v : b.stats.spec_accepted_by_pos) by_pos += v;
    EXPECT_EQ(by_pos, b.stats.spec_num_accepted_tokens);
    EXPECT_GE(b.stats.spec_accepted_by_pos[0], b.stats.spec_accepted_by_pos[1]);
  }
}

TEST(SpecEngine, GreedyIdenticalNgram) { equivalence(SpecMode::kNgram, 0.0f); }
TEST(SpecEngine, GreedyIdenticalDraftModel) { equivalence(SpecMode::kDraft, 0.0f); }
TEST(SpecEngine, SeededSamplingIdenticalNgram) { equivalence(SpecMode::kNgram, 0.8f); }
TEST(SpecEngine, SeededSamplingIdenticalDraftModel) { equivalence(SpecMode::kDraft, 0.8f); }
// Two threads: the engine samples plain decode rows in parallel before the serial pass
// (presample); a drafting sequence's rows (one per drafted position) must neither shift the
// other sequences' rows nor draw from its generator there.
TEST(SpecEngine, SeededSamplingIdenticalNgramParallelSampling) { equivalence(SpecMode::kNgram, 0.8f, 2); }

TEST(SpecEngine, StopStringsMaxTokensAndNChoices) {
  TS_REQUIRE_SHARED(path, kStories);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  auto reqs = story_requests(*m, 6, 40, 0.0f);
  // Stop strings taken from the middle of the non-speculative output; n > 1 with sampling.
  const RunResult plain = run(*m, opts(SpecMode::kOff), reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::string& t = plain.outs[i][0].text;
    if (t.size() > 20) reqs[i].sampling.stop = {t.substr(t.size() / 2, 4)};
    reqs[i].sampling.max_tokens = 10 + static_cast<int32_t>(i) * 5;
    if (i % 2 == 1) {
      reqs[i].sampling.n = 3;
      reqs[i].sampling.temperature = 0.7f;
    }
  }
  const RunResult a = run(*m, opts(SpecMode::kOff), reqs);
  const RunResult b = run(*m, opts(SpecMode::kNgram), reqs);
  expect_same(a, b, "stop/max_tokens/n");
  int stopped = 0;
  for (const auto& o : a.outs) stopped += o[0].finish == FinishReason::kStop;
  EXPECT_GT(stopped, 0);  // the stop strings really ended some choices
  EXPECT_GT(b.stats.spec_num_accepted_tokens, 0);
}

TEST(SpecEngine, ConstrainedOutputIdentical) {
  TS_REQUIRE_SHARED(path, kStories);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  auto c = structured::compile({.kind = structured::ConstraintKind::kRegex, .source = "(Lily (was|is) (sad|happy)\\. ){2,6}"},
                               structured::TokenIndex::for_tokenizer(m->tokenizer()));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto reqs = story_requests(*m, 4, 48, 0.0f);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].constraint = *c;
    reqs[i].sampling.ignore_eos = false;
    if (i % 2 == 1) reqs[i].sampling.temperature = 0.9f;
  }
  const RunResult a = run(*m, opts(SpecMode::kOff), reqs);
  const RunResult b = run(*m, opts(SpecMode::kNgram), reqs);
  expect_same(a, b, "constrained");
  for (const auto& o : b.outs) EXPECT_EQ(o[0].text.rfind("Lily ", 0), 0u) << o[0].text;
  EXPECT_GT(b.stats.spec_num_drafts, 0);
}

TEST(SpecEngine, PreemptionAndCancellation) {
  TS_REQUIRE_SHARED(path, kStories);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  const auto reqs = story_requests(*m, 8, 80, 0.0f);
  // A pool far too small for eight long sequences: preemption (recompute) must happen.
  const RunResult a = run(*m, opts(SpecMode::kOff, 128, 24), reqs);
  for (SpecMode mode : {SpecMode::kNgram, SpecMode::kDraft}) {
    const RunResult b = run(*m, opts(mode, 128, 24), reqs);
    EXPECT_GT(b.stats.num_preemptions, 0);
    expect_same(a, b, std::string("preemption ") + spec_mode_name(mode));
    EXPECT_GT(b.stats.spec_num_accepted_tokens, 0);
  }
  // Cancel request 2 after a few steps: it ends cancelled, the rest as before, pool intact (run).
  const RunResult c = run(*m, opts(SpecMode::kNgram), reqs, 0, 2, 6);
  ASSERT_EQ(c.outs.size(), reqs.size());
  EXPECT_EQ(c.outs[2][0].finish, FinishReason::kCancelled);
  EXPECT_LT(c.outs[2][0].tokens.size(), 80u);
  EXPECT_EQ(c.outs[2][0].usage.completion_tokens, static_cast<int64_t>(c.outs[2][0].tokens.size()));
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i != 2) {
      EXPECT_EQ(c.outs[i][0].tokens, a.outs[i][0].tokens) << i;
    }
  }
}

TEST(SpecEngine, PrefixCacheHoldsOnlyVerifiedTokens) {
  TS_REQUIRE_SHARED(path, kStories);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  auto reqs = story_requests(*m, 1, 70, 0.0f);
  auto e = Engine::create(*m, opts(SpecMode::kNgram));
  ASSERT_TRUE(e.ok());
  auto step_all = [&] { for (int i = 0; i < 10000 && !(*e)->idle(); ++i) (*e)->step(); };
  auto h = (*e)->submit(reqs[0]);
  ASSERT_TRUE(h.ok());
  step_all();
  const auto first = collect(**h)[0];
  ASSERT_EQ(first.tokens.size(), 70u);
  EXPECT_GT((*e)->stats().spec_num_draft_tokens, (*e)->stats().spec_num_accepted_tokens);  // some rejected
  // Prompt + output as a new prompt: its full blocks come from the cache, and the continuation
  // must equal a fresh engine's (a block registered with rejected-draft KV would change it).
  Request next = reqs[0];
  next.prompt_tokens.insert(next.prompt_tokens.end(), first.tokens.begin(), first.tokens.end() - 1);
  next.sampling.max_tokens = 20;
  auto h2 = (*e)->submit(next);
  ASSERT_TRUE(h2.ok());
  step_all();
  const auto second = collect(**h2)[0];
  const int32_t bs = opts(SpecMode::kOff).block_size;
  EXPECT_EQ(second.usage.cached_tokens, (static_cast<int32_t>(next.prompt_tokens.size()) - 1) / bs * bs);
  EXPECT_EQ(second.tokens[0], first.tokens.back());
  const RunResult fresh = run(*m, opts(SpecMode::kOff), {next});
  EXPECT_EQ(second.tokens, fresh.outs[0][0].tokens);
  EXPECT_EQ((*e)->stats().kv_blocks_used, 0);
}

TEST(SpecEngine, OptOutAndGlobalPause) {
  TS_REQUIRE_SHARED(path, kStories);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  auto reqs = story_requests(*m, 4, 30, 0.0f);
  for (auto& r : reqs) r.speculative = false;
  EXPECT_EQ(run(*m, opts(SpecMode::kNgram), reqs).stats.spec_num_drafts, 0);
  // Four equal requests decode side by side from start to end: above max_decode_seqs, nobody drafts.
  reqs = story_requests(*m, 1, 30, 0.0f);
  reqs = {reqs[0], reqs[0], reqs[0], reqs[0]};
  EngineOptions o = opts(SpecMode::kNgram);
  o.enable_prefix_cache = false;
  o.spec.max_decode_seqs = 3;
  EXPECT_EQ(run(*m, o, reqs).stats.spec_num_drafts, 0);
  o.spec.max_decode_seqs = 4;
  EXPECT_GT(run(*m, o, reqs).stats.spec_num_drafts, 0);
}

TEST(SpecEngine, DraftVocabularyMismatchRefused) {
  TS_REQUIRE_SHARED(path, kStories);
  TS_REQUIRE_SHARED(qwen, "golden/models/tiny-qwen2-q8_0.gguf");
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  EngineOptions o = opts(SpecMode::kOff);
  o.spec.mode = SpecMode::kDraft;
  o.spec.draft_model = load_cached(qwen);
  auto e = Engine::create(*m, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("at token"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace ts::engine

namespace ts::engine {
namespace {

TEST(SpecEngine, GreedyIdenticalQ8Qwen2) {
  // Q8_0 weights (activations quantized per row) and a 151,936-token vocabulary: verification
  // rows come from multi-token slices, plain decoding from single tokens; ids must not differ.
  TS_REQUIRE_SHARED(path, "golden/models/tiny-qwen2-q8_0.gguf");
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    Request r;
    r.prompt_tokens = m->tokenizer().encode(i % 2 ? "the cat sat on the mat, the cat sat on the" : "one two three one two", false, false);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 12 + i;
    r.sampling.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  const RunResult a = run(*m, opts(SpecMode::kOff, 64, 64), reqs, 1);
  const RunResult b = run(*m, opts(SpecMode::kNgram, 64, 64), reqs, 1);
  expect_same(a, b, "q8 qwen2");
  EXPECT_GT(b.stats.spec_num_draft_tokens, 0);
}

}  // namespace
}  // namespace ts::engine

namespace ts::engine {
namespace {

TEST(SpecEngine, DraftKvCountsWithinTheKvBudget) {
  TS_REQUIRE_SHARED(path, kStories);
  TS_REQUIRE_SHARED(dpath, kStoriesF16);
  model::Model* m = load_cached(path);
  model::Model* d = load_cached(dpath);
  ASSERT_NE(m, nullptr);
  ASSERT_NE(d, nullptr);
  const size_t budget = size_t{1} << 20;
  const size_t tb = model::KvStorage::bytes_per_block(m->config(), model::KvType::kF16, 16);
  const size_t db = model::KvStorage::bytes_per_block(d->config(), model::KvType::kF16, 16);
  EXPECT_EQ(spec_budget_blocks(tb, 1, db, budget), static_cast<int32_t>(budget / (tb + db)));
  EXPECT_EQ(spec_budget_blocks(tb, 1, db, tb + db - 1), 0);
  // One draft block per 4 target blocks (window-only KV with 4 full-attention groups): every
  // partial group of 4 still needs its draft block, and the pair never exceeds the budget.
  for (size_t b : {tb + db - 1, tb + db, 3 * tb + db, 4 * tb + db, 5 * tb + db, 5 * tb + 2 * db, budget}) {
    const int32_t n = spec_budget_blocks(tb, 4, db, b);
    EXPECT_LE(n * tb + spec_draft_blocks(n, 4) * db, b) << b;
    EXPECT_GT((n + 1) * tb + spec_draft_blocks(n + 1, 4) * db, b) << b;  // the largest that fits
  }
  auto blocks_with = [&](SpecMode mode) {
    EngineOptions o = opts(mode);
    o.num_kv_blocks = 0;  // sized from the budget
    o.kv_cache_bytes = budget;
    auto e = Engine::create(*m, o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? (*e)->stats().kv_blocks_total : 0;
  };
  const int32_t off = blocks_with(SpecMode::kOff), drafted = blocks_with(SpecMode::kDraft);
  EXPECT_EQ(off, static_cast<int32_t>(budget / tb));
  // Target blocks plus the draft's block beside each stay within the budget, with no room for
  // one more pair.
  EXPECT_LE(static_cast<size_t>(drafted) * (tb + db), budget);
  EXPECT_GT(static_cast<size_t>(drafted + 1) * (tb + db), budget);
  EXPECT_LT(drafted, off);
}

TEST(SpecEngine, CostModelNeverRunsADraftAsLargeAsTheTarget) {
  // The target as its own draft (a second instance: a Model's scratch serves one engine): a
  // drafted position costs a whole target forward, so even drafts that are always accepted
  // cannot pay; the policy knows it from the weight sizes before running it (no clock involved).
  TS_REQUIRE_SHARED(path, kStories);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  auto twin = model::Model::load(path);
  ASSERT_TRUE(twin.ok());
  const auto reqs = story_requests(*m, 3, 40, 0.0f);
  const RunResult base = run(*m, opts(SpecMode::kOff), reqs);
  EngineOptions o = opts(SpecMode::kDraft);
  o.spec.draft_model = twin->get();
  o.spec.cost_model = true;
  const RunResult r = run(*m, o, reqs);
  EXPECT_EQ(r.stats.spec_num_drafts, 0);
  EXPECT_EQ(r.outs, base.outs);
  // Without the cost model the same draft is run and always accepted (the check can fail).
  o.spec.cost_model = false;
  const RunResult always = run(*m, o, reqs);
  EXPECT_GT(always.stats.spec_num_drafts, 0);
  EXPECT_EQ(always.stats.spec_num_accepted_tokens, always.stats.spec_num_draft_tokens);
  EXPECT_EQ(always.outs, base.outs);
}

}  // namespace
}  // namespace ts::engine
