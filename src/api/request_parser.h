// Parses and validates OpenAI request bodies into the plain structs of api/types.h.
// Every bad input gives an ApiError naming the parameter: malformed JSON, a body that is not an
// object, nesting past kMaxJsonDepth, invalid UTF-8 (400 naming the field that holds it), wrong
// types, missing fields, out-of-range values, unsupported features. Unknown fields are ignored,
// as most OpenAI-compatible servers do, so newer SDKs keep working. JSON null means "absent".
// The model name is not checked here (the service knows its models: api::model_not_found).
// Pure functions; thread-safe; never throw.
#pragma once

#include <cstddef>
#include <string_view>

#include "api/error.h"
#include "api/types.h"

namespace ts::api {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr int32_t kMaxChoices = 128;  // prompts x n per request

ApiResult<CompletionRequest> parse_completion_request(std::string_view body);
ApiResult<ChatRequest> parse_chat_request(std::string_view body);
ApiResult<TokenizeRequest> parse_tokenize_request(std::string_view body);
ApiResult<DetokenizeRequest> parse_detokenize_request(std::string_view body);

// Offset of the first byte that starts an invalid UTF-8 sequence (overlong forms, surrogates
// and code points above U+10FFFF are invalid); std::string_view::npos when `s` is valid.
size_t find_invalid_utf8(std::string_view s);
inline bool is_valid_utf8(std::string_view s) { return find_invalid_utf8(s) == std::string_view::npos; }

}  // namespace ts::api
