// Jinja tests and global functions (see builtins.h).
#include "chat/builtins.h"

#include <cmath>
#include <memory>
#include <unordered_map>

#include "chat/ops.h"
#include "chat/strings.h"

namespace ts::chat {

const Value& get_arg(const CallArgs& args, size_t i, std::string_view name, const Value& fallback) {
  if (i < args.positional.size()) return args.positional[i];
  for (const auto& [k, v] : args.kwargs) {
    if (k == name) return v;
  }
  return fallback;
}

namespace {

const Value kUndef;

const Value& other(CallArgs& a) { return get_arg(a, 0, "other", kUndef); }

int64_t int_for_parity(const Value& v) {
  if (!v.is_int() && !v.is_bool()) {
    if (v.is_float()) return static_cast<int64_t>(v.as_float());
    throw_runtime("unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
  }
  return v.as_int();
}

bool t_defined(const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(const Value& v, CallArgs&) { return v.is_dict(); }
// Python's iter() succeeds on str, list, dict and jinja2's Undefined.
bool t_iterable(const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
// jinja2: len() and __getitem__ exist (Undefined has both).
bool t_sequence(const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_callable(const Value& v, CallArgs&) { return v.is_callable(); }
bool t_escaped(const Value&, CallArgs&) { return false; }
bool t_odd(const Value& v, CallArgs&) { return int_for_parity(v) % 2 != 0; }
bool t_even(const Value& v, CallArgs&) { return int_for_parity(v) % 2 == 0; }
bool t_divisibleby(const Value& v, CallArgs& a) {
  const Value& n = get_arg(a, 0, "num", kUndef);
  return binary_op("%", v, n).truthy() == false;
}
bool t_eq(const Value& v, CallArgs& a) { return values_equal(v, other(a)); }
bool t_ne(const Value& v, CallArgs& a) { return !values_equal(v, other(a)); }
bool t_lt(const Value& v, CallArgs& a) { return compare_values(v, other(a)) < 0; }
bool t_le(const Value& v, CallArgs& a) { return compare_values(v, other(a)) <= 0; }
bool t_gt(const Value& v, CallArgs& a) { return compare_values(v, other(a)) > 0; }
bool t_ge(const Value& v, CallArgs& a) { return compare_values(v, other(a)) >= 0; }
bool t_in(const Value& v, CallArgs& a) { return contains(get_arg(a, 0, "seq", kUndef), v); }
bool t_sameas(const Value& v, CallArgs& a) {
  const Value& o = other(a);
  if (v.identity() || o.identity()) return v.identity() == o.identity();
  if (v.kind() != o.kind()) return false;
  return values_equal(v, o);  // None/True/False/small values: Python singletons or interned
}
bool t_lower(const Value& v, CallArgs&) { return py_is(to_str(v), "islower"); }
bool t_upper(const Value& v, CallArgs&) { return py_is(to_str(v), "isupper"); }

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none},
      {"boolean", t_boolean}, {"true", t_true}, {"false", t_false}, {"integer", t_integer},
      {"float", t_float}, {"number", t_number}, {"string", t_string}, {"mapping", t_mapping},
      {"iterable", t_iterable}, {"sequence", t_sequence}, {"callable", t_callable},
      {"escaped", t_escaped}, {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby},
      {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne},
      {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
      {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge},
      {"in", t_in}, {"sameas", t_sameas}, {"lower", t_lower}, {"upper", t_upper},
  };
  return kTests;
}

Value g_range(CallArgs& a) {
  int64_t start = 0, stop = 0, step = 1;
  for (const auto& v : a.positional) {
    if (!v.is_int() && !v.is_bool()) throw_runtime("'" + type_name(v) + "' object cannot be interpreted as an integer");
  }
  switch (a.positional.size()) {
    case 1: stop = a.positional[0].as_int(); break;
    case 2: start = a.positional[0].as_int(); stop = a.positional[1].as_int(); break;
    case 3:
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
      step = a.positional[2].as_int();
      break;
    default: throw_runtime("range expected 1 to 3 arguments, got " + std::to_string(a.positional.size()));
  }
  if (step == 0) throw_runtime("range() arg 3 must not be zero");
  // Count in floating point first so that huge spans are refused before any overflow.
  double span = (static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step);
  if (span > static_cast<double>(int64_t{1} << 40)) check_items(int64_t{1} << 40);
  int64_t n = span <= 0 ? 0 : static_cast<int64_t>(std::ceil(span));
  check_items(n);
  ValueList out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(Value::from_int(start + i * step));
  charge_bytes(n * static_cast<int64_t>(sizeof(Value)));
  return Value::list(std::move(out));
}

Value g_namespace(CallArgs& a) {
  Value ns = Value::make_namespace();
  for (const auto& p : a.positional) {
    if (!p.is_dict()) throw_runtime("namespace() positional argument must be a mapping");
    for (const auto& [k, v] : p.dict_items().entries) ns.dict_items().set(k, v);
  }
  for (const auto& [k, v] : a.kwargs) ns.dict_items().set(k, v);
  return ns;
}

Value g_dict(CallArgs& a) {
  Value d = Value::dict();
  for (const auto& p : a.positional) {
    if (!p.is_dict()) throw_runtime("dict() positional argument must be a mapping");
    for (const auto& [k, v] : p.dict_items().entries) d.dict_items().set(k, v);
  }
  for (const auto& [k, v] : a.kwargs) d.dict_items().set(k, v);
  return d;
}

Value g_raise_exception(CallArgs& a) {
  throw JinjaError(ErrorKind::kRaised, to_str(get_arg(a, 0, "message", kUndef)));
}

Value g_joiner(CallArgs& a) {
  std::string sep = to_str(get_arg(a, 0, "sep", Value::from_string(", ")));
  auto used = std::make_shared<bool>(false);
  return Value::callable("joiner", [sep, used](CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::from_string("");
    }
    return Value::from_string(sep);
  });
}

}  // namespace

TestFn find_test(std::string_view name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

void add_builtin_globals(ValueDict& globals) {
  globals.set("range", Value::callable("range", g_range));
  globals.set("namespace", Value::callable("namespace", g_namespace));
  globals.set("dict", Value::callable("dict", g_dict));
  globals.set("raise_exception", Value::callable("raise_exception", g_raise_exception));
  globals.set("joiner", Value::callable("joiner", g_joiner));
}

}  // namespace ts::chat
