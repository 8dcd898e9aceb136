#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ts::chat {

void throw_runtime(std::string message) { throw JinjaError(ErrorKind::kRuntime, std::move(message)); }

namespace {

// Recursion guard for walks over nested values (repr, ==, ordering, JSON in): values built from
// JSON or by a template may be deeply nested, and the C++ stack must not be.
constexpr int kMaxValueDepth = 512;
// repr()/json.dumps of one value; shared sub-values could otherwise expand exponentially.
constexpr size_t kMaxTextBytes = size_t{64} << 20;

void check_text_size(const std::string& out) {
  if (out.size() > kMaxTextBytes) {
    throw JinjaError(ErrorKind::kLimit, "value too large to convert to text");
  }
}
thread_local int g_value_depth = 0;

struct ValueDepthGuard {
  ValueDepthGuard() {
    if (++g_value_depth > kMaxValueDepth) {
      --g_value_depth;
      throw_runtime("value nested more than " + std::to_string(kMaxValueDepth) + " levels deep");
    }
  }
  ~ValueDepthGuard() { --g_value_depth; }
  ValueDepthGuard(const ValueDepthGuard&) = delete;
  ValueDepthGuard& operator=(const ValueDepthGuard&) = delete;
};

}  // namespace

namespace {

bool reaches_impl(const Value& v, const void* target, int64_t& budget) {
  if (!v.identity() || v.is_callable()) return false;
  if (v.identity() == target) return true;
  // Shared sub-values make the walk a DAG traversal; cap it instead of tracking visits.
  if (--budget < 0) throw JinjaError(ErrorKind::kLimit, "value graph too large to check for cycles");
  ValueDepthGuard guard;
  if (v.is_list()) {
    for (const auto& x : v.items()) {
      if (reaches_impl(x, target, budget)) return true;
    }
  } else {
    for (const auto& [k, x] : v.dict_items().entries) {
      if (reaches_impl(x, target, budget)) return true;
    }
  }
  return false;
}

}  // namespace

