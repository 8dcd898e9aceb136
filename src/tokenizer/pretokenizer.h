// Pre-tokenizers for byte-level BPE: the regex lists llama.cpp applies per tokenizer.ggml.pre,
// run with PCRE2 (UTF, UCP, JIT when available).
//
// Several regexes apply in sequence: each one runs inside every piece the previous one produced
// (it cannot see across piece borders), and the text between its matches stays a piece too.
// Invalid UTF-8 is tolerated: bytes that are not UTF-8 match no class and end up in gap pieces.
// Immutable after create(); split() is thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ts::tokenizer::internal {

struct PreConfig {
  std::string canonical;              // e.g. "llama3", "qwen2", "gpt2"
  std::vector<std::string> patterns;  // applied in sequence
  bool ignore_merges = false;         // a word already in the vocab is taken whole (llama3)
  bool add_bos = false;               // default add_bos when the GGUF has no key
  // SentencePiece-style BPE (Gemma 4): ' ' is written as U+2581 before merging, symbols are
  // raw UTF-8 characters (no GPT-2 byte mapping), pieces missing from the vocabulary fall back
  // to <0xNN> byte tokens, and add_bos is forced on (as llama.cpp does).
  bool spm_style = false;
};

// The configuration for a tokenizer.ggml.pre value ("" or "default" = llama.cpp's default
// list). Error kUnimplemented for names this build does not know.
Result<PreConfig> pre_config(std::string_view pre);

class PreTokenizer {
 public:
  // Compiles the patterns. Error kInternal when PCRE2 rejects one (with its message).
  static Result<std::unique_ptr<PreTokenizer>> create(const std::vector<std::string>& patterns);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits `text` into consecutive non-empty pieces covering it; appends [offset, length) pairs.
  void split(std::string_view text, std::vector<std::pair<size_t, size_t>>* pieces) const;

 private:
  PreTokenizer() = default;
  struct Compiled;
  std::vector<Compiled> regexes_;
};

}  // namespace ts::tokenizer::internal
