// SentencePiece-style BPE (tokenizer.ggml.model = "llama"), as llama.cpp's llm_tokenizer_spm:
// the text is split into UTF-8 characters, then the adjacent pair whose concatenation is the
// highest-scoring vocabulary piece is merged (ties: leftmost first) until no pair is a piece.
// Symbols that are not pieces fall back to byte tokens <0xNN> (a byte that does not start a
// well-formed UTF-8 character is a symbol of its own, so invalid input round-trips). Merging uses a priority queue
// over a linked list of symbols: O(n log n). Control and unknown pieces are never produced by
// merging (SentencePiece treats them as unreachable from text); llama.cpp would merge them.
// Immutable; encode() is thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ts::tokenizer::internal {

class SpmModel {
 public:
  explicit SpmModel(const Vocab& v);
  // Encodes already-escaped text ('▁' for spaces); appends ids.
  void encode(std::string_view text, std::vector<int32_t>* out) const;
  // The id for one byte: <0xNN>, else the one-byte piece, else unk.
  int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }

 private:
  const Vocab& vocab_;
  int32_t byte_tokens_[256];
};

// ' ' -> "▁" (U+2581).
std::string escape_whitespace(std::string_view text);

}  // namespace ts::tokenizer::internal
