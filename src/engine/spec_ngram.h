// Prompt-lookup (n-gram) drafting for speculative decoding: the next tokens are guessed by
// finding the sequence's latest n tokens earlier in its own prompt + output and copying what
// followed them there. Free to compute, no model, and very effective on input-grounded text
// (quoting, summarizing, editing, code edits) where the output repeats spans of the input.
//
// Pure function, thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ts::engine {

struct NgramOptions {
  int32_t ngram_min = 1;             // shortest suffix tried as the lookup key (>= 1)
  int32_t ngram_max = 4;             // longest suffix tried first (>= ngram_min)
  int32_t max_scan = 8192;           // only the last max_scan tokens are searched (bounded cost)
};

// Proposes up to k tokens to follow `tokens`. For n from ngram_max down to ngram_min, looks for
// the most recent earlier occurrence of the last n tokens (not overlapping the suffix itself)
// and copies the k tokens that followed it, continuing through the copy itself where the match
// is so recent that fewer than k tokens follow it (periodic text: the period repeats); the
// longest key that matches wins. `out`
// is cleared and receives the proposal; returns its size (k, or 0 when nothing matches, k <= 0 or
// tokens is shorter than ngram_min + 1).
int32_t ngram_propose(std::span<const int32_t> tokens, const NgramOptions& opts, int32_t k,
                      std::vector<int32_t>& out);

}  // namespace ts::engine
