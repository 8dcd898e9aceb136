#include "api/request_parser.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

namespace ts::api {

using json = nlohmann::json;
using Err = std::optional<ApiError>;

#define API_TRY(expr)                         \
  do {                                        \
    if (::ts::api::Err _api_e = (expr)) return std::move(*_api_e); \
  } while (0)

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

namespace {

constexpr const char kSentinel[] = "\xEF\xBF\xBF";  // U+FFFF marks bytes that were invalid

std::string fmt_num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

// Deepest nesting of arrays/objects, outside strings (cheap pre-check: later walks recurse).
int json_depth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

bool find_sentinel_path(const json& j, const std::string& path, std::string* out) {
  if (j.is_string()) {
    if (j.get_ref<const std::string&>().find(kSentinel) != std::string::npos) {
      *out = path;
      return true;
    }
    return false;
  }
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      if (find_sentinel_path(j[i], path + "[" + std::to_string(i) + "]", out)) return true;
    return false;
  }
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::string p = path.empty() ? it.key() : path + "." + it.key();
      if (it.key().find(kSentinel) != std::string::npos) {
        *out = p;
        return true;
      }
      if (find_sentinel_path(it.value(), p, out)) return true;
    }
  }
  return false;
}

std::string parse_error_text(const std::exception& e) {
  std::string m = e.what();
  if (size_t p = m.find("] "); m.rfind("[json.exception", 0) == 0 && p != std::string::npos)
    m = m.substr(p + 2);
  return m;
}

ApiError malformed(std::string detail) {
  ApiError e;
  e.message = "We could not parse the JSON body of your request: " + std::move(detail) +
              ". The API expects a JSON object; check the request body and Content-Type.";
  e.code = "invalid_json";
  return e;
}

ApiResult<json> parse_body(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return malformed("the body is empty");
  if (json_depth(body) > kMaxJsonDepth)
    return malformed("nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  size_t bad = find_invalid_utf8(body);
  json j;
  if (bad == std::string_view::npos) {
    try {
      j = json::parse(body);
    } catch (const std::exception& e) {
      return malformed(parse_error_text(e));
    }
  } else {
    // Replace each invalid byte with a marker so the JSON still parses, then report which
    // field held it.
    std::string fixed;
    fixed.reserve(body.size() + 16);
    std::string_view rest = body;
    while (!rest.empty()) {
      size_t b = find_invalid_utf8(rest);
      if (b == std::string_view::npos) {
        fixed.append(rest);
        break;
      }
      fixed.append(rest.substr(0, b));
      fixed.append(kSentinel);
      rest.remove_prefix(b + 1);
    }
    try {
      j = json::parse(fixed);
    } catch (const std::exception&) {
      return malformed("invalid UTF-8 at byte " + std::to_string(bad));
    }
    std::string path;
    if (!find_sentinel_path(j, "", &path) || path.empty())
      return malformed("invalid UTF-8 at byte " + std::to_string(bad));
    return invalid_value(path, "Invalid '" + path + "': the string is not valid UTF-8.",
                         "invalid_utf8");
  }
  if (!j.is_object()) return malformed("the body is not a JSON object");
  return j;
}

// A present, non-null field, or nullptr.
const json* field(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string join(const std::string& prefix, const char* key) {
  return prefix.empty() ? std::string(key) : prefix + "." + key;
}

Err get_string(const json& o, const char* key, std::string* out, bool required,
               const std::string& prefix = {}) {
  const json* v = field(o, key);
  if (!v) return required ? Err(missing_param(join(prefix, key))) : Err();
  if (!v->is_string()) return invalid_type(join(prefix, key), "a string");
  *out = v->get<std::string>();
  return {};
}

Err get_bool(const json& o, const char* key, bool* out) {
  const json* v = field(o, key);
  if (!v) return {};
  if (!v->is_boolean()) return invalid_type(key, "a boolean");
  *out = v->get<bool>();
  return {};
}

// Integers; a float with an integral value (2.0) is accepted as that integer.
Err to_int(const json& v, const std::string& name, int64_t lo, int64_t hi, int64_t* out) {
  int64_t x;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    x = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
            ? std::numeric_limits<int64_t>::max()
            : static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 9.0e18)
      return invalid_type(name, "an integer");
    x = static_cast<int64_t>(d);
  } else {
    return invalid_type(name, "an integer");
  }
  if (x < lo)
    return invalid_value(name, "Invalid '" + name + "': integer below minimum value. Expected a value >= " +
                                   std::to_string(lo) + ", but got " + std::to_string(x) + " instead.",
                         "integer_below_min_value");
  if (x > hi)
    return invalid_value(name, "Invalid '" + name + "': integer above maximum value. Expected a value <= " +
                                   std::to_string(hi) + ", but got " + std::to_string(x) + " instead.",
                         "integer_above_max_value");
  *out = x;
  return {};
}

