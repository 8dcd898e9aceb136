// Internal to src/engine: the engine's state (Engine::Impl and the per-request/per-sequence
// state it owns), shared by engine.cc (submission, the step loop, sampling) and engine_spec.cc
// (speculative decoding: drafts, verification, rollback). Only the engine thread touches it
// once a request is taken from the inbox (see engine.h for the threading contract).
#pragma once

#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <future>
#include <list>
#include <new>
#include <stdexcept>
#include <random>
#include <unordered_map>

#include "core/check.h"
#include "core/log.h"
#include "engine/batch_sampler.h"
#include "engine/block_pool.h"
#include "engine/fault_injection.h"
#include "engine/kv_cache_manager.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/spec_draft.h"
#include "engine/stop_matcher.h"
#include "structured/constraint.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ts::engine {

namespace engine_detail {

struct ReqState;

// Engine-side state of one sequence: scheduling state plus output state.
struct SeqState {
  Sequence seq;
  ReqState* req = nullptr;
  int32_t index = 0;                  // choice index
  Rng rng;
  std::unique_ptr<tokenizer::StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stop;
  std::unique_ptr<structured::ConstraintState> constraint;  // null when unconstrained
  bool finished = false;
  bool in_scheduler = false;
  SpecAdaptState spec;                // adaptive draft length (speculative decoding)
  std::vector<int32_t> drafts;        // this step's drafted tokens (also at the end of seq.tokens)
};

struct ReqState {
  Request req;
  std::shared_ptr<detail::HandleState> handle;
  std::vector<std::unique_ptr<SeqState>> seqs;
  int32_t num_finished = 0;
  Usage usage;
  Timings timings;
  bool counted_queued = true;         // still counted in its tier's queue
  bool siblings_released = false;     // choices 1..n-1 handed to the scheduler
  bool done = false;
};

}  // namespace engine_detail

using engine_detail::ReqState;
using engine_detail::SeqState;

struct Engine::Impl {
  explicit Impl(int threads, model::KvStorage kv_storage, int32_t num_blocks, const EngineOptions& o,
                SchedulerOptions so, int32_t n_vocab)
      : pool(threads),
        kv(std::move(kv_storage)),
        blocks(num_blocks, o.enable_prefix_cache),
        kvm(blocks, o.block_size, kv.layout().group_window),
        sched(so, kvm),
        sampler(n_vocab),
        waker(std::make_shared<detail::Waker>()) {}

  ThreadPool pool;
  model::KvStorage kv;
  BlockPool blocks;
  KvCacheManager kvm;
  Scheduler sched;
  Sampler sampler;
  std::shared_ptr<detail::Waker> waker;

  std::vector<float> logits;                      // [max_seqs][n_vocab]
  std::vector<int32_t> batch_tokens;              // flattened step tokens
  std::vector<model::SeqSlice> slices;            // one per scheduled sequence
  std::vector<std::span<const int32_t>> group_tables;  // [scheduled][KV groups] (window-only KV)

  std::list<std::unique_ptr<ReqState>> active;    // engine thread only
  std::unordered_map<const Sequence*, SeqState*> by_seq;
  std::unique_ptr<DraftRunner> draft;             // --speculative draft
  std::vector<SeqState*> drafted;                 // sequences carrying drafts this step
  SpecCostModel step_cost;                        // decode step time vs tokens (speculation's cost)
  SpecCostModel draft_cost;                       // draft model time vs (positions, catch-up tokens)
  // Speculation's cost accounting runs on the engine thread's CPU time (spec_cpu_ms), not wall
  // time: on a shared machine another process's load stretches wall time at random, which the
  // step-cost fit would read as drafts being cheap or dear.
  double spec_step_cpu0 = 0;                      // CPU ms at the start of this step's drafting
  TimePoint spec_step_wall0{};                    // ... and the wall clock then (a sanity bound)
  double spec_draft_ms = 0;                       // draft model CPU time in this step
  int64_t spec_explore_steps = 0;                 // steps planned before the cost model was ready
  SpecProbeBudget probe_budget;                   // caps the time probes may cost
  SpecProbeBudget price_probe_budget{0.005};      // the same for price probes (drafts cannot pay)
  bool spec_probe_step = false;                   // this step's drafts are probes only
  bool spec_price_probe = false;                  // ... and that probe re-measures the price only
  double spec_plain_ms = 0;                       // this step's predicted time without drafts (0: unknown)
  int64_t spec_step_drafts = 0;                   // drafted tokens verified in this step
  double spec_last_plain_ms = 0;                  // the last decode step without drafts, as measured

  std::mutex in_mu;
  std::vector<std::unique_ptr<ReqState>> inbox;   // submitted, not yet taken by the loop
  std::atomic<int32_t> queued[kNumTiers] = {0, 0};
  std::atomic<bool> accepting{true};
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> num_active{0};             // requests submitted and not done

  mutable std::mutex stats_mu;
  EngineStats stats;
  int64_t next_seq_id = 1;
  int64_t next_request_order = 1;
  uint64_t seed_state = 0;

  model::Model* model = nullptr;
  EngineOptions opts;
  int32_t max_model_len = 0;

  // Parallel sampling: with two or more rows to sample, unconstrained rows are sampled on the
  // pool first (batch_sampler.h: the same tokens as the serial pass); on_logits then takes the
  // token from there instead of sampling.
  std::unique_ptr<BatchSampler> batch_sampler;
  std::vector<SampleRow> presampled;              // [logit rows of this step]; empty = serial
  SampleRow* current_pre = nullptr;               // the row being processed, when presampled
  void presample(const SchedulerOutput& out, int32_t V);

  bool step();
  void sample_guarded(SeqState& s, const float* row, int32_t V, TimePoint now);
  void fail_all(const std::string& why);
  void take_inbox(TimePoint now);
  void check_cancellations(TimePoint now);
  // Ends one choice: removes it from the scheduler, emits its final event.
  void finish_seq(SeqState& s, FinishReason reason, Status error, std::string text,
                  std::vector<int32_t> ids, std::vector<LogprobEntry> lps);
  // Samples from one logits row and emits the token (and maybe the end) of the choice.
  void on_logits(SeqState& s, const float* row, TimePoint now);
  void sweep_done();
  void publish_stats(double step_ms);
  // Speculative decoding (opts.spec): drafts tokens for eligible decoding sequences before the
  // schedule, appending them to seq.tokens within the token and block budgets.
  void propose_drafts();
  // Feeds the step-cost model one decode step (no prefill) of forward_tokens tokens, timed on
  // the engine thread's CPU clock from propose_drafts to now, the draft model's time excluded.
  void spec_observe_step(int64_t forward_tokens);
  // Removes a sequence's unverified drafts from its tokens.
  void strip_drafts(SeqState& s);
  // Strips the drafts of every sequence drafted this step that were not verified (not scheduled,
  // or a failed forward), rolling their draft-model KV back to the verified tokens.
  void drop_unverified_drafts();
  // Verifies a scheduled sequence's drafts against its logit rows (one per scheduled token):
  // samples position by position, accepts while the sampled token equals the draft, and rolls
  // back the KV of the rest. Returns the rows sampled (tokens emitted, a final one included).
  int32_t verify_drafts(SeqState& s, const ScheduledSeq& sc, const float* rows, int32_t V, TimePoint now);
};

inline void push_event(ReqState& r, Event ev) {
  ev.usage = r.usage;
  ev.timings = r.timings;
  if (ev.time == TimePoint{}) ev.time = Clock::now();
  r.handle->push(std::move(ev));
}

}  // namespace ts::engine
