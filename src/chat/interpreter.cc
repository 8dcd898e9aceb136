#include "chat/interpreter.h"

#include "chat/builtins.h"

namespace ts::chat {

Interpreter::Interpreter(const InterpreterLimits& limits) : limits_(limits) {
  budget_.max_bytes = limits.max_value_bytes;
  budget_.max_items = limits.max_list_items;
}

Interpreter::DepthGuard::DepthGuard(Interpreter* in) : in_(in) {
  if (++in_->depth_ > in_->limits_.max_depth) {
    --in_->depth_;
    throw JinjaError(ErrorKind::kLimit, "template recursion deeper than " +
                                            std::to_string(in_->limits_.max_depth) + " levels");
  }
}
Interpreter::DepthGuard::~DepthGuard() { --in_->depth_; }

void Interpreter::step() {
  if (++steps_ > limits_.max_steps) {
    throw JinjaError(ErrorKind::kLimit, "template exceeded " + std::to_string(limits_.max_steps) +
                                            " evaluation steps");
  }
}

void Interpreter::emit(std::string& out, const std::string& text) {
  if (static_cast<int64_t>(out.size() + text.size()) > limits_.max_output_bytes) {
    throw JinjaError(ErrorKind::kLimit, "template output exceeds " +
                                            std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out += text;
}

std::string Interpreter::render(const Body& body, const ValueDict& globals) {
  BudgetScope budget_scope(&budget_);
  auto root = std::make_shared<Scope>();
  for (const auto& [k, v] : globals.entries) root->vars[k] = v;
  auto top = std::make_shared<Scope>();
  top->parent = root;
  std::string out;
  exec_body(body, top, out);
  // Macros capture their defining scope; break the cycle scope -> macro -> scope.
  top->vars.clear();
  return out;
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) const {
  for (const Scope* s = scope.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  step();
  DepthGuard guard(this);
  try {
    switch (s.kind) {
      case StmtKind::kText: emit(out, s.text); break;
      case StmtKind::kOutput: emit(out, to_str(eval(*s.expr, scope))); break;
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (eval(*cond, scope).truthy()) return exec_body(body, scope, out);
        }
        return exec_body(s.else_body, scope, out);
      case StmtKind::kFor: exec_for(s, scope, out); break;
      case StmtKind::kSet: exec_set(s, scope); break;
      case StmtKind::kMacro:
        scope->vars[s.text] = make_macro(s, s.params, s.body, scope, s.text);
        break;
      case StmtKind::kCallBlock: {
        Value caller = make_macro(s, s.params, s.body, scope, "caller");
        const Expr& call = *s.expr;
        Value callee = eval(*call.children[0], scope);
        CallArgs args = eval_args(call, scope, 1);
        args.kwargs.emplace_back("caller", caller);
        if (!callee.is_callable()) throw_runtime("'" + type_name(callee) + "' is not callable");
        Value result = callee.fn().fn(args);
        emit(out, to_str(result));
        break;
      }
      case StmtKind::kFilterBlock: {
        std::string inner;
        exec_body(s.body, scope, inner);
        Value subject = Value::from_string(std::move(inner));
        emit(out, to_str(eval_filter(*s.expr, scope, &subject)));
        break;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
    }
  } catch (const JinjaError& e) {
    if (e.line() == 0) throw JinjaError(e.kind(), e.what(), s.line, s.column);
    throw;
  }
  return Flow::kNormal;
}

void Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  if (s.recursive) throw_runtime("recursive loops are not supported");
  Value iterable = eval(*s.expr, scope);
  ValueList items = iterate(iterable);
  auto bind = [&](Scope& target, const Value& item) {
    if (s.targets.size() == 1) {
      target.vars[s.targets[0]] = item;
      return;
    }
    ValueList parts = iterate(item);
    if (parts.size() != s.targets.size()) {
      throw_runtime("too " + std::string(parts.size() < s.targets.size() ? "few" : "many") +
                    " values to unpack (expected " + std::to_string(s.targets.size()) + ")");
    }
    for (size_t i = 0; i < parts.size(); ++i) target.vars[s.targets[i]] = parts[i];
  };
  if (s.cond) {
    ValueList kept;
    for (const auto& item : items) {
      step();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      bind(*probe, item);
      if (eval(*s.cond, probe).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body, scope, out);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    step();
    auto iter_scope = std::make_shared<Scope>();
    iter_scope->parent = scope;
    bind(*iter_scope, items[static_cast<size_t>(i)]);
    ValueDict loop;
    loop.set("index", Value::from_int(i + 1));
    loop.set("index0", Value::from_int(i));
    loop.set("revindex", Value::from_int(n - i));
    loop.set("revindex0", Value::from_int(n - i - 1));
    loop.set("first", Value::from_bool(i == 0));
    loop.set("last", Value::from_bool(i == n - 1));
    loop.set("length", Value::from_int(n));
    loop.set("depth", Value::from_int(1));
    loop.set("depth0", Value::from_int(0));
    if (i > 0) loop.set("previtem", items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) loop.set("nextitem", items[static_cast<size_t>(i + 1)]);
    loop.set("cycle", Value::callable("cycle", [i](CallArgs& a) {
      if (a.positional.empty()) throw_runtime("no items for cycling given");
      return a.positional[static_cast<size_t>(i) % a.positional.size()];
    }));
    iter_scope->vars["loop"] = Value::dict(std::move(loop));
    Flow f = exec_body(s.body, iter_scope, out);
    if (f == Flow::kBreak) break;
  }
}

void Interpreter::exec_set(const Stmt& s, const ScopePtr& scope) {
  Value value;
  if (s.expr) {
    value = eval(*s.expr, scope);
  } else {
    std::string inner;
    exec_body(s.body, scope, inner);
    value = Value::from_string(std::move(inner));
  }
  if (!s.attr.empty()) {
    Value ns = lookup(s.targets[0], scope);
    if (!ns.is_namespace()) throw_runtime("cannot assign attribute on non-namespace object");
    if (reaches(value, ns.identity())) throw_runtime("cannot store a namespace inside itself");
    ns.dict_items().set(s.attr, std::move(value));
    return;
  }
  if (s.targets.size() == 1) {
    scope->vars[s.targets[0]] = std::move(value);
    return;
  }
  ValueList parts = iterate(value);
  if (parts.size() != s.targets.size()) {
    throw_runtime("cannot unpack " + std::to_string(parts.size()) + " values into " +
                  std::to_string(s.targets.size()) + " names");
  }
  for (size_t i = 0; i < parts.size(); ++i) scope->vars[s.targets[i]] = parts[i];
}

Value Interpreter::make_macro(const Stmt& s, const std::vector<MacroParam>& params,
                              const Body& body, const ScopePtr& closure, const std::string& name) {
  // The closure is held weakly: the defining scope owns the macro, not the other way round.
  std::weak_ptr<Scope> weak = closure;
  return Value::callable(name, [this, &params, &body, weak, name](CallArgs& args) {
    ScopePtr parent = weak.lock();
    if (!parent) throw_runtime("macro '" + name + "' called after its scope ended");
    DepthGuard guard(this);
    auto frame = std::make_shared<Scope>();
    frame->parent = parent;
    ValueList varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        frame->vars[params[i].name] = args.positional[i];
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    ValueDict extra;
    for (auto& [k, v] : args.kwargs) {
      bool is_param = false;
      for (const auto& p : params) is_param = is_param || p.name == k;
      if (is_param || k == "caller") {
        frame->vars[k] = v;
      } else {
        extra.set(k, v);
      }
    }
    for (const auto& p : params) {
      if (frame->vars.count(p.name)) continue;
      frame->vars[p.name] = p.default_value ? eval(*p.default_value, frame)
                                            : Value::undefined("parameter '" + p.name + "' was not provided");
    }
    frame->vars["varargs"] = Value::list(std::move(varargs));
    frame->vars["kwargs"] = Value::dict(std::move(extra));
    std::string out;
    exec_body(body, frame, out);
    charge_bytes(static_cast<int64_t>(out.size()));
    return Value::from_string(std::move(out));
  });
}

CallArgs Interpreter::eval_args(const Expr& e, const ScopePtr& scope, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.children.size(); ++i) args.positional.push_back(eval(*e.children[i], scope));
  for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v, scope));
  return args;
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  step();
  DepthGuard guard(this);
  try {
    return eval_inner(e, scope);
  } catch (const JinjaError& err) {
    if (err.line() == 0) throw JinjaError(err.kind(), err.what(), e.line, e.column);
    throw;
  }
}

Value Interpreter::eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_subject) {
  Value subject = e.children[0] ? (e.children[0]->kind == ExprKind::kFilter && block_subject
                                       ? eval_filter(*e.children[0], scope, block_subject)
                                       : eval(*e.children[0], scope))
                                : *block_subject;
  FilterFn fn = find_filter(e.name);
  if (!fn) throw JinjaError(ErrorKind::kRuntime, "No filter named '" + e.name + "'.", e.line, e.column);
  CallArgs args = eval_args(e, scope, 1);
  return fn(subject, args);
}