Err get_int(const json& o, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const json* v = field(o, key);
  if (!v) return {};
  int64_t x;
  API_TRY(to_int(*v, key, lo, hi, &x));
  *out = x;
  return {};
}

// Numbers in [lo, hi] (or (lo, hi] when lo_open).
Err get_number(const json& o, const char* key, double lo, double hi, bool lo_open, double* out) {
  const json* v = field(o, key);
  if (!v) return {};
  if (!v->is_number()) return invalid_type(key, "a number");
  double d = v->get<double>();
  std::string name = key;
  if (!std::isfinite(d)) return invalid_type(name, "a finite number");
  if (d < lo || (lo_open && d == lo))
    return invalid_value(name, "Invalid '" + name + "': decimal below minimum value. Expected a value " +
                                   (lo_open ? "> " : ">= ") + fmt_num(lo) + ", but got " + fmt_num(d) +
                                   " instead.",
                         "decimal_below_min_value");
  if (d > hi)
    return invalid_value(name, "Invalid '" + name + "': decimal above maximum value. Expected a value <= " +
                                   fmt_num(hi) + ", but got " + fmt_num(d) + " instead.",
                         "decimal_above_max_value");
  *out = d;
  return {};
}

Err parse_stop(const json& o, std::vector<std::string>* out) {
  const json* v = field(o, "stop");
  if (!v) return {};
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 4)
      return invalid_value("stop", "Invalid 'stop': expected an array of at most 4 strings, but got " +
                                       std::to_string(v->size()) + ".",
                           "array_above_max_length");
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string())
        return invalid_type("stop[" + std::to_string(i) + "]", "a string");
      stops.push_back((*v)[i].get<std::string>());
    }
  } else {
    return invalid_type("stop", "a string or an array of strings");
  }
  for (auto& s : stops)
    if (!s.empty()) out->push_back(std::move(s));
  return {};
}

Err parse_logit_bias(const json& o, std::vector<std::pair<int32_t, float>>* out) {
  const json* v = field(o, "logit_bias");
  if (!v) return {};
  if (!v->is_object()) return invalid_type("logit_bias", "an object mapping token ids to numbers");
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& k = it.key();
    std::string name = "logit_bias." + k;
    bool digits = !k.empty() && k.size() <= 10 &&
                  std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; });
    int64_t id = digits ? std::stoll(k) : -1;
    if (!digits || id > std::numeric_limits<int32_t>::max())
      return invalid_value("logit_bias", "Invalid 'logit_bias': key '" + k +
                                             "' is not a token id (a non-negative integer).",
                           "invalid_value");
    if (!it.value().is_number()) return invalid_type(name, "a number");
    double b = it.value().get<double>();
    if (!(b >= -100.0 && b <= 100.0))
      return invalid_value("logit_bias", "Invalid 'logit_bias': the bias for token " + k +
                                             " must be in [-100, 100], but got " + fmt_num(b) + ".",
                           "invalid_value");
    out->emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  std::sort(out->begin(), out->end());
  return {};
}

