#include "chat/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "chat/value.h"

namespace ts::chat {

namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options) : opt_(options) {
    // Newlines are normalized to "\n" (jinja2's newline_sequence).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!opt_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, (tag == std::string::npos ? src_.size() : tag) - pos);
      if (tag == std::string::npos) {
        emit_text(text, pos);
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && is_ws(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting_) {
          bool only_ws = l_pos < text.size();
          for (size_t i = l_pos; i < text.size() && only_ws; ++i) only_ws = is_ws(text[i]);
          if (only_ws) text.resize(l_pos);
        }
      }
      emit_text(text, pos);
      line_starting_ = false;
      size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(tag, body);
      } else if (kind == '%' && try_raw(tag, body, pos)) {
        // pos updated by try_raw
      } else {
        pos = lex_tag(tag, body, kind == '%');
      }
    }
    Token eof;
    eof.type = TokenType::kEof;
    position(src_.size(), eof.line, eof.column);
    toks_.push_back(eof);
    return std::move(toks_);
  }

 private:
  void position(size_t pos, int& line, int& column) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    line = static_cast<int>(idx) + 1;
    column = static_cast<int>(pos - line_starts_[idx]) + 1;
  }

  [[noreturn]] void fail(size_t pos, const std::string& message) const {
    int line, column;
    position(pos, line, column);
    throw JinjaError(ErrorKind::kSyntax, message, line, column);
  }

  void push(TokenType type, std::string text, size_t pos) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    position(pos, t.line, t.column);
    toks_.push_back(std::move(t));
  }

  void emit_text(const std::string& text, size_t pos) {
    if (!text.empty()) push(TokenType::kText, text, pos);
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // Consumes what follows a tag end; returns the new position and sets line_starting_.
  size_t after_end(size_t end_pos, bool strip_all, bool trim_newline) {
    size_t p = end_pos;
    if (strip_all) {
      while (p < src_.size() && is_ws(src_[p])) ++p;
    } else if (trim_newline && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = src_[p - 1] == '\n';
    return p;
  }

  size_t lex_comment(size_t tag, size_t body) {
    size_t end = src_.find("#}", body);
    if (end == std::string::npos) fail(tag, "Missing end of comment tag");
    char before = end > body ? src_[end - 1] : '\0';
    return after_end(end + 2, before == '-', before != '+' && opt_.trim_blocks);
  }

  bool match_word(size_t& p, const char* word) const {
    size_t n = std::strlen(word);
    if (src_.compare(p, n, word) != 0) return false;
    if (p + n < src_.size() && is_name_char(src_[p + n])) return false;
    p += n;
    return true;
  }

  // `{% raw %}...{% endraw %}`: the content is literal text.
  bool try_raw(size_t tag, size_t body, size_t& pos) {
    size_t p = body;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (!match_word(p, "raw")) return false;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    bool strip_after = false;
    if (p < src_.size() && src_[p] == '-') {
      strip_after = true;
      ++p;
    }
    if (src_.compare(p, 2, "%}") != 0) fail(p, "expected '%}' after 'raw'");
    size_t content = after_end(p + 2, strip_after, opt_.trim_blocks);
    for (size_t s = find_tag(content); s != std::string::npos; s = find_tag(s + 1)) {
      if (src_[s + 1] != '%') continue;
      size_t q = s + 2;
      bool strip_before = false;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) strip_before = src_[q++] == '-';
      while (q < src_.size() && is_ws(src_[q])) ++q;
      if (!match_word(q, "endraw")) continue;
      while (q < src_.size() && is_ws(src_[q])) ++q;
      bool strip_end = false;
      if (q < src_.size() && src_[q] == '-') {
        strip_end = true;
        ++q;
      }
      if (src_.compare(q, 2, "%}") != 0) fail(q, "expected '%}' after 'endraw'");
      std::string text = src_.substr(content, s - content);
      if (strip_before) {
        while (!text.empty() && is_ws(text.back())) text.pop_back();
      }
      emit_text(text, content);
      pos = after_end(q + 2, strip_end, opt_.trim_blocks);
      return true;
    }
    fail(tag, "Missing end of raw directive");
  }

  size_t lex_tag(size_t tag, size_t p, bool block) {
    push(block ? TokenType::kBlockBegin : TokenType::kVarBegin, block ? "{%" : "{{", tag);
    std::vector<char> brackets;
    while (true) {
      while (p < src_.size() && is_ws(src_[p])) ++p;
      if (p >= src_.size()) fail(tag, block ? "Unexpected end of template: missing '%}'" : "Unexpected end of template: missing '}}'");
      if (brackets.empty()) {
        const char* close = block ? "%}" : "}}";
        if (src_[p] == '-' && src_.compare(p + 1, 2, close) == 0) {
          push(block ? TokenType::kBlockEnd : TokenType::kVarEnd, close, p);
          return after_end(p + 3, true, false);
        }
        if (block && src_[p] == '+' && src_.compare(p + 1, 2, close) == 0) {
          push(TokenType::kBlockEnd, close, p);
          return after_end(p + 3, false, false);
        }
        if (src_.compare(p, 2, close) == 0) {
          push(block ? TokenType::kBlockEnd : TokenType::kVarEnd, close, p);
          return after_end(p + 2, false, block && opt_.trim_blocks);
        }
      }
      char c = src_[p];
      if (is_name_start(c)) {
        size_t s = p;
        while (p < src_.size() && is_name_char(src_[p])) ++p;
        push(TokenType::kName, src_.substr(s, p - s), s);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else {
        p = lex_operator(p, brackets);
      }
    }
  }

  size_t lex_string(size_t start) {
    char q = src_[start];
    std::string value;
    size_t p = start + 1;
    while (true) {
      if (p >= src_.size()) fail(start, "unexpected end of string literal");
      char c = src_[p];
      if (c == q) break;
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail(start, "unexpected end of string literal");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          int digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (int k = 0; k < digits; ++k) {
            int h = p < src_.size() ? hex_value(src_[p]) : -1;
            if (h < 0) fail(p, "truncated \\" + std::string(1, e) + " escape in string literal");
            cp = cp * 16 + static_cast<uint32_t>(h);
            ++p;
          }
          if (cp > 0x10FFFF) fail(p, "illegal Unicode character in string literal");
          append_utf8(value, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[p++] - '0');
            }
            append_utf8(value, cp);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    push(TokenType::kString, std::move(value), start);
    return p + 1;
  }

  size_t lex_number(size_t start) {
    size_t p = start;
    auto digits = [&] {
      while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])))) ++p;
    };
    digits();
    bool is_float = false;
    bool after_dot = start > 0 && src_[start - 1] == '.';  // `x.0` is attribute access
    if (!after_dot && p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      is_float = true;
      ++p;
      digits();
    }
    if (!after_dot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        is_float = true;
        p = q;
        digits();
      }
    }
    std::string text;
    for (size_t i = start; i < p; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t;
    t.type = is_float ? TokenType::kFloat : TokenType::kInt;
    t.text = text;
    position(start, t.line, t.column);
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
      if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) fail(start, "integer literal too large");
      t.int_value = static_cast<int64_t>(v);
    }
    toks_.push_back(std::move(t));
    return p;
  }

  size_t lex_operator(size_t p, std::vector<char>& brackets) {
    static const char* kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.compare(p, 2, op) == 0) {
        push(TokenType::kOperator, op, p);
        return p + 2;
      }
    }
    char c = src_[p];
    if (std::strchr("+-*/%~()[]{},.:|=<>;", c) == nullptr) {
      fail(p, std::string("unexpected char '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) fail(p, std::string("unexpected '") + c + "'");
      if (brackets.back() != c) {
        fail(p, std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
      }
      brackets.pop_back();
    }
    push(TokenType::kOperator, std::string(1, c), p);
    return p + 1;
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> toks_;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace ts::chat
