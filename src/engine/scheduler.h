// Scheduler: decides, each step, which sequences run and how many tokens each computes, under a
// token budget (max_batch_tokens) and a sequence cap (max_seqs), per-tier limits, and the KV
// blocks available. It returns a plain SchedulerOutput; the engine executes it.
//
// Order inside a step, tier by tier from the highest priority down:
//   1. running sequences of the tier: decodes first, then the next chunk of unfinished
//      prefills, each oldest admission first;
//   2. admission of the tier's waiting sequences (FCFS) while seats, budget, the tier's KV
//      share and blocks allow.
// Lower tiers therefore only get what higher tiers leave. When blocks run out, the running
// sequence not yet scheduled this step with the lowest priority and the newest admission is
// preempted, possibly the one asking (its blocks freed;
// it goes back to the front of its tier's queue and is recomputed later). A waiting sequence
// may preempt running sequences of strictly lower priority to get blocks or a seat.
// Chunked prefill falls out of the budget: a prompt computes min(remaining, budget left).
//
// First-token pacing (SchedulerOptions::first_token_pacing): prompts that queue up together get
// their first tokens one after another instead of all at the end of one long step. Once a step
// completes some prompt of a tier (k prompts), another prompt of that tier joins the step only
// if that lowers the summed time to first token, as predicted by StepCostModel: joining delays
// the k first tokens by its chunk's cost (k x n x per_prefill_token); waiting for the next step
// delays it and the prompts queued behind it (b of them) by that step's decodes (every sequence
// that samples in this step decodes in the next: d x per_decode). It joins iff
// k x n x per_prefill_token <= (1 + b) x d x per_decode. A chunk that would not complete its prompt
// never joins such a step (it would delay the k first tokens and bring its own none closer). So a
// burst of 128-token prompts on a CPU (tens to hundreds of ms each) is prefilled one prompt a
// step, and a burst of 10-token prompts still goes in a few large steps. Measured (serve, 32
// requests of 128 prompt / 64 output tokens at concurrency 8, Qwen2.5-0.5B shape, 2 cores):
// TTFT p50 0.98-1.23 -> 0.43-0.70 s, p95 1.60-1.87 -> 1.33-1.65 s, output tokens/s unchanged;
// the last prompt of a burst gets its first token no sooner (the same work comes first), a
// little later where the running sequences' decodes fill the steps in between. The price is
// paid in TPOT: the first prompts' sequences see the later prompts' prefill steps as gaps
// between their tokens (TPOT p50 31-35 -> 40-58 ms there; time to the last token unchanged).
// Before any step was measured, and across tiers (the latency cut below governs those), steps
// fill as before.
//
// Step time follows the latency targets. A tier with a latency_target protects the tiers below
// it: their prefill chunks (running chunks and admissions) are cut so that the step's predicted
// duration stays within step_latency_fraction of the target while the protecting tier has
// sequences waiting or running, and within idle_step_latency_fraction of it otherwise (a request
// that arrives mid-step waits for that step to end). The prediction comes from StepCostModel,
// learned online from the steps the engine ran on this host and model (Engine feeds it through
// cost_model()); before its first observation lower tiers get at most
// cold_start_prefill_tokens of prefill a step. Lower-tier decodes are cut only
// in a step where the protecting tier admits a request (its first-token step; at most one step
// per such admission). While the protecting tier has nobody waiting or admitted, lower tiers get at
// least min_lower_prefill_tokens of prefill a step, so they cannot starve on a host too slow
// for the target; waiting higher-tier requests leave them nothing, as for admission.
//
// Not thread-safe: engine thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/sequence.h"

namespace ts::engine {

// Limits of one serving tier.
struct TierOptions {
  int32_t max_running = 256;         // running sequences of this tier at most
  float kv_share = 1.0f;             // share of KV blocks this tier may hold at admission, (0, 1]
  int32_t priority = 0;              // higher runs first and is preempted last
  std::chrono::milliseconds latency_target{0};  // queue-time target; 0 = none. While a request
                                     // of this tier has waited past it, lower-priority tiers
                                     // admit nothing new.
  int32_t max_queued = 1024;         // waiting requests before submit() answers kUnavailable
};

struct SchedulerOptions {
  int32_t max_seqs = 64;             // running sequences at most
  int32_t max_batch_tokens = 512;    // tokens computed per step at most
  TierOptions tiers[kNumTiers];      // indexed by Tier
  // Share of a protecting tier's latency_target one step may take (predicted), while that tier
  // has sequences waiting or running / while it has none; 0 = no cut.
  float step_latency_fraction = 0.25f;
  float idle_step_latency_fraction = 0.25f;
  int32_t min_lower_prefill_tokens = 16;  // prefill tokens a step always leaves to lower tiers
  int32_t cold_start_prefill_tokens = 64;  // lower-tier prefill a step before any cost is measured
  double cost_ewma_alpha = 0.2;      // weight of the newest step in StepCostModel
  bool first_token_pacing = true;    // see "First-token pacing" above
};

// Online model of a step's duration: seconds ~ decode_seqs * per_decode + prefill_tokens *
// per_prefill_token. per_decode is an EWMA of (step time / sequences) over decode-only steps (it
// absorbs the step's fixed cost, which decode-only steps always pay); per_prefill_token an EWMA
// of (step time - decodes * per_decode) / prefill tokens over steps with prefill. Until a
// decode-only step was seen, a step's time is split evenly over its tokens. Not thread-safe.
class StepCostModel {
 public:
  explicit StepCostModel(double alpha = 0.2) : alpha_(alpha) {}
  // One executed step: tokens of multi-token chunks, sequences that computed one token, time.
  void observe(int32_t prefill_tokens, int32_t decode_seqs, std::chrono::duration<double> took);
  bool ready() const { return per_decode_ > 0.0 || per_token_ > 0.0; }
  // Seconds; per_prefill_token falls back to per_decode (and back) until both were observed.
  double per_prefill_token() const { return per_token_ > 0.0 ? per_token_ : per_decode_; }
  double per_decode() const { return per_decode_ > 0.0 ? per_decode_ : per_token_; }
  double predict(int32_t prefill_tokens, int32_t decode_seqs) const {
    return prefill_tokens * per_prefill_token() + decode_seqs * per_decode();
  }
  int64_t num_observed() const { return num_observed_; }

