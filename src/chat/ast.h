// Syntax tree of a parsed Jinja template. Immutable after parsing, so one parsed template may be
// rendered from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace ts::chat {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,  // literal
  kName,     // name
  kList,     // children = items
  kTuple,    // children = items
  kDict,     // children = key, value, key, value, ...
  kGetAttr,  // children[0].name
  kGetItem,  // children[0][children[1]]
  kSlice,    // children[0][a:b:c]; children[1..3] may be null
  kCall,     // children[0](children[1..], kwargs)
  kFilter,   // children[0] | name(children[1..], kwargs); children[0] null in a filter block
  kTest,     // children[0] is [not] name(children[1..], kwargs)
  kUnary,    // name = "not", "-", "+"
  kBinary,   // name = "+", "-", "*", "/", "//", "%", "**", "~"
  kAnd,
  kOr,
  kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ...
  kTernary,  // children = then, cond, else (else may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  bool negated = false;  // `is not`
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
};

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches (cond, body)...; else_body
  kFor,       // targets in expr [if cond] body [else else_body]
  kSet,       // targets = expr | {% set x %}body{% endset %} | set ns.attr = expr (attr)
  kMacro,     // name(params) body
  kCallBlock, // {% call(params) expr %}body{% endcall %}
  kFilterBlock,  // {% filter expr %}body{% endfilter %}; expr is a kFilter chain with null subject
  kBreak,
  kContinue,
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  int column = 0;
  std::string text;                  // kText; kMacro name
  ExprPtr expr;                      // kOutput, kFor iterable, kSet value, kCallBlock call, kFilterBlock
  ExprPtr cond;                      // kFor inline `if`
  std::vector<std::string> targets;  // kFor/kSet names
  std::string attr;                  // kSet `ns.attr` (targets[0] = ns)
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;
  Body else_body;
  std::vector<MacroParam> params;  // kMacro, kCallBlock
  bool recursive = false;          // kFor `recursive`
};

}  // namespace ts::chat
