// Plain data exchanged with the engine: what a caller submits (Request, SamplingParams, Tier)
// and what it gets back on the request's event stream (Event, Usage, Timings, FinishReason).
// JSON lives at the edge: the API layer parses, validates and tokenizes into these structs.
// All types are values; no shared state, thread-safe to copy.
#pragma once

#include <chrono>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ts::structured { class Constraint; }

namespace ts::engine {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

// Serving tier. Interactive work is scheduled first; batch fills what is left and is preempted
// first. Each tier has its own limits in EngineOptions.
enum class Tier { kInteractive = 0, kBatch = 1 };
inline constexpr int kNumTiers = 2;
const char* tier_name(Tier t);                    // "interactive" | "batch"
Result<Tier> parse_tier(std::string_view name);   // kInvalidArgument on an unknown name

// Why one choice (sequence) ended.
enum class FinishReason {
  kNone = 0,    // still running (intermediate events)
  kStop,        // EOS / a stop token id / a stop string
  kLength,      // max_tokens reached, or the model's context is full
  kCancelled,   // RequestHandle::cancel() or Engine shutdown
  kError,       // see Event::error (e.g. kDeadlineExceeded when the deadline passed)
};
const char* finish_reason_name(FinishReason r);   // "stop" | "length" | "cancelled" | "error" | ""

// Per-request sampling. Defaults are OpenAI's where it has one.
struct SamplingParams {
  float temperature = 1.0f;          // 0 = greedy (argmax, lowest id on ties); must be >= 0
  int32_t top_k = 0;                 // keep the k most likely tokens; 0 or < 0 = off
  float top_p = 1.0f;                // nucleus: smallest set with cumulative prob >= top_p; 1 = off
  float min_p = 0.0f;                // drop tokens with prob < min_p * max prob; 0 = off
  float repetition_penalty = 1.0f;   // >1 discourages tokens seen in prompt or output (CTRL style)
  float frequency_penalty = 0.0f;    // logit -= f * count in output (OpenAI)
  float presence_penalty = 0.0f;     // logit -= p if the token occurs in output (OpenAI)
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, added to its logit)
  std::optional<uint64_t> seed;      // per-request RNG seed; results reproducible whatever the batch
  int32_t max_tokens = 16;           // completion tokens per choice (>= 1)
  std::vector<std::string> stop;     // stop strings; matched across tokens, never in the output
  std::vector<int32_t> stop_token_ids;  // extra ids that end a choice (not shown as text)
  bool ignore_eos = false;           // keep generating past EOS/EOG tokens
  bool logprobs = false;             // report the sampled token's logprob per token
  int32_t top_logprobs = 0;          // also the N most likely alternatives (0..20)
  int32_t n = 1;                     // choices; they share the prompt's KV blocks
};

// One request as submitted to Engine::submit.
struct Request {
  std::string id;                    // caller's id (logs, usage records); any string
  std::vector<int32_t> prompt_tokens;  // already tokenized, BOS included if wanted (non-empty)
  SamplingParams sampling;           // how to pick tokens
  Tier tier = Tier::kInteractive;    // scheduling tier
  std::string cache_namespace;       // prefix-cache namespace (tenant[/adapter]); tenants never share blocks
  std::optional<TimePoint> deadline; // finish with FinishReason::kError/kDeadlineExceeded after this
  // Constrained decoding (structured/constraint.h), built for this model's tokenizer; null = none.
  // Each choice keeps its own state; only allowed tokens are sampled, EOS only once the text is a
  // complete sentence, and the choice ends with kStop as soon as nothing more can follow (kLength
  // when max_tokens comes first; the text produced so far is kept).
  std::shared_ptr<const structured::Constraint> constraint;
  bool speculative = true;           // false: never draft for this request (extension field
                                     // `speculative: false`); no effect when the engine's spec is off
};

// Log-probability of one token (natural log, from the model's raw logits).
struct TokenLogprob {
  int32_t token = 0;                 // token id
  float logprob = 0.0f;              // log softmax of the raw logits
};

// Logprobs for one generated token.
struct LogprobEntry {
  TokenLogprob sampled;              // the token that was chosen
  std::vector<TokenLogprob> top;     // top_logprobs alternatives, most likely first (ties: lower id)
};

// Token accounting for the whole request (all choices).
struct Usage {
  int64_t prompt_tokens = 0;         // prompt length (counted once for n > 1)
  int64_t completion_tokens = 0;     // generated tokens over all choices, stop/EOS tokens included
  int64_t cached_tokens = 0;         // prompt tokens served from the prefix cache at first admission
};

// Lifecycle times of the request (steady clock). Unset points are TimePoint{} (epoch).
struct Timings {
  TimePoint arrival;                 // submit() accepted it
  TimePoint scheduled;               // first scheduled in a step
  TimePoint first_token;             // first generated token of any choice
  TimePoint finished;                // last choice finished (any reason)
  int32_t num_preemptions = 0;       // times any of its sequences was preempted (recompute)
};

// One item of a request's event stream. Every choice ends with exactly one event whose finish
// is not kNone; the very last event of the request has request_done = true.
struct Event {
  int32_t index = 0;                 // choice index in [0, n)
  std::string text;                  // text delta: valid UTF-8, stop strings removed, may be empty
                                     // (text may lag token_ids while a stop string could still match)
  std::vector<int32_t> token_ids;    // tokens generated since the previous event of this choice
  std::vector<LogprobEntry> logprobs;  // one per token_ids entry when sampling.logprobs
  FinishReason finish = FinishReason::kNone;  // set on the choice's final event
  Status error;                      // when finish == kError: what went wrong
  bool request_done = false;         // last event of the whole request
  Usage usage;                       // request totals so far (final on the request_done event)
  Timings timings;                   // request timings so far (final on the request_done event)
  TimePoint time;                    // when the engine emitted it (its tokens exist from then on);
                                     // TimePoint{} = unknown (backends that do not stamp events)
};

}  // namespace ts::engine