Err parse_sampling(const json& o, bool chat, SamplingOptions* s) {
  API_TRY(get_number(o, "temperature", 0.0, 2.0, false, &s->temperature));
  API_TRY(get_number(o, "top_p", 0.0, 1.0, true, &s->top_p));
  std::optional<int64_t> i;
  API_TRY(get_int(o, "top_k", -1, 1 << 20, &i));
  s->top_k = i && *i > 0 ? static_cast<int32_t>(*i) : 0;
  API_TRY(get_number(o, "min_p", 0.0, 1.0, false, &s->min_p));
  API_TRY(get_number(o, "repetition_penalty", 0.0, 2.0, true, &s->repetition_penalty));
  API_TRY(get_number(o, "presence_penalty", -2.0, 2.0, false, &s->presence_penalty));
  API_TRY(get_number(o, "frequency_penalty", -2.0, 2.0, false, &s->frequency_penalty));
  i.reset();
  API_TRY(get_int(o, "n", 1, kMaxChoices, &i));
  if (i) s->n = static_cast<int32_t>(*i);
  API_TRY(get_int(o, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                  &s->seed));
  API_TRY(parse_stop(o, &s->stop));
  API_TRY(parse_logit_bias(o, &s->logit_bias));
  API_TRY(get_bool(o, "ignore_eos", &s->ignore_eos));
  API_TRY(get_bool(o, "speculative", &s->speculative));
  std::string tier;
  API_TRY(get_string(o, "tier", &tier, false));
  if (tier == "batch") {
    s->tier = engine::Tier::kBatch;
  } else if (!tier.empty() && tier != "interactive") {
    return invalid_value("tier", "Invalid 'tier': expected \"interactive\" or \"batch\", but got \"" +
                                     tier + "\".");
  }
  constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  if (chat) {
    API_TRY(get_int(o, "max_completion_tokens", 1, kMaxTokens, &s->max_tokens));
    if (!s->max_tokens) API_TRY(get_int(o, "max_tokens", 1, kMaxTokens, &s->max_tokens));
  } else {
    API_TRY(get_int(o, "max_tokens", 1, kMaxTokens, &s->max_tokens));
    if (!s->max_tokens) s->max_tokens = 16;  // OpenAI's default for completions
  }
  return {};
}

Err parse_stream(const json& o, bool* stream, bool* include_usage) {
  API_TRY(get_bool(o, "stream", stream));
  const json* so = field(o, "stream_options");
  if (!so) return {};
  if (!*stream)
    return invalid_value("stream_options",
                         "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
  if (!so->is_object()) return invalid_type("stream_options", "an object");
  if (const json* iu = field(*so, "include_usage")) {
    if (!iu->is_boolean()) return invalid_type("stream_options.include_usage", "a boolean");
    *include_usage = iu->get<bool>();
  }
  return {};
}

Err parse_token_array(const json& a, const std::string& name, std::vector<int32_t>* out) {
  out->reserve(a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    int64_t id;
    API_TRY(to_int(a[k], name + "[" + std::to_string(k) + "]", 0, std::numeric_limits<int32_t>::max(), &id));
    out->push_back(static_cast<int32_t>(id));
  }
  return {};
}

Err parse_prompt(const json& o, std::vector<PromptInput>* out) {
  auto it = o.find("prompt");
  if (it == o.end() || it->is_null()) return missing_param("prompt");
  const json& p = *it;
  const char* kShapes = "a string, an array of strings, an array of token ids, or an array of token-id arrays";
  if (p.is_string()) {
    out->push_back(PromptInput{.is_tokens = false, .text = p.get<std::string>(), .tokens = {}});
    return {};
  }
  if (!p.is_array()) return invalid_type("prompt", kShapes);
  if (p.empty()) return invalid_value("prompt", "Invalid 'prompt': the array must not be empty.", "empty_array");
  if (p[0].is_number()) {
    PromptInput in{.is_tokens = true, .text = {}, .tokens = {}};
    API_TRY(parse_token_array(p, "prompt", &in.tokens));
    out->push_back(std::move(in));
    return {};
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const json& e = p[i];
    std::string name = "prompt[" + std::to_string(i) + "]";
    if (e.is_string() && p[0].is_string()) {
      out->push_back(PromptInput{.is_tokens = false, .text = e.get<std::string>(), .tokens = {}});
    } else if (e.is_array() && p[0].is_array()) {
      if (e.empty()) return invalid_value(name, "Invalid '" + name + "': a token-id array must not be empty.",
                                          "empty_array");
      PromptInput in{.is_tokens = true, .text = {}, .tokens = {}};
      API_TRY(parse_token_array(e, name, &in.tokens));
      out->push_back(std::move(in));
    } else {
      return invalid_type(name, p[0].is_string() ? "a string (all prompts of one type)"
                                                 : p[0].is_array() ? "an array of token ids" : kShapes);
    }
  }
  return {};
}

Err parse_content(const json& c, const std::string& path, std::optional<std::string>* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return {};
  }
  if (!c.is_array()) return invalid_type(path, "a string or an array of content parts");
  std::string text;
  for (size_t k = 0; k < c.size(); ++k) {
    const json& part = c[k];
    std::string pp = path + "[" + std::to_string(k) + "]";
    if (!part.is_object()) return invalid_type(pp, "a content part object");
    std::string type;
    API_TRY(get_string(part, "type", &type, true, pp));
    std::string piece;
    if (type == "text") {
      API_TRY(get_string(part, "text", &piece, true, pp));
    } else if (type == "refusal") {
      API_TRY(get_string(part, "refusal", &piece, true, pp));
    } else {
      return invalid_value(pp + ".type", "Invalid '" + pp + ".type': content parts of type '" + type +
                                             "' are not supported; this model accepts text only.",
                           "unsupported_content_type");
    }
    if (k > 0) text += "\n";
    text += piece;
  }
  *out = std::move(text);
  return {};
}

