// `tokenserve plan`: capacity planning from KV-cache arithmetic. Given a model shape (or a
// GGUF), a memory size and a context-length distribution, it computes KV bytes per token,
// per-request peak KV at P50/P95/P99, how many sequences fit after weights and headroom, and
// the serve settings to use. Pure computation apart from reading the model / lengths file;
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/kv_storage.h"

namespace ts::tools {

// Model facts the plan needs.
struct ModelShape {
  std::string name;           // for the report ("" = unnamed)
  int32_t n_layer = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int64_t n_ctx_train = 0;    // 0 = unknown
  uint64_t weight_bytes = 0;  // resident weight memory
  std::string weight_source;  // how weight_bytes was obtained
  int32_t n_expert = 0;       // MoE experts per layer (0 = dense)
  int32_t n_expert_used = 0;  // MoE experts per token
  uint64_t active_weight_bytes = 0;  // weight bytes one token reads (MoE: < weight_bytes), 0 = unknown
  int32_t n_swa_layers = 0;   // sliding-window layers (gemma3)
  int32_t sliding_window = 0;
};

// Reads the shape from a GGUF's metadata and its tensors' byte sizes (weights = sum of all
// tensor bytes). Errors: those of GgufFile::open and read_model_config.
Result<ModelShape> model_shape_from_gguf(const std::string& path);

// Weight bytes of `params` parameters stored as `weight_type` (f32 f16 bf16 q8_0 q4_0 q4_k
// q6_k: block bytes / block size per weight). Errors: kInvalidArgument for an unknown type.
Result<uint64_t> weight_bytes_for(double params, std::string_view weight_type);

// KV bytes one token takes over all layers, K and V: 2 x layers x kv heads x
// (head_dim x element bytes), plus for q8_0 one f32 scale per token per head, computed by
// model::kv_bytes_per_token (the layout of model::KvStorage).
uint64_t kv_bytes_per_token(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, model::KvType type);

// Context-length distribution (total tokens per request: prompt + output).
struct LengthDistribution {
  int64_t count = 0;  // samples (0 when given as percentiles)
  int64_t p50 = 0, p95 = 0, p99 = 0;
  int64_t max = 0;
};

// Parses a lengths file: one total context length per line, or replay JSONL lines
// ({"input_tokens", "output_tokens", ...} summed). Percentiles are rounded up to whole tokens.
// Blank and '#' lines are skipped. Errors: kInvalidArgument naming the line, or no lengths.
Result<LengthDistribution> parse_lengths(std::string_view text);

struct PlanOptions {
  ModelShape model;
  model::KvType kv_type = model::KvType::kF16;
  uint64_t memory_bytes = 0;     // accelerator/host memory for weights + KV
  double headroom = 0.2;         // fraction of memory kept free (activations, runtime, fragments)
  LengthDistribution lengths;
  int32_t concurrency = 0;       // > 0: check that this many concurrent requests fit
  int32_t block_size = 16;       // KV block (page) size in tokens; peaks round up to blocks
                                 // (model::KvFootprint: sliding-window layers hold their window)
};

struct PlanPercentile {
  std::string label;             // "P50", "P95", "P99"
  int64_t context_tokens = 0;
  uint64_t peak_bytes = 0;       // KV of one request at this context, rounded up to blocks
  int64_t max_seqs = 0;          // concurrent requests of this context that fit in the KV budget
};

struct PlanResult {
  PlanOptions options;
  uint64_t kv_bytes_per_token = 0;         // every layer (a request shorter than any window)
  uint64_t kv_full_bytes_per_token = 0;    // full-attention layers only (= kv_bytes_per_token
                                           // without sliding-window layers)
  uint64_t kv_window_bytes_per_seq = 0;    // sliding-window layers' window, at most, per request
  std::string kv_formula;        // "2 x 64 layers x 8 KV heads x 128 head dim x 2 B (f16)"
  uint64_t usable_bytes = 0;     // memory x (1 - headroom)
  int64_t kv_budget_bytes = 0;   // usable - weights (negative when weights do not fit)
  std::vector<PlanPercentile> percentiles;  // P50, P95, P99
  uint64_t rec_kv_cache_memory = 0;         // --kv-cache-memory (whole MiB)
  int64_t rec_max_seqs = 0;                 // --max-seqs
  int64_t interactive_max_running = 0;
  double interactive_kv_share = 1.0;
  int64_t batch_max_running = 0;
  double batch_kv_share = 0.75;
  uint64_t memory_for_concurrency = 0;      // memory that --concurrency at P95 would need
  std::vector<std::string> notes;
  std::vector<std::string> warnings;
};

// Errors: kInvalidArgument for a non-positive shape, memory, lengths or block size, lengths
// not ascending, or headroom outside [0, 1).
Result<PlanResult> compute_plan(const PlanOptions& opts);

// "24.00 GiB", "512.0 MiB", "1.5 KiB", "100 B".
std::string format_bytes(uint64_t bytes);
// The table report (ends with '\n').
std::string format_plan(const PlanResult& r);
// Every number of the plan as JSON text.
std::string plan_json(const PlanResult& r);

}  // namespace ts::tools
