// WordPiece (tokenizer.ggml.model = "bert"), as llama.cpp's llm_tokenizer_wpm: the text is
// normalised per code point (first code point of its NFD decomposition, then lowercase;
// NUL, U+FFFD and control characters dropped), split on whitespace, with punctuation, ASCII
// symbols and CJK ideographs as one-character words; each word, prefixed with '▁', is cut
// greedily into the longest vocabulary pieces from the left. A word that cannot be cut
// entirely becomes [UNK]. Lowercasing and accent stripping make it lossy: decode(encode(s))
// is not s in general. Immutable; encode() is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ts::tokenizer::internal {

class WpmModel {
 public:
  explicit WpmModel(const Vocab& v);
  void encode(std::string_view text, std::vector<int32_t>* out) const;

  // The normalised words (exposed for tests).
  static std::vector<std::string> preprocess(std::string_view text);

 private:
  const Vocab& vocab_;
  size_t max_piece_len_ = 0;
};

}  // namespace ts::tokenizer::internal
