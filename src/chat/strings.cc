#include "chat/strings.h"

#include <algorithm>

namespace ts::chat {

namespace {

std::vector<uint32_t> decode(const std::string& s) {
  std::vector<uint32_t> cps;
  size_t i = 0;
  while (i < s.size()) cps.push_back(decode_utf8(s, i));
  return cps;
}

std::string encode(const std::vector<uint32_t>& cps) {
  std::string out;
  for (uint32_t cp : cps) append_utf8(out, cp);
  return out;
}

bool is_upper_cp(uint32_t c) {
  return (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
         (c >= 0x100 && c <= 0x17F && c % 2 == 0 && c != 0x138) ||
         (c >= 0x391 && c <= 0x3AB && c != 0x3A2) || (c >= 0x400 && c <= 0x42F);
}
bool is_lower_cp(uint32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 0xDF && c <= 0xFF && c != 0xF7) ||
         (c >= 0x100 && c <= 0x17F && c % 2 == 1) || (c >= 0x3B1 && c <= 0x3CB) ||
         (c >= 0x430 && c <= 0x45F);
}
bool is_cased(uint32_t c) { return is_upper_cp(c) || is_lower_cp(c); }

uint32_t to_upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c % 2 == 1 && c != 0x131 && c != 0x149 && c != 0x17F) return c - 1;
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}
uint32_t to_lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x17F && c % 2 == 0 && c != 0x130 && c != 0x138) return c + 1;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_alpha_cp(uint32_t c) {
  return is_cased(c) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) ||
         (c >= 0xAC00 && c <= 0xD7A3) || c == 0xAA || c == 0xBA;
}
bool is_digit_cp(uint32_t c) { return c >= '0' && c <= '9'; }

}  // namespace

bool py_isspace(uint32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::vector<uint32_t> cps = decode(s);
  std::vector<uint32_t> set;
  if (chars) set = decode(*chars);
  auto strip_me = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_isspace(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_me(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_me(cps[e - 1])) --e;
  }
  return encode(std::vector<uint32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                      cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

std::string py_upper(const std::string& s) {
  std::vector<uint32_t> cps = decode(s);
  for (auto& c : cps) c = to_upper_cp(c);
  return encode(cps);
}

std::string py_lower(const std::string& s) {
  std::vector<uint32_t> cps = decode(s);
  for (auto& c : cps) c = to_lower_cp(c);
  return encode(cps);
}

std::string py_title(const std::string& s) {
  std::vector<uint32_t> cps = decode(s);
  bool prev_cased = false;
  for (auto& c : cps) {
    bool cased = is_cased(c);
    if (cased) c = prev_cased ? to_lower_cp(c) : to_upper_cp(c);
    prev_cased = cased;
  }
  return encode(cps);
}

std::string py_capitalize(const std::string& s) {
  std::vector<uint32_t> cps = decode(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? to_upper_cp(cps[i]) : to_lower_cp(cps[i]);
  return encode(cps);
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      int64_t n = 0;
      while (n < maxsplit) {
        size_t f = s.find(*sep, pos);
        if (f == std::string::npos) break;
        out.push_back(s.substr(pos, f - pos));
        pos = f + sep->size();
        ++n;
      }
      out.push_back(s.substr(pos));
      return out;
    }
    size_t end = s.size();
    int64_t n = 0;
    while (n < maxsplit && end >= sep->size()) {
      size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string::npos) break;
      out.push_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
      ++n;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  // Whitespace split on code points.
  std::vector<uint32_t> cps = decode(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  size_t i = 0;
  int64_t n = 0;
  while (i < cps.size()) {
    while (i < cps.size() && py_isspace(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (n >= maxsplit) {
      size_t e = cps.size();
      while (e > i && py_isspace(cps[e - 1])) --e;
      std::vector<uint32_t> rest(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(e));
      if (from_right) std::reverse(rest.begin(), rest.end());
      out.push_back(encode(rest));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !py_isspace(cps[j])) ++j;
    std::vector<uint32_t> word(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j));
    if (from_right) std::reverse(word.begin(), word.end());
    out.push_back(encode(word));
    ++n;
    i = j;
  }
  if (from_right) std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.push_back(cur);
      cur.clear();
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      cur += s[i];
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string py_replace(const std::string& s, const std::string& old_s, const std::string& new_s,
                       int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old_s.empty()) {
    // Python inserts `new` before every code point and at the end.
    auto offs = utf8_offsets(s);
    int64_t n = 0;
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      if (n++ < count) out += new_s;
      out.append(s, offs[i], offs[i + 1] - offs[i]);
    }
    if (n < count) out += new_s;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (n < count) {
    size_t f = s.find(old_s, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += new_s;
    pos = f + old_s.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

bool py_is(const std::string& s, const std::string& what) {
  std::vector<uint32_t> cps = decode(s);
  if (cps.empty()) return false;
  if (what == "islower" || what == "isupper") {
    bool any = false;
    for (uint32_t c : cps) {
      if (what == "islower" ? is_upper_cp(c) : is_lower_cp(c)) return false;
      any = any || is_cased(c);
    }
    return any;
  }
  for (uint32_t c : cps) {
    bool ok = what == "isdigit"   ? is_digit_cp(c)
              : what == "isalpha" ? is_alpha_cp(c)
              : what == "isspace" ? py_isspace(c)
                                  : (is_alpha_cp(c) || is_digit_cp(c));
    if (!ok) return false;
  }
  return true;
}

std::string brace_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) throw_runtime("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (size_t colon = field.find(':'); colon != std::string::npos) field = field.substr(0, colon);
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index >= args.positional.size()) throw_runtime("Replacement index out of range");
        v = &args.positional[auto_index++];
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        size_t k = std::stoul(field);
        if (k >= args.positional.size()) throw_runtime("Replacement index out of range");
        v = &args.positional[k];
      } else {
        for (const auto& [name, val] : args.kwargs) {
          if (name == field) v = &val;
        }
        if (!v) throw_runtime("KeyError: '" + field + "'");
      }
      out += to_str(*v);
      i = close;
    } else if (c == '}') {
      throw_runtime("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace ts::chat
