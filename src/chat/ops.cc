#include "chat/ops.h"

#include <cmath>
#include <cstdio>

#include "chat/strings.h"

namespace ts::chat {

namespace {

thread_local RenderBudget* g_budget = nullptr;

[[noreturn]] void throw_limit(const std::string& what) {
  throw JinjaError(ErrorKind::kLimit, what);
}

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw_runtime("integer overflow");
  return r;
}
int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) throw_runtime("integer overflow");
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw_runtime("integer overflow");
  return r;
}

// Python's short type name ("int", "str", "NoneType").
std::string short_type(const Value& v) {
  std::string t = type_name(v);
  return v.is_undefined() ? "Undefined" : t.substr(0, t.find(' '));
}

std::string op_type_error(const std::string& op, const Value& a, const Value& b) {
  return "unsupported operand type(s) for " + op + ": '" + short_type(a) + "' and '" +
         short_type(b) + "'";
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    int64_t total = static_cast<int64_t>(seq.str().size()) * n;
    if (n > 0 && total / n != static_cast<int64_t>(seq.str().size())) throw_limit("string too large");
    charge_bytes(total);
    std::string out;
    out.reserve(static_cast<size_t>(total));
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::from_string(std::move(out));
  }
  int64_t total = static_cast<int64_t>(seq.items().size()) * n;
  check_items(total);
  charge_bytes(total * static_cast<int64_t>(sizeof(Value)));
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw_runtime("integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) throw_runtime("integer overflow");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == 0) throw_runtime("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Normalizes a Python index against `n`; returns false when out of range.
bool norm_index(int64_t& i, int64_t n) {
  if (i < 0) i += n;
  return i >= 0 && i < n;
}

Value bound(const std::string& name, NativeFn fn) { return Value::callable(name, std::move(fn)); }

const Value& arg(CallArgs& a, size_t i, const char* kw, const Value& fallback) {
  if (i < a.positional.size()) return a.positional[i];
  for (auto& [k, v] : a.kwargs) {
    if (k == kw) return v;
  }
  return fallback;
}

std::string str_arg(CallArgs& a, size_t i, const char* kw, const char* method) {
  static const Value kUndef;
  const Value& v = arg(a, i, kw, kUndef);
  if (!v.is_string()) throw_runtime(std::string(method) + "() argument must be str, not " + type_name(v));
  return v.str();
}

Value string_method(const Value& self, const std::string& name) {
  const std::string s = self.str();
  static const Value kNone = Value::none();
  auto chars_arg = [](CallArgs& a) -> std::optional<std::string> {
    const Value& c = arg(a, 0, "chars", kNone);
    if (c.is_none() || c.is_undefined()) return std::nullopt;
    return to_str(c);
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    return bound(name, [s, left, right, chars_arg](CallArgs& a) {
      return Value::from_string(py_strip(s, chars_arg(a), left, right));
    });
  }
  if (name == "upper") return bound(name, [s](CallArgs&) { return Value::from_string(py_upper(s)); });
  if (name == "lower") return bound(name, [s](CallArgs&) { return Value::from_string(py_lower(s)); });
  if (name == "title") return bound(name, [s](CallArgs&) { return Value::from_string(py_title(s)); });
  if (name == "capitalize") {
    return bound(name, [s](CallArgs&) { return Value::from_string(py_capitalize(s)); });
  }
  if (name == "startswith" || name == "endswith") {
    bool starts = name == "startswith";
    return bound(name, [s, starts](CallArgs& a) {
      static const Value kU;
      const Value& p = arg(a, 0, "prefix", kU);
      auto test = [&](const std::string& x) {
        if (x.size() > s.size()) return false;
        return starts ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
      };
      if (p.is_string()) return Value::from_bool(test(p.str()));
      if (p.is_list()) {
        for (const auto& x : p.items()) {
          if (x.is_string() && test(x.str())) return Value::from_bool(true);
        }
        return Value::from_bool(false);
      }
      throw_runtime(std::string(starts ? "startswith" : "endswith") +
                    " first arg must be str or a tuple of str, not " + type_name(p));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool from_right = name == "rsplit";
    return bound(name, [s, from_right](CallArgs& a) {
      static const Value kN = Value::none();
      static const Value kMinus1 = Value::from_int(-1);
      const Value& sep = arg(a, 0, "sep", kN);
      const Value& maxv = arg(a, 1, "maxsplit", kMinus1);
      int64_t maxsplit = maxv.is_number() ? maxv.as_int() : -1;
      std::optional<std::string> sep_s;
      if (!sep.is_none() && !sep.is_undefined()) {
        if (!sep.is_string()) throw_runtime("must be str or None, not " + type_name(sep));
        if (sep.str().empty()) throw_runtime("empty separator");
        sep_s = sep.str();
      }
      ValueList out;
      for (auto& piece : py_split(s, sep_s, maxsplit, from_right)) {
        out.push_back(Value::from_string(std::move(piece)));
      }
      check_items(static_cast<int64_t>(out.size()));
      return Value::list(std::move(out));
    });
  }
  if (name == "splitlines") {
    return bound(name, [s](CallArgs&) {
      ValueList out;
      for (auto& piece : py_splitlines(s)) out.push_back(Value::from_string(std::move(piece)));
      return Value::list(std::move(out));
    });
  }
  if (name == "replace") {
    return bound(name, [s](CallArgs& a) {
      static const Value kMinus1 = Value::from_int(-1);
      std::string old_s = str_arg(a, 0, "old", "replace");
      std::string new_s = str_arg(a, 1, "new", "replace");
      const Value& c = arg(a, 2, "count", kMinus1);
      std::string out = py_replace(s, old_s, new_s, c.is_number() ? c.as_int() : -1);
      charge_bytes(static_cast<int64_t>(out.size()));
      return Value::from_string(std::move(out));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    return bound(name, [s, name](CallArgs& a) {
      std::string sub = str_arg(a, 0, "sub", name.c_str());
      if (name == "count") {
        if (sub.empty()) return Value::from_int(static_cast<int64_t>(utf8_length(s)) + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value::from_int(n);
      }
      size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (name == "index") throw_runtime("substring not found");
        return Value::from_int(-1);
      }
      return Value::from_int(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, p))));
    });
  }
  if (name == "join") {
    return bound(name, [s](CallArgs& a) {
      static const Value kU;
      std::string out;
      bool first = true;
      for (const auto& item : iterate(arg(a, 0, "iterable", kU))) {
        if (!item.is_string()) throw_runtime("sequence item: expected str instance, " + type_name(item) + " found");
        if (!first) out += s;
        first = false;
        out += item.str();
      }
      charge_bytes(static_cast<int64_t>(out.size()));
      return Value::from_string(std::move(out));
    });
  }
  if (name == "format") {
    return bound(name, [s](CallArgs& a) {
      std::string out = brace_format(s, a);
      charge_bytes(static_cast<int64_t>(out.size()));
      return Value::from_string(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "islower" ||
      name == "isupper" || name == "isalnum") {
    return bound(name, [s, name](CallArgs&) { return Value::from_bool(py_is(s, name)); });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return bound(name, [self, name](CallArgs&) {
      ValueList out;
      for (const auto& [k, v] : self.dict_items().entries) {
        if (name == "items") out.push_back(Value::tuple({Value::from_string(k), v}));
        else if (name == "keys") out.push_back(Value::from_string(k));
        else out.push_back(v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return bound(name, [self](CallArgs& a) {
      static const Value kN = Value::none();
      static const Value kU;
      const Value& key = arg(a, 0, "key", kU);
      if (key.is_string()) {
        if (const Value* v = self.dict_items().find(key.str())) return *v;
      }
      return arg(a, 1, "default", kN);
    });
  }
  if (name == "copy") {
    return bound(name, [self](CallArgs&) { return Value::dict(self.dict_items()); });
  }
  return Value();  // not a method: caller falls back to the key
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "append") {
    return bound(name, [self](CallArgs& a) {
      static const Value kU;
      check_items(static_cast<int64_t>(self.items().size()) + 1);
      charge_bytes(sizeof(Value));
      const Value& item = arg(a, 0, "object", kU);
      if (reaches(item, self.identity())) throw_runtime("cannot append a list to itself");
      self.items().push_back(item);
      return Value::none();
    });
  }
  if (name == "pop") {
    return bound(name, [self](CallArgs& a) {
      static const Value kMinus1 = Value::from_int(-1);
      int64_t i = arg(a, 0, "index", kMinus1).as_int();
      auto& items = self.items();
      if (!norm_index(i, static_cast<int64_t>(items.size()))) throw_runtime("pop index out of range");
      Value v = items[static_cast<size_t>(i)];
      items.erase(items.begin() + i);
      return v;
    });
  }
  if (name == "index" || name == "count") {
    return bound(name, [self, name](CallArgs& a) {
      static const Value kU;
      const Value& x = arg(a, 0, "value", kU);
      int64_t n = 0;
      const auto& items = self.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (values_equal(items[i], x)) {
          if (name == "index") return Value::from_int(static_cast<int64_t>(i));
          ++n;
        }
      }
      if (name == "index") throw_runtime(repr(x) + " is not in list");
      return Value::from_int(n);
    });
  }
  return Value::undefined("'" + type_name(self) + "' has no attribute '" + name + "'");
}

}  // namespace

BudgetScope::BudgetScope(RenderBudget* budget) : previous_(g_budget) { g_budget = budget; }
BudgetScope::~BudgetScope() { g_budget = previous_; }

void charge_bytes(int64_t bytes) {
  if (!g_budget) return;
  g_budget->bytes_used += bytes;
  if (g_budget->bytes_used > g_budget->max_bytes) {
    throw_limit("template exceeded its memory budget of " + std::to_string(g_budget->max_bytes) + " bytes");
  }
}

void check_items(int64_t n) {
  int64_t max_items = g_budget ? g_budget->max_items : (int64_t{1} << 20);
  if (n > max_items) throw_limit("list of " + std::to_string(n) + " items exceeds the limit of " + std::to_string(max_items));
}

void require_defined(const Value& v) {
  if (v.is_undefined()) throw_runtime(v.str().empty() ? "value is undefined" : v.str());
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: require_defined(obj); return obj;
    case Value::Kind::kString: return string_method(obj, name);
    case Value::Kind::kDict: {
      Value m = dict_method(obj, name);
      if (m.is_callable()) return m;
      if (const Value* v = obj.dict_items().find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::kNamespace: {
      if (const Value* v = obj.dict_items().find(name)) return *v;
      return Value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    case Value::Kind::kList: return list_method(obj, name);
    default: return Value::undefined("'" + type_name(obj) + "' has no attribute '" + name + "'");
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: require_defined(obj); return obj;
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      if (key.is_string()) {
        if (const Value* v = obj.dict_items().find(key.str())) return *v;
        if (obj.is_dict()) {
          Value m = dict_method(obj, key.str());
          if (m.is_callable()) return m;
        }
      }
      return Value::undefined("'" + type_name(obj) + "' has no attribute " + repr(key));
    case Value::Kind::kList:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        const auto& items = obj.items();
        if (norm_index(i, static_cast<int64_t>(items.size()))) return items[static_cast<size_t>(i)];
        return Value::undefined(type_name(obj) + " has no element " + std::to_string(key.as_int()));
      }
      if (key.is_string()) return get_attr(obj, key.str());
      return Value::undefined(type_name(obj) + " has no element " + repr(key));
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        auto offs = utf8_offsets(obj.str());
        int64_t i = key.as_int();
        int64_t n = static_cast<int64_t>(offs.size()) - 1;
        if (norm_index(i, n)) {
          return Value::from_string(obj.str().substr(offs[static_cast<size_t>(i)],
                                                     offs[static_cast<size_t>(i) + 1] - offs[static_cast<size_t>(i)]));
        }
        return Value::undefined("str object has no element " + std::to_string(key.as_int()));
      }
      if (key.is_string()) return get_attr(obj, key.str());
      return Value::undefined("str object has no element " + repr(key));
    default:
      return Value::undefined("'" + type_name(obj) + "' has no attribute " + repr(key));
  }
}

Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step_opt) {
  require_defined(obj);
  if (!obj.is_string() && !obj.is_list()) throw_runtime("'" + type_name(obj) + "' is not subscriptable");
  int64_t step = step_opt.value_or(1);
  if (step == 0) throw_runtime("slice step cannot be zero");
  std::vector<size_t> offs;
  int64_t n;
  if (obj.is_string()) {
    offs = utf8_offsets(obj.str());
    n = static_cast<int64_t>(offs.size()) - 1;
  } else {
    n = static_cast<int64_t>(obj.items().size());
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt_pos, int64_t dflt_neg) {
    if (!v) return step > 0 ? dflt_pos : dflt_neg;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t lo = adjust(start, 0, n - 1);
  int64_t hi = adjust(stop, n, -1);
  std::vector<int64_t> idx;
  if (step > 0) {
    for (int64_t i = lo; i < hi; i += step) idx.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += step) idx.push_back(i);
  }
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : idx) {
      out.append(obj.str(), offs[static_cast<size_t>(i)], offs[static_cast<size_t>(i) + 1] - offs[static_cast<size_t>(i)]);
    }
    charge_bytes(static_cast<int64_t>(out.size()));
    return Value::from_string(std::move(out));
  }
  ValueList out;
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(obj.items()[static_cast<size_t>(i)]);
  charge_bytes(static_cast<int64_t>(out.size() * sizeof(Value)));
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out = to_str(a) + to_str(b);
    charge_bytes(static_cast<int64_t>(out.size()));
    return Value::from_string(std::move(out));
  }
  require_defined(a);
  require_defined(b);
  bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Value::from_int(checked_add(a.as_int(), b.as_int()));
    if (nums) return Value::from_float(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      charge_bytes(static_cast<int64_t>(a.str().size() + b.str().size()));
      return Value::from_string(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      ValueList out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      check_items(static_cast<int64_t>(out.size()));
      charge_bytes(static_cast<int64_t>(out.size() * sizeof(Value)));
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string()) throw_runtime("can only concatenate str (not \"" + short_type(b) + "\") to str");
    throw_runtime(op_type_error(op, a, b));
  }
  if (op == "-") {
    if (ints) return Value::from_int(checked_sub(a.as_int(), b.as_int()));
    if (nums) return Value::from_float(a.as_float() - b.as_float());
    throw_runtime(op_type_error(op, a, b));
  }
  if (op == "*") {
    if (ints) return Value::from_int(checked_mul(a.as_int(), b.as_int()));
    if (nums) return Value::from_float(a.as_float() * b.as_float());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    throw_runtime(op_type_error(op, a, b));
  }
  if (op == "/") {
    if (!nums) throw_runtime(op_type_error(op, a, b));
    if (b.as_float() == 0) throw_runtime("division by zero");
    return Value::from_float(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (ints) return Value::from_int(floor_div(a.as_int(), b.as_int()));
    if (!nums) throw_runtime(op_type_error(op, a, b));
    if (b.as_float() == 0) throw_runtime("float floor division by zero");
    return Value::from_float(std::floor(a.as_float() / b.as_float()));
  }
  if (op == "%") {
    if (a.is_string()) {
      std::string out = percent_format(a.str(), b);
      charge_bytes(static_cast<int64_t>(out.size()));
      return Value::from_string(std::move(out));
    }
    if (ints) return Value::from_int(py_mod(a.as_int(), b.as_int()));
    if (!nums) throw_runtime(op_type_error(op, a, b));
    if (b.as_float() == 0) throw_runtime("float modulo");
    double r = std::fmod(a.as_float(), b.as_float());
    if (r != 0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
    return Value::from_float(r);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) {
        result = checked_mul(result, base);
        if (result == 0 || result == 1) break;
        if (result == -1) {
          result = (e % 2 == 1) ? -1 : 1;
          break;
        }
      }
      return Value::from_int(result);
    }
    if (!nums) throw_runtime(op_type_error(op, a, b));
    return Value::from_float(std::pow(a.as_float(), b.as_float()));
  }
  throw_runtime("unknown operator " + op);
}

Value unary_op(const std::string& op, const Value& a) {
  require_defined(a);
  if (!a.is_number()) throw_runtime("bad operand type for unary " + op + ": '" + type_name(a) + "'");
  if (op == "+") return a.is_float() ? a : Value::from_int(a.as_int());
  if (a.is_float()) return Value::from_float(-a.as_float());
  return Value::from_int(checked_sub(0, a.as_int()));
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!needle.is_string()) throw_runtime("'in <string>' requires string as left operand, not " + type_name(needle));
      return haystack.str().find(needle.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& x : haystack.items()) {
        if (values_equal(x, needle)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return needle.is_string() && haystack.dict_items().find(needle.str()) != nullptr;
    default: throw_runtime("argument of type '" + type_name(haystack) + "' is not iterable");
  }
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.items();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [k, val] : v.dict_items().entries) keys.push_back(Value::from_string(k));
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      auto offs = utf8_offsets(v.str());
      for (size_t i = 0; i + 1 < offs.size(); ++i) {
        chars.push_back(Value::from_string(v.str().substr(offs[i], offs[i + 1] - offs[i])));
      }
      return chars;
    }
    default: {
      std::string t = type_name(v);
      throw_runtime("'" + t.substr(0, t.find(' ')) + "' object is not iterable");
    }
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::kList: return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return static_cast<int64_t>(v.dict_items().entries.size());
    default: throw_runtime("object of type '" + type_name(v) + "' has no len()");
  }
}

