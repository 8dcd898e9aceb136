// Parsed, validated OpenAI requests as plain structs (no JSON past this point), and the plain
// inputs the response formatters take. Values; thread-safe to copy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/tool_spec.h"
#include "engine/request.h"

namespace ts::api {

// One prompt: text to tokenize, or token ids as given.
struct PromptInput {
  bool is_tokens = false;        // true: `tokens` holds the prompt; false: `text` does
  std::string text;              // valid UTF-8
  std::vector<int32_t> tokens;   // ids >= 0 (the vocabulary bound is checked by the server)
};

// Sampling and length controls shared by both endpoints, validated to their ranges.
struct SamplingOptions {
  std::optional<int64_t> max_tokens;  // >= 1; nullopt = up to the context limit (chat default)
  double temperature = 1.0;           // [0, 2]
  double top_p = 1.0;                 // (0, 1]
  int32_t top_k = 0;                  // >= 1, or 0/-1 = off
  double min_p = 0.0;                 // [0, 1]
  double repetition_penalty = 1.0;    // (0, 2]
  double presence_penalty = 0.0;      // [-2, 2]
  double frequency_penalty = 0.0;     // [-2, 2]
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias in [-100, 100]), id order
  std::optional<int64_t> seed;        // any integer
  int32_t n = 1;                      // [1, 128] choices per prompt
  std::vector<std::string> stop;      // up to 4 non-empty strings
  bool ignore_eos = false;
  engine::Tier tier = engine::Tier::kInteractive;
  bool speculative = true;            // extension `speculative: false`: opt out of speculative decoding
};

// `response_format` (both endpoints). The constraint itself is compiled by the server
// (server/structured_output.h), which refuses invalid schemas, grammars and regexes with a 400.
struct ResponseFormat {
  enum class Type { kText, kJsonObject, kJsonSchema, kGrammar, kRegex };
  Type type = Type::kText;            // text | json_object | json_schema | grammar | regex (extensions)
  std::string source;                 // json_schema: the schema as JSON text; grammar: GBNF; regex: pattern
  std::string name;                   // json_schema.name ("" when absent)
  bool strict = false;                // json_schema.strict (the constraint is enforced either way)
};

// POST /v1/completions
struct CompletionRequest {
  std::string model;
  std::vector<PromptInput> prompts;   // at least one (array-of-prompts gives several)
  SamplingOptions sampling;           // max_tokens defaults to 16 here, as OpenAI's does
  std::optional<int32_t> logprobs;    // [0, 5] alternatives per token; nullopt = no logprobs
  bool echo = false;                  // prepend the prompt to the text
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage (stream only)
  std::string user;
  ResponseFormat response_format;     // extension here (OpenAI has it on chat only)
};

struct ToolCall {
  std::string id;
  std::string type = "function";
  std::string function_name;
  std::string arguments;              // JSON text as the client sent it
};

struct ChatMessage {
  std::string role;                   // system | developer | user | assistant | tool
  std::optional<std::string> content; // text; array-of-parts content joined with "\n"; nullopt = null
  std::string name;                   // optional participant name
  std::vector<ToolCall> tool_calls;   // assistant only
  std::string tool_call_id;           // tool only (required there)
  std::optional<std::string> reasoning_content;  // assistant only: earlier reasoning (given to
                                      // templates as reasoning_content and gpt-oss's thinking)
};

// POST /v1/chat/completions
struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;  // at least one
  SamplingOptions sampling;           // max_completion_tokens (or legacy max_tokens)
  bool logprobs = false;
  int32_t top_logprobs = 0;           // [0, 20]; needs logprobs
  bool stream = false;
  bool include_usage = false;
  std::string user;
  std::string tools_json;             // `tools` as JSON text, "" when absent (for the template)
  std::string tool_choice_json;       // `tool_choice` as JSON text, "" when absent
  std::vector<ToolSpec> tools;        // validated `tools`
  ToolChoice tool_choice;             // kNone without tools, kAuto by default with them
  bool parallel_tool_calls = true;    // several calls in one message allowed
  std::string chat_template_kwargs_json;  // object of extra template variables, "" when absent
  std::string reasoning_effort;       // "low" | "medium" | "high" (or "minimal"), "" when absent
  bool add_generation_prompt = true;  // vLLM extension
  ResponseFormat response_format;
};

// POST /tokenize ({"prompt"|"content"} or {"messages"}) and POST /detokenize ({"tokens"}).
struct TokenizeRequest {
  std::string model;                  // optional
  std::optional<std::string> text;    // "prompt" or "content"
  std::vector<ChatMessage> messages;  // when tokenizing a conversation through the template
  bool add_special = true;            // add BOS etc. ("add_special" / "add_special_tokens");
                                      // defaults to false for messages (the template adds them)
  bool add_generation_prompt = true;  // messages only
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// ---- Inputs to the response formatters ----

enum class FinishReason { kNull, kStop, kLength, kToolCalls, kContentFilter };
const char* finish_reason_text(FinishReason r);  // "stop" | ... ; nullptr for kNull

struct TopLogprob {
  std::string token;                  // token text (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
};

struct TokenLogprobs {
  std::string token;                  // the sampled token's text (raw bytes)
  float logprob = 0.0f;
  std::vector<TopLogprob> top;        // most likely first
};

// One tool call of an assistant message (response side).
struct ToolCallOut {
  std::string id;
  std::string name;
  std::string arguments;              // JSON object text
};

struct Choice {
  int32_t index = 0;
  std::string text;                   // completion text or assistant message content
  std::optional<std::string> reasoning;  // chat: reasoning_content (nullopt = omitted)
  std::vector<ToolCallOut> tool_calls;   // chat: the message's tool_calls (content null if "")
  FinishReason finish = FinishReason::kNull;
  bool has_logprobs = false;
  std::vector<TokenLogprobs> logprobs;  // one per generated token when has_logprobs
  int64_t text_offset_base = 0;       // completions: offset of the first generated token's text
};

struct UsageInfo {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  std::optional<int64_t> reasoning_tokens;  // completion tokens spent reasoning (thinking models)
};

struct ResponseMeta {
  std::string id;                     // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;                // unix seconds
  std::string model;
};

struct ModelCard {
  std::string id;
  int64_t created = 0;
  std::string owned_by = "tokenserve";
  int64_t max_model_len = 0;          // 0 = omitted
};

}  // namespace ts::api
