#include "api/tool_spec.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

namespace ts::api {

using json = nlohmann::json;

namespace {

std::string compact(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiError bad_schema(const std::string& path, const std::string& why) {
  return invalid_value(path, "Invalid '" + path + "': not a valid JSON Schema: " + why + ".",
                       "invalid_function_parameters");
}

bool is_type_name(const std::string& t) {
  static const char* kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
  return std::any_of(std::begin(kTypes), std::end(kTypes), [&](const char* k) { return t == k; });
}

// Structural check of a JSON Schema: each keyword we know has the type the spec gives it, and
// nested schemas are checked recursively. Unknown keywords are allowed (annotations).
std::optional<ApiError> check_schema(const json& s, const std::string& path, int depth) {
  if (depth > 64) return bad_schema(path, "nested deeper than 64 levels");
  if (s.is_boolean()) return std::nullopt;
  if (!s.is_object()) return bad_schema(path, "a schema must be an object or a boolean");
  if (auto t = s.find("type"); t != s.end()) {
    if (t->is_string()) {
      if (!is_type_name(t->get<std::string>()))
        return bad_schema(path + ".type", "unknown type '" + t->get<std::string>() + "'");
    } else if (t->is_array()) {
      for (const json& e : *t)
        if (!e.is_string() || !is_type_name(e.get<std::string>()))
          return bad_schema(path + ".type", "every entry of 'type' must be a type name");
    } else {
      return bad_schema(path + ".type", "'type' must be a string or an array of strings");
    }
  }
  if (auto p = s.find("properties"); p != s.end()) {
    if (!p->is_object()) return bad_schema(path + ".properties", "'properties' must be an object");
    for (auto it = p->begin(); it != p->end(); ++it)
      if (auto e = check_schema(it.value(), path + ".properties." + it.key(), depth + 1)) return e;
  }
  if (auto r = s.find("required"); r != s.end()) {
    if (!r->is_array()) return bad_schema(path + ".required", "'required' must be an array of strings");
    for (const json& e : *r)
      if (!e.is_string()) return bad_schema(path + ".required", "'required' must be an array of strings");
  }
  for (const char* key : {"items", "additionalProperties", "not", "contains", "propertyNames"}) {
    if (auto it = s.find(key); it != s.end()) {
      if (std::string(key) == "items" && it->is_array()) {
        for (size_t i = 0; i < it->size(); ++i)
          if (auto e = check_schema((*it)[i], path + ".items[" + std::to_string(i) + "]", depth + 1)) return e;
      } else if (auto e = check_schema(*it, path + "." + key, depth + 1)) {
        return e;
      }
    }
  }
  for (const char* key : {"anyOf", "oneOf", "allOf", "prefixItems"}) {
    if (auto it = s.find(key); it != s.end()) {
      if (!it->is_array() || it->empty())
        return bad_schema(path + "." + key, std::string("'") + key + "' must be a non-empty array of schemas");
      for (size_t i = 0; i < it->size(); ++i)
        if (auto e = check_schema((*it)[i], path + "." + key + "[" + std::to_string(i) + "]", depth + 1)) return e;
    }
  }
  for (const char* key : {"$defs", "definitions"}) {
    if (auto it = s.find(key); it != s.end()) {
      if (!it->is_object()) return bad_schema(path + "." + key, std::string("'") + key + "' must be an object");
      for (auto d = it->begin(); d != it->end(); ++d)
        if (auto e = check_schema(d.value(), path + "." + key + "." + d.key(), depth + 1)) return e;
    }
  }
  if (auto it = s.find("enum"); it != s.end() && !it->is_array())
    return bad_schema(path + ".enum", "'enum' must be an array");
  for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
    if (auto it = s.find(key); it != s.end() && !it->is_number())
      return bad_schema(path + "." + key, std::string("'") + key + "' must be a number");
  for (const char* key : {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"})
    if (auto it = s.find(key); it != s.end() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
      return bad_schema(path + "." + key, std::string("'") + key + "' must be a non-negative integer");
  for (const char* key : {"pattern", "format", "$ref", "description", "title"})
    if (auto it = s.find(key); it != s.end() && !it->is_string())
      return bad_schema(path + "." + key, std::string("'") + key + "' must be a string");
  return std::nullopt;
}

bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

json call_object_schema(const ToolSpec& t, const char* args_key) {
  return json{{"type", "object"},
              {"properties", {{"name", {{"const", t.name}}}, {args_key, json::parse(t.parameters_json)}}},
              {"required", json::array({"name", args_key})},
              {"additionalProperties", false}};
}

json one_of_calls(const std::vector<ToolSpec>& tools, const ToolChoice& choice, const char* args_key) {
  if (choice.mode == ToolChoiceMode::kNamed)
    for (const ToolSpec& t : tools)
      if (t.name == choice.name) return call_object_schema(t, args_key);
  json any = json::array();
  for (const ToolSpec& t : tools) any.push_back(call_object_schema(t, args_key));
  if (any.size() == 1) return any[0];
  return json{{"anyOf", std::move(any)}};
}

}  // namespace

ApiResult<std::vector<ToolSpec>> parse_tools(const json& tools) {
  if (!tools.is_array()) return invalid_type("tools", "an array of tool objects");
  std::vector<ToolSpec> out;
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    std::string p = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return invalid_type(p, "a tool object");
    auto type = t.find("type");
    if (type != t.end() && !type->is_null() && !(type->is_string() && *type == "function"))
      return invalid_value(p + ".type", "Invalid '" + p + ".type': only 'function' tools are supported.");
    auto fn = t.find("function");
    if (fn == t.end() || fn->is_null()) return missing_param(p + ".function");
    if (!fn->is_object()) return invalid_type(p + ".function", "an object");
    ToolSpec spec;
    auto name = fn->find("name");
    if (name == fn->end() || name->is_null()) return missing_param(p + ".function.name");
    if (!name->is_string()) return invalid_type(p + ".function.name", "a string");
    spec.name = name->get<std::string>();
    if (!valid_function_name(spec.name))
      return invalid_value(p + ".function.name", "Invalid '" + p + ".function.name': '" + spec.name +
                                                     "' must be 1-64 characters of a-z, A-Z, 0-9, '_', '-' or '.'.");
    if (!names.insert(spec.name).second)
      return invalid_value(p + ".function.name", "Invalid '" + p + ".function.name': the function '" +
                                                     spec.name + "' is defined twice.");
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null()) {
      if (!d->is_string()) return invalid_type(p + ".function.description", "a string");
      spec.description = d->get<std::string>();
    }
    spec.parameters_json = "{}";
    if (auto params = fn->find("parameters"); params != fn->end() && !params->is_null()) {
      std::string pp = p + ".function.parameters";
      if (!params->is_object()) return bad_schema(pp, "the parameters must be a JSON Schema object");
      if (auto e = check_schema(*params, pp, 0)) return *e;
      if (auto ty = params->find("type"); ty != params->end() && !(ty->is_string() && *ty == "object"))
        return bad_schema(pp + ".type", "function parameters must be of type 'object'");
      spec.parameters_json = compact(*params);
    }
    if (auto s = fn->find("strict"); s != fn->end() && !s->is_null() && !s->is_boolean())
      return invalid_type(p + ".function.strict", "a boolean");
    out.push_back(std::move(spec));
  }
  return out;
}

ApiResult<ToolChoice> parse_tool_choice(const json* choice, const std::vector<ToolSpec>& tools) {
  ToolChoice c;
  c.mode = tools.empty() ? ToolChoiceMode::kNone : ToolChoiceMode::kAuto;
  if (!choice) return c;
  if (choice->is_string()) {
    const std::string& s = choice->get_ref<const std::string&>();
    if (s == "none") c.mode = ToolChoiceMode::kNone;
    else if (s == "auto") c.mode = tools.empty() ? ToolChoiceMode::kNone : ToolChoiceMode::kAuto;
    else if (s == "required") c.mode = ToolChoiceMode::kRequired;
    else
      return invalid_value("tool_choice", "Invalid 'tool_choice': expected 'none', 'auto', 'required' or "
                                          "{\"type\": \"function\", \"function\": {\"name\": ...}}, but got '" + s + "'.");
  } else if (choice->is_object()) {
    auto type = choice->find("type");
    if (type == choice->end() || !type->is_string() || *type != "function")
      return invalid_value("tool_choice.type", "Invalid 'tool_choice.type': expected 'function'.");
    auto fn = choice->find("function");
    if (fn == choice->end() || !fn->is_object()) return missing_param("tool_choice.function");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) return missing_param("tool_choice.function.name");
    c.mode = ToolChoiceMode::kNamed;
    c.name = name->get<std::string>();
  } else {
    return invalid_type("tool_choice", "a string or an object");
  }
  if ((c.mode == ToolChoiceMode::kRequired || c.mode == ToolChoiceMode::kNamed) && tools.empty())
    return invalid_value("tool_choice", "Invalid 'tool_choice': it requires a tool call, but no 'tools' were given.");
  if (c.mode == ToolChoiceMode::kNamed &&
      std::none_of(tools.begin(), tools.end(), [&](const ToolSpec& t) { return t.name == c.name; }))
    return invalid_value("tool_choice", "Invalid 'tool_choice': the function '" + c.name +
                                            "' is not one of the functions in 'tools'.",
                         "tool_not_found");
  return c;
}

std::optional<ForcedCallPlan> forced_call_plan(ToolCallFormat format, const std::vector<ToolSpec>& tools,
                                               const ToolChoice& choice, bool parallel) {
  if (choice.mode != ToolChoiceMode::kRequired && choice.mode != ToolChoiceMode::kNamed) return std::nullopt;
  const ToolSpec* named = nullptr;
  for (const ToolSpec& t : tools)
    if (choice.mode == ToolChoiceMode::kNamed && t.name == choice.name) named = &t;
  auto list = [&](json item) {
    json a{{"type", "array"}, {"items", std::move(item)}, {"minItems", 1}};
    if (!parallel) a["maxItems"] = 1;
    return a;
  };
  // Formats whose call header carries the name force one function; with several tools to
  // choose from they need a grammar (structured::schema_to_gbnf), not a schema: no constraint
  // then (best effort; the lead can add the grammar once src/structured is merged).
  bool header_named = format == ToolCallFormat::kDeepSeek || format == ToolCallFormat::kHarmony;
  if (header_named && !named && tools.size() == 1) named = &tools[0];
  ForcedCallPlan plan;
  switch (format) {
    case ToolCallFormat::kNone:
    case ToolCallFormat::kHermes:
      plan.prefill = "<tool_call>\n";
      plan.schema = compact(one_of_calls(tools, choice, "arguments"));
      break;
    case ToolCallFormat::kLlama3:
      plan.schema = compact(one_of_calls(tools, choice, "parameters"));
      break;
    case ToolCallFormat::kMistral:
      plan.prefill = "[TOOL_CALLS]";
      plan.schema = compact(list(one_of_calls(tools, choice, "arguments")));
      break;
    case ToolCallFormat::kGranite:
      plan.prefill = "<|tool_call|>";
      plan.schema = compact(list(one_of_calls(tools, choice, "arguments")));
      break;
    case ToolCallFormat::kDeepSeek:
      if (named) {
        plan.prefill = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C><\xEF\xBD\x9Ctool\xE2\x96\x81"
                       "call\xE2\x96\x81" "begin\xEF\xBD\x9C>function<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>" +
                       named->name + "\n```json\n";
        plan.schema = named->parameters_json;
      }
      break;
    case ToolCallFormat::kHarmony:
      if (named) {
        plan.prefill = "<|channel|>commentary to=functions." + named->name + " <|constrain|>json<|message|>";
        plan.schema = named->parameters_json;
      }
      break;
  }
  return plan;
}

}  // namespace ts::api
