// Splits text on special-token strings before the model runs, as llama.cpp's
// tokenizer_st_partition does: special tokens are tried longest first (ties: lower id first);
// each one splits every remaining text fragment at all its non-overlapping occurrences, left to
// right. Control and unknown tokens take part only with parse_special; user-defined tokens always.
// Tokens marked lstrip/rstrip (Vocab::strip) also swallow the whitespace before/after them.
// A trie finds which special tokens occur at all, so the common case (none) costs one pass.
// Immutable after construction; split() is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ts::tokenizer::internal {

struct Fragment {
  int32_t token = -1;  // a special token id, or -1 for raw text [offset, offset + length)
  size_t offset = 0;
  size_t length = 0;
};

class SpecialSplitter {
 public:
  explicit SpecialSplitter(const Vocab& v);
  // Appends the fragments of `text` (raw text fragments are never empty).
  void split(std::string_view text, bool parse_special, std::vector<Fragment>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                 // token ending here
  };
  int32_t child(int32_t node, uint8_t b) const;

  const Vocab& vocab_;
  std::vector<Node> trie_;
  // Special-token ids in llama.cpp's order: text length descending, then id ascending.
  std::vector<int32_t> order_;
  std::vector<int32_t> rank_;  // [n_vocab]: position in order_, -1 when not special
};

}  // namespace ts::tokenizer::internal
