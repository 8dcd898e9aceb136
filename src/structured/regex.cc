// Regular expression parser into the grammar AST (full-match semantics).
#include <cctype>

#include "structured/grammar.h"

namespace ts::structured {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges digit() { return {{'0', '9'}}; }
Ranges word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges space() { return {{'\t', '\r'}, {' ', ' '}}; }

class RegexParser {
 public:
  RegexParser(std::string_view s, const CompileLimits& lim) : s_(s), lim_(lim) {}

  Result<Node> run() {
    if (!s_.empty() && s_[0] == '^') ++i_;
    Node n;
    TS_RETURN_IF_ERROR(parse_alt(&n, 0));
    if (i_ < s_.size()) {
      if (s_[i_] == ')') return error("unmatched ')'");
      return error("unexpected character");
    }
    return n;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("regex: " + what + " at offset " + std::to_string(i_));
  }

  Status parse_alt(Node* out, int depth) {
    if (depth > 200) return error("groups nested too deeply");
    std::vector<Node> alts;
    for (;;) {
      Node seq = Node::seq();
      TS_RETURN_IF_ERROR(parse_seq(&seq, depth));
      alts.push_back(std::move(seq));
      if (i_ < s_.size() && s_[i_] == '|') { ++i_; continue; }
      break;
    }
    *out = alts.size() == 1 ? std::move(alts[0]) : Node::alt(std::move(alts));
    return Status();
  }

  Status parse_cp(uint32_t* out) {
    const unsigned char c = static_cast<unsigned char>(s_[i_]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > s_.size()) return error("invalid UTF-8");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s_[i_ + k]) & 0x3F);
    i_ += n;
    *out = cp;
    return Status();
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