bool reaches(const Value& v, const void* target) {
  int64_t budget = 1 << 17;
  return reaches_impl(v, target, budget);
}

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* ValueDict::find(std::string_view key) {
  for (auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::set(const std::string& key, Value value) {
  if (Value* v = find(key)) {
    *v = std::move(value);
  } else {
    entries.emplace_back(key, std::move(value));
  }
}

bool ValueDict::erase(std::string_view key) {
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->first == key) {
      entries.erase(it);
      return true;
    }
  }
  return false;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::from_bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::from_int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::from_float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::from_string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}
Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::dict() { return dict(ValueDict{}); }
Value Value::dict(ValueDict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(d));
  return v;
}
Value Value::make_namespace() {
  Value v = dict();
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const void* Value::identity() const {
  if (list_) return list_.get();
  if (dict_) return dict_.get();
  if (fn_) return fn_.get();
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !s_.empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like "-1.2345e+02": split sign, digits and exponent.
  bool neg = sci[0] == '-';
  std::string body = neg ? sci.substr(1) : sci;
  size_t e = body.find('e');
  std::string mant = body.substr(0, e);
  int exp = std::stoi(body.substr(e + 1));
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {  // Python: repr uses fixed notation for -4 <= exp < 16
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {

std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

}  // namespace

std::string repr(const Value& v) {
  ValueDepthGuard guard;
  switch (v.kind()) {
    case Value::Kind::kString: return repr_string(v.str());
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += repr(items[i]);
        check_text_size(out);
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return out;
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict_items().entries) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + repr(val);
        check_text_size(out);
      }
      return out + "}";
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return python_float_repr(v.as_float());
    case Value::Kind::kString: return v.str();
    case Value::Kind::kList:
    case Value::Kind::kDict: return repr(v);
    case Value::Kind::kNamespace: return "<Namespace>";
    case Value::Kind::kCallable: return "<function " + v.fn().name + ">";
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "NoneType object";
    case Value::Kind::kBool: return "bool object";
    case Value::Kind::kInt: return "int object";
    case Value::Kind::kFloat: return "float object";
    case Value::Kind::kString: return "str object";
    case Value::Kind::kList: return v.is_tuple() ? "tuple object" : "list object";
    case Value::Kind::kDict: return "dict object";
    case Value::Kind::kNamespace: return "Namespace object";
    case Value::Kind::kCallable: return "function object";
  }
  return "object";
}

bool values_equal(const Value& a, const Value& b) {
  if (a.identity() && a.identity() == b.identity()) return true;  // Python's `is` shortcut
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  ValueDepthGuard guard;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const auto& x = a.dict_items().entries;
      const auto& y = b.dict_items();
      if (x.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = y.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

int compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    ValueDepthGuard guard;
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return compare_values(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw_runtime("'<' not supported between instances of '" + type_name(a) + "' and '" +
                type_name(b) + "'");
}

namespace {

template <typename J>
Value from_json_impl(const J& j) {
  ValueDepthGuard guard;
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::from_bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::from_int(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::from_float(static_cast<double>(u));
      return Value::from_int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::from_float(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::from_string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_impl(e));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      ValueDict d;
      d.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json_impl(it.value()));
      return Value::dict(std::move(d));
    }
    default: return Value::none();  // binary / discarded: not produced by JSON text
  }
}

void json_escape(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
            char b[8];
            std::snprintf(b, sizeof(b), "\\u%04x", c);
            out += b;
          } else {
            out += static_cast<char>(c);
          }
      }
      continue;
    }
    size_t start = i;
    uint32_t cp = decode_utf8(s, i);
    if (!ensure_ascii) {
      out.append(s.substr(start, i - start));
      continue;
    }
    char b[16];
    if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      std::snprintf(b, sizeof(b), "\\u%04x", cp);
    }
    out += b;
  }
  out += '"';
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  if (depth > 512) throw_runtime("tojson: value nested too deeply");
  bool pretty = o.indent >= 0 || !o.indent_str.empty();
  std::string unit = !o.indent_str.empty() ? o.indent_str : std::string(std::max(o.indent, 0), ' ');
  const std::string item_sep = o.item_separator.value_or(pretty ? "," : ", ");
  const std::string key_sep = o.key_separator.value_or(": ");
  auto newline = [&](int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += unit;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      double d = v.as_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += python_float_repr(d);
      return;
    }
    case Value::Kind::kString: json_escape(out, v.str(), o.ensure_ascii); return;
    case Value::Kind::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (pretty) newline(depth + 1);
        dump(out, items[i], o, depth + 1);
        check_text_size(out);
      }
      if (pretty) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.dict_items().entries) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        if (pretty) newline(depth + 1);
        json_escape(out, entries[i]->first, o.ensure_ascii);
        out += key_sep;
        dump(out, entries[i]->second, o, depth + 1);
        check_text_size(out);
      }
      if (pretty) newline(depth);
      out += '}';
      return;
    }
    default:
      throw_runtime("Object of type " +
                    (v.is_undefined() ? std::string("Undefined") : type_name(v).substr(0, type_name(v).find(' '))) +
                    " is not JSON serializable");
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j); }

std::string to_json(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  dump(out, v, options, 0);
  return out;
}

uint32_t decode_utf8(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int n = 0;
  uint32_t cp = c;
  if (c >= 0xF0 && c < 0xF8) {
    n = 3;
    cp = c & 0x07;
  } else if (c >= 0xE0) {
    n = c < 0xF0 ? 2 : 0;
    cp = c & 0x0F;
  } else if (c >= 0xC0) {
    n = 1;
    cp = c & 0x1F;
  }
  if (n == 0 || i + static_cast<size_t>(n) >= s.size()) {
    ++i;
    return c;
  }
  for (int k = 1; k <= n; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += n + 1;
  return cp;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offs;
  offs.reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    offs.push_back(i);
    decode_utf8(s, i);
  }
  offs.push_back(s.size());
  return offs;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0, i = 0;
  while (i < s.size()) {
    decode_utf8(s, i);
    ++n;
  }
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace ts::chat
