// Scheduler decisions driven by a tiny simulation of the engine (no model): after each step the
// scheduled tokens count as computed, and a sequence whose chunk reached its end gets one new
// token appended (as if sampled).
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>

namespace ts::engine {
namespace {

struct Sim {
  BlockPool pool;
  KvCacheManager kv;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  int64_t next_id = 1;

  Sim(int32_t num_blocks, int32_t block_size, SchedulerOptions opts)
      : pool(num_blocks, true), kv(pool, block_size), sched(opts, kv) {}

  Sequence* add(int32_t prompt_len, Tier tier = Tier::kInteractive, int32_t first_token = 1) {
    auto s = std::make_unique<Sequence>();
    s->id = next_id;
    s->request_order = next_id++;
    s->tier = tier;
    s->priority = sched.options().tiers[static_cast<int>(tier)].priority;
    for (int32_t i = 0; i < prompt_len; ++i) s->tokens.push_back(first_token + i);
    s->num_prompt_tokens = prompt_len;
    Sequence* p = s.get();
    seqs.push_back(std::move(s));
    sched.add(p);
    return p;
  }

  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule(Clock::now());
    for (const auto& sc : out.scheduled) {
      sc.seq->num_computed_tokens += sc.num_tokens;
      kv.commit_computed(*sc.seq);
      if (sc.wants_logits) sc.seq->tokens.push_back(7);
    }
    return out;
  }
};

SchedulerOptions opts(int32_t max_seqs, int32_t budget) {
  SchedulerOptions o;
  o.max_seqs = max_seqs;
  o.max_batch_tokens = budget;
  o.tiers[0].priority = 1;  // interactive
  o.tiers[1].priority = 0;  // batch
  return o;
}

int32_t tokens_of(const SchedulerOutput& out, const Sequence* s) {
  for (const auto& sc : out.scheduled) {
    if (sc.seq == s) return sc.num_tokens;
  }
  return 0;
}

TEST(Scheduler, ChunkedPrefillUnderTokenBudget) {
  Sim sim(16, 4, opts(8, 8));
  Sequence* s = sim.add(20);
  auto o1 = sim.step();
  EXPECT_EQ(tokens_of(o1, s), 8);
  EXPECT_FALSE(o1.scheduled[0].wants_logits);
  auto o2 = sim.step();
  EXPECT_EQ(tokens_of(o2, s), 8);
  auto o3 = sim.step();
  EXPECT_EQ(tokens_of(o3, s), 4);
  EXPECT_TRUE(o3.scheduled[0].wants_logits);
  auto o4 = sim.step();  // now a decode
  EXPECT_EQ(tokens_of(o4, s), 1);
  EXPECT_TRUE(o4.scheduled[0].wants_logits);
}

TEST(Scheduler, RunningDecodesComeBeforeNewPrefill) {
  Sim sim(64, 4, opts(8, 10));
  Sequence* a = sim.add(3);
  Sequence* b = sim.add(3);
  sim.step();                      // both prompts (6 tokens)
  Sequence* c = sim.add(40);       // long prompt arrives
  auto o = sim.step();
  EXPECT_EQ(tokens_of(o, a), 1);
  EXPECT_EQ(tokens_of(o, b), 1);
  EXPECT_EQ(tokens_of(o, c), 8);   // what the budget leaves
  o = sim.step();
  EXPECT_EQ(tokens_of(o, a), 1);   // decodes never stall behind the long prefill
  EXPECT_EQ(tokens_of(o, b), 1);
  EXPECT_EQ(tokens_of(o, c), 8);
  EXPECT_EQ(o.num_tokens, 10);
}

TEST(Scheduler, MaxSeqsCapsRunningSequences) {
  Sim sim(64, 4, opts(2, 100));
  sim.add(2);
  sim.add(2);
  Sequence* c = sim.add(2);
  auto o = sim.step();
  EXPECT_EQ(o.scheduled.size(), 2u);
  EXPECT_EQ(c->status, SeqStatus::kWaiting);
  sim.sched.remove(sim.seqs[0].get());
  o = sim.step();
  EXPECT_EQ(tokens_of(o, c), 2);
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOutAndResumes) {
  Sim sim(4, 4, opts(8, 64));  // 16 token slots in all
  Sequence* a = sim.add(6);
  Sequence* b = sim.add(6);
  auto o = sim.step();          // a: 2 blocks, b: 2 blocks
  EXPECT_EQ(o.scheduled.size(), 2u);
  EXPECT_EQ(sim.pool.num_free(), 0);
  o = sim.step();               // positions 6 and 7 fit in the second blocks
  EXPECT_TRUE(o.preempted.empty());
  o = sim.step();
  EXPECT_TRUE(o.preempted.empty());
  o = sim.step();               // a needs a third block: b (newest) is preempted
  ASSERT_EQ(o.preempted.size(), 1u);
  EXPECT_EQ(o.preempted[0], b);
  EXPECT_EQ(b->status, SeqStatus::kWaiting);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(tokens_of(o, a), 1);
  EXPECT_EQ(tokens_of(o, b), 0);
  const int32_t b_len = b->num_tokens();
  sim.sched.remove(a);          // a finishes
  o = sim.step();               // b resumes: its two full blocks come from the prefix cache
  EXPECT_EQ(b->status, SeqStatus::kRunning);
  EXPECT_EQ(b->num_cached_tokens, 8);
  EXPECT_EQ(tokens_of(o, b), b_len - 8);
  EXPECT_EQ(b->num_tokens(), b_len + 1);
  sim.sched.remove(b);
  EXPECT_EQ(sim.pool.num_used(), 0);
}

TEST(Scheduler, InteractiveAdmittedAheadOfBatchBacklogByPreemptingBatch) {
  Sim sim(64, 4, opts(4, 64));
  std::vector<Sequence*> batch;
  for (int i = 0; i < 10; ++i) batch.push_back(sim.add(4, Tier::kBatch, 100 + 10 * i));
  sim.step();
  EXPECT_EQ(sim.sched.num_running(Tier::kBatch), 4);
  Sequence* inter = sim.add(4, Tier::kInteractive, 500);
  auto o = sim.step();
  EXPECT_EQ(tokens_of(o, inter), 4);  // first token in the very next step
  EXPECT_TRUE(o.scheduled[0].seq == inter || tokens_of(o, inter) > 0);
  ASSERT_EQ(o.preempted.size(), 1u);
  EXPECT_EQ(o.preempted[0], batch[3]);  // newest batch sequence gave its seat
  EXPECT_EQ(sim.sched.num_running(Tier::kInteractive), 1);
  EXPECT_EQ(sim.sched.num_waiting(Tier::kBatch), 7);
  EXPECT_EQ(sim.sched.options().tiers[0].priority, 1);
  // The preempted batch sequence is first in its queue again.
  sim.sched.remove(inter);
  o = sim.step();
  EXPECT_GT(tokens_of(o, batch[3]), 0);
  for (auto& s : sim.seqs) sim.sched.remove(s.get());
  EXPECT_EQ(sim.pool.num_used(), 0);
}

TEST(Scheduler, TierLimitsCapRunningAndKvShare) {
  SchedulerOptions o = opts(16, 256);
  o.tiers[1].max_running = 2;
  Sim sim(64, 4, o);
  for (int i = 0; i < 4; ++i) sim.add(4, Tier::kBatch, 10 * i + 1);
  auto out = sim.step();
  EXPECT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(sim.sched.num_waiting(Tier::kBatch), 2);

  SchedulerOptions o2 = opts(16, 256);
  o2.tiers[1].kv_share = 0.25f;  // 4 of 16 blocks
  Sim sim2(16, 4, o2);
  for (int i = 0; i < 4; ++i) sim2.add(8, Tier::kBatch, 10 * i + 1);  // 2 blocks each
  out = sim2.step();
  EXPECT_EQ(out.scheduled.size(), 2u);
  sim2.add(8, Tier::kInteractive, 900);  // interactive is not bound by batch's share
  out = sim2.step();
  EXPECT_EQ(sim2.sched.num_running(Tier::kInteractive), 1);
}

TEST(Scheduler, LatencyTargetPausesLowerTierAdmission) {
  SchedulerOptions o = opts(16, 256);
  o.tiers[0].max_running = 1;
  o.tiers[0].latency_target = std::chrono::milliseconds(1);
  Sim sim(64, 4, o);
  sim.add(4, Tier::kInteractive, 1);
  Sequence* late = sim.add(4, Tier::kInteractive, 50);
  late->arrival = Clock::now() - std::chrono::seconds(1);  // waited past its target
  sim.step();
  Sequence* b = sim.add(4, Tier::kBatch, 100);
  auto out = sim.step();
  EXPECT_EQ(tokens_of(out, b), 0);  // interactive overdue: batch admits nothing
  EXPECT_EQ(b->status, SeqStatus::kWaiting);
  sim.sched.remove(late);
  out = sim.step();
  EXPECT_EQ(tokens_of(out, b), 4);
}

}  // namespace
}  // namespace ts::engine

