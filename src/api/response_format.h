// OpenAI response bodies and SSE stream chunks, from the plain structs of api/types.h.
// Keys come in OpenAI's order; strings that are not valid UTF-8 (a token that is part of a
// multi-byte character) are rendered with U+FFFD, their raw bytes kept in chat logprobs' "bytes".
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/tool_parser.h"
#include "api/types.h"

namespace ts::api {

// Whole responses.
std::string completion_body(const ResponseMeta& meta, const std::vector<Choice>& choices,
                            const UsageInfo& usage);
std::string chat_completion_body(const ResponseMeta& meta, const std::vector<Choice>& choices,
                                 const UsageInfo& usage);

// Streaming chunks (the JSON only; wrap with sse_event). `usage_field` adds "usage": null, as
// OpenAI does on every chunk but the last when stream_options.include_usage is set.
// Completions: one chunk per text delta; the choice's last one carries finish_reason.
std::string completion_chunk(const ResponseMeta& meta, const Choice& delta, bool usage_field);
// Chat: first a role chunk per choice, then content chunks (delta "content" and/or
// "reasoning_content"), then a finish chunk (empty delta).
std::string chat_role_chunk(const ResponseMeta& meta, int32_t index, bool usage_field);
std::string chat_content_chunk(const ResponseMeta& meta, const Choice& delta, bool usage_field);
// Chat tool-call deltas: a call's first delta carries id, type and name (arguments ""); later
// ones only argument fragments, which the SDK's stream helpers concatenate.
std::string chat_tool_call_chunk(const ResponseMeta& meta, int32_t index,
                                 const std::vector<ToolCallDelta>& calls, bool usage_field);
std::string chat_finish_chunk(const ResponseMeta& meta, int32_t index, FinishReason finish,
                              bool usage_field);
// The final usage chunk ("choices": []) sent when include_usage is set, before [DONE].
std::string usage_chunk(const ResponseMeta& meta, bool chat, const UsageInfo& usage);

// "data: <json>\n\n"
std::string sse_event(std::string_view json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// GET /v1/models and /v1/models/{id}.
std::string model_list_body(const std::vector<ModelCard>& models);
std::string model_body(const ModelCard& model);

// /tokenize -> {"tokens": [...], "count": n, "max_model_len": m}; /detokenize -> {"prompt", "content"}
// (the same text under vLLM's and llama.cpp's names).
std::string tokenize_body(const std::vector<int32_t>& tokens, int64_t max_model_len);
std::string detokenize_body(std::string_view text);

}  // namespace ts::api
