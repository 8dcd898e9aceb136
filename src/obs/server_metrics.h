// ServerMetrics: the one object the HTTP server talks to for observability. It owns the metrics
// registry (Prometheus families named `tokenserve:*`, see the list in server_metrics.cc) and the
// dashboard history, and turns per-request observations and engine snapshots into both.
//
// Who calls what:
//   - on_request_finished(): once per request the engine accepted, after its last event
//     (any finish reason, also client disconnects). Use fill_from_engine() for usage and
//     timings. A request finished with http_status >= 400 also counts as an error.
//   - on_error(status): once per request refused before the engine (bad JSON, unknown model,
//     bad key, 413, queue full 503 ...). Not for 429 refusals of rate limits and quotas: call
//     on_rate_limited() / on_quota_rejected(), which count the 429 error themselves.
//   - sample_engine(): with Engine::stats(), periodically (e.g. every second) and before a
//     scrape; it sets the gauges and mirrors the engine's cumulative counters.
//   - set_ledger_spool_depth(): whenever the ledger's spool changes or on a timer.
//
// Thread-safety: every method is thread-safe. Counters, gauges and histograms are atomics; the
// dashboard history and the tenant set take short mutexes. None of this runs on the engine
// thread (the engine only publishes EngineStats), so the engine never waits on metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/request.h"
#include "obs/dashboard_history.h"
#include "obs/metrics.h"

namespace ts::obs {

inline constexpr std::string_view kMetricPrefix = "tokenserve:";

// What the server knows about one finished request.
struct RequestObservation {
  std::string model;                 // served model name (label)
  engine::Tier tier = engine::Tier::kInteractive;  // scheduling tier (label)
  std::string tenant;                // from the API key; "" = anonymous (auth off)
  std::string app;                   // app of the API key; "" = none
  int64_t prompt_tokens = 0;         // usage.prompt_tokens
  int64_t cached_tokens = 0;         // prompt tokens served from the prefix cache
  int64_t completion_tokens = 0;     // usage.completion_tokens (all choices)
  engine::TimePoint arrival;         // accepted by the engine; TimePoint{} = unknown
  engine::TimePoint scheduled;       // first scheduled; TimePoint{} = never
  engine::TimePoint first_token;     // first generated token; TimePoint{} = none
  engine::TimePoint finished;        // last choice finished
  // Every gap between consecutive generated tokens of each choice, as the engine emitted them
  // (server/response_job.h JobResult::inter_token_gaps). Each one is an inter-token latency
  // observation; none are made up when it is empty (TPOT still gets the request's mean).
  std::vector<std::chrono::duration<double>> inter_token_gaps;
  engine::FinishReason finish_reason = engine::FinishReason::kStop;  // of the request
  int http_status = 200;             // status sent (200 also for streams that ended in error)
  int32_t num_preemptions = 0;       // times the request was preempted
};

// Copies usage and timings from the request's final (request_done) event; the finish reason
// is the first choice's non-kNone reason, worst first (error > cancelled > length > stop).
void fill_from_engine(const engine::Event& done_event, engine::FinishReason finish,
                      RequestObservation* obs);

struct ServerMetricsOptions {
  std::string model;                 // label on engine gauges and counters
  size_t max_tenants = 100;          // distinct tenant label values; more become "other"
  DashboardHistoryOptions history;   // dashboard buckets and window
  std::function<WallTime()> wall_clock;  // time for the dashboard; empty = system_clock::now
};

class ServerMetrics {
 public:
  explicit ServerMetrics(ServerMetricsOptions opts = {});
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  void on_request_finished(const RequestObservation& obs);
  void on_error(int http_status);
  void on_rate_limited(std::string_view tenant = {});
  void on_quota_rejected(std::string_view tenant = {});
  void sample_engine(const engine::EngineStats& stats);
  void set_ledger_spool_depth(int64_t depth);

  // Prometheus text format 0.0.4 (serve as "text/plain; version=0.0.4; charset=utf-8").
  std::string prometheus_text() const { return registry_.prometheus_text(); }

  // The dashboard's data (/dashboard/data):
  //  {"model", "generated_at_ms", "tiers": ["interactive","batch"],
  //   "bucket_seconds", "window_seconds", "current_window_seconds",
  //   "series": {"t": [bucket start, epoch ms], per tier {"interactive": [...], "batch": [...]}:
  //              "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "running", "waiting";
  //              plain arrays: "output_tokens_per_s", "prompt_tokens_per_s", "requests",
  //              "kv_cache_usage" (0..1), "prefix_hit_rate" (0..1), "errors", "rate_limited",
  //              "quota_rejected"; "tokens_by_tenant": {tenant: [tokens per bucket]}}
  //              (null where a bucket has no data),
  //   "current": last current_window: per tier "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms",
  //              "requests"; "output_tokens_per_s", "errors", "rate_limited", "quota_rejected",
  //              "prefix_hit_rate", "window_seconds"; and from the last engine sample
  //              "running", "waiting" (per tier and "total"), "kv_cache_usage",
  //   "totals":  since start, equal to the /metrics counters summed over labels: "requests",
  //              "prompt_tokens", "generation_tokens", "errors", "rate_limited",
  //              "quota_rejected", "preemptions", "prefix_cache_queries", "prefix_cache_hits",
  //              "ledger_spool_depth", "spec_draft_tokens", "spec_accepted_tokens",
  //              "spec_acceptance_rate" (accepted / drafted; 0 before any draft),
  //   "usage":   [{"tenant","app","prompt_tokens","completion_tokens","total_tokens",
  //                "requests"}] over the window, largest first}
  nlohmann::json dashboard_json() const;
  // dashboard_json() serialized; invalid UTF-8 in tenant/app names is replaced, never thrown.
  std::string dashboard_json_text() const;

  Registry& registry() { return registry_; }

 private:
  std::string bound_tenant(std::string_view tenant);
  WallTime now() const { return opts_.wall_clock ? opts_.wall_clock() : WallClock::now(); }

  ServerMetricsOptions opts_;
  Registry registry_;
  DashboardHistory history_;

  HistogramFamily* ttft_;
  HistogramFamily* itl_;
  HistogramFamily* tpot_;
  HistogramFamily* e2e_;
  HistogramFamily* queue_;
  HistogramFamily* prefill_;
  HistogramFamily* decode_;
  HistogramFamily* prompt_len_;
  HistogramFamily* gen_len_;
  GaugeFamily* running_;
  GaugeFamily* waiting_;
  GaugeFamily* kv_usage_;
  GaugeFamily* spool_;
  CounterFamily* prompt_tokens_;
  CounterFamily* cached_tokens_;
  CounterFamily* generation_tokens_;
  CounterFamily* success_;
  CounterFamily* errors_;
  CounterFamily* preemptions_;
  CounterFamily* prefix_queries_;
  CounterFamily* prefix_hits_;
  CounterFamily* rate_limited_;
  CounterFamily* quota_rejected_;
  CounterFamily* spec_drafts_;             // speculative decoding (engine/spec_decode.h)
  CounterFamily* spec_draft_tokens_;
  CounterFamily* spec_accepted_tokens_;
  CounterFamily* spec_accepted_by_pos_;    // labels model, position (0 = first drafted token)

  mutable std::shared_mutex tenants_mu_;
  std::set<std::string, std::less<>> tenants_;   // tenants with their own label value

  std::mutex engine_mu_;                         // sample_engine's previous cumulative values
  int64_t last_prefix_queries_ = -1;
  int64_t last_prefix_hits_ = -1;
};

}  // namespace ts::obs