Value Interpreter::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.children[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.children[i + 1], scope);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") ok = values_equal(left, right);
    else if (op == "!=") ok = !values_equal(left, right);
    else if (op == "in") ok = contains(right, left);
    else if (op == "not in") ok = !contains(right, left);
    else {
      require_defined(left);
      require_defined(right);
      int c = compare_values(left, right);
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value::from_bool(false);
    left = std::move(right);
  }
  return Value::from_bool(true);
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: return lookup(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const auto& c : e.children) items.push_back(eval(*c, scope));
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      ValueDict d;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value k = eval(*e.children[i], scope);
        if (!k.is_string()) throw_runtime("only string keys are supported in dict literals");
        d.set(k.str(), eval(*e.children[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr: return get_attr(eval(*e.children[0], scope), e.name);
    case ExprKind::kGetItem: return get_item(eval(*e.children[0], scope), eval(*e.children[1], scope));
    case ExprKind::kSlice: {
      Value obj = eval(*e.children[0], scope);
      std::optional<int64_t> bounds[3];
      for (int i = 0; i < 3; ++i) {
        if (!e.children[i + 1]) continue;
        Value b = eval(*e.children[i + 1], scope);
        if (b.is_none()) continue;
        if (!b.is_int() && !b.is_bool()) throw_runtime("slice indices must be integers or None");
        bounds[i] = b.as_int();
      }
      return slice(obj, bounds[0], bounds[1], bounds[2]);
    }
    case ExprKind::kCall: {
      Value callee = eval(*e.children[0], scope);
      CallArgs args = eval_args(e, scope, 1);
      if (callee.is_undefined()) require_defined(callee);
      if (!callee.is_callable()) throw_runtime("'" + type_name(callee) + "' is not callable");
      return callee.fn().fn(args);
    }
    case ExprKind::kFilter: return eval_filter(e, scope, nullptr);
    case ExprKind::kTest: {
      Value subject = eval(*e.children[0], scope);
      TestFn fn = find_test(e.name);
      if (!fn) throw_runtime("No test named '" + e.name + "'.");
      CallArgs args = eval_args(e, scope, 1);
      return Value::from_bool(fn(subject, args) != e.negated);
    }
    case ExprKind::kUnary: {
      Value v = eval(*e.children[0], scope);
      if (e.name == "not") return Value::from_bool(!v.truthy());
      return unary_op(e.name, v);
    }
    case ExprKind::kBinary:
      return binary_op(e.name, eval(*e.children[0], scope), eval(*e.children[1], scope));
    case ExprKind::kAnd: {
      Value a = eval(*e.children[0], scope);
      return a.truthy() ? eval(*e.children[1], scope) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.children[0], scope);
      return a.truthy() ? a : eval(*e.children[1], scope);
    }
    case ExprKind::kCompare: return eval_compare(e, scope);
    case ExprKind::kTernary:
      if (eval(*e.children[1], scope).truthy()) return eval(*e.children[0], scope);
      return e.children[2] ? eval(*e.children[2], scope) : Value::undefined("conditional has no else");
  }
  throw_runtime("unknown expression");
}

}  // namespace ts::chat
