// Engine: owns the KV memory, the block pool, the scheduler and a compute thread pool, and runs
// the step loop (schedule -> one batched forward -> sample -> emit events) on its own thread.
// Callers submit tokenized Requests and read each request's event stream from its handle.
//
// Thread-safety: submit(), stats(), stop_accepting(), idle() and RequestHandle methods are
// thread-safe. step() is for tests/benchmarks that create the engine with start_thread = false
// and must then be called from one thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/spec_decode.h"
#include "model/kv_storage.h"

namespace ts::model { class Model; }

namespace ts::engine {

struct EngineOptions {
  int32_t block_size = 16;           // tokens per KV block
  size_t kv_cache_bytes = size_t{256} << 20;  // KV memory budget; `serve` sizes it from the machine
                                              // (engine/kv_budget.h) unless --kv-cache-memory
  int32_t num_kv_blocks = 0;         // > 0: exact block count, overrides kv_cache_bytes (tests);
                                     // the blocks are shared by every KV group (a window-only
                                     // layout's block holds fewer layers: model::KvLayout)
  model::KvType kv_type = model::KvType::kF16;  // KV element type
  int32_t max_seqs = 64;             // running sequences at most (--max-seqs)
  int32_t max_batch_tokens = 512;    // tokens per step at most (--max-batch-tokens); >= max_seqs is sensible
  int32_t max_model_len = 0;         // prompt + completion limit; 0 = the model's context length
  bool enable_prefix_cache = true;   // reuse cached full blocks across requests
  bool kv_window_only = true;        // sliding-window layers (gemma3) keep only their window
                                     // (model::KvLayout::windowed); false: every position stored
                                     // and masked at attention (the reference layout)
  TierOptions interactive{.max_running = 256, .kv_share = 1.0f, .priority = 1,
                          .latency_target = std::chrono::milliseconds(500), .max_queued = 1024};
  TierOptions batch{.max_running = 256, .kv_share = 0.9f, .priority = 0,
                    .latency_target = std::chrono::milliseconds(0), .max_queued = 4096};
  // Latency-driven step size (scheduler.h): while interactive work waits or runs, batch prefill
  // is cut so a step's predicted time stays within this share of the interactive latency_target
  // (also while interactive is idle: a request arriving mid-step waits for that step); 0 = no
  // cut (--step-latency-fraction).
  float step_latency_fraction = 0.25f;
  // Prompts queued together get their first tokens one after another where the step cost model
  // says that lowers their summed wait (scheduler.h, "First-token pacing"); false: a step
  // takes every prompt the budget allows (--no-first-token-pacing).
  bool first_token_pacing = true;
  int32_t num_threads = 0;           // compute threads; <= 0 = all hardware threads
  bool start_thread = true;          // false: no loop thread; the owner calls step() (tests, bench)
  // The loop thread and its compute workers run as SCHED_BATCH (core/thread_sched.h: same CPU
  // share, no wake-up favour), so a replica's io threads answer scrapes and write SSE at once
  // while both cores compute. serve sets it unless --no-sched-hints.
  bool compute_sched_batch = false;
  uint64_t seed = 0;                 // seeds requests without their own seed; 0 = random_device
  SpecOptions spec;                  // speculative decoding (off by default; spec_decode.h)
};

// A snapshot for metrics (refreshed after every step).
struct EngineStats {
  int32_t num_running = 0;           // sequences holding KV and scheduled
  int32_t num_waiting[kNumTiers] = {0, 0};  // requests/sequences waiting per tier (index = Tier)
  int32_t num_running_tier[kNumTiers] = {0, 0};  // running sequences per tier
  int32_t kv_blocks_total = 0;       // blocks in the pool
  int32_t kv_blocks_used = 0;        // blocks referenced by some sequence
  int32_t kv_blocks_cached = 0;      // free blocks that still hold a cached prefix (evictable)
  int32_t block_size = 0;            // tokens per block
  int64_t prefix_queries = 0;        // prompt tokens looked up in the prefix cache at admission
  int64_t prefix_hits = 0;           // of those, tokens found cached
  int64_t num_preemptions = 0;       // sequences preempted (recompute) since start
  int64_t prompt_tokens_total = 0;   // prompt tokens of finished and running requests, counted at admission
  int64_t prefill_tokens_total = 0;  // tokens actually computed through the model for prompts/recompute
  int64_t generation_tokens_total = 0;  // tokens sampled
  int64_t num_steps = 0;             // forward steps run
  int64_t requests_finished = 0;     // requests whose last event was emitted
  double last_step_ms = 0.0;         // duration of the last step
  int64_t spec_num_drafts = 0;       // draft verifications (one per speculating sequence and step)
  int64_t spec_num_draft_tokens = 0; // drafted tokens verified by the target
  int64_t spec_num_accepted_tokens = 0;  // of those, accepted (emitted without a step of their own)
  int64_t spec_accepted_by_pos[kMaxDraftTokens] = {};  // accepted drafts by position (0 = first)
};

class RequestHandle;
namespace detail { struct HandleState; struct Waker; }

class Engine {
 public:
  // Sizes the KV pool (num_kv_blocks or kv_cache_bytes), allocates it, and starts the loop
  // thread when opts.start_thread. max_model_len is the model's context (or opts.max_model_len
  // if smaller), capped to the tokens the pool holds for one sequence (num_blocks * block_size,
  // or more with window-only sliding-window groups: model::KvFootprint) with one log line. `model` must outlive the engine, and only one engine may
  // drive a Model at a time (Model::forward uses per-model scratch).
  // With opts.spec.mode != kOff the options are checked by validate_spec_options (the draft
  // model's vocabulary must match) and a draft model gets its own KV pool of as many blocks
  // (sized from kv_cache_bytes, both pools come out of it: spec_budget_blocks).
  // Errors: kInvalidArgument (bad options), kResourceExhausted (KV allocation failed or the
  // budget holds no block).
  static Result<std::unique_ptr<Engine>> create(model::Model& model, EngineOptions opts);
  // Stops the loop; unfinished requests end with FinishReason::kCancelled.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Errors, with nothing queued:
  //  kInvalidArgument: empty prompt, token id out of range, bad sampling values, or
  //                    prompt + max_tokens above max_model_len (message gives the counts and
  //                    how much would fit);
  //  kUnavailable: the tier's queue is full, or the engine stopped accepting.
  // Nothing is reserved for max_tokens: KV blocks are allocated as the sequence grows, and when
  // the pool runs short the scheduler preempts (recompute) instead of refusing. Since
  // max_model_len is capped to the pool, every accepted request fits the pool alone.
  Result<std::shared_ptr<RequestHandle>> submit(Request req);

