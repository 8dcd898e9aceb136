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
  bool empty() const { return scheduled.empty(); }
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

 private:
  void preempt(Sequence* victim, SchedulerOutput& out);
  // Newest running sequence not scheduled this step with priority <= max_priority, or null.
  Sequence* pick_victim(int32_t max_priority) const;
  void insert_running(Sequence* seq);
  int32_t tier_blocks(Tier t) const;
  bool try_admit(Sequence* seq, int32_t& budget, SchedulerOutput& out);

  SchedulerOptions opts_;
  KvCacheManager& kv_;
  std::vector<Sequence*> running_;              // priority desc, admit_order asc
  std::deque<Sequence*> waiting_[kNumTiers];    // FCFS; preempted go to the front
  int64_t next_admit_order_ = 1;
  int64_t step_ = 0;
};

}  // namespace ts::engine
