#include "tokenizer/wpm.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/wpm_tables.h"

namespace ts::tokenizer::internal {
namespace {

namespace wt = wpm_tables;

template <typename T>
const T* find_run(const T* table, size_t n, uint32_t cp) {
  const T* end = table + n;
  const T* it = std::upper_bound(table, end, cp, [](uint32_t c, const T& r) { return c < r.first; });
  if (it == table) return nullptr;
  --it;
  return (cp >= it->first && cp <= it->last) ? it : nullptr;
}

bool in_ranges(const wt::Range* table, size_t n, uint32_t cp) {
  return find_run(table, n, cp) != nullptr;
}

uint32_t nfd_first(uint32_t cp) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) return 0x1100 + (cp - 0xAC00) / (21 * 28);  // leading jamo
  const wt::TargetRun* r = find_run(wt::kNfd, wt::kNfd_size, cp);
  return r ? r->target : cp;
}

uint32_t to_lower(uint32_t cp) {
  const wt::DeltaRun* r = find_run(wt::kLowercase, wt::kLowercase_size, cp);
  return r ? static_cast<uint32_t>(static_cast<int64_t>(cp) + r->delta) : cp;
}

bool is_whitespace(uint32_t cp) {  // Unicode White_Space
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_chinese_char(uint32_t cp) {  // the ranges BERT's BasicTokenizer uses
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Decodes the next code point (U+FFFD for an ill-formed byte); advances *i.
uint32_t next_cp(std::string_view s, size_t* i) {
  const int n = utf8_well_formed_len(s.substr(*i));
  if (n <= 0) {
    *i += 1;
    return 0xFFFD;
  }
  const auto* p = reinterpret_cast<const uint8_t*>(s.data() + *i);
  *i += static_cast<size_t>(n);
  switch (n) {
    case 1: return p[0];
    case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
             (p[3] & 0x3Fu);
  }
}

}  // namespace

WpmModel::WpmModel(const Vocab& v) : vocab_(v) {
  for (const std::string& p : v.pieces) max_piece_len_ = std::max(max_piece_len_, p.size());
}

std::vector<std::string> WpmModel::preprocess(std::string_view text) {
  std::vector<std::string> words(1);
  for (size_t i = 0; i < text.size();) {
    const uint32_t cp = nfd_first(next_cp(text, &i));
    if (is_whitespace(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cp == 0 || cp == 0xFFFD || in_ranges(wt::kControl, wt::kControl_size, cp)) continue;
    std::string s;
    append_utf8(s, to_lower(cp));
    if (in_ranges(wt::kPunctuation, wt::kPunctuation_size, cp) ||
        (cp < 0x7F && in_ranges(wt::kSymbol, wt::kSymbol_size, cp)) || is_chinese_char(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WpmModel::encode(std::string_view text, std::vector<int32_t>* out) const {
  for (const std::string& word : preprocess(text)) {
    const std::string w = "\xE2\x96\x81" + word;
    const size_t start_size = out->size();
    bool ok = true;
    for (size_t i = 0; i < w.size();) {
      size_t j = std::min(w.size(), i + max_piece_len_);
      for (; j > i; --j) {
        if (auto id = vocab_.find(std::string_view(w).substr(i, j - i))) {
          out->push_back(*id);
          break;
        }
      }
      if (j == i) {
        ok = false;
        break;
      }
      i = j;
    }
    if (!ok || out->size() == start_size) {
      out->resize(start_size);
      if (vocab_.unk >= 0) out->push_back(vocab_.unk);
    }
  }
}

}  // namespace ts::tokenizer::internal
