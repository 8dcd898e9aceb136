// Byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp's llm_tokenizer_bpe: the text is
// pre-tokenized into words (pretokenizer.h), each word's bytes are mapped to GPT-2's printable
// code points, and within a word the adjacent pair with the lowest merge rank is merged (ties:
// leftmost first) until no pair has a rank.
//
// SentencePiece-style BPE (PreConfig::spm_style, tokenizer.ggml.model = "gemma4"): the same
// merging, but ' ' is first written as U+2581, the initial symbols are the raw UTF-8 characters
// of the word (a lead byte announces the length, as llama.cpp's unicode_len_utf8), a word made
// only of newlines that is itself a piece is taken whole, and a final symbol that is not a
// vocabulary piece becomes its bytes' <0xNN> tokens. Merging uses a priority queue over a linked list of
// symbols (O(n log n) per word); nothing is cached across calls.
//
// Merges are keyed by symbol ids: vocabulary ids, plus ids >= n_vocab for merge operands that
// are not vocabulary pieces, so no strings are built while merging.
// Immutable after create(); encode() is thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/flat_index.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace ts::tokenizer::internal {

class BpeModel {
 public:
  // Errors: kDataLoss for a merge without a separating space; kInternal if a regex fails.
  static Result<std::unique_ptr<BpeModel>> create(const Vocab& v,
                                                  const std::vector<std::string>& merges,
                                                  const PreConfig& pre);
  // Encodes raw text (bytes); appends ids.
  void encode(std::string_view text, std::vector<int32_t>* out) const;

 private:
  BpeModel(const Vocab& v) : vocab_(v) {}
  // Symbol id for a text: a vocab id, an extra id, or -1.
  int32_t symbol_id(std::string_view text) const;
  int32_t intern(std::string_view text);
  void encode_word(std::string_view word_bytes, std::vector<int32_t>* out) const;
  void encode_word_spm(std::string_view word, std::vector<int32_t>* out) const;
  std::string_view symbol_text(int32_t id) const;

  const Vocab& vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  bool ignore_merges_ = false;
  bool spm_style_ = false;
  PairMap merges_;                       // (left, right) -> (rank, merged symbol id)
  std::deque<std::string> extra_texts_;  // texts of ids >= n_vocab (stable addresses)
  PieceIndex extra_ids_;                 // text -> id - n_vocab
  int32_t byte_symbol_[256];  // symbol id of each byte's mapped code point, -1 if none
  int32_t byte_token_[256];   // spm_style: the <0xNN> token of each byte, -1 if none
};

}  // namespace ts::tokenizer::internal
