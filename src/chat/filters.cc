// Jinja filters (see builtins.h). Names and argument order follow jinja2 3.1; tojson follows
// transformers' override (json.dumps, ensure_ascii=False, no HTML escaping).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <unordered_map>

#include "chat/builtins.h"
#include "chat/ops.h"
#include "chat/strings.h"

namespace ts::chat {

namespace {

const Value kUndef;
const Value kNoneV = Value::none();
const Value kFalseV = Value::from_bool(false);

Value str_value(std::string s) {
  charge_bytes(static_cast<int64_t>(s.size()));
  return Value::from_string(std::move(s));
}

// `attribute="a.b"` (dotted path; integer parts index lists), as jinja2's make_attrgetter.
Value attr_path(const Value& v, const Value& path) {
  if (!path.is_string()) return get_item(v, path);
  Value cur = v;
  size_t start = 0;
  const std::string& p = path.str();
  while (true) {
    size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? get_item(cur, Value::from_int(std::atoll(part.c_str()))) : get_item(cur, Value::from_string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Sort key comparison with jinja2's case_sensitive=False default (strings compared lowercased).
int compare_keys(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) {
    return compare_values(Value::from_string(py_lower(a.str())), Value::from_string(py_lower(b.str())));
  }
  return compare_values(a, b);
}

Value f_abs(const Value& v, CallArgs&) {
  if (v.is_float()) return Value::from_float(std::fabs(v.as_float()));
  if (v.is_number()) return unary_op(v.as_int() < 0 ? "-" : "+", v);
  throw_runtime("bad operand type for abs(): '" + type_name(v) + "'");
}
Value f_attr(const Value& v, CallArgs& a) { return get_attr(v, to_str(get_arg(a, 0, "name", kUndef))); }
Value f_capitalize(const Value& v, CallArgs&) { return str_value(py_capitalize(to_str(v))); }
Value f_lower(const Value& v, CallArgs&) { return str_value(py_lower(to_str(v))); }
Value f_upper(const Value& v, CallArgs&) { return str_value(py_upper(to_str(v))); }
Value f_title(const Value& v, CallArgs&) { return str_value(py_title(to_str(v))); }
Value f_string(const Value& v, CallArgs&) { return v.is_string() ? v : str_value(to_str(v)); }
Value f_safe(const Value& v, CallArgs&) { return v; }
Value f_pprint(const Value& v, CallArgs&) { return str_value(repr(v)); }
Value f_length(const Value& v, CallArgs&) { return Value::from_int(length(v)); }

Value f_default(const Value& v, CallArgs& a) {
  const Value& dflt = get_arg(a, 0, "default_value", Value::from_string(""));
  bool boolean = get_arg(a, 1, "boolean", kFalseV).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return dflt;
  return v;
}

Value f_trim(const Value& v, CallArgs& a) {
  const Value& chars = get_arg(a, 0, "chars", kNoneV);
  std::optional<std::string> set;
  if (!chars.is_none() && !chars.is_undefined()) set = to_str(chars);
  return str_value(py_strip(to_str(v), set, true, true));
}

Value f_replace(const Value& v, CallArgs& a) {
  const Value& count = get_arg(a, 2, "count", kNoneV);
  return str_value(py_replace(to_str(v), to_str(get_arg(a, 0, "old", kUndef)),
                              to_str(get_arg(a, 1, "new", kUndef)),
                              count.is_number() ? count.as_int() : -1));
}

Value f_escape(const Value& v, CallArgs&) {
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return str_value(std::move(out));
}

Value f_first(const Value& v, CallArgs&) {
  if (v.is_list()) return v.items().empty() ? Value::undefined("No first item, sequence was empty.") : v.items().front();
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, CallArgs&) {
  if (v.is_list()) return v.items().empty() ? Value::undefined("No last item, sequence was empty.") : v.items().back();
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_list(const Value& v, CallArgs&) {
  if (v.is_list() && !v.is_tuple()) return Value::list(v.items());
  return Value::list(iterate(v));
}

Value f_items(const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict() && !v.is_namespace()) throw_runtime("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.dict_items().entries) out.push_back(Value::tuple({Value::from_string(k), val}));
  return Value::list(std::move(out));
}

Value f_join(const Value& v, CallArgs& a) {
  std::string sep = to_str(get_arg(a, 0, "d", Value::from_string("")));
  const Value& attribute = get_arg(a, 1, "attribute", kNoneV);
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_none() ? item : attr_path(item, attribute));
    charge_bytes(static_cast<int64_t>(sep.size()));
  }
  return str_value(std::move(out));
}

Value f_int(const Value& v, CallArgs& a) {
  const Value& dflt = get_arg(a, 0, "default", Value::from_int(0));
  int base = static_cast<int>(get_arg(a, 1, "base", Value::from_int(10)).as_int());
  if (v.is_int() || v.is_bool()) return Value::from_int(v.as_int());
  if (v.is_float()) {
    double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return dflt;
    return Value::from_int(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str(), std::nullopt, true, true);
    std::string digits;
    for (char c : s) {
      if (c != '_') digits += c;
    }
    if (!digits.empty()) {
      char* end = nullptr;
      errno = 0;
      long long r = std::strtoll(digits.c_str(), &end, base < 2 || base > 36 ? 10 : base);
      if (errno == 0 && end && *end == '\0') return Value::from_int(r);
      double d = std::strtod(digits.c_str(), &end);
      if (end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::from_int(static_cast<int64_t>(d));
    }
  }
  return dflt;
}

Value f_float(const Value& v, CallArgs& a) {
  const Value& dflt = get_arg(a, 0, "default", Value::from_float(0.0));
  if (v.is_number()) return Value::from_float(v.as_float());
  if (v.is_string()) {
    std::string s = py_strip(v.str(), std::nullopt, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value::from_float(d);
  }
  return dflt;
}

Value f_round(const Value& v, CallArgs& a) {
  int64_t precision = get_arg(a, 0, "precision", Value::from_int(0)).as_int();
  std::string method = to_str(get_arg(a, 1, "method", Value::from_string("common")));
  if (!v.is_number()) throw_runtime("type " + type_name(v) + " doesn't define __round__ method");
  precision = std::clamp<int64_t>(precision, -300, 300);
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_float() * scale;
  double r;
  if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else if (method == "common") r = std::nearbyint(x);  // ties to even, as Python's round()
  else throw_runtime("method must be common, ceil or floor");
  return Value::from_float(r / scale);
}

Value f_reverse(const Value& v, CallArgs&) {
  if (v.is_string()) return slice(v, std::nullopt, std::nullopt, -1);
  ValueList items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_tojson(const Value& v, CallArgs& a) {
  JsonDumpOptions o;
  o.ensure_ascii = get_arg(a, 0, "ensure_ascii", kFalseV).truthy();
  const Value& indent = get_arg(a, 1, "indent", kNoneV);
  if (indent.is_string()) o.indent_str = indent.str(), o.indent = 0;
  else if (indent.is_number()) o.indent = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  const Value& seps = get_arg(a, 2, "separators", kNoneV);
  if (seps.is_list() && seps.items().size() == 2) {
    o.item_separator = to_str(seps.items()[0]);
    o.key_separator = to_str(seps.items()[1]);
  }
  o.sort_keys = get_arg(a, 3, "sort_keys", kFalseV).truthy();
  return str_value(to_json(v, o));
}

Value f_indent(const Value& v, CallArgs& a) {
  const Value& width = get_arg(a, 0, "width", Value::from_int(4));
  bool first = get_arg(a, 1, "first", kFalseV).truthy();
  bool blank = get_arg(a, 2, "blank", kFalseV).truthy();
  std::string ind = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 256)), ' ');
  std::vector<std::string> lines = py_splitlines(to_str(v) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += ind;
    }
    out += lines[i];
  }
  if (first) out = ind + out;
  return str_value(std::move(out));
}

Value f_wordcount(const Value& v, CallArgs&) {
  const std::string s = to_str(v);
  int64_t n = 0;
  bool in_word = false;
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = decode_utf8(s, i);
    bool word = (cp < 0x80) ? (std::isalnum(static_cast<int>(cp)) || cp == '_') : !py_isspace(cp);
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value::from_int(n);
}

Value f_format(const Value& v, CallArgs& a) {
  return str_value(percent_format(to_str(v), Value::tuple(a.positional)));
}

Value f_map(const Value& v, CallArgs& a) {
  ValueList out;
  const Value& attribute = get_arg(a, 99, "attribute", kUndef);
  if (!attribute.is_undefined()) {
    const Value& dflt = get_arg(a, 99, "default", kUndef);
    for (const auto& item : iterate(v)) {
      Value x = attr_path(item, attribute);
      out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) throw_runtime("map requires a filter name or attribute=");
  std::string name = to_str(a.positional[0]);
  FilterFn fn = find_filter(name);
  if (!fn) throw_runtime("No filter named '" + name + "'.");
  CallArgs rest{ValueList(a.positional.begin() + 1, a.positional.end()), a.kwargs};
  for (const auto& item : iterate(v)) {
    CallArgs copy = rest;
    out.push_back(fn(item, copy));
  }
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr share one implementation.
Value select_impl(const Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t first = by_attr ? 1 : 0;
  Value attribute = by_attr ? get_arg(a, 0, "attr", kUndef) : kUndef;
  TestFn test = nullptr;
  if (a.positional.size() > first) {
    std::string name = to_str(a.positional[first]);
    test = find_test(name);
    if (!test) throw_runtime("No test named '" + name + "'.");
  }
  CallArgs rest{ValueList(a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(a.positional.size(), first + 1)), a.positional.end()), {}};
  ValueList out;
  for (const auto& item : iterate(v)) {
    Value x = by_attr ? attr_path(item, attribute) : item;
    CallArgs copy = rest;
    bool ok = test ? test(x, copy) : x.truthy();
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, false); }

Value f_sort(const Value& v, CallArgs& a) {
  bool reverse = get_arg(a, 0, "reverse", kFalseV).truthy();
  bool cs = get_arg(a, 1, "case_sensitive", kFalseV).truthy();
  const Value& attribute = get_arg(a, 2, "attribute", kNoneV);
  ValueList items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(attribute.is_none() ? item : attr_path(item, attribute), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    int c = compare_keys(x.first, y.first, cs);
    return reverse ? c > 0 : c < 0;
  });
  ValueList out;
  for (auto& [k, item] : keyed) out.push_back(item);
  return Value::list(std::move(out));
}

Value f_dictsort(const Value& v, CallArgs& a) {
  bool cs = get_arg(a, 0, "case_sensitive", kFalseV).truthy();
  std::string by = to_str(get_arg(a, 1, "by", Value::from_string("key")));
  bool reverse = get_arg(a, 2, "reverse", kFalseV).truthy();
  CallArgs none;
  Value pairs = f_items(v, none);
  ValueList items = pairs.items();
  size_t idx = by == "value" ? 1 : 0;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    int c = compare_keys(x.items()[idx], y.items()[idx], cs);
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}

Value f_unique(const Value& v, CallArgs& a) {
  bool cs = get_arg(a, 0, "case_sensitive", kFalseV).truthy();
  const Value& attribute = get_arg(a, 1, "attribute", kNoneV);
  ValueList out, seen;
  for (const auto& item : iterate(v)) {
    Value key = attribute.is_none() ? item : attr_path(item, attribute);
    if (!cs && key.is_string()) key = Value::from_string(py_lower(key.str()));
    bool dup = false;
    for (const auto& s : seen) dup = dup || values_equal(s, key);
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value minmax(const Value& v, CallArgs& a, bool want_max) {
  bool cs = get_arg(a, 0, "case_sensitive", kFalseV).truthy();
  const Value& attribute = get_arg(a, 1, "attribute", kNoneV);
  ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    Value x = attribute.is_none() ? items[i] : attr_path(items[i], attribute);
    Value b = attribute.is_none() ? items[best] : attr_path(items[best], attribute);
    int c = compare_keys(x, b, cs);
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}
Value f_max(const Value& v, CallArgs& a) { return minmax(v, a, true); }
Value f_min(const Value& v, CallArgs& a) { return minmax(v, a, false); }

Value f_sum(const Value& v, CallArgs& a) {
  const Value& attribute = get_arg(a, 0, "attribute", kNoneV);
  Value total = get_arg(a, 1, "start", Value::from_int(0));
  for (const auto& item : iterate(v)) total = binary_op("+", total, attribute.is_none() ? item : attr_path(item, attribute));
  return total;
}

Value f_batch(const Value& v, CallArgs& a) {
  int64_t n = get_arg(a, 0, "linecount", Value::from_int(1)).as_int();
  if (n <= 0) throw_runtime("batch size must be positive");
  const Value& fill = get_arg(a, 1, "fill_with", kNoneV);
  ValueList out, cur;
  for (const auto& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_none()) {
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_center(const Value& v, CallArgs& a) {
  std::string s = to_str(v);
  int64_t width = std::clamp<int64_t>(get_arg(a, 0, "width", Value::from_int(80)).as_int(), 0, 1 << 16);
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value::from_string(s);
  int64_t total = width - len;
  int64_t left = total / 2 + (total & width & 1);  // CPython's str.center rounding
  return str_value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
      {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
      {"float", f_float}, {"forceescape", f_escape}, {"format", f_format}, {"indent", f_indent},
      {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last},
      {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map},
      {"max", f_max}, {"min", f_min}, {"pprint", f_pprint}, {"reject", f_reject},
      {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
      {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr},
      {"sort", f_sort}, {"string", f_string}, {"sum", f_sum}, {"title", f_title},
      {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique}, {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return kFilters;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

}  // namespace ts::chat
