// The gateway's built-in endpoint picker (pool = builtin), with GIE/SGLang semantics
// (SCALEOUT.md §6.2). Pure decision logic: the caller supplies the endpoints' state (scraped
// metrics, readiness, its own in-flight counts) and the time; the picker returns a ranked list
// and a decision record. No I/O, no threads of its own.
//
//  Filters: ready, not ejected, model label match ("model" label absent = serves any model).
//  Stale metrics (older than stale_after, or never scraped) rank after every fresh endpoint
//  with score 0 ("unknown, lowest score"), so they are used only when nothing fresh is left.
//  Scorers (each 0..1, weighted sum):
//    prefix  matched leading blocks / prompt blocks (PrefixIndex, keyed by model + tenant)
//    queue   1 - waiting / max waiting among the candidates (1 when none waits)
//    kv      1 - kv_cache_usage
//  Imbalance guard (SGLang): with load = waiting + running, if max - min > guard_abs and
//  max > guard_rel * min, the prefix score is ignored and the least-loaded endpoint wins.
//  Ties: random (seeded rng), so equal endpoints share load.
//  Tier shedding (GIE's InferenceObjective priority: batch is sheddable): with
//  shed_batch_waiting > 0, a batch request is shed (Decision::shed, nothing ranked) when every
//  eligible endpoint with fresh metrics has waiting >= shed_batch_waiting (the pool is
//  saturated); interactive requests are never shed. Without fresh metrics nothing is shed.
//  waiting and running are max(scraped, the gateway's own in-flight view), because a scrape
//  lags the requests the gateway has just sent.
//
// Thread-safe: pick() and record() take an internal mutex (the prefix index is shared state).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "router/prefix_index.h"

namespace ts::router {

using Clock = std::chrono::steady_clock;

// What the gateway knows about one endpoint at decision time.
struct EndpointState {
  std::string name;
  std::map<std::string, std::string> labels;
  bool ready = true;              // last /ready poll answered 200
  bool ejected = false;           // passive ejection after consecutive failures
  bool has_metrics = false;       // at least one scrape parsed
  Clock::time_point scraped_at;   // when the last successful scrape finished
  double waiting = 0;             // tokenserve:num_requests_waiting (all tiers)
  double running = 0;             // tokenserve:num_requests_running (all tiers)
  double kv_usage = 0;            // tokenserve:kv_cache_usage_perc, 0..1
  int64_t in_flight = 0;          // requests this gateway has outstanding on it
};

struct PickerOptions {
  double weight_prefix = 3, weight_queue = 2, weight_kv = 1;
  bool imbalance_guard = true;
  double guard_abs = 8;           // max - min load must exceed this ...
  double guard_rel = 1.5;         // ... and max > rel * min
  std::chrono::milliseconds stale_after{150};  // 3 scrape intervals of 50 ms
  PrefixIndexOptions prefix;
  uint64_t seed = 0;              // 0 = random_device
  double shed_batch_waiting = 0;  // > 0: shed batch when every fresh endpoint waits >= this
};

struct PickRequest {
  std::string model;
  std::string tenant;
  std::string prompt;             // rendered prompt (see render_chat_prompt)
  bool batch = false;             // tier batch: sheddable at saturation
};

// One endpoint's line in the decision record.
struct Candidate {
  std::string name;
  bool stale = false;
  double prefix = 0, queue = 0, kv = 0;  // scorer outputs, 0..1
  double load = 0;                        // waiting + running used by the guard
  double score = 0;                       // weighted total (0 when stale)
  int64_t prefix_blocks = 0;              // matched leading blocks
};

struct Decision {
  std::vector<Candidate> ranked;          // best first; empty = no eligible endpoint
  std::vector<std::string> filtered_out;  // "name: reason"
  bool guard_applied = false;
  bool shed = false;                      // a batch request shed at saturation (ranked empty)
  double min_waiting = 0;                 // least waiting among fresh candidates
  int64_t prompt_blocks = 0;
  std::vector<uint64_t> block_hashes;     // for record()
  std::chrono::nanoseconds took{0};

  // {"ranked":[{name,score,prefix,queue,kv,load,stale,prefix_blocks}], "filtered_out":[...],
  //  "guard_applied", "shed", "prompt_blocks", "took_us"}
  nlohmann::json to_json() const;
  // Appends to_json().dump() to `out`, written directly (no JSON tree: it runs per request).
  void append_json(std::string& out) const;
};

// Canonical rendering of a chat request for prefix matching: every message in order as
// "<|role|>\n" + content (text parts joined) + "\n". Each turn extends the previous turns'
// rendering, which is what makes turn n+1 share a prefix with turn n, as the engine's rendered
// chat template does. `messages` must be an array; non-object items are skipped.
std::string render_chat_prompt(const nlohmann::json& messages);

class Picker {
 public:
  explicit Picker(PickerOptions opts = {});

  Decision pick(const PickRequest& req, const std::vector<EndpointState>& endpoints, Clock::time_point now);
  // After the request went to `endpoint`: index its prompt blocks there.
  void record(const std::string& endpoint, const Decision& d);
  // An endpoint left the pool.
  void forget(const std::string& endpoint);
  const PickerOptions& options() const { return opts_; }

 private:
  PickerOptions opts_;
  std::mutex mu_;
  PrefixIndex index_;
  std::mt19937_64 rng_;
};

}  // namespace ts::router
