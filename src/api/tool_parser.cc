#include "api/tool_parser.h"

#include "api/json_prefix.h"

#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

namespace ts::api {

// ordered: arguments keep the model's key order, so they can stream as it writes them.
using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kDsCallsBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>";
constexpr std::string_view kDsCallsEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>";
constexpr std::string_view kDsCallBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>";
constexpr std::string_view kDsCallEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>";
constexpr std::string_view kDsSep = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>";
constexpr std::string_view kGraniteCall = "<|tool_call|>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kHStart = "<|start|>";
constexpr std::string_view kHChannel = "<|channel|>";
constexpr std::string_view kHMessage = "<|message|>";
constexpr std::string_view kHEnd = "<|end|>";
constexpr std::string_view kHCall = "<|call|>";
constexpr std::string_view kHReturn = "<|return|>";
constexpr std::string_view kHConstrain = "<|constrain|>";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view lstrip(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view rstrip(std::string_view s) {
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view strip(std::string_view s) { return rstrip(lstrip(s)); }

// Length of the longest suffix of `s` that is a proper prefix of one of `markers`.
size_t partial_marker_len(std::string_view s, const std::vector<std::string_view>& markers) {
  size_t best = 0;
  for (std::string_view m : markers) {
    for (size_t k = std::min(s.size(), m.size() - 1); k > best; --k) {
      if (s.substr(s.size() - k) == m.substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

// End (one past) of the JSON value starting at s[pos] (after whitespace), by bracket and string
// scanning; npos when the value is not complete yet. Scalars end at a delimiter.
size_t json_value_end(std::string_view s, size_t pos) {
  while (pos < s.size() && is_ws(s[pos])) ++pos;
  if (pos >= s.size()) return std::string_view::npos;
  char c = s[pos];
  if (c != '{' && c != '[') {
    if (c == '"') {
      for (size_t i = pos + 1; i < s.size(); ++i) {
        if (s[i] == '\\') ++i;
        else if (s[i] == '"') return i + 1;
      }
      return std::string_view::npos;
    }
    size_t i = pos;
    while (i < s.size() && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ';') ++i;
    return i == s.size() ? std::string_view::npos : i;
  }
  int depth = 0;
  bool in_str = false;
  for (size_t i = pos; i < s.size(); ++i) {
    char ch = s[i];
    if (in_str) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_str = false;
      continue;
    }
    if (ch == '"') in_str = true;
    else if (ch == '{' || ch == '[') ++depth;
    else if ((ch == '}' || ch == ']') && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

std::optional<json> parse_json(std::string_view s) {
  json j = json::parse(s.begin(), s.end(), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Arguments as compact JSON object text: an object, or a string holding one.
std::optional<std::string> arguments_text(const json& a) {
  if (a.is_object()) return a.dump(-1, ' ', false, json::error_handler_t::replace);
  if (a.is_string()) {
    auto inner = parse_json(a.get_ref<const std::string&>());
    if (inner && inner->is_object()) return inner->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return std::nullopt;
}

// {"name": N, "arguments"|"parameters": {...}} -> call.
std::optional<ParsedToolCall> call_from_object(const json& o) {
  if (!o.is_object()) return std::nullopt;
  auto n = o.find("name");
  if (n == o.end() || !n->is_string() || n->get_ref<const std::string&>().empty()) return std::nullopt;
  auto a = o.find("arguments");
  if (a == o.end()) a = o.find("parameters");
  std::optional<std::string> args = a == o.end() ? std::optional<std::string>("{}") : arguments_text(*a);
  if (!args) return std::nullopt;
  return ParsedToolCall{n->get<std::string>(), std::move(*args)};
}

// A JSON text that is one call object or an array of them.
std::optional<std::vector<ParsedToolCall>> calls_from_json_text(std::string_view s) {
  auto j = parse_json(strip(s));
  if (!j) return std::nullopt;
  std::vector<ParsedToolCall> out;
  if (j->is_array()) {
    if (j->empty()) return std::nullopt;
    for (const json& e : *j) {
      auto c = call_from_object(e);
      if (!c) return std::nullopt;
      out.push_back(std::move(*c));
    }
  } else {
    auto c = call_from_object(*j);
    if (!c) return std::nullopt;
    out.push_back(std::move(*c));
  }
  return out;
}

// A call object {"name": N, "arguments"|"parameters": {...}} being written from s[p]: its name,
// and where its arguments object starts; nullopt until both are known.
struct CallHead {
  std::string name;
  size_t args = 0;
};

size_t skip_ws(std::string_view s, size_t p) {
  while (p < s.size() && is_ws(s[p])) ++p;
  return p;
}

std::optional<CallHead> object_call_head(std::string_view s, size_t p) {
  p = skip_ws(s, p);
  if (p >= s.size() || s[p] != '{') return std::nullopt;
  p = skip_ws(s, p + 1);
  auto read_string = [&](size_t at) -> std::optional<std::pair<std::string, size_t>> {
    if (at >= s.size() || s[at] != '"') return std::nullopt;
    size_t e = json_value_end(s, at);
    if (e == std::string_view::npos) return std::nullopt;
    auto j = parse_json(s.substr(at, e - at));
    if (!j || !j->is_string()) return std::nullopt;
    return std::make_pair(j->get<std::string>(), e);
  };
  auto key = read_string(p);
  if (!key || key->first != "name") return std::nullopt;
  p = skip_ws(s, key->second);
  if (p >= s.size() || s[p] != ':') return std::nullopt;
  auto name = read_string(skip_ws(s, p + 1));
  if (!name || name->first.empty()) return std::nullopt;
  p = skip_ws(s, name->second);
  if (p >= s.size() || s[p] != ',') return std::nullopt;
  auto akey = read_string(skip_ws(s, p + 1));
  if (!akey || (akey->first != "arguments" && akey->first != "parameters")) return std::nullopt;
  p = skip_ws(s, akey->second);
  if (p >= s.size() || s[p] != ':') return std::nullopt;
  p = skip_ws(s, p + 1);
  if (p >= s.size() || s[p] != '{') return std::nullopt;
  return CallHead{std::move(name->first), p};
}

// The partial call for a head: its arguments so far (nullopt when they are not JSON).
std::optional<ParsedToolCall> partial_from(std::string_view s, std::optional<CallHead> h) {
  if (!h) return std::nullopt;
  JsonPrefix c = canonical_json_object_prefix(s.substr(h->args));
  if (c.error) return std::nullopt;
  return ParsedToolCall{std::move(h->name), std::move(c.out)};
}

using PartialProbe = std::optional<ParsedToolCall> (*)(std::string_view text, size_t body);

std::optional<ParsedToolCall> hermes_partial(std::string_view t, size_t body) {
  return partial_from(t, object_call_head(t, body));
}

std::optional<ParsedToolCall> list_partial(std::string_view t, size_t body) {  // granite; mistral v3
  size_t p = skip_ws(t, body);
  if (p < t.size() && t[p] == '[') p = p + 1;
  return partial_from(t, object_call_head(t, p));
}

std::optional<ParsedToolCall> mistral_partial(std::string_view t, size_t body) {
  size_t p = skip_ws(t, body);
  if (p < t.size() && (t[p] == '[' || t[p] == '{')) return list_partial(t, body);
  size_t a = t.find(kMistralArgs, p);
  if (a == std::string_view::npos) return std::nullopt;
  std::string_view name = t.substr(p, a - p);
  if (size_t ci = name.find(kMistralCallId); ci != std::string_view::npos) name = name.substr(0, ci);
  name = strip(name);
  size_t args = skip_ws(t, a + kMistralArgs.size());
  if (name.empty() || args >= t.size() || t[args] != '{') return std::nullopt;
  return partial_from(t, CallHead{std::string(name), args});
}

std::optional<ParsedToolCall> deepseek_partial(std::string_view t, size_t body) {
  size_t b = t.find(kDsCallBegin, body);
  if (b == std::string_view::npos) return std::nullopt;
  size_t hb = b + kDsCallBegin.size();
  if (t.find(kDsCallEnd, hb) != std::string_view::npos) return std::nullopt;  // whole at the list's end
  size_t sep = t.find(kDsSep, hb);
  if (sep == std::string_view::npos) return std::nullopt;
  std::string_view head = strip(t.substr(hb, sep - hb));
  size_t rest = sep + kDsSep.size();
  std::string_view name;
  size_t args;
  if (head == "function") {
    size_t nl = t.find('\n', rest);
    if (nl == std::string_view::npos) return std::nullopt;
    name = strip(t.substr(rest, nl - rest));
    args = skip_ws(t, nl + 1);
    if (t.substr(args, 7) == "```json") args += 7;
    else if (t.substr(args, 3) == "```") args += 3;
    else if (args + 3 > t.size() && std::string_view("```").substr(0, t.size() - args) == t.substr(args)) return std::nullopt;
    args = skip_ws(t, args);
  } else {
    name = head;
    args = skip_ws(t, rest);
  }
  if (name.empty() || args >= t.size() || t[args] != '{') return std::nullopt;
  return partial_from(t, CallHead{std::string(name), args});
}

// What a region parser found after a start marker.
struct Region {
  enum Kind { kComplete, kIncomplete, kInvalid } kind = kIncomplete;
  size_t end = 0;                      // one past the region (kComplete, kInvalid)
  std::vector<ParsedToolCall> calls;   // kComplete
};
using RegionParser = Region (*)(std::string_view text, size_t body, bool final);

Region invalid_to(size_t end) { return Region{Region::kInvalid, end, {}}; }
Region complete(size_t end, std::vector<ParsedToolCall> calls) {
  return Region{Region::kComplete, end, std::move(calls)};
}

Region hermes_region(std::string_view t, size_t body, bool final) {
  size_t e = t.find(kHermesClose, body);
  size_t stop = e == std::string_view::npos ? t.size() : e;
  if (e == std::string_view::npos && !final) return {};
  size_t end = e == std::string_view::npos ? t.size() : e + kHermesClose.size();
  auto calls = calls_from_json_text(t.substr(body, stop - body));
  if (!calls) return invalid_to(end);
  return complete(end, std::move(*calls));
}

Region granite_region(std::string_view t, size_t body, bool final) {
  size_t e = json_value_end(t, body);
  if (e == std::string_view::npos) {
    if (!final) return {};
    return invalid_to(t.size());
  }
  auto calls = calls_from_json_text(t.substr(body, e - body));
  if (!calls) return invalid_to(e);
  return complete(e, std::move(*calls));
}

Region mistral_region(std::string_view t, size_t body, bool final) {
  size_t p = body;
  while (p < t.size() && is_ws(t[p])) ++p;
  if (p < t.size() && (t[p] == '[' || t[p] == '{')) return granite_region(t, p, final);
  // v11+: NAME[ARGS]{...} or NAME[CALL_ID]ID[ARGS]{...}
  size_t a = t.find(kMistralArgs, p);
  if (a == std::string_view::npos) return final ? invalid_to(t.size()) : Region{};
  std::string_view name = t.substr(p, a - p);
  if (size_t ci = name.find(kMistralCallId); ci != std::string_view::npos) name = name.substr(0, ci);
  name = strip(name);
  size_t args_begin = a + kMistralArgs.size();
  size_t e = json_value_end(t, args_begin);
  if (e == std::string_view::npos) return final ? invalid_to(t.size()) : Region{};
  auto args = parse_json(t.substr(args_begin, e - args_begin));
  std::optional<std::string> at = args ? arguments_text(*args) : std::nullopt;
  if (name.empty() || !at) return invalid_to(e);
  return complete(e, {ParsedToolCall{std::string(name), std::move(*at)}});
}

Region deepseek_region(std::string_view t, size_t body, bool final) {
  size_t e = t.find(kDsCallsEnd, body);
  if (e == std::string_view::npos && !final) return {};
  size_t stop = e == std::string_view::npos ? t.size() : e;
  size_t end = e == std::string_view::npos ? t.size() : e + kDsCallsEnd.size();
  std::vector<ParsedToolCall> calls;
  size_t p = body;
  while (true) {
    size_t b = t.find(kDsCallBegin, p);
    if (b == std::string_view::npos || b >= stop) break;
    size_t hb = b + kDsCallBegin.size();
    size_t ce = t.find(kDsCallEnd, hb);
    if (ce == std::string_view::npos || ce > stop) ce = stop;
    std::string_view call = t.substr(hb, ce - hb);
    size_t sep = call.find(kDsSep);
    if (sep == std::string_view::npos) return invalid_to(end);
    std::string_view head = strip(call.substr(0, sep));
    std::string_view rest = call.substr(sep + kDsSep.size());
    std::string_view name, args;
    if (head == "function") {  // V3/R1: type, then the name line and a ```json fence
      size_t nl = rest.find('\n');
      name = strip(rest.substr(0, nl));
      args = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      args = strip(args);
      if (args.substr(0, 7) == "```json") args.remove_prefix(7);
      else if (args.substr(0, 3) == "```") args.remove_prefix(3);
      args = rstrip(args);
      if (args.size() >= 3 && args.substr(args.size() - 3) == "```") args.remove_suffix(3);
    } else {  // V3.1: name, then the arguments
      name = head;
      args = rest;
    }
    auto j = parse_json(strip(args));
    std::optional<std::string> at = j ? arguments_text(*j) : std::nullopt;
    if (name.empty() || !at) return invalid_to(end);
    calls.push_back(ParsedToolCall{std::string(name), std::move(*at)});
    p = ce == stop ? stop : ce + kDsCallEnd.size();
  }
  if (calls.empty()) return invalid_to(end);
  return complete(end, std::move(calls));
}

// Llama 3 built-in tool syntax: name.call(key="value", n=1).
std::optional<ParsedToolCall> python_call(std::string_view s) {
  s = strip(s);
  size_t dot = s.find(".call(");
  if (dot == std::string_view::npos || s.back() != ')') return std::nullopt;
  std::string_view name = s.substr(0, dot);
  std::string_view args = s.substr(dot + 6, s.size() - dot - 7);
  json o = json::object();
  size_t p = 0;
  while (true) {
    while (p < args.size() && (is_ws(args[p]) || args[p] == ',')) ++p;
    if (p >= args.size()) break;
    size_t eq = args.find('=', p);
    if (eq == std::string_view::npos) return std::nullopt;
    std::string key(strip(args.substr(p, eq - p)));
    size_t v = eq + 1;
    while (v < args.size() && is_ws(args[v])) ++v;
    if (v >= args.size()) return std::nullopt;
    size_t ve;
    if (args[v] == '"' || args[v] == '\'') {
      char q = args[v];
      std::string val;
      ve = v + 1;
      while (ve < args.size() && args[ve] != q) {
        if (args[ve] == '\\' && ve + 1 < args.size()) ++ve;
        val += args[ve++];
      }
      if (ve >= args.size()) return std::nullopt;
      ++ve;
      o[key] = val;
    } else {
      ve = args.find(',', v);
      if (ve == std::string_view::npos) ve = args.size();
      auto j = parse_json(strip(args.substr(v, ve - v)));
      if (!j) return std::nullopt;
      o[key] = *j;
    }
    p = ve;
  }
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return std::nullopt;
  if (name.empty()) return std::nullopt;
  return ParsedToolCall{std::string(name), o.dump()};
}

// One or more call objects separated by ';' (Llama 3), or the built-in call syntax.
std::optional<std::vector<ParsedToolCall>> llama_calls(std::string_view s) {
  s = strip(s);
  if (s.empty()) return std::nullopt;
  if (s.front() != '{' && s.front() != '[') {
    auto c = python_call(s);
    if (!c) return std::nullopt;
    return std::vector<ParsedToolCall>{std::move(*c)};
  }
  std::vector<ParsedToolCall> out;
  size_t p = 0;
  while (true) {
    size_t e = json_value_end(s, p);
    if (e == std::string_view::npos) return std::nullopt;
    auto calls = calls_from_json_text(s.substr(p, e - p));
    if (!calls) return std::nullopt;
    for (auto& c : *calls) out.push_back(std::move(c));
    p = e;
    while (p < s.size() && (is_ws(s[p]) || s[p] == ';')) ++p;
    if (p >= s.size()) break;
  }
  return out;
}

Region llama_region(std::string_view t, size_t body, bool final) {
  if (!final) return {};  // no end marker: the call runs to the end of the output
  auto calls = llama_calls(t.substr(body));
  if (!calls) return invalid_to(t.size());
  return complete(t.size(), std::move(*calls));
}

struct Scanner {
  std::vector<std::string_view> starts;  // region start markers
  RegionParser region;
  PartialProbe partial = nullptr;        // the call being written in an incomplete region
};

// Content with tool-call regions taken out. Content is trimmed; when not final, trailing
// whitespace and a partial start marker at the end are held back.
ParsedOutput scan_regions(const Scanner& sc, std::string_view t, bool final) {
  ParsedOutput out;
  std::string content;
  size_t pos = 0;
  while (pos <= t.size()) {
    size_t best = std::string_view::npos;
    std::string_view marker;
    for (std::string_view m : sc.starts) {
      size_t f = t.find(m, pos);
      if (f < best) {
        best = f;
        marker = m;
      }
    }
    if (best == std::string_view::npos) {
      std::string_view tail = t.substr(pos);
      if (!final) tail.remove_suffix(partial_marker_len(tail, sc.starts));
      content.append(tail);
      break;
    }
    content.append(t.substr(pos, best - pos));
    Region r = sc.region(t, best + marker.size(), final);
    if (r.kind == Region::kIncomplete) {  // not final: hold the rest
      if (sc.partial) out.partial = sc.partial(t, best + marker.size());
      break;
    }
    if (r.kind == Region::kInvalid) {
      content.append(t.substr(best, r.end - best));
    } else {
      for (auto& c : r.calls) out.calls.push_back(std::move(c));
    }
    pos = r.end;
  }
  out.content = std::string(final ? strip(content) : rstrip(lstrip(content)));
  return out;
}

ParsedOutput parse_llama3(std::string_view t, bool final) {
  std::string_view s = lstrip(t);
  if (s.empty() && !final) return {};
  if (!s.empty() && s.front() == '{' && t.find(kPythonTag) == std::string_view::npos) {
    if (!final) return {};  // may be a call: decided at the end
    auto calls = llama_calls(s);
    ParsedOutput out;
    if (calls) out.calls = std::move(*calls);
    else out.content = std::string(strip(t));
    return out;
  }
  return scan_regions(Scanner{{kPythonTag}, &llama_region}, t, final);
}

ParsedOutput parse_tools(ToolCallFormat f, std::string_view t, bool final) {
  switch (f) {
    case ToolCallFormat::kHermes: return scan_regions(Scanner{{kHermesOpen}, &hermes_region, &hermes_partial}, t, final);
    case ToolCallFormat::kLlama3: return parse_llama3(t, final);
    case ToolCallFormat::kMistral: return scan_regions(Scanner{{kMistralCalls}, &mistral_region, &mistral_partial}, t, final);
    case ToolCallFormat::kDeepSeek: return scan_regions(Scanner{{kDsCallsBegin}, &deepseek_region, &deepseek_partial}, t, final);
    case ToolCallFormat::kGranite: return scan_regions(Scanner{{kGraniteCall}, &granite_region, &list_partial}, t, final);
    case ToolCallFormat::kNone:
    case ToolCallFormat::kHarmony: break;
  }
  ParsedOutput out;
  out.content = std::string(t);
  return out;
}

// gpt-oss harmony: messages "<|start|>assistant<header><|message|>body<|end|>"; the first one's
// "<|start|>assistant" is in the prompt. analysis -> reasoning; a recipient "functions.N" -> call
// (when tools are parsed); final, commentary without recipient, and text outside messages ->
// content.
ParsedOutput parse_harmony(std::string_view t, bool final, bool tools) {
  static const std::vector<std::string_view> kMarkers = {kHStart, kHChannel, kHMessage, kHEnd,
                                                         kHCall, kHReturn, kHConstrain};
  ParsedOutput out;
  std::string content;
  auto hold = [&](std::string_view body, bool closed) {
    if (!closed && !final) body.remove_suffix(partial_marker_len(body, kMarkers));
    return body;
  };
  size_t pos = 0;
  while (pos < t.size()) {
    size_t next_start = t.find(kHStart, pos);
    size_t seg_end = next_start == std::string_view::npos ? t.size() : next_start;
    std::string_view seg = t.substr(pos, seg_end - pos);
    bool last = next_start == std::string_view::npos;
    size_t m = seg.find(kHMessage);
    if (m == std::string_view::npos) {
      if (last && !final) break;  // a header still coming
      // No message marker: keep the text (without a role name) as content.
      std::string_view s = seg;
      if (s.substr(0, 9) == "assistant") s.remove_prefix(9);
      if (s.find(kHChannel) == std::string_view::npos) content.append(s);
    } else {
      std::string_view header = seg.substr(0, m);
      std::string_view rest = seg.substr(m + kHMessage.size());
      size_t be = std::min({rest.find(kHEnd), rest.find(kHCall), rest.find(kHReturn)});
      bool closed = be != std::string_view::npos;
      std::string_view body = closed ? rest.substr(0, be) : rest;
      std::string channel, recipient;
      if (size_t c = header.find(kHChannel); c != std::string_view::npos) {
        size_t b = c + kHChannel.size(), e = b;
        while (e < header.size() && !is_ws(header[e]) && header[e] != '<') ++e;
        channel = std::string(header.substr(b, e - b));
      }
      if (size_t r = header.find("to="); r != std::string_view::npos) {
        size_t b = r + 3, e = b;
        while (e < header.size() && !is_ws(header[e]) && header[e] != '<') ++e;
        recipient = std::string(header.substr(b, e - b));
      }
      if (tools && recipient.rfind("functions.", 0) == 0) {
        if (!closed && !final) {  // the call is still being written
          size_t a = skip_ws(body, 0);
          if (recipient.size() > 10 && a < body.size() && body[a] == '{')
            out.partial = partial_from(body, CallHead{recipient.substr(10), a});
          break;
        }
        auto j = parse_json(strip(body));
        std::optional<std::string> at = j ? arguments_text(*j) : std::nullopt;
        std::string name = recipient.substr(10);
        if (at && !name.empty()) out.calls.push_back(ParsedToolCall{name, std::move(*at)});
        else content.append(body);
      } else if (channel == "analysis") {
        out.reasoning.append(hold(body, closed));
      } else {
        content.append(hold(body, closed));
      }
      if (!closed) break;
    }
    if (last) break;
    pos = next_start + kHStart.size();
  }
  out.content = std::move(content);
  return out;
}

// Splits a leading <think>…</think> block (or, when the prompt opened it, everything up to
// </think>) from the rest.
struct ThinkSplit {
  std::string reasoning;
  std::string_view rest;
  bool hold_rest = false;  // not final and still inside (or maybe starting) the reasoning
};

ThinkSplit split_think(std::string_view t, bool starts_in, bool final) {
  ThinkSplit s;
  size_t body = 0;
  if (!starts_in) {
    std::string_view l = lstrip(t);
    if (l.substr(0, kThinkOpen.size()) != kThinkOpen) {
      if (!final && kThinkOpen.substr(0, l.size()) == l) {
        s.hold_rest = true;  // empty or a prefix of <think>
        return s;
      }
      s.rest = t;
      return s;
    }
    body = t.size() - l.size() + kThinkOpen.size();
  }
  size_t e = t.find(kThinkClose, body);
  if (e == std::string_view::npos) {
    std::string_view r = t.substr(body);
    if (!final) {
      r.remove_suffix(partial_marker_len(r, {kThinkClose}));
      s.hold_rest = true;
    }
    s.reasoning = std::string(strip(r));  // trailing whitespace waits for more text
    return s;
  }
  s.reasoning = std::string(strip(t.substr(body, e - body)));
  s.rest = t.substr(e + kThinkClose.size());
  return s;
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kNone: return "none";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3: return "llama3";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kDeepSeek: return "deepseek";
    case ToolCallFormat::kGranite: return "granite";
    case ToolCallFormat::kHarmony: return "harmony";
  }
  return "none";
}

std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name) {
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                           ToolCallFormat::kMistral, ToolCallFormat::kDeepSeek, ToolCallFormat::kGranite,
                           ToolCallFormat::kHarmony})
    if (name == tool_call_format_name(f)) return f;
  if (name == "qwen") return ToolCallFormat::kHermes;
  if (name == "gpt-oss") return ToolCallFormat::kHarmony;
  return std::nullopt;
}

ToolCallFormat detect_tool_call_format(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has("<|channel|>") && has("<|message|>")) return ToolCallFormat::kHarmony;
  if (has(kDsCallsBegin) || has(kDsCallBegin)) return ToolCallFormat::kDeepSeek;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (has(kGraniteCall)) return ToolCallFormat::kGranite;
  if (has(kHermesOpen)) return ToolCallFormat::kHermes;
  if (has(kPythonTag) || has("<|eom_id|>") || has("\"parameters\": dictionary")) return ToolCallFormat::kLlama3;
  return ToolCallFormat::kHermes;
}

ReasoningFormat detect_reasoning_format(std::string_view src) {
  if (src.find("<|channel|>") != std::string_view::npos) return ReasoningFormat::kHarmony;
  if (src.find(kThinkClose) != std::string_view::npos) return ReasoningFormat::kThink;
  return ReasoningFormat::kNone;
}

std::vector<std::string> OutputParserConfig::markers() const {
  std::vector<std::string_view> m;
  switch (tools) {
    case ToolCallFormat::kHermes: m = {kHermesOpen, kHermesClose}; break;
    case ToolCallFormat::kLlama3: m = {kPythonTag}; break;
    case ToolCallFormat::kMistral: m = {kMistralCalls, kMistralArgs, kMistralCallId}; break;
    case ToolCallFormat::kDeepSeek: m = {kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsCallEnd, kDsSep}; break;
    case ToolCallFormat::kGranite: m = {kGraniteCall}; break;
    case ToolCallFormat::kNone:
    case ToolCallFormat::kHarmony: break;
  }
  if (reasoning == ReasoningFormat::kThink) {
    m.push_back(kThinkOpen);
    m.push_back(kThinkClose);
  }
  if (reasoning == ReasoningFormat::kHarmony || tools == ToolCallFormat::kHarmony)
    for (std::string_view h : {kHStart, kHChannel, kHMessage, kHEnd, kHCall, kHReturn, kHConstrain}) m.push_back(h);
  return std::vector<std::string>(m.begin(), m.end());
}

ParsedOutput parse_model_output(const OutputParserConfig& cfg, std::string_view text, bool final) {
  if (cfg.reasoning == ReasoningFormat::kHarmony || cfg.tools == ToolCallFormat::kHarmony)
    return parse_harmony(text, final, cfg.tools == ToolCallFormat::kHarmony);
  std::string reasoning;
  std::string_view rest = text;
  if (cfg.reasoning == ReasoningFormat::kThink) {
    ThinkSplit s = split_think(text, cfg.starts_in_reasoning, final);
    if (s.hold_rest) {
      ParsedOutput out;
      out.reasoning = std::move(s.reasoning);
      return out;
    }
    reasoning = std::move(s.reasoning);
    rest = s.rest;
  }
  ParsedOutput out;
  if (cfg.tools == ToolCallFormat::kNone) {
    // Content after reasoning: leading newlines dropped (the template's "</think>\n\n").
    out.content = std::string(reasoning.empty() && cfg.reasoning == ReasoningFormat::kNone ? rest : lstrip(rest));
  } else {
    out = parse_tools(cfg.tools, rest, final);
  }
  out.reasoning = std::move(reasoning);
  return out;
}

bool prompt_opens_reasoning(std::string_view p) {
  size_t open = p.rfind(kThinkOpen);
  if (open == std::string_view::npos) return false;
  size_t close = p.rfind(kThinkClose);
  return (close == std::string_view::npos || close < open) && strip(p.substr(open + kThinkOpen.size())).empty();
}

std::string new_tool_call_id(ToolCallFormat f) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, 61);
  size_t n = f == ToolCallFormat::kMistral ? 9 : 24;
  std::string id = f == ToolCallFormat::kMistral ? "" : "call_";
  for (size_t i = 0; i < n; ++i) id += kAlnum[pick(rng)];
  return id;
}

std::string render_tool_calls(ToolCallFormat f, const std::vector<ParsedToolCall>& calls) {
  auto obj = [](const ParsedToolCall& c, const char* key) {
    json args = json::parse(c.arguments, nullptr, false);
    if (args.is_discarded()) args = c.arguments;
    return json{{"name", c.name}, {key, std::move(args)}};
  };
  std::string out;
  json list = json::array();
  for (const ParsedToolCall& c : calls) {
    switch (f) {
      case ToolCallFormat::kNone:
      case ToolCallFormat::kHermes:
        out += std::string(kHermesOpen) + "\n" + obj(c, "arguments").dump() + "\n" + std::string(kHermesClose) + "\n";
        break;
      case ToolCallFormat::kLlama3:
        out += (out.empty() ? "" : "; ") + obj(c, "parameters").dump();
        break;
      case ToolCallFormat::kMistral:
      case ToolCallFormat::kGranite:
        list.push_back(obj(c, "arguments"));
        break;
      case ToolCallFormat::kDeepSeek:
        out += std::string(kDsCallBegin) + "function" + std::string(kDsSep) + c.name + "\n```json\n" + c.arguments +
               "\n```" + std::string(kDsCallEnd);
        break;
      case ToolCallFormat::kHarmony:
        out += std::string(kHChannel) + "commentary to=functions." + c.name + " " + std::string(kHConstrain) + "json" +
               std::string(kHMessage) + c.arguments + std::string(kHCall);
        break;
    }
  }
  if (f == ToolCallFormat::kMistral) return std::string(kMistralCalls) + list.dump();
  if (f == ToolCallFormat::kGranite) return std::string(kGraniteCall) + list.dump();
  if (f == ToolCallFormat::kDeepSeek) return std::string(kDsCallsBegin) + out + std::string(kDsCallsEnd);
  if (f == ToolCallFormat::kHermes || f == ToolCallFormat::kNone) return std::string(rstrip(out));
  return out;
}

OutputDelta OutputStreamParser::diff(const ParsedOutput& now) {
  OutputDelta d;
  // Monotone by construction; guard anyway so a parser slip never resends or underflows.
  if (now.content.size() > content_sent_) {
    d.content = now.content.substr(content_sent_);
    content_sent_ = now.content.size();
  }
  if (now.reasoning.size() > reasoning_sent_) {
    d.reasoning = now.reasoning.substr(reasoning_sent_);
    reasoning_sent_ = now.reasoning.size();
  }
  // The SDK's stream helpers take the id and name from the first delta of a call and
  // concatenate the argument fragments that follow.
  auto send = [&](size_t i, const ParsedToolCall& c) {
    auto idx = static_cast<int32_t>(i);
    if (i == ids_.size()) {
      ids_.push_back(new_tool_call_id(cfg_.tools));
      args_sent_.emplace_back();
      d.calls.push_back(ToolCallDelta{.index = idx, .id = ids_.back(), .name = c.name, .arguments = ""});
    }
    std::string& sent = args_sent_[i];
    // A streamed prefix the complete call does not extend (a malformed call, see the header)
    // gets nothing more.
    if (c.arguments.size() > sent.size() && c.arguments.compare(0, sent.size(), sent) == 0) {
      d.calls.push_back(ToolCallDelta{.index = idx, .id = "", .name = "", .arguments = c.arguments.substr(sent.size())});
      sent = c.arguments;
    }
  };
  for (size_t i = 0; i < now.calls.size(); ++i)
    if (i >= ids_.size() || args_sent_[i] != now.calls[i].arguments) send(i, now.calls[i]);
  if (now.partial && now.calls.size() + 1 >= ids_.size())  // the call after the complete ones
    send(now.calls.size(), *now.partial);
  return d;
}

OutputDelta OutputStreamParser::push(std::string_view text) {
  text_.append(text);
  return diff(parse_model_output(cfg_, text_, /*final=*/false));
}

OutputDelta OutputStreamParser::finish() { return diff(parse_model_output(cfg_, text_, /*final=*/true)); }

}  // namespace ts::api
