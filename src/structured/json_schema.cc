// JSON Schema -> GBNF (see constraint.h: schema_to_gbnf). Coverage and the deliberate bounds:
//  - types (string, number, integer, boolean, null, object, array, and arrays of types),
//    enum, const, anyOf, oneOf (only when its branches are provably disjoint: different JSON
//    types, different const/enum values, or objects with a required property whose schemas are
//    disjoint, e.g. a "kind" const; other oneOf schemas get a 400 naming 'oneOf', since the
//    grammar cannot enforce "exactly one"; then generating as anyOf is exact), allOf with one
//    entry, local $ref ("#", "#/$defs/...", "#/definitions/...", any local JSON pointer).
//  - objects: properties, required, additionalProperties (false, true or a schema). When
//    additionalProperties is absent no extra keys are generated (as xgrammar's strict mode).
//    Required properties come first in schema order, then optional ones in schema order.
//  - arrays: items, prefixItems, minItems, maxItems.
//  - strings: minLength, maxLength, pattern (full match; characters JSON would have to escape
//    are removed from the pattern's classes), format date, time, date-time, uuid, email, ipv4.
//  - integers: minimum, maximum, exclusiveMinimum, exclusiveMaximum enforced exactly.
//  - numbers: with a minimum/maximum (exclusive too) the grammar is sound: only plain decimals
//    (no exponent) in range: the integers in range and I.F for every integer part I whose unit
//    interval lies in range (so the sign and the integer part's bounds are exact; near a
//    fractional bound only the integers are generated). A range with no integer and no whole
//    unit interval inside is refused (400 naming minimum/maximum).
//  - whitespace between tokens is "", " " or a newline plus up to 20 spaces/tabs.
//  - free-form values ({} / true / json_object) nest at most kAnyDepth deep, and numbers have at
//    most 16 integer and 16 fraction digits, so that every generation can finish.
//  Annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
//  readOnly, writeOnly, strict) are ignored; any other keyword is refused, naming it.
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "structured/grammar.h"

namespace ts::structured {
namespace {

using ojson = nlohmann::ordered_json;
constexpr int kAnyDepth = 8;

std::string lit(std::string_view s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c == '\r') o += "\\r";
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\x%02X", c); o += b; }
    else o += static_cast<char>(c);
  }
  return o + "\"";
}

std::string cp_escape(uint32_t c) {
  char b[16];
  std::snprintf(b, sizeof b, "\\U%08X", c);
  return b;
}