Err parse_messages(const json& o, std::vector<ChatMessage>* out) {
  auto it = o.find("messages");
  if (it == o.end() || it->is_null()) return missing_param("messages");
  if (!it->is_array()) return invalid_type("messages", "an array of message objects");
  if (it->empty())
    return invalid_value("messages", "Invalid 'messages': the array must contain at least one message.",
                         "empty_array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string path = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return invalid_type(path, "a message object");
    ChatMessage msg;
    API_TRY(get_string(m, "role", &msg.role, true, path));
    static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    if (std::none_of(std::begin(kRoles), std::end(kRoles), [&](const char* r) { return msg.role == r; }))
      return invalid_value(path + ".role", "Invalid '" + path + ".role': expected one of system, developer, "
                                               "user, assistant, tool, but got '" + msg.role + "'.");
    if (const json* c = field(m, "content")) API_TRY(parse_content(*c, path + ".content", &msg.content));
    API_TRY(get_string(m, "name", &msg.name, false, path));
    if (const json* tc = field(m, "tool_calls")) {
      if (msg.role != "assistant")
        return invalid_value(path + ".tool_calls", "Invalid '" + path + ".tool_calls': only assistant "
                                                       "messages may have tool_calls.");
      if (!tc->is_array()) return invalid_type(path + ".tool_calls", "an array");
      for (size_t k = 0; k < tc->size(); ++k) {
        const json& call = (*tc)[k];
        std::string cp = path + ".tool_calls[" + std::to_string(k) + "]";
        if (!call.is_object()) return invalid_type(cp, "a tool call object");
        ToolCall t;
        API_TRY(get_string(call, "id", &t.id, false, cp));
        API_TRY(get_string(call, "type", &t.type, false, cp));
        const json* fn = field(call, "function");
        if (!fn) return missing_param(cp + ".function");
        if (!fn->is_object()) return invalid_type(cp + ".function", "an object");
        API_TRY(get_string(*fn, "name", &t.function_name, true, cp + ".function"));
        API_TRY(get_string(*fn, "arguments", &t.arguments, false, cp + ".function"));
        msg.tool_calls.push_back(std::move(t));
      }
    }
    if (msg.role == "tool") API_TRY(get_string(m, "tool_call_id", &msg.tool_call_id, true, path));
    if (msg.role == "assistant") {
      std::string reasoning;
      const char* rkey = field(m, "reasoning_content") ? "reasoning_content" : "reasoning";
      if (field(m, rkey)) {
        API_TRY(get_string(m, rkey, &reasoning, true, path));
        msg.reasoning_content = std::move(reasoning);
      }
    }
    if (!msg.content && !(msg.role == "assistant"))
      return missing_param(path + ".content");
    out->push_back(std::move(msg));
  }
  return {};
}

