// Tokenizers built from GGUF metadata (tokenizer.ggml.*), reproducing llama.cpp token for token.
//
// Supported `tokenizer.ggml.model` values:
//   - "llama": SentencePiece-style BPE driven by piece scores, with byte fallback (<0xNN>),
//     '▁' whitespace escaping and add_space_prefix.
//   - "gpt2": byte-level BPE with ranked merges and a pre-tokenizer chosen by
//     `tokenizer.ggml.pre` (PCRE2 regexes, see pretokenizer.h for the names understood).
//   - "gemma4": SentencePiece-style BPE (Gemma 4): ranked merges over raw UTF-8 characters of
//     each line, ' ' written as '▁', <0xNN> byte fallback, BOS always added with add_special.
//   - "bert": WordPiece (lowercasing, accent-stripping; lossy). With add_special the text is
//     wrapped in [CLS] ... [SEP].
// Anything else ("t5", "rwkv", ...) or an unknown pre-tokenizer name is refused
// by from_gguf with kUnimplemented and a message naming the value.
//
// Special tokens: control (token_type 3), user-defined (4) and unknown (2) tokens are matched in
// the text before the model runs (longest first, as llama.cpp does). Control and unknown tokens
// are only matched when parse_special is true; user-defined tokens are always matched (as
// llama.cpp and Hugging Face's added tokens do). Like llama.cpp, tokens that end generation or
// mark fill-in-the-middle by their text ("</s>", "<|end|>", "<|tool_response>", "<|fim_pad|>",
// ...) are promoted to control first, so e.g. Phi-3's user-defined "</s>" is plain text unless
// parse_special. As in llama.cpp, Phi-3's special tokens also swallow the whitespace after them
// (rstrip, chosen by general.name).
//
// Deliberate differences from llama.cpp, all outside its test vectors: SentencePiece merging
// never forms control/unknown pieces from plain text, and a byte that does not start a
// well-formed UTF-8 character is a symbol of its own (so invalid UTF-8 round-trips through
// byte tokens); the unknown token decodes to its text, not "▅". Likewise in gemma4 text a byte
// that is not well-formed UTF-8 becomes its <0xNN> token (llama.cpp first replaces it by U+FFFD).
//
// Leading space (SentencePiece, add_space_prefix): encode() prefixes " " to a text fragment
// that starts the text or follows a special token. decode() undoes this for the start of the
// text only: it strips one leading space from the first piece when that piece is ids[0], or
// ids[1] right after a BOS. So decode(encode(s, false, false)) == s for any text (except
// WordPiece, which is lossy, and vocabularies missing pieces for some bytes). StreamDecoder
// by default treats its ids as a continuation (generated text after a prompt) and strips nothing;
// see StreamDecoder::Options.
//
// Thread-safety: a Tokenizer is immutable after from_gguf and safe to use from many threads.
// A StreamDecoder is a small per-stream object: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace ts::tokenizer {

class Tokenizer {
 public:
  // Builds the vocabulary, special-token matcher and model once (all maps precomputed).
  // Errors: kDataLoss (tokens missing, arrays of mismatched length, malformed merges),
  // kUnimplemented (unsupported tokenizer.ggml.model or tokenizer.ggml.pre).
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::GgufFile& f);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text (bytes, normally UTF-8; invalid bytes are encoded through byte tokens) to ids.
  // add_special: BOS/EOS according to add_bos()/add_eos() (WordPiece: [CLS] ... [SEP]).
  // parse_special: match control tokens written in the text (e.g. "<|im_start|>") as single
  // ids; when false they are plain text.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Ids to bytes: the concatenation of token_bytes(id), with the SentencePiece leading space
  // stripped at the start of the text (see above). Ids out of range produce nothing.
  std::string decode(std::span<const int32_t> ids) const;

  // The bytes one token produces: byte tokens <0xNN> give that byte, '▁' becomes ' ', byte-level
  // BPE pieces are mapped back to bytes, control/user-defined/unknown tokens give their text,
  // unused tokens give "". "" for ids out of range.
  std::string token_bytes(int32_t id) const;
  // The raw vocabulary string (as stored in the GGUF); "" for ids out of range.
  const std::string& piece(int32_t id) const;
  std::optional<int32_t> find_piece(std::string_view piece) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 when absent
  int32_t eos_id() const;  // -1 when absent
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  // End of generation: eos, eot, eom and the tokens llama.cpp recognises by text
  // (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, <|eom_id|>, ...).
  bool is_eog(int32_t id) const;
  // Control tokens (token_type 3, plus EOG tokens llama.cpp promotes to control).
  bool is_control(int32_t id) const;
  std::string_view model_type() const;  // tokenizer.ggml.model, e.g. "llama", "gpt2"
  std::string_view pre_type() const;    // tokenizer.ggml.pre ("default" when absent)

  struct Impl;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  // Whether decode() would strip the leading space of `id` at the start of the text.
  bool strips_prefix_space(int32_t id) const;
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenization for streaming. push() returns only complete, valid UTF-8: an
// incomplete multi-byte character at the end is held back until its remaining bytes arrive;
// bytes that can never become valid UTF-8 are replaced by U+FFFD as soon as that is certain.
// When decode(ids) is valid UTF-8, the concatenation of push(id)... and finish() equals
// decode(ids) for a decoder with Options{.text_start = true}, and equals the text that ids add
// after a prompt for the default (continuation) decoder.
class StreamDecoder {
 public:
  struct Options {
    // true: the ids start the text (the SentencePiece leading space of the first piece is
    // stripped, as decode() does). false (default): the ids continue an earlier text such as a
    // prompt, so their leading space is kept.
    bool text_start = false;
  };
  explicit StreamDecoder(const Tokenizer& t);
  StreamDecoder(const Tokenizer& t, Options opts);

  std::string push(int32_t id);
  // Flushes what is held (an incomplete character becomes U+FFFD) and resets to the state of a
  // continuation decoder.
  std::string finish();

 private:
  const Tokenizer* tok_;
  std::string pending_;  // bytes not yet emitted: an incomplete UTF-8 sequence (< 4 bytes)
  bool strip_next_space_;  // text_start and no text piece seen yet
  bool seen_any_ = false;  // an id has been pushed (a BOS first keeps strip_next_space_)
};

}  // namespace ts::tokenizer