// Regex AST to GBNF text. in_json_string: drop '"', '\\' and control characters from classes.
Result<std::string> ast_to_gbnf(const Node& n, bool in_json_string) {
  switch (n.kind) {
    case Node::Kind::kSeq: {
      if (n.kids.empty()) return std::string("\"\"");
      std::string o = "(";
      for (size_t i = 0; i < n.kids.size(); ++i) {
        TS_ASSIGN_OR_RETURN(std::string k, ast_to_gbnf(n.kids[i], in_json_string));
        o += (i ? " " : "") + k;
      }
      return o + ")";
    }
    case Node::Kind::kAlt: {
      std::string o = "(";
      for (size_t i = 0; i < n.kids.size(); ++i) {
        TS_ASSIGN_OR_RETURN(std::string k, ast_to_gbnf(n.kids[i], in_json_string));
        o += (i ? " | " : "") + k;
      }
      return o + ")";
    }
    case Node::Kind::kClass: {
      std::vector<std::pair<uint32_t, uint32_t>> r = n.ranges;
      if (in_json_string) {
        std::vector<std::pair<uint32_t, uint32_t>> forbidden{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
        auto allowed = normalize_ranges(forbidden, true);
        std::vector<std::pair<uint32_t, uint32_t>> x;
        for (auto [a, b] : r)
          for (auto [c, d] : allowed)
            if (std::max(a, c) <= std::min(b, d)) x.emplace_back(std::max(a, c), std::min(b, d));
        r = x;
        if (r.empty()) return invalid_argument("pattern needs a character that JSON strings must escape ('\"', '\\' or a control character); not supported");
      }
      std::string o = "[";
      for (auto [a, b] : r) {
        o += cp_escape(a);
        if (b != a) o += "-" + cp_escape(b);
      }
      return o + "]";
    }
    case Node::Kind::kRef: return n.ref;
    case Node::Kind::kRepeat: {
      TS_ASSIGN_OR_RETURN(std::string k, ast_to_gbnf(n.kids.at(0), in_json_string));
      std::string o = "(" + k + "){" + std::to_string(n.min) + ",";
      if (n.max >= 0) o += std::to_string(n.max);
      return o + "}";
    }
  }
  return std::string("\"\"");
}

// Digits of a non-negative number as a string.
std::string digits(uint64_t v) { return std::to_string(v); }

// GBNF for the decimal strings of [a, b], a <= b, both with the same number of digits n.
std::string range_same(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (n == 0) return "\"\"";
  if (n == 1) return a == b ? lit(a) : "[" + a + "-" + b + "]";
  if (a[0] == b[0]) return "(" + lit(a.substr(0, 1)) + " " + range_same(a.substr(1), b.substr(1)) + ")";
  const std::string rest_a = a.substr(1), rest_b = b.substr(1);
  const bool a_zero = rest_a.find_first_not_of('0') == std::string::npos;
  const bool b_nine = rest_b.find_first_not_of('9') == std::string::npos;
  const std::string any = "[0-9]{" + std::to_string(n - 1) + "}";
  std::vector<std::string> alts;
  char lo = a[0], hi = b[0];
  if (!a_zero) { alts.push_back(lit(a.substr(0, 1)) + " " + range_same(rest_a, std::string(n - 1, '9'))); ++lo; }
  if (!b_nine) --hi;
  if (lo <= hi) alts.push_back((lo == hi ? lit(std::string(1, lo)) : "[" + std::string(1, lo) + "-" + std::string(1, hi) + "]") + " " + any);
  if (!b_nine) alts.push_back(lit(b.substr(0, 1)) + " " + range_same(std::string(n - 1, '0'), rest_b));
  std::string o = "(";
  for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + alts[i];
  return o + ")";
}

// GBNF for decimal integers in [a, b] (0 <= a <= b), canonical (no leading zeros).
std::string pos_range(uint64_t a, uint64_t b) {
  std::vector<std::string> alts;
  std::string sa = digits(a), sb = digits(b);
  while (sa.size() < sb.size()) {
    alts.push_back(range_same(sa, std::string(sa.size(), '9')));
    sa = "1" + std::string(sa.size(), '0');
  }
  alts.push_back(range_same(sa, sb));
  if (alts.size() == 1) return alts[0];
  std::string o = "(";
  for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + alts[i];
  return o + ")";
}

constexpr const char* kIntDigits = "(\"0\" | [1-9] [0-9]{0,15})";

// Integers >= a (a >= 0), at most 16 digits.
std::string pos_from(uint64_t a) {
  const std::string sa = digits(a);
  std::string o = "(" + pos_range(a, std::stoull(std::string(sa.size(), '9')));
  if (sa.size() < 16) o += " | [1-9] [0-9]{" + std::to_string(sa.size()) + ",15}";
  return o + ")";
}

std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  auto mag = [](int64_t v) { return static_cast<uint64_t>(v < 0 ? -(v + 1) + 1 : v); };
  if (!lo && !hi) return std::string("(\"-\"? ") + kIntDigits + ")";
  if (lo && hi) {
    if (*hi < 0) return "(\"-\" " + pos_range(mag(*hi), mag(*lo)) + ")";
    if (*lo >= 0) return pos_range(static_cast<uint64_t>(*lo), static_cast<uint64_t>(*hi));
    return "(\"-\" " + pos_range(1, mag(*lo)) + " | " + pos_range(0, static_cast<uint64_t>(*hi)) + ")";
  }
  if (lo) {
    if (*lo >= 0) return pos_from(static_cast<uint64_t>(*lo));
    return "(\"-\" " + pos_range(1, mag(*lo)) + " | " + kIntDigits + ")";
  }
  // Only a maximum.
  if (*hi >= 0) return "(\"-\" [1-9] [0-9]{0,15} | " + pos_range(0, static_cast<uint64_t>(*hi)) + ")";
  return "(\"-\" " + pos_from(mag(*hi)) + ")";
}

class SchemaConverter {
 public:
  SchemaConverter(const ojson& root, std::string prefix, const CompileLimits& lim)
      : root_(root), p_(std::move(prefix)), lim_(lim) {}

  Result<std::string> run() {
    base();
    TS_ASSIGN_OR_RETURN(std::string body, value(root_, "#", 0));
    rules_[p_ + "root"] = body;
    std::string o;
    o += p_ + "root ::= " + rules_[p_ + "root"] + "\n";
    for (const auto& [name, b] : rules_) {
      if (name == p_ + "root") continue;
      o += name + " ::= " + b + "\n";
    }
    return o;
  }

