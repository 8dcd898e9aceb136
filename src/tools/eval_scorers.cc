#include "tools/eval_scorers.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <memory>

namespace ts::tools {

using json = nlohmann::json;

namespace {

std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& ch : r) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return r;
}

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
using Code = std::unique_ptr<pcre2_code, CodeDeleter>;

Code compile(const std::string& pattern, bool ignore_case, std::string* err) {
  int code = 0;
  PCRE2_SIZE off = 0;
  uint32_t flags = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (ignore_case ? PCRE2_CASELESS : 0u);
  pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                flags, &code, &off, nullptr);
  if (!c && err) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof buf);
    *err = "bad regex at offset " + std::to_string(off) + ": " + reinterpret_cast<char*>(buf);
  }
  return Code(c);
}

// 1 match, 0 no match, -1 error (e.g. match limit: a pathological pattern fails, never hangs).
int regex_search(const pcre2_code* code, std::string_view text) {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(mc, 1000000);
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md, mc);
  pcre2_match_context_free(mc);
  pcre2_match_data_free(md);
  if (rc >= 0) return 1;
  return rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

// The first balanced {...} or [...] block (string-aware), or "" when none.
std::string_view first_json_block(std::string_view s) {
  for (size_t start = 0; start < s.size(); ++start) {
    if (s[start] != '{' && s[start] != '[') continue;
    int depth = 0;
    bool in_str = false, esc = false;
    for (size_t i = start; i < s.size(); ++i) {
      char ch = s[i];
      if (in_str) {
        if (esc) esc = false;
        else if (ch == '\\') esc = true;
        else if (ch == '"') in_str = false;
        continue;
      }
      if (ch == '"') in_str = true;
      else if (ch == '{' || ch == '[') ++depth;
      else if (ch == '}' || ch == ']') {
        if (--depth == 0) {
          std::string_view cand = s.substr(start, i - start + 1);
          if (json::accept(cand)) return cand;
          break;
        }
      }
    }
  }
  return {};
}

bool is_label_char(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; }

const char* json_type_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

bool type_matches(const json& v, const std::string& t) {
  std::string vt = json_type_of(v);
  if (t == "number") return v.is_number();
  if (t == "integer" && v.is_number_float()) return std::floor(v.get<double>()) == v.get<double>();
  return vt == t;
}

Status schema_error(const std::string& path, const std::string& why) {
  return invalid_argument("schema at '" + path + "': " + why);
}

Status check_schema_at(const json& s, const std::string& path) {
  if (s.is_boolean()) return ok_status();
  if (!s.is_object()) return schema_error(path, "must be an object");
  static const char* kTypes[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
  auto valid_type = [](const json& t) {
    if (!t.is_string()) return false;
    for (const char* k : kTypes)
      if (t.get<std::string>() == k) return true;
    return false;
  };
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    const std::string p = path + "/" + k;
    if (k == "type") {
      bool ok = valid_type(v);
      if (v.is_array()) {
        ok = !v.empty();
        for (const auto& t : v) ok = ok && valid_type(t);
      }
      if (!ok) return schema_error(p, "unknown type");
    } else if (k == "properties") {
      if (!v.is_object()) return schema_error(p, "must be an object");
      for (auto pi = v.begin(); pi != v.end(); ++pi)
        TS_RETURN_IF_ERROR(check_schema_at(pi.value(), p + "/" + pi.key()));
    } else if (k == "required") {
      if (!v.is_array()) return schema_error(p, "must be an array of strings");
      for (const auto& r : v)
        if (!r.is_string()) return schema_error(p, "must be an array of strings");
    } else if (k == "additionalProperties") {
      if (!v.is_boolean()) return schema_error(p, "only true/false is supported");
    } else if (k == "items") {
      TS_RETURN_IF_ERROR(check_schema_at(v, p));
    } else if (k == "enum") {
      if (!v.is_array() || v.empty()) return schema_error(p, "must be a non-empty array");
    } else if (k == "const" || k == "description" || k == "title" || k == "$schema") {
    } else if (k == "minimum" || k == "maximum") {
      if (!v.is_number()) return schema_error(p, "must be a number");
    } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems") {
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        return schema_error(p, "must be a non-negative integer");
    } else if (k == "pattern") {
      if (!v.is_string()) return schema_error(p, "must be a string");
      TS_RETURN_IF_ERROR(check_regex(v.get<std::string>()));
    } else {
      return schema_error(p, "keyword not supported by the json_schema scorer");
    }
  }
  return ok_status();
}

