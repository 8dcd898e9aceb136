#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ts::tokenizer {

using internal::utf8_well_formed_len;

StreamDecoder::StreamDecoder(const Tokenizer& t) : StreamDecoder(t, Options{}) {}

StreamDecoder::StreamDecoder(const Tokenizer& t, Options opts)
    : tok_(&t), strip_next_space_(opts.text_start && t.add_space_prefix()) {}

std::string StreamDecoder::push(int32_t id) {
  std::string bytes = tok_->token_bytes(id);
  if (strip_next_space_) {
    // Same rule as Tokenizer::decode: the first id, or the one right after a leading BOS.
    if (!(seen_any_ == false && id == tok_->bos_id())) {
      strip_next_space_ = false;
      if (tok_->strips_prefix_space(id)) bytes.erase(0, 1);
    }
  }
  seen_any_ = true;
  pending_ += bytes;

  // Emit every complete sequence; replace what can never complete; hold an incomplete tail.
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const int n = utf8_well_formed_len(std::string_view(pending_).substr(i));
    if (n > 0) {
      out.append(pending_, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    } else if (n < 0) {
      break;  // valid prefix of a character whose remaining bytes have not arrived yet
    } else {
      // Ill-formed: replace the maximal subpart (lead byte plus the continuation bytes that fit).
      size_t skip = 1;
      while (i + skip < pending_.size() &&
             utf8_well_formed_len(std::string_view(pending_).substr(i, skip + 1)) == -1) {
        ++skip;
      }
      out += "\xEF\xBF\xBD";
      i += skip;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = pending_.empty() ? std::string() : internal::utf8_sanitize(pending_);
  pending_.clear();
  strip_next_space_ = false;
  seen_any_ = true;
  return out;
}

}  // namespace ts::tokenizer