 private:
  std::string r(const std::string& n) const { return p_ + n; }

  void base() {
    // Between tokens: nothing, one space, or a newline and up to 20 indentation characters
    // (compact and pretty-printed JSON), never unbounded runs of whitespace.
    rules_[r("ws")] = "(\" \" | \"\\n\" [ \\t]{0,20})?";
    rules_[r("char")] = "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})";
    rules_[r("string")] = "\"\\\"\" " + r("char") + "* \"\\\"\"";
    rules_[r("integer")] = std::string("\"-\"? ") + kIntDigits;
    rules_[r("number")] = std::string("\"-\"? ") + kIntDigits + " (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?";
    rules_[r("boolean")] = "\"true\" | \"false\"";
    rules_[r("null")] = "\"null\"";
    for (int d = kAnyDepth; d >= 0; --d) {
      const std::string v = r("any" + std::to_string(d));
      std::string alts = r("string") + " | " + r("number") + " | " + r("boolean") + " | " + r("null");
      if (d < kAnyDepth) {
        const std::string in = r("any" + std::to_string(d + 1));
        const std::string kv = r("string") + " " + r("ws") + " \":\" " + r("ws") + " " + in + " " + r("ws");
        alts += " | \"{\" " + r("ws") + " (" + kv + " (\",\" " + r("ws") + " " + kv + ")*)? \"}\"";
        alts += " | \"[\" " + r("ws") + " (" + in + " " + r("ws") + " (\",\" " + r("ws") + " " + in + " " + r("ws") + ")*)? \"]\"";
      }
      rules_[v] = alts;
    }
    const std::string kv = r("string") + " " + r("ws") + " \":\" " + r("ws") + " " + r("any1") + " " + r("ws");
    rules_[r("object")] = "\"{\" " + r("ws") + " (" + kv + " (\",\" " + r("ws") + " " + kv + ")*)? \"}\"";
  }

  std::string fresh(const std::string& hint) { return r(hint + std::to_string(counter_++)); }

  Result<std::string> resolve_ref(const std::string& ref, int depth) {
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') return invalid_argument("$ref '" + ref + "' is not a local reference (only '#...' is supported)");
    const ojson* target = &root_;
    if (ref.size() > 1) {
      if (ref[1] != '/') return invalid_argument("$ref '" + ref + "' is not a JSON pointer");
      ojson::json_pointer ptr;
      try {
        ptr = ojson::json_pointer(ref.substr(1));
      } catch (const std::exception&) {
        return invalid_argument("$ref '" + ref + "' is not a valid JSON pointer");
      }
      if (!root_.contains(ptr)) return invalid_argument("$ref '" + ref + "' does not resolve");
      target = &root_.at(ptr);
    }
    const std::string name = fresh("ref");
    ref_rules_[ref] = name;
    TS_ASSIGN_OR_RETURN(std::string body, value(*target, ref, depth + 1));
    rules_[name] = body;
    return name;
  }

  static bool is_annotation(const std::string& k) {
    static const std::set<std::string> kAnn{"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "strict",
                                            "$defs", "definitions"};
    return kAnn.count(k) > 0;
  }

