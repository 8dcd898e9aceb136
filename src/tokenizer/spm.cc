#include "tokenizer/spm.h"

#include <cstdio>
#include <queue>
#include <string>

#include "tokenizer/unicode.h"

namespace ts::tokenizer::internal {
namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  size_t offset;  // into the text
  size_t n;       // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  size_t size;  // bytes of the merged text, to detect stale entries
};

struct BigramLess {
  // std::priority_queue pops the greatest: highest score, then lowest left index.
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

std::string escape_whitespace(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out += "\xE2\x96\x81";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

SpmModel::SpmModel(const Vocab& v) : vocab_(v) {
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    auto id = v.find(buf);
    if (!id) id = v.find(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id ? *id : v.unk;
  }
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    // One UTF-8 character per symbol. Bytes that do not start a well-formed character are
    // symbols of their own (llama.cpp takes the lead byte's announced length, which can swallow
    // the start of the next character; for valid UTF-8 both agree).
    const int wf = utf8_well_formed_len(text.substr(off));
    const size_t n = wf > 0 ? static_cast<size_t>(wf) : 1;
    const auto idx = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{idx - 1, off + n == text.size() ? -1 : idx + 1, off, n});
    off += n;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    std::string_view merged = text.substr(l.offset, l.n + r.n);
    auto id = vocab_.find(merged);
    if (!id) return;
    const TokenType t = vocab_.type(*id);
    if (t == TokenType::kControl || t == TokenType::kUnknown) return;
    queue.push(Bigram{vocab_.scores[static_cast<size_t>(*id)], left, right, merged.size()});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }

  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(bg.left)];
    Symbol& r = symbols[static_cast<size_t>(bg.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    std::string_view piece = text.substr(s.offset, s.n);
    auto id = vocab_.find(piece);
    if (id) {
      out->push_back(*id);
      continue;
    }
    for (char c : piece) {
      const int32_t b = byte_tokens_[static_cast<uint8_t>(c)];
      if (b >= 0) out->push_back(b);
    }
  }
}

}  // namespace ts::tokenizer::internal
