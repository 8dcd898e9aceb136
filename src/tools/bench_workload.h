// What `tokenserve bench` sends: request shapes from a named scenario or a replay file, and
// prompts of exact token lengths made of random words (so they never share a prefix-cache
// block by accident), optionally behind a common prefix of N tokens on purpose.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ts::tools {

// One request's shape.
struct RequestSpec {
  int64_t input_tokens = 0;   // prompt length in tokens, as the server counts them (with BOS)
  int64_t output_tokens = 0;  // max_tokens (with ignore_eos: the exact output length)
  std::string tier;           // "" = server default
  double offset_s = -1;       // replay: arrival offset from the start in seconds; -1 otherwise
};

// Scenario shapes (tokens). Short prompts/outputs are chat-like; long prompts are
// prefill-bound, long outputs decode-bound.
inline constexpr int64_t kShortInput = 128;
inline constexpr int64_t kLongInput = 2048;
inline constexpr int64_t kShortOutput = 128;
inline constexpr int64_t kLongOutput = 1024;

// Parses replay JSONL: one object per line {"offset": s, "input_tokens": n, "output_tokens": n,
// "tier": "..."} ("tier" optional; blank lines and lines starting with '#' skipped). Result is
// sorted by offset. Errors: kInvalidArgument naming the line.
Result<std::vector<RequestSpec>> parse_replay(std::string_view text);

// The request generator of a bench run. Immutable after make(); thread-safe.
class Workload {
 public:
  struct Options {
    std::string scenario = "short-short";  // short-short|long-short|short-long|mixed|replay:FILE
    int64_t input_tokens = 0;              // > 0 overrides the scenario's prompt length
    int64_t output_tokens = 0;             // > 0 overrides the scenario's output length
    std::string tier;                      // applied to requests without their own tier
    uint64_t seed = 1;                     // mixed: which shape each request gets
  };
  // Errors: kInvalidArgument (unknown scenario, bad replay file), kNotFound (replay file).
  static Result<Workload> make(const Options& opts);

  const std::string& name() const { return name_; }
  bool is_replay() const { return !replay_.empty(); }
  // Replay: number of requests in the file. Otherwise 0 (unbounded).
  int64_t size() const { return static_cast<int64_t>(replay_.size()); }
  // Shape of request `index` (deterministic in seed and index). Replay: index < size().
  RequestSpec at(int64_t index) const;
  // One line for reports: "short-short (in 128, out 128)".
  std::string describe() const;

 private:
  std::string name_;
  std::vector<RequestSpec> shapes_;  // scenario shapes; mixed picks one per request
  std::vector<RequestSpec> replay_;
  uint64_t seed_ = 1;
};

// Counts the tokens of a text as the server would (e.g. via POST /tokenize).
using TokenCounter = std::function<Result<int64_t>(const std::string& text)>;

struct Prompt {
  std::string text;
  int64_t measured_tokens = -1;  // tokenizer's count, or -1 when no tokenizer was available
};

// Builds prompts of random words. With a counter, lengths are measured and adjusted until
// exact (or as close as word granularity allows within a few calls); without, one word is
// assumed to be one token. Thread-safe after init().
class PromptBuilder {
 public:
  PromptBuilder(TokenCounter counter, uint64_t seed, int64_t shared_prefix_tokens);
  // Measures the tokenizer (tokens per word) and builds the shared prefix. Errors from the
  // counter are returned (the caller may retry without one).
  Status init();
  bool exact() const { return static_cast<bool>(counter_); }
  int64_t shared_prefix_tokens() const { return prefix_tokens_; }
  // A prompt of `tokens` tokens (at least the shared prefix plus one word); `request_seed`
  // picks the words. Errors come from the counter.
  Result<Prompt> build(int64_t tokens, uint64_t request_seed) const;

 private:
  // Random words appended to `head` until `target` tokens, measured with the counter.
  Result<Prompt> fit(const std::string& head, int64_t target, uint64_t seed) const;

  TokenCounter counter_;
  uint64_t seed_;
  int64_t prefix_target_;
  std::string prefix_text_;        // the shared prefix ("" when none)
  int64_t prefix_tokens_ = 0;      // its measured length
  int64_t empty_tokens_ = 0;       // tokens of "" (BOS and the like)
  mutable std::atomic<double> tokens_per_word_{1.0};
};

}  // namespace ts::tools
