#include "chat/parser.h"

#include <algorithm>
#include <initializer_list>

namespace ts::chat {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse() {
    std::string found;
    Body body = parse_body({}, &found);
    return body;
  }

 private:
  // --- token helpers -------------------------------------------------------------------------
  const Token& peek(size_t ahead = 0) const {
    size_t i = std::min(pos_ + ahead, toks_.size() - 1);
    return toks_[i];
  }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.type == TokenType::kOperator && t.text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.type == TokenType::kName && t.text == name;
  }
  [[noreturn]] void fail(const Token& t, const std::string& message) const {
    throw JinjaError(ErrorKind::kSyntax, message, t.line, t.column);
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kText: return "template text";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kVarEnd: return "end of print statement";
      case TokenType::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek(), std::string("expected '") + op + "', got " + describe(peek()));
    next();
  }
  std::string expect_name() {
    if (peek().type != TokenType::kName) fail(peek(), "expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != TokenType::kBlockEnd) {
      fail(peek(), "expected end of statement block, got " + describe(peek()));
    }
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxNesting) p_->fail(p_->peek(), "template nested too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  // Left-leaning operator chains grow without recursion in the parser, so depth is also
  // bounded here: evaluation recurses once per level.
  ExprPtr binary(ExprKind kind, const Token& at, ExprPtr a, ExprPtr b, std::string name = {}) {
    if (++chain_ > kMaxNesting * 10) fail(at, "expression too long");
    ExprPtr e = node(kind, at);
    e->name = std::move(name);
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return e;
  }

  // --- statements ----------------------------------------------------------------------------
  Body parse_body(std::initializer_list<const char*> terminators, std::string* found) {
    Body body;
    while (true) {
      const Token& t = peek();
      switch (t.type) {
        case TokenType::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kText;
          s->line = t.line;
          s->column = t.column;
          s->text = t.text;
          next();
          body.push_back(std::move(s));
          break;
        }
        case TokenType::kVarBegin: {
          next();
          chain_ = 0;
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kOutput;
          s->line = t.line;
          s->column = t.column;
          s->expr = parse_tuple(false);
          if (peek().type != TokenType::kVarEnd) fail(peek(), "expected '}}', got " + describe(peek()));
          next();
          body.push_back(std::move(s));
          break;
        }
        case TokenType::kBlockBegin: {
          const Token& name = peek(1);
          if (name.type == TokenType::kName) {
            for (const char* term : terminators) {
              if (name.text == term) {
                next();
                next();
                *found = name.text;
                return body;
              }
            }
          }
          body.push_back(parse_statement());
          break;
        }
        case TokenType::kEof: {
          if (terminators.size() == 0) return body;
          std::string want;
          for (const char* term : terminators) want += (want.empty() ? "'" : " or '") + std::string(term) + "'";
          fail(t, "Unexpected end of template. Jinja was looking for the following tags: " + want +
                      ". The innermost block that needs to be closed is '" + block_stack_.back() + "'.");
        }
        default: fail(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    DepthGuard guard(this);
    next();  // {%
    chain_ = 0;
    const Token& t = peek();
    if (t.type != TokenType::kName) fail(t, "tag name expected");
    std::string tag = next().text;
    auto s = std::make_unique<Stmt>();
    s->line = t.line;
    s->column = t.column;
    block_stack_.push_back(tag);
    std::string found;
    if (tag == "if") {
      s->kind = StmtKind::kIf;
      ExprPtr cond = parse_expression(false);
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, &found);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (found == "elif") {
          cond = parse_expression(false);
          expect_block_end();
          continue;
        }
        if (found == "else") {
          expect_block_end();
          s->else_body = parse_body({"endif"}, &found);
        }
        break;
      }
    } else if (tag == "for") {
      s->kind = StmtKind::kFor;
      bool paren = is_op("(");
      if (paren) next();
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        next();
        if (peek().type != TokenType::kName || is_name("in")) break;
        s->targets.push_back(expect_name());
      }
      if (paren) expect_op(")");
      if (!is_name("in")) fail(peek(), "expected 'in', got " + describe(peek()));
      next();
      s->expr = parse_tuple(true);
      if (is_name("if")) {
        next();
        s->cond = parse_expression(false);
      }
      if (is_name("recursive")) {
        next();
        s->recursive = true;
      }
      expect_block_end();
      ++loop_depth_;
      s->body = parse_body({"else", "endfor"}, &found);
      --loop_depth_;
      if (found == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, &found);
      }
    } else if (tag == "set") {
      s->kind = StmtKind::kSet;
      s->targets.push_back(expect_name());
      if (is_op(".")) {
        next();
        s->attr = expect_name();
      } else {
        while (is_op(",")) {
          next();
          s->targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        next();
        s->expr = parse_tuple(false);
      } else {
        if (s->targets.size() != 1 || !s->attr.empty()) fail(peek(), "expected '='");
        expect_block_end();
        s->body = parse_body({"endset"}, &found);
        block_stack_.pop_back();
        expect_block_end();
        return s;
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      s->text = expect_name();
      parse_params(s->params);
      expect_block_end();
      int saved = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_body({"endmacro"}, &found);
      loop_depth_ = saved;
      if (peek().type == TokenType::kName) next();  // {% endmacro name %}
    } else if (tag == "call") {
      s->kind = StmtKind::kCallBlock;
      if (is_op("(")) parse_params(s->params);
      s->expr = parse_expression(false);
      if (s->expr->kind != ExprKind::kCall) fail(t, "expected a call after 'call'");
      expect_block_end();
      s->body = parse_body({"endcall"}, &found);
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      ExprPtr chain;
      do {
        if (chain) next();  // |
        chain = parse_filter(std::move(chain));
      } while (is_op("|"));
      s->expr = std::move(chain);
      expect_block_end();
      s->body = parse_body({"endfilter"}, &found);
    } else if (tag == "generation") {
      // transformers' {% generation %} marks assistant text for masks; it renders its body.
      s->kind = StmtKind::kIf;
      auto yes = node(ExprKind::kLiteral, t);
      yes->literal = Value::from_bool(true);
      expect_block_end();
      s->branches.emplace_back(std::move(yes), parse_body({"endgeneration"}, &found));
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(t, "'" + tag + "' outside of a loop");
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    } else {
      fail(t, "Encountered unknown tag '" + tag + "'.");
    }
    block_stack_.pop_back();
    expect_block_end();
    return s;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      MacroParam p;
      p.name = expect_name();
      if (is_op("=")) {
        next();
        p.default_value = parse_expression(false);
      }
      params.push_back(std::move(p));
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  // --- expressions ---------------------------------------------------------------------------
  bool at_expression_end() const {
    const Token& t = peek();
    return t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd ||
           t.type == TokenType::kEof || is_op(")") || is_op("]") || is_op("}") || is_name("if") ||
           is_name("recursive") || is_op("=");
  }

  ExprPtr parse_tuple(bool no_ternary) {
    const Token& at = peek();
    ExprPtr first = parse_expression(no_ternary);
    if (!is_op(",")) return first;
    ExprPtr tuple = node(ExprKind::kTuple, at);
    tuple->children.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (at_expression_end()) break;
      tuple->children.push_back(parse_expression(no_ternary));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool no_ternary) {
    DepthGuard guard(this);
    const Token& at = peek();
    ExprPtr e = parse_or();
    if (no_ternary) return e;
    while (is_name("if")) {
      next();
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        next();
        other = parse_expression(false);
      }
      ExprPtr t = node(ExprKind::kTernary, at);
      t->children.push_back(std::move(e));
      t->children.push_back(std::move(cond));
      t->children.push_back(std::move(other));
      e = std::move(t);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      e = binary(ExprKind::kOr, at, std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      e = binary(ExprKind::kAnd, at, std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this);
      const Token& at = next();
      ExprPtr e = node(ExprKind::kUnary, at);
      e->name = "not";
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = peek();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      const Token& t = peek();
      if (t.type == TokenType::kOperator &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" ||
           t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::kCompare, at);
        cmp->children.push_back(std::move(first));
      }
      if (++chain_ > kMaxNesting * 10) fail(t, "expression too long");
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      e = binary(ExprKind::kBinary, at, std::move(e), parse_concat(), at.text);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      e = binary(ExprKind::kBinary, at, std::move(e), parse_math2(), "~");
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      e = binary(ExprKind::kBinary, at, std::move(e), parse_pow(), at.text);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      e = binary(ExprKind::kBinary, at, std::move(e), parse_unary(true), "**");
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      e = node(ExprKind::kUnary, at);
      e->name = at.text;
      e->children.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) {
      while (true) {
        if (is_op("|")) {
          next();
          e = parse_filter(std::move(e));
        } else if (is_name("is")) {
          e = parse_test(std::move(e));
        } else if (is_op("(")) {
          e = parse_call(std::move(e));
        } else {
          break;
        }
      }
    }
    return e;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(this);
    const Token& t = peek();
    switch (t.type) {
      case TokenType::kName: {
        next();
        ExprPtr e = node(ExprKind::kLiteral, t);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::from_bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::from_bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        return e;
      }
      case TokenType::kString: {
        ExprPtr e = node(ExprKind::kLiteral, t);
        std::string s;
        while (peek().type == TokenType::kString) s += next().text;
        e->literal = Value::from_string(std::move(s));
        return e;
      }
      case TokenType::kInt:
      case TokenType::kFloat: {
        next();
        ExprPtr e = node(ExprKind::kLiteral, t);
        e->literal = t.type == TokenType::kInt ? Value::from_int(t.int_value) : Value::from_float(t.float_value);
        return e;
      }
      case TokenType::kOperator:
        if (t.text == "(") {
          next();
          if (is_op(")")) {
            next();
            return node(ExprKind::kTuple, t);
          }
          ExprPtr first = parse_expression(false);
          if (is_op(",")) {
            ExprPtr tuple = node(ExprKind::kTuple, t);
            tuple->children.push_back(std::move(first));
            while (is_op(",")) {
              next();
              if (is_op(")")) break;
              tuple->children.push_back(parse_expression(false));
            }
            first = std::move(tuple);
          }
          expect_op(")");
          return first;
        }
        if (t.text == "[") {
          next();
          ExprPtr list = node(ExprKind::kList, t);
          while (!is_op("]")) {
            list->children.push_back(parse_expression(false));
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          next();
          ExprPtr dict = node(ExprKind::kDict, t);
          while (!is_op("}")) {
            dict->children.push_back(parse_expression(false));
            expect_op(":");
            dict->children.push_back(parse_expression(false));
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return dict;
        }
        break;
      default: break;
    }
    fail(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& at = next();
        const Token& t = peek();
        if (t.type == TokenType::kName) {
          e = binary(ExprKind::kGetAttr, at, std::move(e), nullptr, next().text);
          e->children.pop_back();
        } else if (t.type == TokenType::kInt) {
          ExprPtr idx = node(ExprKind::kLiteral, t);
          idx->literal = Value::from_int(next().int_value);
          e = binary(ExprKind::kGetItem, at, std::move(e), std::move(idx));
        } else {
          fail(t, "expected name or number after '.'");
        }
      } else if (is_op("[")) {
        const Token& at = next();
        e = parse_subscript(std::move(e), at);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, const Token& at) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        next();
        is_slice = true;
        if (++part > 2) fail(peek(), "invalid slice");
        continue;
      }
      if (parts[part]) fail(peek(), "expected ']' or ':'");
      parts[part] = parse_expression(false);
    }
    expect_op("]");
    if (!is_slice) {
      if (!parts[0]) fail(at, "expected an index");
      return binary(ExprKind::kGetItem, at, std::move(obj), std::move(parts[0]));
    }
    ExprPtr e = binary(ExprKind::kSlice, at, std::move(obj), std::move(parts[0]));
    e->children.push_back(std::move(parts[1]));
    e->children.push_back(std::move(parts[2]));
    return e;
  }

  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == TokenType::kName && is_op("=", 1)) {
        std::string name = next().text;
        next();
        e.kwargs.emplace_back(std::move(name), parse_expression(false));
      } else {
        if (is_op("*") || is_op("**")) fail(peek(), "*args and **kwargs in calls are not supported");
        e.children.push_back(parse_expression(false));
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr e = binary(ExprKind::kCall, peek(), std::move(callee), nullptr);
    e->children.pop_back();
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr subject) {
    const Token& at = peek();
    ExprPtr e = node(ExprKind::kFilter, at);
    e->name = expect_name();
    while (is_op(".")) {
      next();
      e->name += "." + expect_name();
    }
    if (++chain_ > kMaxNesting * 10) fail(at, "expression too long");
    e->children.push_back(std::move(subject));
    if (is_op("(")) parse_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr subject) {
    const Token& at = next();  // is
    ExprPtr e = node(ExprKind::kTest, at);
    if (is_name("not")) {
      next();
      e->negated = true;
    }
    e->name = expect_name();
    if (++chain_ > kMaxNesting * 10) fail(at, "expression too long");
    e->children.push_back(std::move(subject));
    if (is_op("(")) {
      parse_args(*e);
    } else {
      const Token& t = peek();
      bool starts_primary = t.type == TokenType::kString || t.type == TokenType::kInt ||
                            t.type == TokenType::kFloat || is_op("[") || is_op("{") ||
                            (t.type == TokenType::kName && t.text != "else" && t.text != "or" &&
                             t.text != "and" && t.text != "if" && t.text != "is" &&
                             t.text != "in" && t.text != "not" && t.text != "recursive");
      if (starts_primary) e->children.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int chain_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> block_stack_;
};

}  // namespace

Body parse_template(std::string_view source, const LexerOptions& options) {
  return Parser(tokenize(source, options)).parse();
}

}  // namespace ts::chat
