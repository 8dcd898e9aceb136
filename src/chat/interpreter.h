// Tree-walking evaluator for parsed Jinja templates (ast.h), with jinja2's scoping rules:
// `if` shares its scope, each for-loop iteration and each macro call gets a child scope (so a
// `set` inside a loop does not leak out; namespaces are the way to carry state), top-level
// `set` writes the template scope.
//
// One Interpreter renders one template once; it is not thread-safe and not reusable across
// threads, but many Interpreters may render the same Body concurrently. All limits below turn
// a hostile template into a kLimit JinjaError instead of a hang, a huge allocation or a stack
// overflow.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "chat/ast.h"
#include "chat/ops.h"
#include "chat/value.h"

namespace ts::chat {

struct InterpreterLimits {
  int64_t max_output_bytes = 16 << 20;   // rendered text (and any macro/set block buffer)
  int64_t max_steps = 2'000'000;         // expression/statement evaluations, loop iterations
  int max_depth = 400;                   // nested evaluation frames incl. macro recursion
  int64_t max_value_bytes = 256 << 20;   // bytes of strings/lists a render may create
  int64_t max_list_items = 1 << 20;      // largest list one operation may produce
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  explicit Interpreter(const InterpreterLimits& limits);

  // Renders `body` with `globals` (builtins + context variables) visible. Throws JinjaError.
  std::string render(const Body& body, const ValueDict& globals);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_set(const Stmt& s, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_compare(const Expr& e, const ScopePtr& scope);
  Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_subject);
  CallArgs eval_args(const Expr& e, const ScopePtr& scope, size_t first);
  Value make_macro(const Stmt& s, const std::vector<MacroParam>& params, const Body& body,
                   const ScopePtr& closure, const std::string& name);

  Value lookup(const std::string& name, const ScopePtr& scope) const;
  void emit(std::string& out, const std::string& text);
  void step();

  struct DepthGuard {
    explicit DepthGuard(Interpreter* in);
    ~DepthGuard();
    Interpreter* in_;
  };

  InterpreterLimits limits_;
  RenderBudget budget_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace ts::chat