  // After a backslash: a class escape (sets *cls) or a single character (sets *cp).
  Status parse_escape(Ranges* cls, uint32_t* cp, bool* is_class) {
    if (i_ >= s_.size()) return error("trailing backslash");
    const char e = s_[i_++];
    *is_class = true;
    switch (e) {
      case 'd': *cls = digit(); return Status();
      case 'w': *cls = word(); return Status();
      case 's': *cls = space(); return Status();
      case 'D': *cls = normalize_ranges(digit(), true); return Status();
      case 'W': *cls = normalize_ranges(word(), true); return Status();
      case 'S': *cls = normalize_ranges(space(), true); return Status();
      default: break;
    }
    *is_class = false;
    switch (e) {
      case 'n': *cp = '\n'; return Status();
      case 't': *cp = '\t'; return Status();
      case 'r': *cp = '\r'; return Status();
      case 'f': *cp = '\f'; return Status();
      case 'v': *cp = '\v'; return Status();
      case '0': *cp = 0; return Status();
      case 'x': return parse_hex(2, cp);
      case 'u': return parse_hex(4, cp);
      case 'b': case 'B': case 'A': case 'z': case 'Z': case 'G':
        return error(std::string("anchor '\\") + e + "' is not supported");
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) return error("back-references are not supported");
        if (std::isalnum(static_cast<unsigned char>(e))) return error(std::string("unknown escape '\\") + e + "'");
        *cp = static_cast<unsigned char>(e);
        return Status();
    }
  }

  Status parse_class(Node* out) {
    ++i_;  // '['
    bool neg = false;
    if (i_ < s_.size() && s_[i_] == '^') { neg = true; ++i_; }
    Ranges r;
    bool first = true;
    while (i_ < s_.size() && (s_[i_] != ']' || first)) {
      first = false;
      uint32_t lo = 0;
      if (s_[i_] == '\\') {
        ++i_;
        Ranges c;
        bool is_class = false;
        TS_RETURN_IF_ERROR(parse_escape(&c, &lo, &is_class));
        if (is_class) { r.insert(r.end(), c.begin(), c.end()); continue; }
      } else if (s_.substr(i_, 2) == "[:") {
        return error("POSIX classes are not supported");
      } else {
        TS_RETURN_IF_ERROR(parse_cp(&lo));
      }
      uint32_t hi = lo;
      if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
        ++i_;
        if (s_[i_] == '\\') {
          ++i_;
          Ranges c;
          bool is_class = false;
          TS_RETURN_IF_ERROR(parse_escape(&c, &hi, &is_class));
          if (is_class) return error("a class escape cannot end a range");
        } else {
          TS_RETURN_IF_ERROR(parse_cp(&hi));
        }
        if (hi < lo) return error("character range is out of order");
      }
      r.emplace_back(lo, hi);
    }
    if (i_ >= s_.size()) return error("unterminated character class");
    ++i_;
    Ranges n = normalize_ranges(std::move(r), neg);
    if (n.empty()) return error("empty character class");
    *out = Node::cls(std::move(n));
    return Status();
  }

  Status parse_int(int64_t* out) {
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

  Status parse_seq(Node* seq, int depth) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '|' || c == ')') return Status();
      if (c == '$' && i_ + 1 == s_.size()) { ++i_; return Status(); }
      Node item;
      if (c == '(') {
        ++i_;
        if (s_.substr(i_, 2) == "?:") {
          i_ += 2;
        } else if (i_ < s_.size() && s_[i_] == '?') {
          return error("look-around and named/flag groups are not supported");
        }
        TS_RETURN_IF_ERROR(parse_alt(&item, depth + 1));
        if (i_ >= s_.size() || s_[i_] != ')') return error("expected ')'");
        ++i_;
      } else if (c == '[') {
        TS_RETURN_IF_ERROR(parse_class(&item));
      } else if (c == '.') {
        ++i_;
        item = Node::cls(normalize_ranges({{'\n', '\n'}}, true));
      } else if (c == '\\') {
        ++i_;
        Ranges cls;
        uint32_t cp = 0;
        bool is_class = false;
        TS_RETURN_IF_ERROR(parse_escape(&cls, &cp, &is_class));
        item = is_class ? Node::cls(normalize_ranges(std::move(cls), false)) : Node::chr(cp);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return error("quantifier without anything to repeat");
      } else if (c == '^' || c == '$') {
        return error("anchors are only supported at the start and end");
      } else {
        uint32_t cp;
        TS_RETURN_IF_ERROR(parse_cp(&cp));
        item = Node::chr(cp);
      }
      // Quantifiers.
      while (i_ < s_.size()) {
        const char q = s_[i_];
        int64_t lo = 0, hi = -1;
        if (q == '*') { lo = 0; hi = -1; ++i_; }
        else if (q == '+') { lo = 1; hi = -1; ++i_; }
        else if (q == '?') { lo = 0; hi = 1; ++i_; }
        else if (q == '{') {
          ++i_;
          TS_RETURN_IF_ERROR(parse_int(&lo));
          hi = lo;
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            hi = -1;
            if (i_ < s_.size() && s_[i_] != '}') TS_RETURN_IF_ERROR(parse_int(&hi));
          }
          if (i_ >= s_.size() || s_[i_] != '}') return error("expected '}'");
          ++i_;
          if (hi >= 0 && hi < lo) return error("repetition {m,n} with n < m");
          if (lo > lim_.max_repeat || hi > lim_.max_repeat)
            return error("repetition bound above the limit of " + std::to_string(lim_.max_repeat));
        } else {
          break;
        }
        if (i_ < s_.size() && (s_[i_] == '?' || s_[i_] == '+')) ++i_;  // lazy / possessive: same language
        item = Node::repeat(std::move(item), static_cast<int32_t>(lo), static_cast<int32_t>(hi));
      }
      seq->kids.push_back(std::move(item));
    }
    return Status();
  }

  std::string_view s_;
  const CompileLimits& lim_;
  size_t i_ = 0;
};

}  // namespace

Result<Node> parse_regex(std::string_view pattern, const CompileLimits& limits) {
  if (static_cast<int64_t>(pattern.size()) > limits.max_source_bytes)
    return invalid_argument("regex is larger than " + std::to_string(limits.max_source_bytes) + " bytes");
  RegexParser p(pattern, limits);
  return p.run();
}

}  // namespace ts::structured
