// Operations on Values with jinja2's semantics (sandboxed environment, default Undefined):
// attribute and item lookup, slicing, arithmetic, membership, iteration and the methods of
// str/dict/list that templates call (`s.strip()`, `d.items()`, ...). Every function throws
// JinjaError on a Python-level error (TypeError, UndefinedError, ...).
//
// Resource use is charged to a per-thread RenderBudget (set by the interpreter for the length of
// one render) so that a hostile template cannot build unbounded strings or lists.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "chat/value.h"

namespace ts::chat {

// Per-render limits on what values may grow to. Installed with BudgetScope.
struct RenderBudget {
  int64_t max_bytes = 256 << 20;    // total bytes of strings/list slots a render may create
  int64_t max_items = 1 << 20;      // largest list one operation may produce
  int64_t bytes_used = 0;
};

// Installs `budget` for the current thread until destroyed (RAII, nests).
class BudgetScope {
 public:
  explicit BudgetScope(RenderBudget* budget);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  RenderBudget* previous_;
};

// Charges `bytes` to the current budget; throws a kLimit JinjaError when exhausted.
void charge_bytes(int64_t bytes);
// Throws a kLimit JinjaError when a list of `n` items would be too large.
void check_items(int64_t n);

// `obj.name`: attributes/methods first, then keys (jinja2's getattr).
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: keys/indexes first, then attributes (jinja2's getitem).
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` on str/list/tuple; unset bounds are std::nullopt.
Value slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
            std::optional<int64_t> step);

// Binary operators: "+", "-", "*", "/", "//", "%", "**", "~".
Value binary_op(const std::string& op, const Value& a, const Value& b);
// Unary "-" and "+".
Value unary_op(const std::string& op, const Value& a);
// `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);

// Items a for-loop visits: list items, dict keys, string characters; Undefined gives none.
ValueList iterate(const Value& v);
// len(): code points for strings; 0 for Undefined.
int64_t length(const Value& v);

// Python's str % args (subset: %s %r %d %i %f %x %% with optional width/precision).
std::string percent_format(const std::string& fmt, const Value& args);

// Throws UndefinedError-style JinjaError if `v` is Undefined (for operations that need a value).
void require_defined(const Value& v);

}  // namespace ts::chat
