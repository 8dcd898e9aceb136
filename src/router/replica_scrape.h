// Reads the replica-contract gauges out of a replica's /metrics text (Prometheus 0.0.4), for
// the built-in picker. Pure; thread-safe.
#pragma once

#include <string_view>

#include "core/status.h"

namespace ts::router {

struct ReplicaLoad {
  double waiting = 0;   // Σ tokenserve:num_requests_waiting over its series (tiers)
  double running = 0;   // Σ tokenserve:num_requests_running
  double kv_usage = 0;  // max tokenserve:kv_cache_usage_perc, 0..1
  double prefix_queries = 0;  // Σ tokenserve:prefix_cache_queries_total
  double prefix_hits = 0;     // Σ tokenserve:prefix_cache_hits_total
};

// Also accepts the vllm: names when the tokenserve: ones are absent (a vLLM replica).
// kInvalidArgument when none of waiting/running/kv is present (not a model server's metrics).
Result<ReplicaLoad> parse_replica_metrics(std::string_view text);

}  // namespace ts::router