 private:
  double alpha_;
  double per_decode_ = 0.0;          // 0 = not observed
  double per_token_ = 0.0;           // 0 = not observed
  bool decode_only_seen_ = false;
  int64_t num_observed_ = 0;
};

// One sequence's share of a step.
struct ScheduledSeq {
  Sequence* seq = nullptr;           // runs tokens [num_computed_tokens, +num_tokens)
  int32_t num_tokens = 0;            // >= 1
  bool wants_logits = false;         // the chunk reaches the last token: sample after the step
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> scheduled;  // batch order
  std::vector<Sequence*> preempted;     // preempted this step (blocks freed, waiting again)
  std::vector<Sequence*> admitted;      // admitted this step (included in scheduled)
  int32_t num_tokens = 0;               // sum of scheduled num_tokens
  int32_t num_prefix_query_tokens = 0;  // tokens looked up in the prefix cache at admission
  int32_t num_prefix_hit_tokens = 0;    // of those, found cached
  double step_cap_seconds = 0.0;        // predicted-time cap applied to lower tiers' prefill; 0 = none
  bool empty() const { return scheduled.empty(); }
  // The step's shape as StepCostModel counts it: tokens of chunks longer than one token, and
  // chunks of exactly one token (decodes).
  void shape(int32_t* prefill_tokens, int32_t* decode_seqs) const;
};

class Scheduler {
 public:
  Scheduler(SchedulerOptions opts, KvCacheManager& kv);

  // Queues a waiting sequence (status kWaiting, no blocks) behind its tier's queue.
  void add(Sequence* seq);
  // Removes a sequence wherever it is (finished or cancelled) and frees its blocks.
  void remove(Sequence* seq);

  // Decides one step. `now` drives latency targets.
  SchedulerOutput schedule(TimePoint now);

  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_running(Tier t) const;
  int32_t num_waiting(Tier t) const { return static_cast<int32_t>(waiting_[static_cast<int>(t)].size()); }
  bool has_work() const;
  const SchedulerOptions& options() const { return opts_; }
  // Every running sequence, highest priority then oldest admission first.
  const std::vector<Sequence*>& running() const { return running_; }
  // The step cost model; the engine observes every step it runs.
  StepCostModel& cost_model() { return cost_; }
  const StepCostModel& cost_model() const { return cost_; }

 private:
  void preempt(Sequence* victim, SchedulerOutput& out);
  // Newest running sequence not scheduled this step with priority <= max_priority, or null.
  Sequence* pick_victim(int32_t max_priority) const;
  void insert_running(Sequence* seq);
  int32_t tier_blocks(Tier t) const;
  // First-token pacing of one step, per tier: prompts completing in it so far.
  struct Pacing {
    int32_t completing[kNumTiers] = {};
  };
  // Whether a prefill chunk of n tokens of a prompt with `remaining` tokens left, of tier t, with
  // `behind` prompts of its tier queued after it, waits for the next step (first-token pacing).
  bool paced(const Pacing& pc, const SchedulerOutput& out, Tier t, int32_t n, int32_t remaining,
             int32_t behind) const;
  // max_tokens caps the first chunk (latency cut); <= 0 admits nothing. pc: first-token pacing
  // (the admission is refused when paced).
  bool try_admit(Sequence* seq, int32_t& budget, int32_t max_tokens, SchedulerOutput& out, Pacing& pc,
                 int32_t behind);
  // Prefill tokens a lower tier may still add this step under the latency cut (INT32_MAX when none).
  // protect_busy: the protecting tier has requests waiting or admits one this step (no floor).
  int32_t prefill_allowance(const SchedulerOutput& out, double cap_seconds, int32_t lower_prefill_used,
                            bool protect_busy) const;
  // One more decode would take the step's predicted time past cap_seconds.
  bool decode_over_cap(const SchedulerOutput& out, double cap_seconds) const;

  SchedulerOptions opts_;
  KvCacheManager& kv_;
  std::vector<Sequence*> running_;              // priority desc, admit_order asc
  std::deque<Sequence*> waiting_[kNumTiers];    // FCFS; preempted go to the front
  int64_t next_admit_order_ = 1;
  int64_t step_ = 0;
  StepCostModel cost_;
};

}  // namespace ts::engine
