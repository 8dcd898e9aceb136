// response_format -> the engine's constraint (structured/constraint.h) for this model's
// tokenizer. Compiled constraints are cached by source (compile_cached), the vocabulary index once
// per tokenizer. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "api/error.h"
#include "api/types.h"
#include "structured/constraint.h"

namespace ts::tokenizer { class Tokenizer; }

namespace ts::server {

// nullptr for type text. `start_after`: constrain only the text after it (e.g. "</think>" for
// templates that reason first). Errors: 400 invalid_request_error, param "response_format",
// code "invalid_response_format", with the compiler's message (bad JSON Schema, unsupported
// keyword, GBNF or regex syntax, compile limits).
api::ApiResult<std::shared_ptr<const structured::Constraint>> constraint_for(
    const api::ResponseFormat& rf, const tokenizer::Tokenizer& tok, const std::string& start_after = "");

}  // namespace ts::server
