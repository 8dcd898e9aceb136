// Chat tools as the API receives them: validation of `tools` (each function's name and its
// `parameters` JSON Schema), `tool_choice` and `parallel_tool_calls`, and the plan that makes the
// model call a tool when the client requires one (tool_choice "required" or a named function).
//
// The plan is the pluggable step to constrained decoding: a text the server appends to the
// rendered prompt (the format's call opener, e.g. "<tool_call>\n", so the model starts inside a
// call) and a JSON Schema that the generated text after it must satisfy (the call object, or the
// arguments alone when the opener already names the function). With a constraint engine
// (src/structured: ConstraintSpec{.kind = kJsonSchema, .source = plan.schema}) the call is
// guaranteed to parse and validate; without one the opener alone steers the model (best effort).
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "api/error.h"
#include "api/tool_parser.h"

namespace ts::api {

struct ToolSpec {
  std::string name;                   // [A-Za-z0-9_-]{1,64}
  std::string description;
  std::string parameters_json;        // a JSON Schema object as compact text; "{}" when absent
};

enum class ToolChoiceMode { kAuto, kNone, kRequired, kNamed };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;  // the default with tools (none without)
  std::string name;                   // kNamed: the function, one of the tools
};

// `tools`: an array of {"type":"function","function":{"name", "description"?, "parameters"?,
// "strict"?}}. 400 naming the parameter (e.g. "tools[1].function.parameters") for a missing or
// bad name, a duplicate name, or parameters that are not a valid JSON Schema object (wrong
// keyword types, "required" naming non-strings, unknown "type" names, bad nested schemas).
ApiResult<std::vector<ToolSpec>> parse_tools(const nlohmann::json& tools);

// `tool_choice` (nullptr when absent) against the parsed tools: "none" | "auto" | "required" |
// {"type":"function","function":{"name"}}. 400 for other values, "required" or a named function
// without tools, or a name that is not one of the tools.
ApiResult<ToolChoice> parse_tool_choice(const nlohmann::json* choice, const std::vector<ToolSpec>& tools);

// How a required call is produced for one format.
struct ForcedCallPlan {
  std::string prefill;                // appended to the rendered prompt; also fed to the output
                                      // parser first (it is part of the assistant's message)
  std::string schema;                 // JSON Schema (text) of the generated text after prefill;
                                      // "" when the format needs a grammar (deepseek and harmony
                                      // with several tools and "required"): no constraint
};

// For kRequired / kNamed; nullopt for kAuto / kNone. `parallel`: the format's list form allows
// several calls (mistral, granite) when true, exactly one when false.
std::optional<ForcedCallPlan> forced_call_plan(ToolCallFormat format, const std::vector<ToolSpec>& tools,
                                               const ToolChoice& choice, bool parallel);

}  // namespace ts::api
