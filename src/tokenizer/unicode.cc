#include "tokenizer/unicode.h"

#include <array>

namespace ts::tokenizer::internal {
namespace {

struct ByteLevelTables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> cp_to_byte;  // all mapped code points are < 512

  ByteLevelTables() {
    cp_to_byte.fill(-1);
    // Printable bytes map to themselves; the others, in byte order, to 256, 257, ...
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(byte_to_utf8[b], cp);
      cp_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

// Decodes one code point of well-formed or ill-formed UTF-8; returns its length (>= 1) and
// sets *cp (0xFFFD for an ill-formed byte).
size_t decode_one(std::string_view s, uint32_t* cp) {
  int n = utf8_well_formed_len(s);
  if (n <= 0) {
    *cp = 0xFFFD;
    return 1;
  }
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  switch (n) {
    case 1: *cp = p[0]; break;
    case 2: *cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu); break;
    case 3: *cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu); break;
    default:
      *cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
            (p[3] & 0x3Fu);
  }
  return static_cast<size_t>(n);
}

}  // namespace

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string_view byte_to_unicode_utf8(uint8_t b) { return tables().byte_to_utf8[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? tables().cp_to_byte[cp] : -1; }

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

std::string byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    size_t n = decode_one(text.substr(i), &cp);
    int b = unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

int utf8_well_formed_len(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return 1;
  int len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (static_cast<size_t>(k) >= n) return -1;
    const uint8_t b = p[k];
    const uint8_t klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
    if (b < klo || b > khi) return 0;
  }
  return len;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    int n = utf8_well_formed_len(s.substr(i));
    if (n > 0) {
      out.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
      continue;
    }
    // Maximal ill-formed subpart: the lead byte plus the continuation bytes that were valid.
    size_t skip = 1;
    const size_t want = utf8_seq_len(static_cast<uint8_t>(s[i]));
    while (skip < want && i + skip < s.size()) {
      std::string_view prefix = s.substr(i, skip + 1);
      int m = utf8_well_formed_len(prefix);
      if (m != -1 && m <= 0) break;
      if (m > 0) break;  // cannot happen: the full sequence was ill-formed
      ++skip;
    }
    out += "\xEF\xBF\xBD";
    i += skip;
  }
  return out;
}

}  // namespace ts::tokenizer::internal
