#include "engine/spec_ngram.h"

#include <algorithm>

namespace ts::engine {

int32_t ngram_propose(std::span<const int32_t> tokens, const NgramOptions& opts, int32_t k,
                      std::vector<int32_t>& out) {
  out.clear();
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (k <= 0 || opts.ngram_min < 1 || len < opts.ngram_min + 1) return 0;
  const int64_t lo = std::max<int64_t>(0, len - std::max(opts.max_scan, opts.ngram_max + 1));
  for (int32_t n = std::min<int32_t>(opts.ngram_max, static_cast<int32_t>(len - 1)); n >= opts.ngram_min; --n) {
    const int32_t* key = tokens.data() + (len - n);
    // Candidate starts j with the match [j, j + n) ending before the key starts; newest first.
    for (int64_t j = len - n - 1; j >= lo; --j) {
      if (tokens[static_cast<size_t>(j)] != key[0]) continue;
      if (!std::equal(key, key + n, tokens.data() + j)) continue;
      const int64_t from = j + n;  // first token after the match (< len since j + n <= len - 1)
      // Copy k tokens; past the end of `tokens` the copy continues through its own output (the
      // match says the text repeats with period len - from, so the repetition goes on).
      for (int64_t i = 0; i < k; ++i) {
        const int64_t at = from + i;
        out.push_back(at < len ? tokens[static_cast<size_t>(at)] : out[static_cast<size_t>(at - len)]);
      }
      return static_cast<int32_t>(out.size());
    }
  }
  return 0;
}

}  // namespace ts::engine
