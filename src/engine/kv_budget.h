// The default KV cache budget, sized from the machine the way vLLM's gpu_memory_utilization
// sizes GPU memory: a share of the memory available after the weights, capped at what the
// engine can ever use (max_seqs sequences of max_model_len tokens) and, because host memory is
// shared with everything else on the machine and the pool is allocated (zeroed) up front, at
// `ceiling_bytes` unless one full-context sequence needs more. `tokenserve serve` reads
// MemAvailable from /proc/meminfo before loading the model and prints the result;
// --kv-cache-memory overrides it. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ts::engine {

struct KvBudgetInputs {
  int64_t mem_available_bytes = 0;  // MemAvailable before the model was loaded
  int64_t weight_bytes = 0;         // the model file: resident once its pages are touched
  int64_t kv_bytes_per_token = 0;   // KV bytes one token takes over all layers (> 0)
  int64_t kv_bytes_per_seq = 0;     // KV bytes one sequence of max_model_len tokens holds
                                    // (model::KvFootprint::bytes_for_tokens: less than
                                    // max_model_len x kv_bytes_per_token when sliding-window
                                    // layers keep only their window); 0 = that product
  int64_t max_seqs = 0;             // running sequences at most
  int64_t max_model_len = 0;        // tokens per sequence at most (the model's context)
  double utilization = 0.9;         // share of the memory left after the weights, (0, 1]
  int64_t ceiling_bytes = int64_t{8} << 30;  // default ceiling, raised to one full sequence
};

struct KvBudget {
  int64_t bytes = 0;                // the budget (0 when nothing is left after the weights)
  bool capped_by_use = false;       // lowered to max_seqs * max_model_len tokens of KV, or to
                                    // the ceiling
  std::string explanation;          // one line for the start-up log, e.g.
                                    // "0.9 x (MemAvailable 20.1 GiB - weights 0.5 GiB) = 17.6 GiB"
};

// budget = min(utilization * max(0, mem_available - weights), max_seqs * per-seq,
//              max(ceiling_bytes, per-seq)), per-seq = kv_bytes_per_seq or max_model_len * per-token.
// Error kInvalidArgument for non-positive per-token bytes, sequence counts or lengths, or a
// utilization outside (0, 1].
Result<KvBudget> default_kv_budget(const KvBudgetInputs& in);

// MemAvailable from the text of /proc/meminfo ("MemAvailable:   20971520 kB"), in bytes.
// Error kNotFound when the line is missing, kInvalidArgument when it does not parse.
Result<int64_t> parse_mem_available(std::string_view meminfo);

// "1.5 GiB", "300.0 MiB", "12 KiB", "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace ts::engine