namespace ts::engine {
namespace {

using namespace std::chrono_literals;

// A fake host: the cost model is taught steps of a known cost (no clock involved).
SchedulerOptions tiered(int32_t budget = 512) {
  SchedulerOptions o = opts(32, budget);
  o.tiers[0].latency_target = 500ms;  // interactive: cut batch steps to 125 ms (250 ms idle)
  o.step_latency_fraction = 0.25f;
  o.idle_step_latency_fraction = 0.5f;
  o.min_lower_prefill_tokens = 16;
  o.cost_ewma_alpha = 1.0;  // the newest observation only: exact figures in the tests
  return o;
}

void teach(Scheduler& s, double per_decode, double per_token) {
  s.cost_model().observe(0, 4, std::chrono::duration<double>(4 * per_decode));
  s.cost_model().observe(100, 2, std::chrono::duration<double>(2 * per_decode + 100 * per_token));
}

TEST(StepCostModel, LearnsPerDecodeAndPerPrefillTokenOnline) {
  StepCostModel m(0.3);
  EXPECT_FALSE(m.ready());
  // Before a decode-only step: the time split evenly over tokens.
  m.observe(90, 10, 1.0s);
  EXPECT_TRUE(m.ready());
  EXPECT_NEAR(m.per_prefill_token(), 0.01, 1e-12);
  // A host where a decode costs 20 ms (its share of the step) and a prefill token 2 ms.
  for (int i = 0; i < 40; ++i) {
    m.observe(0, 8, std::chrono::duration<double>(8 * 0.020));
    m.observe(256, 4, std::chrono::duration<double>(4 * 0.020 + 256 * 0.002));
  }
  EXPECT_NEAR(m.per_decode(), 0.020, 1e-4);
  EXPECT_NEAR(m.per_prefill_token(), 0.002, 1e-4);
  EXPECT_NEAR(m.predict(100, 3), 100 * 0.002 + 3 * 0.020, 1e-3);
  // The host gets 3x slower (another process, thermal limits): the model follows.
  for (int i = 0; i < 40; ++i) {
    m.observe(0, 8, std::chrono::duration<double>(8 * 0.060));
    m.observe(256, 4, std::chrono::duration<double>(4 * 0.060 + 256 * 0.006));
  }
  EXPECT_NEAR(m.per_decode(), 0.060, 1e-3);
  EXPECT_NEAR(m.per_prefill_token(), 0.006, 1e-4);
}

TEST(Scheduler, BeforeAnyCostObservationBatchPrefillIsAProbeChunk) {
  SchedulerOptions o = tiered();
  o.cold_start_prefill_tokens = 64;
  Sim sim(256, 16, o);
  Sequence* b = sim.add(600, Tier::kBatch, 1);
  auto out = sim.step();
  EXPECT_EQ(tokens_of(out, b), 64);
  // Once a step was measured, the chunk follows the cost (250 ms idle cut, 2 ms a token).
  teach(sim.sched, 0.010, 0.002);
  out = sim.step();
  EXPECT_EQ(tokens_of(out, b), 125);
}

TEST(Scheduler, WithoutALatencyTargetBatchPrefillTakesTheWholeBudget) {
  SchedulerOptions o = tiered();
  o.tiers[0].latency_target = std::chrono::milliseconds(0);
  Sim sim(256, 16, o);
  teach(sim.sched, 0.010, 0.002);
  Sequence* b = sim.add(600, Tier::kBatch, 1);
  auto out = sim.step();
  EXPECT_EQ(tokens_of(out, b), 512);
  EXPECT_EQ(out.step_cap_seconds, 0.0);
}

TEST(Scheduler, BatchPrefillChunkShrinksToTheInteractiveTargetWhileInteractiveRuns) {
  Sim sim(256, 16, tiered());
  teach(sim.sched, 0.010, 0.002);  // 10 ms a decode, 2 ms a prefill token
  Sequence* i = sim.add(4, Tier::kInteractive, 1);
  sim.step();  // interactive prefill (4 tokens): now decoding
  Sequence* b = sim.add(600, Tier::kBatch, 100);
  auto out = sim.step();
  EXPECT_EQ(tokens_of(out, i), 1);
  // 125 ms cap - 10 ms interactive decode = 115 ms -> 57 prefill tokens at 2 ms.
  EXPECT_DOUBLE_EQ(out.step_cap_seconds, 0.125);
  EXPECT_EQ(tokens_of(out, b), 57);
  // The running batch chunk stays cut on the next steps too.
  out = sim.step();
  EXPECT_EQ(tokens_of(out, b), 57);
  // Interactive done: idle cut, 250 ms -> 125 tokens.
  sim.sched.remove(i);
  out = sim.step();
  EXPECT_DOUBLE_EQ(out.step_cap_seconds, 0.25);
  EXPECT_EQ(tokens_of(out, b), 125);
}

TEST(Scheduler, ChunkFollowsTheLearnedCostNotAConstant) {
  Sim sim(256, 16, tiered());
  teach(sim.sched, 0.010, 0.001);  // a fast host: 1 ms a token
  Sequence* i = sim.add(4, Tier::kInteractive, 1);
  sim.step();
  Sequence* b = sim.add(2000, Tier::kBatch, 100);
  auto out = sim.step();
  EXPECT_EQ(tokens_of(out, b), 115);
  teach(sim.sched, 0.010, 0.005);  // the same host, 5x slower per token now
  out = sim.step();
  EXPECT_EQ(tokens_of(out, b), 23);
  EXPECT_EQ(tokens_of(out, i), 1);
}

TEST(Scheduler, InteractivePrefillIsNotCutAndBatchDecodesWaitOnlyOneStep) {
  Sim sim(512, 16, tiered());
  teach(sim.sched, 0.010, 0.002);
  Sequence* b = sim.add(8, Tier::kBatch, 1);
  sim.step();  // batch: decoding from here on
  Sequence* i = sim.add(400, Tier::kInteractive, 100);
  auto out = sim.step();
  EXPECT_EQ(tokens_of(out, i), 400);  // the protected tier's own prefill is whole
  EXPECT_EQ(tokens_of(out, b), 0);    // its first-token step: the batch decode does not fit
  out = sim.step();
  EXPECT_EQ(tokens_of(out, i), 1);
  EXPECT_EQ(tokens_of(out, b), 1);    // decodes run again in the steps after
}

TEST(Scheduler, LowerTierKeepsAMinimumPrefillOnATooSlowHost) {
  Sim sim(256, 16, tiered());
  teach(sim.sched, 0.200, 0.050);  // one interactive decode alone exceeds the 125 ms cap
  Sequence* i = sim.add(4, Tier::kInteractive, 1);
  sim.step();
  Sequence* b1 = sim.add(100, Tier::kBatch, 100);
  Sequence* b2 = sim.add(100, Tier::kBatch, 300);
  auto out = sim.step();
  EXPECT_EQ(tokens_of(out, i), 1);
  EXPECT_EQ(tokens_of(out, b1), 16);  // min_lower_prefill_tokens, shared by the batch tier
  EXPECT_EQ(tokens_of(out, b2), 0);
}

TEST(Scheduler, AnInteractiveFirstTokenStepDefersBatchWorkThatDoesNotFit) {
  SchedulerOptions o = tiered();
  o.first_token_pacing = false;  // the setup starts six batch prompts in one step
  Sim sim(512, 16, o);
  teach(sim.sched, 0.010, 0.002);
  std::vector<Sequence*> decoding;
  for (int k = 0; k < 6; ++k) decoding.push_back(sim.add(8, Tier::kBatch, 1 + 10 * k));
  sim.step();  // six batch sequences decoding from here on
  Sequence* chunked = sim.add(300, Tier::kBatch, 200);
  sim.step();
  ASSERT_GT(chunked->num_computed_tokens, 0);
  // An interactive request with a 50-token prompt (100 ms) arrives: 125 ms cap.
  Sequence* i = sim.add(50, Tier::kInteractive, 900);
  auto out = sim.step();
  EXPECT_EQ(tokens_of(out, i), 50);
  int decodes = 0;
  for (Sequence* b : decoding) decodes += tokens_of(out, b);
  EXPECT_EQ(decodes, 2);                  // 100 ms + 2 x 10 ms fits; the other four wait a step
  EXPECT_EQ(tokens_of(out, chunked), 2);  // what is left of the cap (5 ms): no 16-token floor
  // Next step: interactive decoding; every batch decode runs again, batch prefill within the cap.
  out = sim.step();
  decodes = 0;
  for (Sequence* b : decoding) decodes += tokens_of(out, b);
  EXPECT_EQ(decodes, 6);
  EXPECT_EQ(tokens_of(out, i), 1);
  EXPECT_EQ(tokens_of(out, chunked), (125 - 70) / 2);
}

// First-token pacing (scheduler.h): with 10 ms a decode and 2 ms a prompt token taught.
int32_t first_token_step(const std::vector<SchedulerOutput>& steps, const Sequence* s) {
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const auto& sc : steps[i].scheduled) {
      if (sc.seq == s && sc.wants_logits) return static_cast<int32_t>(i);
    }
  }
  return -1;
}