Err get_model(const json& o, std::string* model, bool required) {
  API_TRY(get_string(o, "model", model, required));
  if (required && model->empty())
    return invalid_value("model", "Invalid 'model': must be a non-empty string.");
  return {};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// tools, tool_choice, parallel_tool_calls, chat_template_kwargs, reasoning_effort.
Err parse_tools_fields(const json& o, ChatRequest* r) {
  if (const json* tools = field(o, "tools")) {
    auto parsed = parse_tools(*tools);
    if (!parsed.ok()) return parsed.error();
    r->tools = std::move(parsed).value();
    if (!tools->empty()) r->tools_json = dump(*tools);
  }
  const json* tc = field(o, "tool_choice");
  auto choice = parse_tool_choice(tc, r->tools);
  if (!choice.ok()) return choice.error();
  r->tool_choice = std::move(choice).value();
  if (tc) r->tool_choice_json = dump(*tc);
  API_TRY(get_bool(o, "parallel_tool_calls", &r->parallel_tool_calls));
  if (const json* kw = field(o, "chat_template_kwargs")) {
    if (!kw->is_object()) return invalid_type("chat_template_kwargs", "an object");
    static const char* kReserved[] = {"messages", "tools", "bos_token", "eos_token", "add_generation_prompt"};
    for (auto it = kw->begin(); it != kw->end(); ++it)
      if (std::any_of(std::begin(kReserved), std::end(kReserved), [&](const char* k) { return it.key() == k; }))
        return invalid_value("chat_template_kwargs." + it.key(),
                             "Invalid 'chat_template_kwargs." + it.key() + "': '" + it.key() +
                                 "' is set by the server and cannot be overridden.");
    r->chat_template_kwargs_json = dump(*kw);
  }
  API_TRY(get_string(o, "reasoning_effort", &r->reasoning_effort, false));
  static const char* kEfforts[] = {"minimal", "low", "medium", "high"};
  if (!r->reasoning_effort.empty() &&
      std::none_of(std::begin(kEfforts), std::end(kEfforts), [&](const char* e) { return r->reasoning_effort == e; }))
    return invalid_value("reasoning_effort", "Invalid 'reasoning_effort': expected one of minimal, low, medium, "
                                             "high, but got '" + r->reasoning_effort + "'.");
  return {};
}

// Keeps exceptions (e.g. std::bad_alloc, or a json accessor surprise) from crossing the border.
template <typename T, typename F>
ApiResult<T> guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    ApiError err;
    err.message = std::string("Could not process the request body: ") + e.what();
    return err;
  }
}

// response_format: {"type":"text"|"json_object"}, {"type":"json_schema","json_schema":{"name",
// "schema","strict"}}, and the extensions {"type":"grammar","grammar":"<GBNF>"} and
// {"type":"regex","regex":"..."}. Only the shape is checked here; the server compiles it.
Err parse_response_format(const json& o, std::string_view body, ResponseFormat* out) {
  const json* rf = field(o, "response_format");
  if (!rf) return std::nullopt;
  if (!rf->is_object()) return invalid_type("response_format", "an object");
  std::string type;
  API_TRY(get_string(*rf, "type", &type, true, "response_format"));
  if (type == "text") {
    out->type = ResponseFormat::Type::kText;
  } else if (type == "json_object") {
    out->type = ResponseFormat::Type::kJsonObject;
  } else if (type == "json_schema") {
    out->type = ResponseFormat::Type::kJsonSchema;
    const json* js = field(*rf, "json_schema");
    if (!js) return missing_param("response_format.json_schema");
    if (!js->is_object()) return invalid_type("response_format.json_schema", "an object");
    API_TRY(get_string(*js, "name", &out->name, false, "response_format.json_schema"));
    API_TRY(get_bool(*js, "strict", &out->strict));
    const json* schema = field(*js, "schema");
    if (!schema) return missing_param("response_format.json_schema.schema");
    if (!schema->is_object() && !schema->is_boolean())
      return invalid_type("response_format.json_schema.schema", "a JSON Schema object");
    // Property order matters to users (members are generated in schema order): take the schema
    // from an order-preserving parse of the body.
    nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, nullptr, false);
    if (!ordered.is_discarded() && ordered.contains("response_format") &&
        ordered["response_format"].contains("json_schema") &&
        ordered["response_format"]["json_schema"].contains("schema")) {
      out->source = ordered["response_format"]["json_schema"]["schema"].dump(
          -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    } else {
      out->source = dump(*schema);
    }
  } else if (type == "grammar" || type == "regex") {
    out->type = type == "grammar" ? ResponseFormat::Type::kGrammar : ResponseFormat::Type::kRegex;
    API_TRY(get_string(*rf, type.c_str(), &out->source, true, "response_format"));
  } else {
    return invalid_value("response_format.type", "Invalid 'response_format.type': '" + type +
                                                     "' is not supported; use 'text', 'json_object', "
                                                     "'json_schema', 'grammar' or 'regex'.");
  }
  return std::nullopt;
}

}  // namespace

