// Test helpers: a JSON Schema validator for the subset the converter supports (independent of
// the grammar code: it walks the parsed JSON), and a byte-level matcher for a schema.
#pragma once

#include <cstdint>
// GCC 12 reports a false maybe-uninitialized inside <regex> in sanitizer builds.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <string>

#include <nlohmann/json.hpp>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace ts::structured::test {

using ojson = nlohmann::ordered_json;

inline size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline std::wstring utf32(const std::string& s) {
  std::wstring out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(static_cast<wchar_t>(cp));
    i += static_cast<size_t>(n);
  }
  return out;
}

// "" when `v` validates against `s` (resolving local $ref in `root`), else the reason.
inline std::string validate(const ojson& v, const ojson& s, const ojson& root, int depth = 0) {
  if (depth > 64) return "too deep";
  if (s.is_boolean()) return s.get<bool>() ? "" : "false schema";
  if (s.contains("$ref")) {
    std::string ref = s["$ref"];
    const ojson& t = ref == "#" ? root : root.at(ojson::json_pointer(ref.substr(1)));
    return validate(v, t, root, depth + 1);
  }
  if (s.contains("const") && v != s["const"]) return "const mismatch";
  if (s.contains("enum")) {
    bool found = false;
    for (const auto& e : s["enum"]) found = found || e == v;
    if (!found) return "not in enum";
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!s.contains(k)) continue;
    bool any = false;
    for (const auto& sub : s[k]) any = any || validate(v, sub, root, depth + 1).empty();
    if (!any) return std::string("no ") + k + " branch matches";
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) types.push_back(s["type"]);
    else for (const auto& t : s["type"]) types.push_back(t);
    bool ok = false;
    for (const auto& t : types) {
      ok = ok || (t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
           (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) ||
           (t == "null" && v.is_null()) || (t == "object" && v.is_object()) || (t == "array" && v.is_array());
    }
    if (!ok) return "wrong type: " + v.dump();
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return "below minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return "above maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return "not above exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return "not below exclusiveMaximum";
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    if (s.contains("minLength") && utf8_length(str) < s["minLength"].get<size_t>()) return "too short";
    if (s.contains("maxLength") && utf8_length(str) > s["maxLength"].get<size_t>()) return "too long";
    // Code points, so that classes such as [α-ω] mean characters, not bytes.
    if (s.contains("pattern") && !std::regex_match(utf32(str), std::wregex(utf32(s["pattern"].get<std::string>()))))
      return "pattern mismatch: " + str;
    if (s.contains("format")) {
      static const std::map<std::string, std::string> kFormats{
          {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
          {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
          {"date-time", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
          {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
          {"email", R"([A-Za-z0-9._%+-]+@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+)"},
          {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d))"}};
      if (!std::regex_match(str, std::regex(kFormats.at(s["format"].get<std::string>())))) return "format mismatch: " + str;
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return "too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return "too many items";
    size_t start = 0;
    if (s.contains("prefixItems")) {
      for (size_t i = 0; i < v.size() && i < s["prefixItems"].size(); ++i) {
        std::string e = validate(v[i], s["prefixItems"][i], root, depth + 1);
        if (!e.empty()) return "[" + std::to_string(i) + "]: " + e;
      }
      start = s["prefixItems"].size();
    }
    if (s.contains("items")) {
      for (size_t i = start; i < v.size(); ++i) {
        std::string e = validate(v[i], s["items"], root, depth + 1);
        if (!e.empty()) return "[" + std::to_string(i) + "]: " + e;
      }
    }
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return "missing " + r.get<std::string>();
    for (const auto& [k, x] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        std::string e = validate(x, s["properties"][k], root, depth + 1);
        if (!e.empty()) return k + ": " + e;
      } else if (s.contains("additionalProperties")) {
        std::string e = validate(x, s["additionalProperties"], root, depth + 1);
        if (!e.empty()) return "additional " + k + ": " + e;
      } else if (s.contains("properties")) {
        return "unexpected property " + k;  // the converter's default: no extra keys
      }
    }
  }
  return "";
}

// A schema compiled to a byte-level matcher (no vocabulary).
class SchemaMatcher {
 public:
  explicit SchemaMatcher(const std::string& schema) {
    auto g = schema_to_gbnf(schema, "s-");
    if (!g.ok()) { error_ = g.status().message(); return; }
    auto ast = parse_gbnf(*g + "root ::= s-root\n", {});
    if (!ast.ok()) { error_ = "gbnf: " + ast.status().message() + "\n" + *g; return; }
    auto low = lower(*ast, {});
    if (!low.ok()) { error_ = "lower: " + low.status().message(); return; }
    g_ = std::make_unique<Grammar>(std::move(low).value());
    rt_ = std::make_unique<Runtime>(*g_, nullptr);
  }
  const std::string& error() const { return error_; }
  bool accepts(std::string_view s) {
    const int32_t st = rt_->run(rt_->initial(), s);
    return st != Runtime::kDead && rt_->accepting(st);
  }

 private:
  std::string error_;
  std::unique_ptr<Grammar> g_;
  std::unique_ptr<Runtime> rt_;
};

}  // namespace ts::structured::test