bool matches_at(const json& v, const json& s, const std::string& path, std::string* why) {
  auto fail = [&](const std::string& m) {
    if (why) *why = (path.empty() ? "$" : path) + ": " + m;
    return false;
  };
  if (s.is_boolean()) return s.get<bool>() ? true : fail("schema false");
  if (s.contains("type")) {
    const json& t = s["type"];
    bool ok = false;
    if (t.is_string()) ok = type_matches(v, t.get<std::string>());
    else
      for (const auto& x : t) ok = ok || type_matches(v, x.get<std::string>());
    if (!ok) return fail(std::string("expected type ") + t.dump() + ", got " + json_type_of(v));
  }
  if (s.contains("const") && v != s["const"]) return fail("not equal to const");
  if (s.contains("enum")) {
    const json& e = s["enum"];
    if (std::find(e.begin(), e.end(), v) == e.end()) return fail("not one of enum");
  }
  if (v.is_number()) {
    double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return fail("below minimum");
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return fail("above maximum");
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    // Lengths in code points.
    int64_t n = 0;
    for (unsigned char ch : str) n += (ch & 0xC0) != 0x80;
    if (s.contains("minLength") && n < s["minLength"].get<int64_t>()) return fail("shorter than minLength");
    if (s.contains("maxLength") && n > s["maxLength"].get<int64_t>()) return fail("longer than maxLength");
    if (s.contains("pattern")) {
      Code c = compile(s["pattern"].get<std::string>(), false, nullptr);
      if (!c || regex_search(c.get(), str) != 1) return fail("does not match pattern");
    }
  }
  if (v.is_array()) {
    const int64_t n = static_cast<int64_t>(v.size());
    if (s.contains("minItems") && n < s["minItems"].get<int64_t>()) return fail("fewer than minItems");
    if (s.contains("maxItems") && n > s["maxItems"].get<int64_t>()) return fail("more than maxItems");
    if (s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        if (!matches_at(v[i], s["items"], path + "[" + std::to_string(i) + "]", why)) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return fail("missing required property '" + r.get<std::string>() + "'");
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props && props->contains(it.key())) {
        if (!matches_at(it.value(), (*props)[it.key()], path + "." + it.key(), why)) return false;
      } else if (s.contains("additionalProperties") && !s["additionalProperties"].get<bool>()) {
        return fail("unexpected property '" + it.key() + "'");
      }
    }
  }
  return true;
}

}  // namespace

Status check_regex(const std::string& pattern) {
  std::string err;
  Code c = compile(pattern, false, &err);
  if (!c) return invalid_argument(err);
  return ok_status();
}

Status check_json_schema(const json& schema) { return check_schema_at(schema, "#"); }

bool json_matches_schema(const json& value, const json& schema, std::string* why) {
  return matches_at(value, schema, "", why);
}

