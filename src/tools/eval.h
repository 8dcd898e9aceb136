// `tokenserve eval`: runs a layered suite (tools/eval_suite.h) against any OpenAI-compatible
// server, scores every case, and summarizes per layer: score with a Wilson 95% interval,
// output-length distribution (completion tokens), n-gram repetition rate. Against a baseline
// RUN.json it pairs cases by (layer, id) and reports per layer the change with a paired
// significance test (McNemar exact for 0/1 scores), marks regressions (score drop beyond the
// threshold and significant), improvements, and the "gaming" flag: score up while output
// length or repetition jumps. run_eval blocks; it starts `concurrency` client threads and joins
// them before returning. Requests that fail (HTTP error, timeout) score 0 and are counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tools/eval_stats.h"
#include "tools/eval_suite.h"
#include "tools/stats.h"

namespace ts::tools {

struct EvalOptions {
  std::string url;                 // server root, e.g. http://127.0.0.1:8080 (a trailing /v1 is ok)
  std::string model;               // "" = the first id of GET /v1/models
  std::string api_key;             // Authorization: Bearer KEY when not empty
  int32_t concurrency = 4;         // client threads
  double request_timeout_s = 300;  // per request
  int repetition_n = 3;            // n of the repetition rate's word n-grams
  const std::atomic<bool>* stop = nullptr;  // set to stop early; unsent cases are errors
  std::FILE* progress = nullptr;   // when set, a progress line per finished case
};

// Thresholds of the baseline comparison.
struct CompareOptions {
  double regression_threshold = 0.05;  // a layer regresses when its score drops more than this
  double alpha = 0.05;                 // ... and the paired test's p-value is below this
  double length_jump = 0.5;            // gaming flag: mean output tokens up by more than 50%
  double repetition_jump = 0.1;        // ... or repetition rate up by more than 0.1 (absolute)
};

struct CaseResult {
  std::string id, layer;
  double score = 0;
  std::string reason;              // why it failed ("" when passed)
  std::string output;
  std::string error;               // transport/HTTP error ("" when the request succeeded)
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string finish_reason;
  double latency_ms = 0;
  double repetition = 0;
};

struct LayerSummary {
  int64_t n = 0;
  double score = 0;                // mean case score
  Interval ci;                     // Wilson (binary scores) or bootstrap 95%
  int64_t errors = 0;              // requests that failed
  Summary output_tokens;           // distribution of completion tokens
  Summary output_chars;            // distribution of output length in bytes
  double repetition = 0;           // mean repetition rate
};

struct EvalRun {
  std::string url, model, suite, created;
  std::vector<CaseResult> cases;   // suite order
  std::map<std::string, LayerSummary> layers;
  LayerSummary overall;
};

// Sends every case, scores it, summarizes. Errors: kInvalidArgument (bad URL),
// kUnavailable (model discovery failed). Individual request failures are recorded, not returned.
Result<EvalRun> run_eval(const EvalSuite& suite, const EvalOptions& opts);

// Per-layer summaries of scored cases (used by run_eval and when reading RUN.json back).
std::map<std::string, LayerSummary> summarize_layers(const std::vector<CaseResult>& cases,
                                                     LayerSummary* overall);

struct LayerComparison {
  std::string layer;
  bool in_baseline = false, in_candidate = false;
  double base_score = 0, score = 0, delta = 0;  // delta over the paired cases
  PairedTest test;                 // paired by case id
  std::string verdict;             // "regression" | "improvement" | "no_change" | "new" | "removed"
  std::vector<std::string> flags;  // "score_up_length_jump", "score_up_repetition_jump"
  double base_mean_tokens = 0, mean_tokens = 0;
  double base_repetition = 0, repetition = 0;
};

struct Comparison {
  std::string baseline_path;
  std::vector<LayerComparison> layers;  // by layer name
  std::vector<std::string> regressed;   // layer names with verdict "regression"
  std::vector<std::string> flagged;     // layer names with a gaming flag
};

Comparison compare_runs(const EvalRun& baseline, const EvalRun& candidate,
                        const CompareOptions& opts);

// RUN.json text (with "comparison" when cmp is set) and its reader (cases and run fields; the
// layer summaries are recomputed from the cases). Reader errors: kInvalidArgument naming what
// is wrong.
std::string run_json(const EvalRun& run, const Comparison* cmp);
Result<EvalRun> parse_run_json(const std::string& text);

// Human-readable summary for stdout.
std::string format_eval_summary(const EvalRun& run, const Comparison* cmp);

// Markdown report and its SVG charts (eval_report.cc). `stem` is the file name stem the
// markdown uses to link the charts: "<stem>.scores.svg" and "<stem>.lengths.svg".
std::string eval_markdown(const EvalRun& run, const Comparison* cmp, const std::string& stem);
std::string eval_scores_svg(const EvalRun& run, const Comparison* cmp);
std::string eval_lengths_svg(const EvalRun& run);

// Writes RUN.json at `path`, and beside it <stem>.md, <stem>.scores.svg and <stem>.lengths.svg
// (stem = path without ".json"). Each file is written to a temporary name and renamed, so a
// failure leaves no half-written file. kInvalidArgument on a write failure.
Status write_eval_outputs(const std::string& path, const EvalRun& run, const Comparison* cmp);

}  // namespace ts::tools
