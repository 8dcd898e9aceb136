// GBNF parser (llama.cpp's grammar syntax) into the grammar AST.
#include <cctype>

#include "structured/grammar.h"

namespace ts::structured {
namespace {

class GbnfParser {
 public:
  GbnfParser(std::string_view s, const CompileLimits& lim) : s_(s), lim_(lim) {}

  Result<GrammarAst> run() {
    GrammarAst ast;
    skip_space(true);
    while (i_ < s_.size()) {
      std::string name;
      if (!parse_name(&name)) return error("expected a rule name");
      skip_space(false);
      if (s_.substr(i_, 3) != "::=") return error("expected '::=' after rule name '" + name + "'");
      i_ += 3;
      skip_space(true);
      Node body;
      TS_RETURN_IF_ERROR(parse_alternatives(&body, 0));
      for (const auto& r : ast.rules)
        if (r.first == name) return error("rule '" + name + "' is defined twice");
      ast.rules.emplace_back(std::move(name), std::move(body));
      skip_space(true);
    }
    if (ast.rules.empty()) return invalid_argument("grammar: no rules");
    return ast;
  }

 private:
  Status error(const std::string& what) const {
    int line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return invalid_argument("grammar: line " + std::to_string(line) + " col " + std::to_string(col) + ": " + what);
  }

  // Skips blanks and comments; newlines only when `newlines` (or when escaped / inside groups).
  void skip_space(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

  bool parse_name(std::string* out) {
    const size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    *out = std::string(s_.substr(b, i_ - b));
    return !out->empty();
  }

  // True when the next non-blank content starts a new rule ("name ::=").
  bool at_rule_start() const {
    size_t k = i_;
    while (k < s_.size() && name_char(s_[k])) ++k;
    if (k == i_) return false;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t')) ++k;
    return s_.substr(k, 3) == "::=";
  }

  Status parse_hex(int n, uint32_t* out) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) return error("bad hex escape");
      const char c = s_[i_++];
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    *out = v;
    return Status();
  }