TEST(Scheduler, PacingGivesABurstOfLongPromptsTheirFirstTokensOneAfterAnother) {
  for (bool pacing : {true, false}) {
    SCOPED_TRACE(pacing ? "pacing" : "no pacing");
    SchedulerOptions o = tiered();
    o.first_token_pacing = pacing;
    Sim sim(512, 16, o);
    teach(sim.sched, 0.010, 0.002);
    std::vector<Sequence*> burst;
    for (int k = 0; k < 4; ++k) burst.push_back(sim.add(128, Tier::kInteractive, 1 + 200 * k));
    std::vector<SchedulerOutput> steps;
    for (int i = 0; i < 4; ++i) steps.push_back(sim.step());
    if (!pacing) {
      // One 512-token step: every first token after ~1 s.
      for (Sequence* s : burst) EXPECT_EQ(first_token_step(steps, s), 0);
      continue;
    }
    // Joining the second prompt would delay the first by 256 ms to save it one 10 ms decode
    // step (and the two behind it theirs): each prompt gets its own step, first come first.
    for (int k = 0; k < 4; ++k) EXPECT_EQ(first_token_step(steps, burst[static_cast<size_t>(k)]), k);
    // The prompts already started decode in the steps between.
    EXPECT_EQ(tokens_of(steps[3], burst[0]), 1);
    EXPECT_EQ(tokens_of(steps[3], burst[1]), 1);
    EXPECT_EQ(tokens_of(steps[3], burst[3]), 128);
  }
}