namespace {

// One printf conversion, sized first so that a large width cannot overflow a buffer.
template <typename T>
std::string format_one(const std::string& spec, T value) {
  int n = std::snprintf(nullptr, 0, spec.c_str(), value);
  if (n < 0) throw_runtime("invalid format");
  charge_bytes(n);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), spec.c_str(), value);
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  ValueList list = args.is_tuple() ? args.items() : ValueList{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    std::string spec = "%";
    while (j < fmt.size() && std::string("-+ 0#.0123456789").find(fmt[j]) != std::string::npos) spec += fmt[j++];
    if (j >= fmt.size()) throw_runtime("incomplete format");
    char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= list.size()) throw_runtime("not enough arguments for format string");
    const Value& a = list[next++];
    switch (conv) {
      case 's': out += to_str(a); break;
      case 'r': out += repr(a); break;
      case 'd':
      case 'i':
      case 'x':
        if (!a.is_number()) throw_runtime("%" + std::string(1, conv) + " format: a number is required");
        out += format_one(spec + "ll" + (conv == 'x' ? "x" : "d"),
                          static_cast<long long>(a.is_float() ? static_cast<int64_t>(a.as_float()) : a.as_int()));
        break;
      case 'f':
        if (!a.is_number()) throw_runtime("%f format: a number is required");
        out += format_one(spec + "f", a.as_float());
        break;
      default: throw_runtime(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next < list.size() && args.is_tuple()) throw_runtime("not all arguments converted during string formatting");
  return out;
}

}  // namespace ts::chat