bool first_number(std::string_view t, double* out) {
  for (size_t i = 0; i < t.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(t[i])) != 0;
    const bool signed_digit = (t[i] == '-' || t[i] == '+') && i + 1 < t.size() &&
                              std::isdigit(static_cast<unsigned char>(t[i + 1]));
    if (!digit && !signed_digit) continue;
    std::string num;
    size_t j = i;
    if (t[j] == '-' || t[j] == '+') num += t[j++];
    // Digits with thousands separators ("1,234"), a fraction and an exponent.
    while (j < t.size()) {
      if (std::isdigit(static_cast<unsigned char>(t[j]))) num += t[j++];
      else if (t[j] == ',' && j + 3 < t.size() &&
               std::isdigit(static_cast<unsigned char>(t[j + 1])) &&
               std::isdigit(static_cast<unsigned char>(t[j + 2])) &&
               std::isdigit(static_cast<unsigned char>(t[j + 3])) &&
               (j + 4 >= t.size() || !std::isdigit(static_cast<unsigned char>(t[j + 4]))))
        ++j;
      else break;
    }
    if (j + 1 < t.size() && t[j] == '.' && std::isdigit(static_cast<unsigned char>(t[j + 1]))) {
      num += t[j++];
      while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) num += t[j++];
    }
    if (j + 1 < t.size() && (t[j] == 'e' || t[j] == 'E')) {
      size_t k = j + 1;
      if (k < t.size() && (t[k] == '-' || t[k] == '+')) ++k;
      if (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) {
        num += t.substr(j, k - j);
        j = k;
        while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) num += t[j++];
      }
    }
    *out = std::strtod(num.c_str(), nullptr);
    return true;
  }
  return false;
}

ScoreResult score_output(const EvalCase& c, std::string_view output) {
  const json& e = c.expected;
  auto pass = [] { return ScoreResult{1.0, ""}; };
  auto failr = [](std::string why) { return ScoreResult{0.0, std::move(why)}; };
  switch (c.scorer) {
    case Scorer::kExact: {
      std::string got(trim(output)), want(trim(e.get<std::string>()));
      if (c.ignore_case) got = lower(got), want = lower(want);
      return got == want ? pass() : failr("output differs from expected");
    }
    case Scorer::kContains: {
      std::string hay = c.ignore_case ? lower(output) : std::string(output);
      std::vector<std::string> needles;
      if (e.is_string()) needles.push_back(e.get<std::string>());
      else
        for (const auto& s : e) needles.push_back(s.get<std::string>());
      for (const auto& n : needles)
        if (hay.find(c.ignore_case ? lower(n) : n) == std::string::npos)
          return failr("missing \"" + n + "\"");
      return pass();
    }
    case Scorer::kRegex: {
      Code code = compile(e.get<std::string>(), c.ignore_case, nullptr);
      if (!code) return failr("bad regex");
      int r = regex_search(code.get(), output);
      if (r < 0) return failr("regex match limit exceeded");
      return r ? pass() : failr("no match");
    }
    case Scorer::kJsonSchema: {
      json v = json::parse(trim(output), nullptr, false);
      if (v.is_discarded()) {
        std::string_view block = first_json_block(output);
        if (block.empty()) return failr("no JSON in output");
        v = json::parse(block);
      }
      std::string why;
      return json_matches_schema(v, e, &why) ? pass() : failr(why);
    }
    case Scorer::kNumber: {
      double got = 0;
      if (!first_number(output, &got)) return failr("no number in output");
      const double want = e.get<double>();
      return std::fabs(got - want) <= c.tolerance
                 ? pass()
                 : failr("got " + json(got).dump() + ", expected " + json(want).dump());
    }
    case Scorer::kChoice: {
      std::vector<std::string> labels = c.choices;
      if (labels.empty())
        for (char ch = 'A'; ch <= 'Z'; ++ch) labels.emplace_back(1, ch);
      std::string text = c.ignore_case ? lower(output) : std::string(output);
      // The earliest label occurring as a whole token (not inside a word).
      size_t best_pos = std::string::npos;
      std::string best;
      for (const auto& l0 : labels) {
        const std::string l = c.ignore_case ? lower(l0) : l0;
        for (size_t p = text.find(l); p != std::string::npos; p = text.find(l, p + 1)) {
          const bool left = p == 0 || !is_label_char(text[p - 1]);
          const bool right = p + l.size() >= text.size() || !is_label_char(text[p + l.size()]);
          if (left && right) {
            if (p < best_pos) best_pos = p, best = l0;
            break;
          }
        }
      }
      if (best.empty()) return failr("no choice label in output");
      const bool ok = c.ignore_case ? lower(best) == lower(e.get<std::string>()) : best == e.get<std::string>();
      return ok ? pass() : failr("chose " + best);
    }
  }
  return failr("unknown scorer");
}

}  // namespace ts::tools