TEST(Scheduler, PacingStillBatchesShortPrompts) {
  Sim sim(512, 16, tiered());
  teach(sim.sched, 0.010, 0.002);
  std::vector<Sequence*> burst;
  for (int k = 0; k < 8; ++k) burst.push_back(sim.add(10, Tier::kInteractive, 1 + 20 * k));
  auto out = sim.step();
  // The k-th joining prompt costs the k already in the step k x 20 ms; waiting would cost it and
  // the prompts behind it a decode step of k sequences each (k x 10 ms): seven join, the eighth
  // (140 ms against 70 ms) waits one step.
  for (int k = 0; k < 7; ++k) EXPECT_EQ(tokens_of(out, burst[static_cast<size_t>(k)]), 10) << k;
  EXPECT_EQ(tokens_of(out, burst[7]), 0);
  out = sim.step();
  EXPECT_EQ(tokens_of(out, burst[7]), 10);
  EXPECT_EQ(tokens_of(out, burst[0]), 1);
}

TEST(Scheduler, PacingKeepsAPartialChunkOutOfAFirstTokenStep) {
  Sim sim(512, 16, tiered());
  teach(sim.sched, 0.010, 0.002);
  Sequence* a = sim.add(100, Tier::kInteractive, 1);
  Sequence* b = sim.add(1000, Tier::kInteractive, 300);
  auto out = sim.step();
  EXPECT_EQ(tokens_of(out, a), 100);
  EXPECT_EQ(tokens_of(out, b), 0);  // 412 tokens would delay a's first token and bring b's no closer
  out = sim.step();
  EXPECT_EQ(tokens_of(out, a), 1);
  EXPECT_EQ(tokens_of(out, b), 511);  // no prompt completes in this step: the whole budget
  out = sim.step();
  EXPECT_EQ(tokens_of(out, b), 489);
}

