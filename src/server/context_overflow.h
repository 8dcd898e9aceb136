// `context_overflow`: what a completion request does when its input is longer than the context
// window (request extension on /v1/completions and /v1/chat/completions):
//   "error"            today's 400 context_length_exceeded (the default)
//   "truncate_left"    drop the oldest input: tokens from the start of a completion prompt
//                      (BOS kept), or the oldest non-system chat messages (system messages and
//                      the latest turns kept)
//   "truncate_middle"  drop from the middle: the prompt's middle tokens, or the chat messages
//                      nearest the middle (system messages, the first and the latest turns kept)
//   {"mode": "segment", "window": W, "overlap": O, "map_prompt"?, "reduce_prompt"?,
//    "map_max_tokens"?}
//                      cut the input into windows of W tokens, neighbours sharing O tokens;
//                      run the map prompt on every window (all windows submitted together, so
//                      the engine batches them and they share the cached map-prompt prefix),
//                      then the reduce prompt over the map outputs gives the answer.
// Truncated responses carry "context_overflow": {"mode", "dropped_tokens"} (and, for chat,
// "dropped_messages"). Segmented ones roll every window's tokens into `usage` with a
// "segments" breakdown and "context_overflow": {"mode", "segments", "window", "overlap"};
// streams send one `event: context_overflow.progress` per finished window before the answer.
// A map or reduce prompt may hold "{text}" where the window (or the joined map outputs) goes;
// without it the text follows the prompt.
//
// Validation (400, param "context_overflow"): unknown mode, 0 <= overlap < window, and every
// map request (prompt frame + window + map_max_tokens) and the reduce request (its frame +
// num_windows * map_max_tokens + max_tokens) must fit the context.
//
// Default: a request without the field gets its key's app's, else its tenant's
// `context_overflow` from the governance config ([tenants.T] / [tenants.T.apps.A]; string
// modes only, since segment needs per-request numbers), else "error". Chat segment mode
// segments the content of the last user message.
// Pure helpers below; OpenAIService::run_segmented (defined in context_overflow.cc) runs the
// map phase on its own thread per request and hands the reduce step to the response pump.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/error.h"
#include "api/types.h"
#include "core/status.h"
#include "engine/request.h"
#include "server/prompt_builder.h"

namespace ts::server {

enum class OverflowMode { kError, kTruncateLeft, kTruncateMiddle, kSegment };
const char* overflow_mode_name(OverflowMode m);  // "error" | "truncate_left" | ...

struct OverflowPolicy {
  OverflowMode mode = OverflowMode::kError;
  int64_t window = 0;                    // segment: tokens per window
  int64_t overlap = 0;                   // segment: tokens shared by neighbours
  std::string map_prompt;                // "" = default
  std::string reduce_prompt;             // "" = default
  std::optional<int64_t> map_max_tokens; // default: the request's max_tokens
  bool from_request = false;             // the request had the field (else a default applies)
};

// Reads the "context_overflow" field of a request body (absent or null = error mode).
// kInvalidArgument naming what is wrong. A body that is not a JSON object gives error mode (the
// request parser reports it).
Result<OverflowPolicy> parse_context_overflow(const std::string& body);

struct Window {
  int64_t start = 0;  // token offsets into the input, [start, end)
  int64_t end = 0;
};

// Windows of `window` tokens stepping by window - overlap until the input's end is covered.
// kInvalidArgument unless 0 <= overlap < window and num_tokens >= 1.
Result<std::vector<Window>> plan_windows(int64_t num_tokens, int64_t window, int64_t overlap);

// Cuts *tokens to at most `keep` tokens (keep >= keep_prefix + 1) without touching the first
// `keep_prefix` ones (BOS): kTruncateLeft drops the oldest tokens after the prefix,
// kTruncateMiddle the middle ones (the rest split evenly between head and tail). Returns how
// many were dropped (0 when it already fits).
int64_t truncate_tokens(std::vector<int32_t>* tokens, int64_t keep, OverflowMode mode, int64_t keep_prefix);

// Order in which chat messages are dropped for a truncation mode: indices into `messages`,
// never a system/developer message, never the last message. Left: oldest first. Middle: the
// one nearest the middle first, keeping the first non-system message for last.
std::vector<size_t> chat_drop_order(const std::vector<api::ChatMessage>& messages, OverflowMode mode);

// A prompt around inserted text: prefix + text + suffix.
struct PromptFrame {
  std::string prefix;
  std::string suffix;
};
PromptFrame map_frame(const std::string& map_prompt);        // "" = default map prompt
PromptFrame reduce_frame(const std::string& reduce_prompt);  // "" = default reduce prompt

// How many special tokens (BOS) the builder puts before a completion prompt's text.
size_t special_prefix_len(const PromptBuilder& prompts);

// Per-window accounting, reported in usage.segments.
struct SegmentUsage {
  int64_t index = 0;
  Window window;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  std::string finish_reason;
};

// {"object": "context_overflow.progress", "segment", "num_segments", "window": [s, e],
//  "prompt_tokens", "completion_tokens", "cached_tokens"} as one named SSE event.
std::string progress_event(const SegmentUsage& s, int64_t num_segments);

// The usage extension: {"segments": [...], "reduce": {...}}.
nlohmann::json segments_usage_json(const std::vector<SegmentUsage>& maps, const api::UsageInfo& reduce);

// A segmented request ready to run: the map requests (one per window, prompts built and checked
// against the context) and how to build the reduce request from the joined map outputs.
struct SegmentRun {
  OverflowPolicy policy;
  std::vector<Window> windows;
  std::vector<engine::Request> maps;
  std::function<api::ApiResult<engine::Request>(const std::string& joined)> make_reduce;
  int64_t reduce_prompt_reserve = 0;  // worst-case reduce prompt tokens (for admission)
  int32_t reduce_max_tokens = 16;     // per choice
  int32_t n = 1;                      // choices of the reduce step
};

}  // namespace ts::server