  // Runs one scheduling step (start_thread = false only). Returns false when there was no work.
  bool step();

  EngineStats stats() const;
  // New submits get kUnavailable; running and queued requests continue (graceful drain).
  void stop_accepting();
  // True when no request is queued or running.
  bool idle() const;
  const EngineOptions& options() const { return opts_; }
  model::Model& model() { return model_; }
  // Max prompt + completion tokens per request.
  int32_t max_model_len() const { return max_model_len_; }
  // True when max_model_len was lowered to what the KV pool holds for one sequence.
  bool max_model_len_capped_by_kv() const { return kv_capped_; }

 private:
  struct Impl;
  Engine(model::Model& model, EngineOptions opts);
  void loop();

  model::Model& model_;
  EngineOptions opts_;
  int32_t max_model_len_ = 0;
  bool kv_capped_ = false;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

// The caller's side of one request. Shared between the caller and the engine thread.
class RequestHandle {
 public:
  // Next event, waiting up to `timeout`; std::nullopt on timeout or after the final event
  // (request_done) has been taken.
  std::optional<Event> next(std::chrono::milliseconds timeout);
  // Every event up to and including request_done (blocking, for tests and non-streaming use).
  std::vector<Event> wait_all();
  // Asks the engine to stop this request; its blocks are freed within one step and every
  // unfinished choice ends with FinishReason::kCancelled. Idempotent; no-op once finished.
  void cancel();
  // True once the request_done event was produced (it may not be taken yet).
  bool done() const;
  // Registers a waker notified after every event pushed to this handle and on cancel() (one
  // per handle; a later call replaces it; null removes it). Notified at once when events are
  // already waiting, so a consumer that registers and then polls misses nothing. Thread-safe.
  void set_listener(std::shared_ptr<detail::Waker> listener);
  const std::string& id() const { return id_; }
  int32_t num_choices() const { return n_; }

  // For the engine.
  RequestHandle(std::string id, int32_t n, std::shared_ptr<detail::HandleState> state);
  detail::HandleState& state() { return *state_; }

 private:
  std::string id_;
  int32_t n_ = 1;
  std::shared_ptr<detail::HandleState> state_;
};

namespace detail {
// Wakes the engine loop (submit, cancel).
struct Waker {
  std::mutex mu;
  std::condition_variable cv;
  bool pending = false;
  void notify() {
    { std::lock_guard<std::mutex> l(mu); pending = true; }
    cv.notify_one();
  }
};

// Producers (the engine, test and scripted backends) add events only through push(), which
// wakes both next() and the registered listener.
struct HandleState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;          // produced, not yet taken
  bool done = false;                 // request_done produced
  bool done_taken = false;           // request_done taken by next()
  std::atomic<bool> cancel_requested{false};
  std::shared_ptr<Waker> waker;      // the engine loop to wake on cancel
  std::shared_ptr<Waker> listener;   // guarded by mu: the consumer to wake on push (may be null)

  // Appends one event (request_done sets done) and wakes next() and the listener.
  void push(Event ev) {
    std::shared_ptr<Waker> l;
    {
      std::lock_guard<std::mutex> g(mu);
      if (ev.request_done) done = true;
      events.push_back(std::move(ev));
      l = listener;
    }
    cv.notify_all();
    if (l) l->notify();
  }
};
}  // namespace detail

}  // namespace ts::engine