  Result<std::string> value(const ojson& s, const std::string& path, int depth) {
    if (depth > lim_.max_schema_depth) return invalid_argument("schema nests deeper than " + std::to_string(lim_.max_schema_depth) + " levels");
    if (s.is_boolean()) {
      if (s.get<bool>()) return r("any0");
      return invalid_argument("schema at '" + path + "' is false: no value can match");
    }
    if (!s.is_object()) return invalid_argument("schema at '" + path + "' must be an object or a boolean");
    static const std::set<std::string> kKnown{
        "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
        "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
        "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (const auto& [k, v] : s.items()) {
      if (!kKnown.count(k) && !is_annotation(k))
        return invalid_argument("unsupported JSON Schema keyword '" + k + "' at '" + path + "'");
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return invalid_argument("'$ref' at '" + path + "' must be a string");
      return resolve_ref(s["$ref"].get<std::string>(), depth);
    }
    if (s.contains("const")) return lit(s["const"].dump(-1, ' ', false));
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) return invalid_argument("'enum' at '" + path + "' must be a non-empty array");
      std::string o = "(";
      for (size_t i = 0; i < e.size(); ++i) o += (i ? " | " : "") + lit(e[i].dump(-1, ' ', false));
      return o + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const ojson& a = s[key];
      if (!a.is_array() || a.empty()) return invalid_argument(std::string("'") + key + "' at '" + path + "' must be a non-empty array");
      if (key[0] == 'o') {
        for (size_t i = 0; i < a.size(); ++i)
          for (size_t j = i + 1; j < a.size(); ++j)
            if (!disjoint(a[i], a[j], 0))
              return invalid_argument("'oneOf' at '" + path + "': branches " + std::to_string(i) + " and " + std::to_string(j) +
                                      " may overlap (exclusivity cannot be enforced; only branches of different types, "
                                      "different const/enum values, or objects told apart by a required const property "
                                      "are supported; use 'anyOf' if overlap is fine)");
      }
      std::string o = "(";
      for (size_t i = 0; i < a.size(); ++i) {
        TS_ASSIGN_OR_RETURN(std::string v, value(a[i], path + "/" + key + "/" + std::to_string(i), depth + 1));
        o += (i ? " | " : "") + v;
      }
      return o + ")";
    }
    if (s.contains("allOf")) {
      const ojson& a = s["allOf"];
      if (!a.is_array() || a.size() != 1) return invalid_argument("unsupported JSON Schema keyword 'allOf' at '" + path + "' (only a single entry is supported)");
      return value(a[0], path + "/allOf/0", depth + 1);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array()) {
        for (const auto& x : t) {
          if (!x.is_string()) return invalid_argument("'type' at '" + path + "' must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return invalid_argument("'type' at '" + path + "' must be a string or an array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return r("any0");
    }
    std::string o = "(";
    for (size_t i = 0; i < types.size(); ++i) {
      TS_ASSIGN_OR_RETURN(std::string v, typed(s, types[i], path, depth));
      o += (i ? " | " : "") + v;
    }
    return o + ")";
  }

  // ---- oneOf: provable disjointness (sound: "false" when unsure) ----
  const ojson* deref(const ojson* s, int hops) const {
    while (s && s->is_object() && s->contains("$ref") && hops++ < 16) {
      const ojson& rv = (*s)["$ref"];
      if (!rv.is_string()) return nullptr;
      const std::string ref = rv.get<std::string>();
      if (ref == "#") { s = &root_; continue; }
      if (ref.size() < 2 || ref[0] != '#' || ref[1] != '/') return nullptr;
      try {
        ojson::json_pointer ptr(ref.substr(1));
        if (!root_.contains(ptr)) return nullptr;
        s = &root_.at(ptr);
      } catch (const std::exception&) {
        return nullptr;
      }
    }
    return s;
  }
  static std::string type_of(const ojson& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return std::floor(v.get<double>()) == v.get<double>() ? "integer" : "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    return "object";
  }
  // The JSON types a branch allows (nullopt: any / unknown), and its literal values when it is
  // a const/enum.
  struct Shape {
    std::optional<std::set<std::string>> types;
    std::optional<std::vector<ojson>> literals;
  };
  static Shape shape(const ojson& s) {
    Shape sh;
    if (!s.is_object()) return sh;
    if (s.contains("const")) sh.literals = std::vector<ojson>{s["const"]};
    else if (s.contains("enum") && s["enum"].is_array()) sh.literals = std::vector<ojson>(s["enum"].begin(), s["enum"].end());
    if (sh.literals) {
      std::set<std::string> t;
      for (const auto& v : *sh.literals) t.insert(type_of(v));
      sh.types = t;
      return sh;
    }
    if (s.contains("anyOf") || s.contains("oneOf") || s.contains("allOf")) return sh;
    if (s.contains("type")) {
      std::set<std::string> t;
      const ojson& ty = s["type"];
      if (ty.is_string()) t.insert(ty.get<std::string>());
      else if (ty.is_array()) for (const auto& x : ty) if (x.is_string()) t.insert(x.get<std::string>());
      sh.types = t;
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      sh.types = std::set<std::string>{"object"};
    }
    return sh;
  }
  static bool types_meet(const std::set<std::string>& a, const std::set<std::string>& b) {
    for (const auto& t : a) {
      if (b.count(t)) return true;
      if ((t == "integer" && b.count("number")) || (t == "number" && b.count("integer"))) return true;
    }
    return false;
  }
  bool disjoint(const ojson& x0, const ojson& y0, int depth) const {
    const ojson* x = deref(&x0, 0);
    const ojson* y = deref(&y0, 0);
    if (!x || !y || depth > 4) return false;
    const Shape a = shape(*x), b = shape(*y);
    if (a.literals && b.literals) {
      for (const auto& u : *a.literals)
        for (const auto& v : *b.literals)
          if (u == v) return false;
      return true;
    }
    auto lit_vs = [](const Shape& l, const Shape& t) {
      for (const auto& v : *l.literals)
        if (types_meet({type_of(v)}, *t.types)) return false;
      return true;
    };
    if (a.literals && b.types) return lit_vs(a, b);
    if (b.literals && a.types) return lit_vs(b, a);
    if (!a.types || !b.types) return false;
    if (!types_meet(*a.types, *b.types)) return true;
    // Objects only: a property required by both whose schemas are disjoint (a discriminator).
    if (*a.types != std::set<std::string>{"object"} || *b.types != std::set<std::string>{"object"}) return false;
    auto req = [](const ojson& s, const std::string& k) {
      if (!s.contains("required") || !s["required"].is_array()) return false;
      for (const auto& r : s["required"])
        if (r == k) return true;
      return false;
    };
    if (!x->contains("properties") || !y->contains("properties")) return false;
    const ojson& px = (*x)["properties"];
    const ojson& py = (*y)["properties"];
    if (!px.is_object() || !py.is_object()) return false;
    for (const auto& [k, sx] : px.items())
      if (py.contains(k) && req(*x, k) && req(*y, k) && disjoint(sx, py[k], depth + 1)) return true;
    return false;
  }

  Result<std::optional<int64_t>> get_int(const ojson& s, const char* k, const std::string& path) {
    if (!s.contains(k)) return std::optional<int64_t>();
    const ojson& v = s[k];
    if (!v.is_number()) return invalid_argument(std::string("'") + k + "' at '" + path + "' must be a number");
    if (v.is_number_integer()) return std::optional<int64_t>(v.get<int64_t>());
    const double d = v.get<double>();
    if (!(std::fabs(d) < 9e15)) return invalid_argument(std::string("'") + k + "' at '" + path + "' is out of range");
    return std::optional<int64_t>(static_cast<int64_t>(std::floor(d)) + (std::floor(d) == d ? 0 : 0));
  }

  Result<std::string> typed(const ojson& s, const std::string& type, const std::string& path, int depth) {
    if (type == "null") return r("null");
    if (type == "boolean") return r("boolean");
    if (type == "string") return string_rule(s, path);
    if (type == "integer") {
      std::optional<int64_t> lo, hi;
      auto bound = [&](const char* k, int64_t adj, bool is_min, std::optional<int64_t>* out) -> Status {
        if (!s.contains(k)) return Status();
        const ojson& v = s[k];
        if (v.is_boolean()) return invalid_argument(std::string("boolean '") + k + "' (draft 4) is not supported at '" + path + "'");
        if (!v.is_number()) return invalid_argument(std::string("'") + k + "' at '" + path + "' must be a number");
        const double d = v.get<double>();
        if (!(std::fabs(d) < 1e15)) return invalid_argument(std::string("'") + k + "' at '" + path + "' is out of range (|x| < 1e15)");
        int64_t b = static_cast<int64_t>(is_min ? std::ceil(d) : std::floor(d));
        if (adj != 0 && static_cast<double>(b) == d) b += adj;
        if (!*out || (is_min ? b > **out : b < **out)) *out = b;
        return Status();
      };
      TS_RETURN_IF_ERROR(bound("minimum", 0, true, &lo));
      TS_RETURN_IF_ERROR(bound("exclusiveMinimum", 1, true, &lo));
      TS_RETURN_IF_ERROR(bound("maximum", 0, false, &hi));
      TS_RETURN_IF_ERROR(bound("exclusiveMaximum", -1, false, &hi));
      if (lo && hi && *lo > *hi) return invalid_argument("integer range at '" + path + "' is empty (minimum > maximum)");
      return int_range(lo, hi);
    }
    if (type == "number") return number_rule(s, path);
    if (type == "array") return array_rule(s, path, depth);
    if (type == "object") return object_rule(s, path, depth);
    return invalid_argument("unsupported type '" + type + "' at '" + path + "'");
  }

  // Numbers with bounds: plain decimals (no exponent), exact in sign and integer part and sound
  // (every value the grammar allows is in range): integers in the range, plus I.F (any
  // fraction) for integer parts I whose whole unit interval lies in the range. A range holding
  // no integer and no whole unit interval (e.g. [0.2, 0.3]) is refused: the grammar cannot
  // express its bounds on the fraction.
  Result<std::string> number_rule(const ojson& s, const std::string& path) {
    std::optional<double> lo, hi;
    bool lo_ex = false, hi_ex = false;
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(k)) continue;
      const ojson& v = s[k];
      if (v.is_boolean()) return invalid_argument(std::string("boolean '") + k + "' (draft 4) is not supported at '" + path + "'");
      if (!v.is_number()) return invalid_argument(std::string("'") + k + "' at '" + path + "' must be a number");
      const double d = v.get<double>();
      if (!(std::fabs(d) < 1e15)) return invalid_argument(std::string("'") + k + "' at '" + path + "' is out of range (|x| < 1e15)");
      const bool ex = k[0] == 'e', is_min = std::string_view(k).find("inimum") != std::string_view::npos;
      std::optional<double>& b = is_min ? lo : hi;
      bool& bex = is_min ? lo_ex : hi_ex;
      if (!b || (is_min ? d > *b || (d == *b && ex) : d < *b || (d == *b && ex))) {
        b = d;
        bex = ex;
      }
    }
    if (!lo && !hi) return r("number");
    if (lo && hi && (*lo > *hi || (*lo == *hi && (lo_ex || hi_ex))))
      return invalid_argument("number range at '" + path + "' is empty (minimum > maximum)");
    auto fl = [](double d) { return static_cast<int64_t>(std::floor(d)); };
    auto ce = [](double d) { return static_cast<int64_t>(std::ceil(d)); };
    const std::string frac = " \".\" [0-9]{1,16}";
    std::vector<std::string> alts;
    // Integers.
    std::optional<int64_t> ilo, ihi;
    if (lo) ilo = lo_ex ? fl(*lo) + 1 : ce(*lo);
    if (hi) ihi = hi_ex ? ce(*hi) - 1 : fl(*hi);
    if (!ilo || !ihi || *ilo <= *ihi) alts.push_back(int_range(ilo, ihi));
    // Non-negative I.F: x in [I, I+1), so I >= lo (I > lo when exclusive, "I.0" equals I) and I + 1 <= hi.
    {
      int64_t a = 0;
      if (lo) a = std::max<int64_t>(0, lo_ex ? fl(*lo) + 1 : ce(*lo));
      std::optional<int64_t> b;
      if (hi) b = fl(*hi) - 1;
      if (!b) alts.push_back("(" + pos_from(static_cast<uint64_t>(a)) + frac + ")");
      else if (a <= *b) alts.push_back("(" + pos_range(static_cast<uint64_t>(a), static_cast<uint64_t>(*b)) + frac + ")");
    }
    // Negative -I.F: x in (-(I+1), -I], so -(I+1) >= lo and -I <= hi (-I < hi when exclusive).
    {
      int64_t a = 0;
      if (hi) a = std::max<int64_t>(0, hi_ex ? fl(-*hi) + 1 : ce(-*hi));
      std::optional<int64_t> b;
      if (lo) b = fl(-*lo) - 1;
      if (!b) alts.push_back("(\"-\" " + pos_from(static_cast<uint64_t>(a)) + frac + ")");
      else if (a <= *b) alts.push_back("(\"-\" " + pos_range(static_cast<uint64_t>(a), static_cast<uint64_t>(*b)) + frac + ")");
    }
    if (alts.empty())
      return invalid_argument("number range at '" + path + "' holds no integer and no whole unit interval: "
                              "'minimum'/'maximum' this narrow are not supported");
    std::string o = "(";
    for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + alts[i];
    return o + ")";
  }

  Result<std::string> string_rule(const ojson& s, const std::string& path) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (has_len) return invalid_argument("unsupported JSON Schema keyword 'minLength'/'maxLength' together with 'pattern' at '" + path + "'");
      if (!s["pattern"].is_string()) return invalid_argument("'pattern' at '" + path + "' must be a string");
      auto ast = parse_regex(s["pattern"].get<std::string>(), lim_);
      if (!ast.ok()) return invalid_argument("'pattern' at '" + path + "': " + ast.status().message());
      TS_ASSIGN_OR_RETURN(std::string body, ast_to_gbnf(*ast, true));
      return "(\"\\\"\" " + body + " \"\\\"\")";
    }
    if (s.contains("format")) {
      if (has_len) return invalid_argument("unsupported JSON Schema keyword 'minLength'/'maxLength' together with 'format' at '" + path + "'");
      if (!s["format"].is_string()) return invalid_argument("'format' at '" + path + "' must be a string");
      const std::string f = s["format"].get<std::string>();
      const std::string date = "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])";
      const std::string time = "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
      std::string body;
      if (f == "date") body = date;
      else if (f == "time") body = time;
      else if (f == "date-time") body = date + " \"T\" " + time;
      else if (f == "uuid") body = "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}";
      else if (f == "email") {
        const std::string label = "[a-zA-Z0-9] ([a-zA-Z0-9-]{0,30} [a-zA-Z0-9])?";
        body = "[a-zA-Z0-9._%+-]{1,64} \"@\" " + label + " (\".\" " + label + "){1,4}";
      } else if (f == "ipv4") {
        const std::string oct = "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9])";
        body = oct + " \".\" " + oct + " \".\" " + oct + " \".\" " + oct;
      } else {
        return invalid_argument("unsupported JSON Schema format '" + f + "' at '" + path + "' (supported: date, time, date-time, uuid, email, ipv4)");
      }
      return "(\"\\\"\" " + body + " \"\\\"\")";
    }
    if (!has_len) return r("string");
    TS_ASSIGN_OR_RETURN(auto lo, get_int(s, "minLength", path));
    TS_ASSIGN_OR_RETURN(auto hi, get_int(s, "maxLength", path));
    const int64_t a = lo.value_or(0);
    if (a < 0 || (hi && *hi < a)) return invalid_argument("minLength/maxLength at '" + path + "' are inconsistent");
    if (a > lim_.max_repeat || (hi && *hi > lim_.max_repeat))
      return invalid_argument("minLength/maxLength at '" + path + "' above the limit of " + std::to_string(lim_.max_repeat));
    std::string rep = "{" + std::to_string(a) + "," + (hi ? std::to_string(*hi) : std::string()) + "}";
    return "(\"\\\"\" (" + r("char") + ")" + rep + " \"\\\"\")";
  }

  Result<std::string> array_rule(const ojson& s, const std::string& path, int depth) {
    TS_ASSIGN_OR_RETURN(auto lo, get_int(s, "minItems", path));
    TS_ASSIGN_OR_RETURN(auto hi, get_int(s, "maxItems", path));
    const int64_t a = lo.value_or(0);
    if (a < 0 || (hi && *hi < a)) return invalid_argument("minItems/maxItems at '" + path + "' are inconsistent");
    if (a > lim_.max_repeat || (hi && *hi > lim_.max_repeat))
      return invalid_argument("minItems/maxItems at '" + path + "' above the limit of " + std::to_string(lim_.max_repeat));
    const std::string ws = r("ws");
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const ojson& p = s["prefixItems"];
      if (!p.is_array()) return invalid_argument("'prefixItems' at '" + path + "' must be an array");
      for (size_t i = 0; i < p.size(); ++i) {
        TS_ASSIGN_OR_RETURN(std::string v, value(p[i], path + "/prefixItems/" + std::to_string(i), depth + 1));
        prefix.push_back(v);
      }
    }
    std::string item = r("any1");
    bool more = true;
    if (s.contains("items")) {
      if (s["items"].is_boolean() && !s["items"].get<bool>()) more = false;
      else { TS_ASSIGN_OR_RETURN(item, value(s["items"], path + "/items", depth + 1)); }
    }
    if (!prefix.empty()) {
      // Tuple: the prefix items in order (all of them unless minItems allows fewer), then more items.
      const int64_t np = static_cast<int64_t>(prefix.size());
      if (a > np && !more) return invalid_argument("minItems at '" + path + "' exceeds the tuple length");
      std::string o = "\"[\" " + ws + " ";
      std::string tail;
      if (more) {
        const int64_t rest_lo = std::max<int64_t>(0, a - np);
        std::string rep = "{" + std::to_string(rest_lo) + "," + (hi ? std::to_string(std::max<int64_t>(0, *hi - np)) : std::string()) + "}";
        tail = " (\",\" " + ws + " " + item + " " + ws + ")" + rep;
      }
      // Items after a point may be left out when minItems allows it.
      std::string inner = tail;
      for (int64_t i = np - 1; i >= 0; --i) {
        const std::string sep = i == 0 ? "" : "\",\" " + ws + " ";
        const std::string cur = sep + prefix[static_cast<size_t>(i)] + " " + ws + inner;
        inner = i >= a ? " (" + cur + ")?" : " " + cur;
      }
      return "(" + o + inner + " \"]\")";
    }
    if (!more) return "(\"[\" " + ws + " \"]\")";
    const std::string first = item + " " + ws;
    const std::string next = "(\",\" " + ws + " " + item + " " + ws + ")";
    std::string body;
    if (a == 0) {
      std::string rep = hi ? "{0," + std::to_string(std::max<int64_t>(0, *hi - 1)) + "}" : "*";
      body = hi && *hi == 0 ? "" : "(" + first + " " + next + rep + ")?";
    } else {
      body = first + " " + next + "{" + std::to_string(a - 1) + "," + (hi ? std::to_string(*hi - 1) : std::string()) + "}";
    }
    return "(\"[\" " + ws + " " + body + " \"]\")";
  }

  Result<std::string> object_rule(const ojson& s, const std::string& path, int depth) {
    const std::string ws = r("ws");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return invalid_argument("'required' at '" + path + "' must be an array");
      for (const auto& x : s["required"]) {
        if (!x.is_string()) return invalid_argument("'required' at '" + path + "' must hold strings");
        required.insert(x.get<std::string>());
      }
    }
    std::vector<std::string> req_kv, opt_kv;
    std::set<std::string> seen;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return invalid_argument("'properties' at '" + path + "' must be an object");
      for (const auto& [k, v] : s["properties"].items()) {
        TS_ASSIGN_OR_RETURN(std::string val, value(v, path + "/properties/" + k, depth + 1));
        const std::string kv = lit(ojson(k).dump(-1, ' ', false)) + " " + ws + " \":\" " + ws + " " + val + " " + ws;
        (required.count(k) ? req_kv : opt_kv).push_back(kv);
        seen.insert(k);
      }
    }
    for (const auto& k : required)
      if (!seen.count(k)) return invalid_argument("required property '" + k + "' at '" + path + "' is not in 'properties'");
    std::string extra;  // one additional key/value, or "" when none are allowed
    if (s.contains("additionalProperties")) {
      const ojson& ap = s["additionalProperties"];
      if (!(ap.is_boolean() && !ap.get<bool>())) {
        std::string val = r("any1");
        if (!ap.is_boolean()) { TS_ASSIGN_OR_RETURN(val, value(ap, path + "/additionalProperties", depth + 1)); }
        extra = r("string") + " " + ws + " \":\" " + ws + " " + val + " " + ws;
      }
    } else if (!s.contains("properties")) {
      extra = r("string") + " " + ws + " \":\" " + ws + " " + r("any1") + " " + ws;  // {"type":"object"}
    }
    // Optional members: opt(k, comma) = [sep] kv_k opt(k+1, true) | opt(k+1, comma).
    const std::string sep = "\",\" " + ws + " ";
    std::string tail_comma = extra.empty() ? "\"\"" : "(" + sep + extra + ")*";
    std::string tail_first = extra.empty() ? "\"\"" : "(" + extra + " (" + sep + extra + ")*)?";
    for (size_t k = opt_kv.size(); k-- > 0;) {
      const std::string rc = fresh("optc"), rf = fresh("optf");
      rules_[rc] = "(" + sep + opt_kv[k] + " " + tail_comma + ") | " + tail_comma;
      rules_[rf] = "(" + opt_kv[k] + " " + tail_comma + ") | " + tail_first;
      tail_comma = rc;
      tail_first = rf;
    }
    std::string body;
    for (size_t i = 0; i < req_kv.size(); ++i) body += (i ? sep : std::string()) + req_kv[i] + " ";
    body += req_kv.empty() ? tail_first : tail_comma;
    const std::string name = fresh("obj");
    rules_[name] = "\"{\" " + ws + " " + body + " \"}\"";
    return name;
  }

  const ojson& root_;
  std::string p_;
  const CompileLimits& lim_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  int counter_ = 0;
};

}  // namespace

Result<std::string> schema_to_gbnf(std::string_view schema_json, std::string_view rule_prefix,
                                   const CompileLimits& limits) {
  if (static_cast<int64_t>(schema_json.size()) > limits.max_source_bytes)
    return invalid_argument("schema is larger than " + std::to_string(limits.max_source_bytes) + " bytes");
  for (char c : rule_prefix)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
      return invalid_argument("rule prefix may only hold letters, digits, '-' and '_'");
  ojson root = ojson::parse(schema_json, nullptr, false);
  if (root.is_discarded()) return invalid_argument("schema is not valid JSON");
  SchemaConverter c(root, std::string(rule_prefix), limits);
  return c.run();
}

}  // namespace ts::structured