  // One character of a literal or class (escapes decoded), as a code point.
  Status parse_char(uint32_t* out) {
    if (i_ >= s_.size()) return error("unexpected end of grammar");
    const unsigned char c = static_cast<unsigned char>(s_[i_]);
    if (c == '\\') {
      ++i_;
      if (i_ >= s_.size()) return error("unexpected end after '\\'");
      const char e = s_[i_++];
      switch (e) {
        case 'n': *out = '\n'; return Status();
        case 't': *out = '\t'; return Status();
        case 'r': *out = '\r'; return Status();
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': *out = static_cast<unsigned char>(e); return Status();
        case 'x': return parse_hex(2, out);
        case 'u': return parse_hex(4, out);
        case 'U': return parse_hex(8, out);
        default: --i_; return error(std::string("unknown escape '\\") + e + "'");
      }
    }
    // UTF-8 character.
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > s_.size()) return error("invalid UTF-8 in grammar");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s_[i_ + k]) & 0x3F);
    i_ += n;
    *out = cp;
    return Status();
  }

  Status parse_alternatives(Node* out, int depth) {
    if (depth > 200) return error("groups nested too deeply");
    std::vector<Node> alts;
    for (;;) {
      Node seq = Node::seq();
      TS_RETURN_IF_ERROR(parse_sequence(&seq, depth));
      alts.push_back(std::move(seq));
      skip_space(depth > 0);
      if (i_ < s_.size() && s_[i_] == '|') {
        ++i_;
        skip_space(true);
        continue;
      }
      break;
    }
    *out = alts.size() == 1 ? std::move(alts[0]) : Node::alt(std::move(alts));
    return Status();
  }

  Status parse_sequence(Node* seq, int depth) {
    for (;;) {
      skip_space(depth > 0);
      if (i_ >= s_.size()) return Status();
      const char c = s_[i_];
      if (c == '\n') {
        // A newline ends the rule unless the next line continues it (starts with | or is not a rule).
        size_t save = i_;
        skip_space(true);
        if (i_ >= s_.size() || at_rule_start() || s_[i_] == '|') {
          if (i_ < s_.size() && s_[i_] == '|') return Status();
          i_ = save;
          skip_space(true);
          return Status();
        }
        continue;
      }
      if (c == '|' || c == ')') return Status();
      Node item;
      if (c == '"') {
        ++i_;
        item = Node::seq();
        while (i_ < s_.size() && s_[i_] != '"') {
          uint32_t cp;
          TS_RETURN_IF_ERROR(parse_char(&cp));
          item.kids.push_back(Node::chr(cp));
        }
        if (i_ >= s_.size()) return error("unterminated string literal");
        ++i_;
      } else if (c == '[') {
        ++i_;
        bool neg = false;
        if (i_ < s_.size() && s_[i_] == '^') { neg = true; ++i_; }
        std::vector<std::pair<uint32_t, uint32_t>> r;
        while (i_ < s_.size() && s_[i_] != ']') {
          uint32_t lo, hi;
          TS_RETURN_IF_ERROR(parse_char(&lo));
          hi = lo;
          if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
            ++i_;
            TS_RETURN_IF_ERROR(parse_char(&hi));
            if (hi < lo) return error("character range is out of order");
          }
          r.emplace_back(lo, hi);
        }
        if (i_ >= s_.size()) return error("unterminated character class");
        ++i_;
        auto ranges = normalize_ranges(std::move(r), neg);
        if (ranges.empty()) return error("empty character class");
        item = Node::cls(std::move(ranges));
      } else if (c == '.') {
        ++i_;
        item = Node::cls(normalize_ranges({}, true));
      } else if (c == '(') {
        ++i_;
        skip_space(true);
        TS_RETURN_IF_ERROR(parse_alternatives(&item, depth + 1));
        skip_space(true);
        if (i_ >= s_.size() || s_[i_] != ')') return error("expected ')'");
        ++i_;
      } else if (name_char(c)) {
        if (at_rule_start()) return Status();  // the next rule (same line is unusual but legal)
        std::string name;
        parse_name(&name);
        item = Node::rule(std::move(name));
      } else {
        return error(std::string("unexpected character '") + c + "'");
      }
      // Postfix operators.
      for (;;) {
        if (i_ >= s_.size()) break;
        const char p = s_[i_];
        if (p == '*') { ++i_; item = Node::repeat(std::move(item), 0, -1); }
        else if (p == '+') { ++i_; item = Node::repeat(std::move(item), 1, -1); }
        else if (p == '?') { ++i_; item = Node::repeat(std::move(item), 0, 1); }
        else if (p == '{') {
          ++i_;
          int64_t lo = 0, hi = -1;
          TS_RETURN_IF_ERROR(parse_int(&lo));
          skip_space(false);
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            skip_space(false);
            if (i_ < s_.size() && s_[i_] != '}') TS_RETURN_IF_ERROR(parse_int(&hi));
          } else {
            hi = lo;
          }
          skip_space(false);
          if (i_ >= s_.size() || s_[i_] != '}') return error("expected '}'");
          ++i_;
          if (lo > lim_.max_repeat || hi > lim_.max_repeat)
            return error("repetition bound above the limit of " + std::to_string(lim_.max_repeat));
          if (hi >= 0 && hi < lo) return error("repetition {m,n} with n < m");
          item = Node::repeat(std::move(item), static_cast<int32_t>(lo), static_cast<int32_t>(hi));
        } else {
          break;
        }
      }
      seq->kids.push_back(std::move(item));
    }
  }

  Status parse_int(int64_t* out) {
    skip_space(false);
    const size_t b = i_;
    int64_t v = 0;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      v = v * 10 + (s_[i_++] - '0');
      if (v > (int64_t{1} << 40)) return error("number too large");
    }
    if (i_ == b) return error("expected a number");
    *out = v;
    return Status();
  }

  std::string_view s_;
  const CompileLimits& lim_;
  size_t i_ = 0;
};

}  // namespace

Result<GrammarAst> parse_gbnf(std::string_view text, const CompileLimits& limits) {
  if (static_cast<int64_t>(text.size()) > limits.max_source_bytes)
    return invalid_argument("grammar is larger than " + std::to_string(limits.max_source_bytes) + " bytes");
  GbnfParser p(text, limits);
  return p.run();
}

}  // namespace ts::structured
