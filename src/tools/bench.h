// `tokenserve bench`: a load generator for any OpenAI-compatible server. It sends streaming
// POST /v1/completions requests (stream_options.include_usage, max_tokens + ignore_eos for a
// fixed output length) as a closed loop of N clients or as Poisson / replayed arrivals, times
// every SSE chunk, and reports latency percentiles, throughput, errors and goodput.
//
// A run is always bounded: by a request count, a duration (then in-flight requests get a
// drain period), a per-request timeout, and the caller's stop flag (Ctrl-C), after which the
// report covers what finished. run_bench blocks the calling thread; it starts its own client
// threads and joins them all before returning.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tools/stats.h"

namespace ts::tools {

struct BenchOptions {
  std::string url;                 // server root, e.g. http://127.0.0.1:8080 (a trailing /v1 is ok)
  std::string model;               // "model" field of each request
  std::string api_key;             // sent as "Authorization: Bearer KEY" when not empty
  std::string scenario = "short-short";  // short-short|long-short|short-long|mixed|replay:FILE
  int32_t concurrency = 0;         // > 0: closed loop with this many clients
  double rate = 0;                 // > 0: Poisson arrivals, requests per second
  int64_t max_requests = 0;        // 0: no count bound (then duration bounds the run)
  double duration_s = 0;           // 0: no time bound (then max_requests bounds the run)
  std::string tier;                // "tier" field of each request ("" = omit)
  int64_t shared_prefix = 0;       // common prefix of this many tokens on every prompt
  int64_t input_tokens = 0;        // > 0 overrides the scenario's prompt length
  int64_t output_tokens = 0;       // > 0 overrides the scenario's output length
  std::optional<double> slo_ttft_ms;  // goodput: TTFT at most this
  std::optional<double> slo_tpot_ms;  // goodput: TPOT at most this
  uint64_t seed = 1;               // arrivals, mixed shapes, prompt words
  bool ignore_eos = true;          // send ignore_eos so outputs have exactly max_tokens
  bool use_tokenize = true;        // measure prompts with POST /tokenize when the server has it
  double request_timeout_s = 600;  // per request, connect to last byte
  double drain_s = 30;             // after --duration, how long in-flight requests may finish
  int32_t max_inflight = 1024;     // open-loop modes: client threads at most
  const std::atomic<bool>* stop = nullptr;  // set (e.g. by SIGINT) to stop now with a partial report
  std::FILE* progress = nullptr;   // when set, a one-line progress display (a terminal)
  std::FILE* log = nullptr;        // when set, notes about setup (tokenizer found or not)
};

// One request as measured by the client. Times are seconds since the run started.
struct RequestRecord {
  int64_t index = 0;
  std::string tier;
  int64_t target_input_tokens = 0;
  int64_t target_output_tokens = 0;
  double scheduled_s = 0;          // planned arrival (closed loop: when a client took it)
  double start_s = 0;              // request sent
  double end_s = 0;                // last byte received or failure
  bool ok = false;                 // HTTP 200 and a complete stream
  bool cancelled = false;          // cut off by Ctrl-C or the drain deadline (not an error)
  int http_status = 0;             // 0 when no response head arrived
  std::string error;               // error key ("429", "connection", "timeout", ...) when !ok
  std::string error_message;       // first part of the error body or transport message
  double ttft_ms = 0;              // first chunk with a choice
  double e2e_ms = 0;
  double tpot_ms = 0;              // (e2e - ttft) / (output_tokens - 1); 0 when < 2 tokens
  std::vector<double> itl_ms;      // gaps between consecutive chunks with a choice
  std::vector<double> chunk_s;     // arrival time of each chunk with a choice
  int64_t num_chunks = 0;          // chunks with non-empty text
  int64_t prompt_tokens = 0;       // usage.prompt_tokens, or the measured prompt length
  int64_t output_tokens = 0;       // usage.completion_tokens, or num_chunks
  bool usage_reported = false;     // the server sent a usage object
};

struct BenchReport {
  std::string url, model, scenario, mode;  // mode: "closed loop, concurrency 8" / "poisson 4 req/s"
  bool interrupted = false;        // stopped by the stop flag
  bool prompts_exact = false;      // prompt lengths measured with the server's tokenizer
  double elapsed_s = 0;            // run start to the last request's end
  int64_t num_sent = 0, num_ok = 0, num_errors = 0, num_cancelled = 0;
  int64_t num_usage_reported = 0;  // ok requests whose stream carried usage
  int64_t total_prompt_tokens = 0, total_output_tokens = 0;  // over ok requests
  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  Summary prompt_tokens, output_tokens;
  double req_per_s = 0, output_tok_per_s = 0, total_tok_per_s = 0;
  std::map<std::string, int64_t> errors;  // error key -> count
  std::optional<double> slo_ttft_ms, slo_tpot_ms;
  int64_t num_good = 0;            // ok and within both SLOs
  double goodput_share = 0;        // num_good / (num_ok + num_errors)
  double goodput_rate = 0;         // num_good / elapsed_s
  std::vector<RequestRecord> records;  // in index order
};

// "800ms", "0.8s", "250us", "2m", or a bare number of milliseconds -> milliseconds;
// nullopt when malformed.
std::optional<double> parse_duration_ms(std::string_view s);

// Runs the benchmark. Errors (before any load is sent): kInvalidArgument (bad options),
// kNotFound (replay file), kUnavailable (server unreachable while preparing prompts).
// Request failures during the run are not errors: they are counted in the report.
Result<BenchReport> run_bench(const BenchOptions& opts);

// Aggregates records into a report (pure; used by run_bench and tests). Fills every field
// except url/model/scenario/mode/interrupted/prompts_exact.
BenchReport summarize_records(std::vector<RequestRecord> records, double elapsed_s,
                              std::optional<double> slo_ttft_ms, std::optional<double> slo_tpot_ms);

// Human-readable report (several lines, ends with '\n').
std::string format_report(const BenchReport& r);
// Every number of the report, and one object per request, as JSON text.
std::string report_json(const BenchReport& r);
// An SVG image: CDFs of TTFT, TPOT and ITL, and output tokens/s and requests over time.
std::string report_svg(const BenchReport& r);

}  // namespace ts::tools