ApiResult<CompletionRequest> parse_completion_request(std::string_view body) {
  return guarded<CompletionRequest>([&]() -> ApiResult<CompletionRequest> {
    auto parsed = parse_body(body);
    if (!parsed.ok()) return parsed.error();
    const json& o = parsed.value();
    CompletionRequest r;
    API_TRY(get_model(o, &r.model, true));
    API_TRY(parse_prompt(o, &r.prompts));
    API_TRY(parse_sampling(o, /*chat=*/false, &r.sampling));
    std::optional<int64_t> lp;
    API_TRY(get_int(o, "logprobs", 0, 5, &lp));
    if (lp) r.logprobs = static_cast<int32_t>(*lp);
    API_TRY(get_bool(o, "echo", &r.echo));
    API_TRY(parse_stream(o, &r.stream, &r.include_usage));
    API_TRY(get_string(o, "user", &r.user, false));
    API_TRY(parse_response_format(o, body, &r.response_format));
    std::string suffix;
    API_TRY(get_string(o, "suffix", &suffix, false));
    if (!suffix.empty())
      return invalid_value("suffix", "Invalid 'suffix': insertion (suffix) is not supported by this server.",
                           "unsupported_parameter");
    std::optional<int64_t> best_of;
    API_TRY(get_int(o, "best_of", 1, kMaxChoices, &best_of));
    if (best_of && *best_of != r.sampling.n)
      return invalid_value("best_of", "Invalid 'best_of': only best_of equal to n is supported.",
                           "unsupported_parameter");
    int64_t choices = static_cast<int64_t>(r.prompts.size()) * r.sampling.n;
    if (choices > kMaxChoices)
      return invalid_value("n", "Invalid 'n': " + std::to_string(r.prompts.size()) + " prompts x n=" +
                                    std::to_string(r.sampling.n) + " gives " + std::to_string(choices) +
                                    " choices; at most " + std::to_string(kMaxChoices) + " are allowed.");
    return r;
  });
}

ApiResult<ChatRequest> parse_chat_request(std::string_view body) {
  return guarded<ChatRequest>([&]() -> ApiResult<ChatRequest> {
    auto parsed = parse_body(body);
    if (!parsed.ok()) return parsed.error();
    const json& o = parsed.value();
    ChatRequest r;
    API_TRY(get_model(o, &r.model, true));
    API_TRY(parse_messages(o, &r.messages));
    API_TRY(parse_sampling(o, /*chat=*/true, &r.sampling));
    API_TRY(get_bool(o, "logprobs", &r.logprobs));
    std::optional<int64_t> tl;
    API_TRY(get_int(o, "top_logprobs", 0, 20, &tl));
    if (tl) {
      if (!r.logprobs)
        return invalid_value("top_logprobs", "Invalid 'top_logprobs': 'logprobs' must be true when "
                                             "'top_logprobs' is set.");
      r.top_logprobs = static_cast<int32_t>(*tl);
    }
    API_TRY(parse_stream(o, &r.stream, &r.include_usage));
    API_TRY(get_string(o, "user", &r.user, false));
    API_TRY(get_bool(o, "add_generation_prompt", &r.add_generation_prompt));
    API_TRY(parse_tools_fields(o, &r));
    API_TRY(parse_response_format(o, body, &r.response_format));
    return r;
  });
}

ApiResult<TokenizeRequest> parse_tokenize_request(std::string_view body) {
  return guarded<TokenizeRequest>([&]() -> ApiResult<TokenizeRequest> {
    auto parsed = parse_body(body);
    if (!parsed.ok()) return parsed.error();
    const json& o = parsed.value();
    TokenizeRequest r;
    API_TRY(get_model(o, &r.model, false));
    std::string text;
    const char* key = field(o, "prompt") ? "prompt" : "content";
    if (field(o, key)) {
      API_TRY(get_string(o, key, &text, true));
      r.text = std::move(text);
    } else if (field(o, "messages")) {
      API_TRY(parse_messages(o, &r.messages));
      r.add_special = false;
      API_TRY(get_bool(o, "add_generation_prompt", &r.add_generation_prompt));
    } else {
      return missing_param("prompt");
    }
    API_TRY(get_bool(o, field(o, "add_special") ? "add_special" : "add_special_tokens", &r.add_special));
    return r;
  });
}

ApiResult<DetokenizeRequest> parse_detokenize_request(std::string_view body) {
  return guarded<DetokenizeRequest>([&]() -> ApiResult<DetokenizeRequest> {
    auto parsed = parse_body(body);
    if (!parsed.ok()) return parsed.error();
    const json& o = parsed.value();
    DetokenizeRequest r;
    API_TRY(get_model(o, &r.model, false));
    const json* t = field(o, "tokens");
    if (!t) return missing_param("tokens");
    if (!t->is_array()) return invalid_type("tokens", "an array of token ids");
    API_TRY(parse_token_array(*t, "tokens", &r.tokens));
    return r;
  });
}

}  // namespace ts::api
