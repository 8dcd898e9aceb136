// The vocabulary read from GGUF metadata: pieces, scores, token types, special ids and the
// add_bos/add_eos/add_space_prefix flags with llama.cpp's per-model defaults. Internal to the
// tokenizer module. Immutable after load; safe to share between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tokenizer/flat_index.h"

namespace ts::tokenizer::internal {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre, "default" when absent

  std::vector<std::string> pieces;  // [n_vocab]; never resized after load (map views point in)
  std::vector<float> scores;        // [n_vocab]; 0 when the GGUF has none
  std::vector<TokenType> types;     // [n_vocab]; kNormal when the GGUF has none
  std::vector<uint8_t> eog;         // [n_vocab]; 1 for end-of-generation tokens
  // [n_vocab]; kLstrip/kRstrip: matching this special token also swallows the whitespace
  // before/after it (set per model name, as llama.cpp does for Phi-3 and Jina).
  std::vector<uint8_t> strip;
  static constexpr uint8_t kLstrip = 1;
  static constexpr uint8_t kRstrip = 2;
  // piece -> id; on duplicate pieces the highest id wins (as llama.cpp's map assignment).
  PieceIndex piece_to_id;

  int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;
  int32_t sep = -1;  // WordPiece [SEP]
  bool add_bos = false;
  bool add_eos = false;
  bool add_sep = false;  // WordPiece: [SEP] closes the text when special tokens are added
  bool add_space_prefix = false;

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  std::optional<int32_t> find(std::string_view piece) const {
    const int32_t id = piece_to_id.find(piece);
    if (id < 0) return std::nullopt;
    return id;
  }
  TokenType type(int32_t id) const { return types[static_cast<size_t>(id)]; }
};

// Reads pieces, scores, types and special ids. `model` decides the defaults for add_bos etc.;
// `default_add_bos` is the per-pre-tokenizer default for BPE (llama3-family vocabularies add BOS).
// Errors: kDataLoss when tokens are missing or arrays disagree in length.
Status load_vocab(const gguf::GgufFile& f, bool default_add_bos, bool default_space_prefix,
                  Vocab* v);

}  // namespace ts::tokenizer::internal
