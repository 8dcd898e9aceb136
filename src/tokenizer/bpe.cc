#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"

namespace ts::tokenizer::internal {
namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  int32_t id;     // symbol id (vocab id, extra id, or -1 when the text is unknown)
  size_t offset;  // first byte of the word this symbol covers
  size_t n;       // bytes of the word covered; 0 once merged into its left neighbour
};

struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t result;
};

struct BigramGreater {
  // std::priority_queue pops the greatest; we want the lowest rank, then the lowest left.
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// Merges adjacent symbols by rank until no pair has one; `symbols` is a linked list from 0.
void merge_symbols(const PairMap& merges, std::vector<Symbol>& symbols) {
  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t a = symbols[static_cast<size_t>(left)].id;
    const int32_t b = symbols[static_cast<size_t>(right)].id;
    if (a < 0 || b < 0) return;
    const PairMap::Value* m = merges.find(a, b);
    if (m == nullptr) return;
    queue.push(Bigram{m->rank, left, right, a, b, m->result});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }
  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(bg.left)];
    Symbol& r = symbols[static_cast<size_t>(bg.right)];
    // Stale: one side merged since, or changed (its id differs).
    if (l.n == 0 || r.n == 0 || l.next != bg.right || l.id != bg.left_id || r.id != bg.right_id) {
      continue;
    }
    l.n += r.n;
    l.id = bg.result;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }
}

}  // namespace

int32_t BpeModel::symbol_id(std::string_view text) const {
  if (auto id = vocab_.find(text)) return *id;
  const int32_t extra = extra_ids_.find(text);
  return extra < 0 ? -1 : vocab_.size() + extra;
}

int32_t BpeModel::intern(std::string_view text) {
  int32_t id = symbol_id(text);
  if (id >= 0) return id;
  extra_texts_.emplace_back(text);
  return vocab_.size() + extra_ids_.add(extra_texts_.back());
}

std::string_view BpeModel::symbol_text(int32_t id) const {
  if (id < vocab_.size()) return vocab_.pieces[static_cast<size_t>(id)];
  return extra_texts_[static_cast<size_t>(id - vocab_.size())];
}

Result<std::unique_ptr<BpeModel>> BpeModel::create(const Vocab& v,
                                                   const std::vector<std::string>& merges,
                                                   const PreConfig& pre) {
  std::unique_ptr<BpeModel> m(new BpeModel(v));
  TS_ASSIGN_OR_RETURN(m->pre_, PreTokenizer::create(pre.patterns));
  m->ignore_merges_ = pre.ignore_merges;
  m->spm_style_ = pre.spm_style;
  m->merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& line = merges[rank];
    // The separator is the first space after the first character (a piece may be " " itself).
    const size_t sp = line.find(' ', 1);
    if (sp == std::string::npos) {
      return data_loss("tokenizer.ggml.merges[" + std::to_string(rank) + "] has no space: \"" +
                       line + "\"");
    }
    std::string_view a(line.data(), sp);
    std::string_view b(line.data() + sp + 1, line.size() - sp - 1);
    const int32_t ia = m->intern(a);
    const int32_t ib = m->intern(b);
    joined.assign(a);
    joined.append(b);
    const int32_t ir = m->intern(joined);
    // The first (lowest-rank) occurrence of a pair wins.
    m->merges_.insert_if_absent(ia, ib, PairMap::Value{static_cast<int32_t>(rank), ir});
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    m->byte_symbol_[b] = m->symbol_id(byte_to_unicode_utf8(static_cast<uint8_t>(b)));
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    m->byte_token_[b] = v.find(std::string_view(name, sizeof(name))).value_or(-1);
  }
  return m;
}

void BpeModel::encode(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<std::pair<size_t, size_t>> words;
  if (spm_style_) {
    const std::string escaped = escape_whitespace(text);
    pre_->split(escaped, &words);
    for (const auto& [off, len] : words) {
      encode_word_spm(std::string_view(escaped).substr(off, len), out);
    }
    return;
  }
  pre_->split(text, &words);
  for (const auto& [off, len] : words) encode_word(text.substr(off, len), out);
}

void BpeModel::encode_word_spm(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (word.find_first_not_of('\n') == std::string_view::npos) {
    if (auto id = vocab_.find(word)) {
      out->push_back(*id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const size_t n = std::min(word.size() - off, utf8_seq_len(static_cast<uint8_t>(word[off])));
    const auto idx = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{idx - 1, off + n == word.size() ? -1 : idx + 1,
                             symbol_id(word.substr(off, n)), off, n});
    off += n;
  }
  merge_symbols(merges_, symbols);
  for (int32_t i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    if (s.id >= 0 && s.id < vocab_.size()) {
      out->push_back(s.id);
      continue;
    }
    for (char c : word.substr(s.offset, s.n)) {  // byte fallback; bytes without a token vanish
      const int32_t id = byte_token_[static_cast<uint8_t>(c)];
      if (id >= 0) out->push_back(id);
    }
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_ || word.size() == 1) {
    const std::string mapped = bytes_to_byte_level(word);
    if (auto id = vocab_.find(mapped)) {
      out->push_back(*id);
      return;
    }
  }

  // One symbol per byte: byte-level BPE sees each byte as one mapped code point.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const auto idx = static_cast<int32_t>(i);
    symbols.push_back(Symbol{idx - 1, i + 1 == word.size() ? -1 : idx + 1,
                             byte_symbol_[static_cast<uint8_t>(word[i])], i, 1});
  }

  merge_symbols(merges_, symbols);

  for (int32_t i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    if (s.id >= 0 && s.id < vocab_.size()) {
      out->push_back(s.id);
      continue;
    }
    // Not a vocabulary piece: like llama.cpp, emit the one-byte pieces of its mapped text that
    // exist (only ASCII-mapped bytes can match).
    const std::string mapped = bytes_to_byte_level(word.substr(s.offset, s.n));
    for (char c : mapped) {
      if (auto id = vocab_.find(std::string_view(&c, 1))) out->push_back(*id);
    }
  }
}

}  // namespace ts::tokenizer::internal
