// Token sampling for one sequence from one row of logits: logit_bias, repetition / frequency /
// presence penalties, temperature, top_k, top_p, min_p, greedy, and logprobs.
//
// Order: raw logits -> logit_bias -> penalties -> (temperature 0: argmax, lowest id on ties)
// -> / temperature -> top_k -> top_p (on the top-k renormalized) -> min_p -> draw.
// Logprobs are log-softmax of the *raw* logits (before bias, penalties and temperature).
// top_k / top_p select on a partial order (nth_element + sort of a growing prefix), never a
// full sort of the vocabulary.
//
// Rng is a per-sequence generator (xoshiro256**): a request's draws depend only on its seed
// and its own tokens, never on what else is in the batch.
//
// Not thread-safe: one Sampler per thread (it keeps scratch buffers).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace ts::engine {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  // Uniform in [0, 1), 53 random bits.
  double uniform();

 private:
  uint64_t s_[4];
};

// Per-sequence seed from a request seed and the choice index (different choices differ).
uint64_t choice_seed(uint64_t request_seed, int32_t index);

class Sampler {
 public:
  explicit Sampler(int32_t n_vocab);

  // Picks the next token. logits: [n_vocab] raw model output (not modified). prompt/output:
  // the sequence's tokens so far (penalties). When lp is non-null it receives the sampled
  // token's logprob and `top_logprobs` alternatives. `allowed` (constrained decoding): when
  // non-empty, a bitset of ceil(n_vocab / 64) words (bit t of word t / 64 = token t allowed,
  // at least one set); only allowed tokens can be drawn, under every other parameter (they act
  // on the allowed tokens as if the others had probability 0). Logprobs stay those of the raw logits.
  int32_t sample(std::span<const float> logits, const SamplingParams& params,
                 std::span<const int32_t> prompt, std::span<const int32_t> output, Rng& rng,
                 LogprobEntry* lp, std::span<const uint64_t> allowed = {});

  // Log-softmax of logits at `token`, and the n most likely (ties: lower id first).
  static void logprobs(std::span<const float> logits, int32_t token, int32_t n, LogprobEntry* out);

 private:
  void apply_penalties(const SamplingParams& p, std::span<const int32_t> prompt,
                       std::span<const int32_t> output);

  int32_t n_vocab_;
  std::vector<float> work_;                      // [n_vocab] processed logits
  std::vector<uint32_t> stamp_;                  // [n_vocab] token seen marker (generation)
  std::vector<int32_t> count_;                   // [n_vocab] output counts (valid if stamped)
  uint32_t gen_ = 0;
  std::vector<std::pair<float, int32_t>> cand_;  // candidates (scaled logit, id)
  std::vector<int32_t> ids_;                     // allowed token ids (masked sampling)
};

}  // namespace ts::engine
