#include "tokenizer/special.h"

#include <algorithm>

namespace ts::tokenizer::internal {

namespace {
// C isspace in the "C" locale, as llama.cpp uses for lstrip/rstrip.
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

bool is_special_type(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}
}  // namespace

SpecialSplitter::SpecialSplitter(const Vocab& v) : vocab_(v) {
  rank_.assign(static_cast<size_t>(v.size()), -1);
  for (int32_t id = 0; id < v.size(); ++id) {
    // Duplicate texts: only the id the piece map resolves to (llama.cpp matches by text).
    if (is_special_type(v.type(id)) && !v.pieces[static_cast<size_t>(id)].empty()) {
      order_.push_back(id);
    }
  }
  std::stable_sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    return v.pieces[static_cast<size_t>(a)].size() > v.pieces[static_cast<size_t>(b)].size();
  });
  for (size_t i = 0; i < order_.size(); ++i) {
    rank_[static_cast<size_t>(order_[i])] = static_cast<int32_t>(i);
  }

  trie_.emplace_back();
  for (int32_t id : order_) {
    int32_t node = 0;
    for (char c : v.pieces[static_cast<size_t>(id)]) {
      const auto b = static_cast<uint8_t>(c);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(trie_.size());
        trie_.emplace_back();
        auto& ch = trie_[static_cast<size_t>(node)].children;
        ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t{-1})),
                  {b, next});
      }
      node = next;
    }
    // Two special tokens with the same text: the first in order (lower id) is tried first and
    // consumes every occurrence, so it is the one kept.
    if (trie_[static_cast<size_t>(node)].token < 0) trie_[static_cast<size_t>(node)].token = id;
  }
}

int32_t SpecialSplitter::child(int32_t node, uint8_t b) const {
  const auto& ch = trie_[static_cast<size_t>(node)].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t{-1}));
  return (it != ch.end() && it->first == b) ? it->second : -1;
}

void SpecialSplitter::split(std::string_view text, bool parse_special,
                            std::vector<Fragment>* out) const {
  if (text.empty()) return;
  auto allowed = [&](int32_t id) {
    return parse_special || vocab_.type(id) == TokenType::kUserDefined;
  };

  // Which special tokens occur anywhere in the text (a superset of those that will match).
  std::vector<int32_t> present;  // ranks
  if (order_.size() > 0) {
    for (size_t i = 0; i < text.size(); ++i) {
      int32_t node = 0;
      for (size_t j = i; j < text.size(); ++j) {
        node = child(node, static_cast<uint8_t>(text[j]));
        if (node < 0) break;
        int32_t tok = trie_[static_cast<size_t>(node)].token;
        if (tok >= 0 && allowed(tok)) present.push_back(rank_[static_cast<size_t>(tok)]);
      }
    }
  }
  if (present.empty()) {
    out->push_back(Fragment{-1, 0, text.size()});
    return;
  }
  std::sort(present.begin(), present.end());
  present.erase(std::unique(present.begin(), present.end()), present.end());

  std::vector<Fragment> frags{Fragment{-1, 0, text.size()}};
  std::vector<Fragment> next;
  for (int32_t r : present) {
    const int32_t id = order_[static_cast<size_t>(r)];
    const std::string_view tok_text = vocab_.pieces[static_cast<size_t>(id)];
    const uint8_t strip = vocab_.strip[static_cast<size_t>(id)];
    const bool lstrip = (strip & Vocab::kLstrip) != 0;
    const bool rstrip = (strip & Vocab::kRstrip) != 0;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view body = text.substr(f.offset, f.length);
      size_t start = 0;
      while (true) {
        size_t m = body.find(tok_text, start);
        if (m == std::string_view::npos) break;
        size_t left_end = m;
        if (lstrip) {
          while (left_end > start && is_space(body[left_end - 1])) --left_end;
        }
        if (left_end > start) next.push_back(Fragment{-1, f.offset + start, left_end - start});
        next.push_back(Fragment{id, f.offset + m, tok_text.size()});
        start = m + tok_text.size();
        if (rstrip) {
          while (start < body.size() && is_space(body[start])) ++start;
        }
      }
      if (start < body.size()) next.push_back(Fragment{-1, f.offset + start, body.size() - start});
    }
    frags.swap(next);
  }
  out->insert(out->end(), frags.begin(), frags.end());
}

}  // namespace ts::tokenizer::internal
