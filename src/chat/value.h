// Values of the Jinja interpreter (src/chat), modelled on the Python objects jinja2 works with:
// Undefined, None, bool, int, float, str, list/tuple, dict (insertion-ordered), namespace and
// callables (macros, builtins, bound methods). Lists, dicts and namespaces are shared by
// reference like Python objects; everything else is a plain value.
//
// Errors inside the interpreter travel as JinjaError, an exception that never leaves ts_chat:
// the public entry points (chat_template.h) catch it and return a Status. Not thread-safe to
// mutate a shared list/dict from two threads; a render owns all values it creates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::chat {

// Why a render stopped. kRaised carries the template's own raise_exception() message.
enum class ErrorKind { kSyntax, kRuntime, kRaised, kLimit };

class JinjaError : public std::runtime_error {
 public:
  JinjaError(ErrorKind kind, std::string message, int line = 0, int column = 0)
      : std::runtime_error(message), kind_(kind), line_(line), column_(column) {}
  ErrorKind kind() const { return kind_; }
  int line() const { return line_; }      // 1-based; 0 when unknown
  int column() const { return column_; }  // 1-based; 0 when unknown

 private:
  ErrorKind kind_;
  int line_;
  int column_;
};

// Shorthand for a runtime error without a position (the evaluator adds one).
[[noreturn]] void throw_runtime(std::string message);

class Value;
using ValueList = std::vector<Value>;

// An insertion-ordered string-keyed map (Python dict order). Small, so lookups are linear.
struct ValueDict {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value value);
  bool erase(std::string_view key);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFn = std::function<Value(CallArgs&)>;

struct Callable {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable
  };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value from_bool(bool b);
  static Value from_int(int64_t i);
  static Value from_float(double f);
  static Value from_string(std::string s);
  static Value list(ValueList items = {});
  static Value tuple(ValueList items);
  static Value dict();
  static Value dict(ValueDict d);
  static Value make_namespace();
  static Value callable(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python Number
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return is_bool() ? (b_ ? 1 : 0) : i_; }  // bool or int
  double as_float() const { return is_float() ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return s_; }  // string value, or Undefined's hint
  ValueList& items() const { return *list_; }
  ValueDict& dict_items() const { return *dict_; }  // dict or namespace
  const Callable& fn() const { return *fn_; }
  // Identity of the shared object behind a list/dict/namespace/callable (for `is sameas`).
  const void* identity() const;

  bool truthy() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Callable> fn_;
};

// Python's str(): None -> "None", True -> "True", 1.0 -> "1.0", lists/dicts as repr, Undefined -> "".
std::string to_str(const Value& v);
// Python's repr(): strings quoted the way Python quotes them.
std::string repr(const Value& v);
// Python's float repr (shortest round trip, "1.0", "1e+20", "inf").
std::string python_float_repr(double d);
// jinja2-style type name for error messages: "dict object", "str object", "undefined".
std::string type_name(const Value& v);

// Python ==: numbers by value, containers deeply, dicts ignoring order.
bool values_equal(const Value& a, const Value& b);
// Python ordering (<0, 0, >0) for numbers, strings and lists; throws JinjaError otherwise.
int compare_values(const Value& a, const Value& b);

// True when `target` (a list/dict/namespace identity) is reachable from `v`; used to refuse
// reference cycles, which shared ownership could never free.
bool reaches(const Value& v, const void* target);

// JSON in: objects keep their key order; integers stay integers. Throws JinjaError when nested
// deeper than 512 levels.
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// Python json.dumps as transformers' tojson calls it.
struct JsonDumpOptions {
  int indent = -1;              // < 0: no newlines
  std::string indent_str;       // used instead of `indent` spaces when non-empty
  bool ensure_ascii = false;    // escape non-ASCII as \uXXXX
  std::optional<std::string> item_separator;  // default ", " (or "," with indent)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonDumpOptions& options);

// UTF-8 helpers: Python string operations work on code points.
// Byte offsets of each code point start, plus the total size as the last element.
std::vector<size_t> utf8_offsets(std::string_view s);
size_t utf8_length(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);
// Decodes one code point at s[i] (advancing i); invalid bytes decode as themselves.
uint32_t decode_utf8(std::string_view s, size_t& i);

}  // namespace ts::chat