TEST(Scheduler, PacingDefersBeforePreemptingForASeat) {
  for (bool pacing : {true, false}) {
    SCOPED_TRACE(pacing ? "pacing" : "no pacing");
    SchedulerOptions o = tiered();
    o.max_seqs = 2;
    o.first_token_pacing = pacing;
    Sim sim(512, 16, o);
    teach(sim.sched, 0.010, 0.002);
    Sequence* b = sim.add(8, Tier::kBatch, 1);
    sim.step();  // batch: decoding from here on
    Sequence* i1 = sim.add(128, Tier::kInteractive, 100);
    Sequence* i2 = sim.add(128, Tier::kInteractive, 300);
    auto out = sim.step();
    EXPECT_EQ(tokens_of(out, i1), 128);
    if (pacing) {
      // i2 would wait for i1's first token anyway: the batch sequence keeps its seat and KV.
      EXPECT_EQ(tokens_of(out, i2), 0);
      EXPECT_TRUE(out.preempted.empty());
      EXPECT_EQ(b->num_preemptions, 0);
    } else {
      EXPECT_EQ(tokens_of(out, i2), 128);
      ASSERT_EQ(out.preempted.size(), 1u);
      EXPECT_EQ(out.preempted[0], b);
    }
  }
}

TEST(Scheduler, PacingWaitsForAMeasuredStepAndStaysWithinATier) {
  // Before any step was measured, a step takes every prompt the budget allows.
  Sim cold(512, 16, tiered());
  Sequence* x = cold.add(128, Tier::kInteractive, 1);
  Sequence* y = cold.add(128, Tier::kInteractive, 300);
  auto out = cold.step();
  EXPECT_EQ(tokens_of(out, x), 128);
  EXPECT_EQ(tokens_of(out, y), 128);
  // An interactive prompt completing does not pace the batch tier (the latency cut governs it).
  SchedulerOptions o = tiered();
  o.tiers[0].latency_target = std::chrono::milliseconds(0);
  Sim sim(512, 16, o);
  teach(sim.sched, 0.010, 0.002);
  Sequence* i = sim.add(128, Tier::kInteractive, 1);
  Sequence* b = sim.add(128, Tier::kBatch, 300);
  out = sim.step();
  EXPECT_EQ(tokens_of(out, i), 128);
  EXPECT_EQ(tokens_of(out, b), 128);
}

}  // namespace
}  // namespace ts::engine
