#include "api/json_prefix.h"

#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::api {

namespace {

using json = nlohmann::ordered_json;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void put_utf8(std::string& o, uint32_t cp) {
  if (cp < 0x80) {
    o += static_cast<char>(cp);
  } else if (cp < 0x800) {
    o += static_cast<char>(0xC0 | (cp >> 6));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    o += static_cast<char>(0xE0 | (cp >> 12));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    o += static_cast<char>(0xF0 | (cp >> 18));
    o += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A decoded code point as nlohmann's dump writes it inside a string.
void put_json_char(std::string& o, uint32_t cp) {
  switch (cp) {
    case '"': o += "\\\""; return;
    case '\\': o += "\\\\"; return;
    case '\b': o += "\\b"; return;
    case '\f': o += "\\f"; return;
    case '\n': o += "\\n"; return;
    case '\r': o += "\\r"; return;
    case '\t': o += "\\t"; return;
    default: break;
  }
  if (cp < 0x20) {
    static constexpr char kHex[] = "0123456789abcdef";
    o += "\\u00";
    o += kHex[cp >> 4];
    o += kHex[cp & 0xF];
    return;
  }
  put_utf8(o, cp);
}

std::optional<uint32_t> hex4(std::string_view s) {
  uint32_t v = 0;
  for (char c : s) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
    else return std::nullopt;
  }
  return v;
}

// The string whose opening quote is s[i-1]: appends its characters (and the closing quote) to
// o; returns the index after the closing quote, npos when cut (what is certain is appended), or
// npos with *error set.
size_t canon_string(std::string_view s, size_t i, std::string& o, bool* error) {
  constexpr size_t kCut = std::string_view::npos;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"') {
      o += '"';
      return i + 1;
    }
    if (c < 0x20) {
      *error = true;
      return kCut;
    }
    if (c == '\\') {
      if (i + 1 >= s.size()) return kCut;
      char e = s[i + 1];
      switch (e) {
        case '"': put_json_char(o, '"'); i += 2; continue;
        case '\\': put_json_char(o, '\\'); i += 2; continue;
        case '/': put_json_char(o, '/'); i += 2; continue;
        case 'b': put_json_char(o, '\b'); i += 2; continue;
        case 'f': put_json_char(o, '\f'); i += 2; continue;
        case 'n': put_json_char(o, '\n'); i += 2; continue;
        case 'r': put_json_char(o, '\r'); i += 2; continue;
        case 't': put_json_char(o, '\t'); i += 2; continue;
        case 'u': break;
        default: *error = true; return kCut;
      }
      if (i + 6 > s.size()) return kCut;
      auto hi = hex4(s.substr(i + 2, 4));
      if (!hi) {
        *error = true;
        return kCut;
      }
      if (*hi >= 0xDC00 && *hi <= 0xDFFF) {
        *error = true;
        return kCut;
      }
      if (*hi >= 0xD800 && *hi <= 0xDBFF) {
        if (i + 12 > s.size()) return kCut;
        auto lo = s.substr(i + 6, 2) == "\\u" ? hex4(s.substr(i + 8, 4)) : std::nullopt;
        if (!lo || *lo < 0xDC00 || *lo > 0xDFFF) {
          *error = true;
          return kCut;
        }
        put_utf8(o, 0x10000 + ((*hi - 0xD800) << 10) + (*lo - 0xDC00));
        i += 12;
        continue;
      }
      put_json_char(o, *hi);
      i += 6;
      continue;
    }
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0) {
      *error = true;
      return kCut;
    }
    if (i + n > s.size()) return kCut;  // a character cut at the end
    o.append(s.substr(i, n));
    i += n;
  }
  return kCut;
}

}  // namespace

JsonPrefix canonical_json_object_prefix(std::string_view s) {
  JsonPrefix r;
  if (s.empty() || s[0] != '{') {
    r.error = !s.empty();
    return r;
  }
  // What may come next.
  enum Want { kKeyOrEnd, kKey, kColon, kValue, kValueOrEnd, kCommaOrEnd };
  std::vector<char> stack = {'{'};
  Want want = kKeyOrEnd;
  r.out.push_back('{');  // (not `= "{"`: GCC 12 warns a false -Wrestrict on it)
  size_t i = 1;
  auto after_value = [&] { want = kCommaOrEnd; };
  while (i < s.size()) {
    char c = s[i];
    if (is_ws(c)) {
      ++i;
      continue;
    }
    if ((c == '}' || c == ']') && (want == kCommaOrEnd || (want == kKeyOrEnd && c == '}') ||
                                   (want == kValueOrEnd && c == ']'))) {
      if ((c == '}') != (stack.back() == '{')) break;
      r.out += c;
      ++i;
      stack.pop_back();
      if (stack.empty()) {
        r.complete = true;
        return r;
      }
      after_value();
      continue;
    }
    if (c == ',' && want == kCommaOrEnd) {
      r.out += c;
      ++i;
      want = stack.back() == '{' ? kKey : kValue;
      continue;
    }
    if (c == ':' && want == kColon) {
      r.out += c;
      ++i;
      want = kValue;
      continue;
    }
    if (c == '"' && (want == kKeyOrEnd || want == kKey || want == kValue || want == kValueOrEnd)) {
      bool key = want == kKeyOrEnd || want == kKey;
      r.out += '"';
      size_t e = canon_string(s, i + 1, r.out, &r.error);
      if (e == std::string_view::npos) return r;
      i = e;
      if (key) want = kColon;
      else after_value();
      continue;
    }
    if (want != kValue && want != kValueOrEnd) break;
    if (c == '{' || c == '[') {
      r.out += c;
      ++i;
      stack.push_back(c);
      want = c == '{' ? kKeyOrEnd : kValueOrEnd;
      continue;
    }
    if (c == 't' || c == 'f' || c == 'n') {
      std::string_view lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
      std::string_view have = s.substr(i, lit.size());
      if (have != lit.substr(0, have.size())) break;
      if (have.size() < lit.size() || i + lit.size() == s.size()) return r;  // may go on
      r.out.append(lit);
      i += lit.size();
      after_value();
      continue;
    }
    size_t e = i;
    while (e < s.size() && std::string_view("-+.eE0123456789").find(s[e]) != std::string_view::npos) ++e;
    if (e == i) break;
    if (e == s.size()) return r;  // the number may go on
    json n = json::parse(s.substr(i, e - i), nullptr, false);
    if (n.is_discarded() || !n.is_number()) break;
    r.out += n.dump();
    i = e;
    after_value();
  }
  if (i < s.size()) r.error = true;
  return r;
}

}  // namespace ts::api
