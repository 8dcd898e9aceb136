// Scorers of `tokenserve eval`: each turns a model output into a score in [0, 1] (all of them
// are binary today: 1 = pass, 0 = fail), with a short reason for failures.
//   exact       trimmed output == expected (ignore_case optional)
//   contains    expected string (or every string of an array) occurs in the output
//   regex       expected PCRE2 pattern matches somewhere in the output
//   json_schema the output (or the first {...}/[...] block in it, e.g. inside a ``` fence)
//               parses as JSON and satisfies the expected schema (subset below)
//   number      the first number in the output is within `tolerance` of expected
//   choice      the first standalone choice label in the output equals expected
// Supported JSON Schema keywords: type (string or array of types), properties, required,
// additionalProperties (bool), items, enum, const, minimum, maximum, minLength, maxLength,
// minItems, maxItems, pattern. Other keywords are refused when the suite loads, never ignored.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tools/eval_suite.h"

namespace ts::tools {

struct ScoreResult {
  double score = 0;     // in [0, 1]
  std::string reason;   // "" when it passed; else why not ("no number in output", ...)
};

ScoreResult score_output(const EvalCase& c, std::string_view output);

// Checks a pattern compiles (PCRE2, UTF mode). kInvalidArgument with the compiler's message
// and offset otherwise.
Status check_regex(const std::string& pattern);

// Checks a schema only uses the supported keywords with values of the right types.
// kInvalidArgument naming the keyword path otherwise.
Status check_json_schema(const nlohmann::json& schema);

// True when `value` satisfies `schema` (already checked); *why says the first violation.
bool json_matches_schema(const nlohmann::json& value, const nlohmann::json& schema,
                         std::string* why);

// The first decimal number in text ("-3", "2.5e3", "1,234" -> 1234); false when none.
bool first_number(std::string_view text, double* out);

}  // namespace ts::tools
