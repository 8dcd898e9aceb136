// DashboardHistory: the last hour of serving activity in fixed wall-clock buckets (5 s by
// default), for the live dashboard. Each bucket keeps per-tier TTFT and TPOT samples (a bounded
// reservoir, so percentiles are exact until a bucket sees more than `max_samples` requests),
// token and request counts, errors and refusals, the last engine sample (running, waiting, KV
// usage), prefix-cache deltas and token usage per (tenant, app).
//
// Time comes from the caller (`now` arguments), so tests drive it with a fake clock. A bucket
// is reused when its slot comes round again (a ring of window / bucket slots).
//
// Thread-safety: all methods are thread-safe (one mutex; each call holds it for a few
// microseconds). Never called from the engine thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"

namespace ts::obs {

using WallClock = std::chrono::system_clock;
using WallTime = WallClock::time_point;

struct DashboardHistoryOptions {
  std::chrono::seconds bucket{5};            // width of one bucket
  std::chrono::seconds window{3600};         // history kept (window / bucket slots)
  std::chrono::seconds current_window{60};   // "current" values aggregate this much
  size_t max_samples = 512;                  // latency samples kept per tier per bucket
  size_t max_usage_keys = 256;               // (tenant, app) pairs per bucket; more fold to "other"
  size_t max_tenant_series = 8;              // tenants drawn as their own series; rest "other"
};

// One finished request, as the history needs it.
struct HistoryRequest {
  engine::Tier tier = engine::Tier::kInteractive;  // scheduling tier
  std::optional<double> ttft_s;              // time to first token, when a token came
  std::optional<double> tpot_s;              // mean time per output token after the first
  int64_t prompt_tokens = 0;                 // prompt tokens
  int64_t completion_tokens = 0;             // generated tokens
  std::string_view tenant;                   // bounded by the caller
  std::string_view app;                      // free-form; bounded here per bucket
  bool error = false;                        // ended with an HTTP error status
};

// One engine snapshot, as the history needs it.
struct HistoryEngineSample {
  std::array<int32_t, engine::kNumTiers> running{};  // running sequences per tier
  std::array<int32_t, engine::kNumTiers> waiting{};  // waiting requests per tier
  double kv_usage = 0.0;                     // used / total KV blocks, 0..1
  int64_t prefix_queries_delta = 0;          // prompt tokens looked up since the previous sample
  int64_t prefix_hits_delta = 0;             // of those, found cached
};

class DashboardHistory {
 public:
  DashboardHistory(DashboardHistoryOptions opts, WallTime start);

  void record_request(WallTime now, const HistoryRequest& r);
  void record_error(WallTime now);
  void record_rate_limited(WallTime now);
  void record_quota_rejected(WallTime now);
  void record_engine(WallTime now, const HistoryEngineSample& s);

  // {"bucket_seconds", "window_seconds", "current_window_seconds", "series": {...},
  //  "current": {...}, "usage": [...]} (see dashboard_json in server_metrics.h for the fields).
  nlohmann::json to_json(WallTime now) const;

  const DashboardHistoryOptions& options() const { return opts_; }

 private:
  struct Samples {
    std::vector<double> values;  // reservoir
    int64_t seen = 0;            // offered so far
    void add(double v, size_t cap);
  };
  struct TierBucket {
    Samples ttft, tpot;          // seconds
    int64_t requests = 0;
    int64_t prompt_tokens = 0;
    int64_t output_tokens = 0;
  };
  struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t requests = 0;
  };
  struct Bucket {
    int64_t id = -1;             // absolute bucket number (epoch time / bucket width)
    std::array<TierBucket, engine::kNumTiers> tier;
    int64_t errors = 0;
    int64_t rate_limited = 0;
    int64_t quota_rejected = 0;
    bool has_engine = false;     // an engine sample landed here
    HistoryEngineSample engine;  // the last one
    int64_t prefix_queries = 0;  // summed deltas
    int64_t prefix_hits = 0;
    std::map<std::pair<std::string, std::string>, Usage> usage;  // (tenant, app)
  };

  int64_t bucket_id(WallTime t) const;
  Bucket& bucket_at(WallTime t);                // resets a stale slot
  const Bucket* find(int64_t id) const;         // nullptr when the slot holds another id

  DashboardHistoryOptions opts_;
  int64_t bucket_ms_;
  int64_t start_id_;
  WallTime start_;
  mutable std::mutex mu_;
  std::vector<Bucket> ring_;
  std::optional<HistoryEngineSample> last_engine_;
};

// Percentile of `values` (0 <= p <= 100) by linear interpolation between the closest ranks;
// std::nullopt when empty. `values` is sorted in place.
std::optional<double> percentile(std::vector<double>& values, double p);

}  // namespace ts::obs
