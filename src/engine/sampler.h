// Token sampling for one sequence from one row of logits: logit_bias, repetition / frequency /
// presence penalties, temperature, top_k, top_p, min_p, greedy, and logprobs.
//
// Order: raw logits -> logit_bias -> penalties -> (temperature 0: argmax, lowest id on ties)
// -> / temperature -> top_k -> top_p (on the top-k renormalized) -> min_p -> draw.
// Logprobs are log-softmax of the *raw* logits (before bias, penalties and temperature).
// Cost (PERFORMANCE: sampling is on the decode critical path): greedy is one vectorized max
// pass (no copy when there is no mask, bias or penalty); top_k is one threshold-filter pass that
// keeps a buffer of ~2k candidates (select_top_k), never a sort of the vocabulary and no
// full-vocabulary exp; top_p alone needs the normalizer, so it makes one float exp-and-sum pass
// (exp_shifted, 4-wide vectors, nothing stored) and then looks for the nucleus among the best
// 64, 256, 1024 ... tokens (select_top_k) until their mass reaches top_p. Full-vocabulary sums
// are float within 64-element blocks, double across blocks. Draws over the few kept candidates
// stay in double. A given seed, logits and parameters always give the same token.
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

// Kernels (pure; exposed for tests and benchmarks).
//
// out[i] = exp(x[i] * scale - shift) in float (out may be null: the sum only) (|relative error| < 4e-7 against std::exp; an
// argument below -87.3, -inf included, gives exactly 0). block_sums[b] (when non-null, size
// ceil(n / kExpBlock)) = sum of out over block b in float. Returns the sum of all of out (float
// per block, double across blocks).
inline constexpr int32_t kExpBlock = 64;
double exp_shifted(const float* x, int32_t n, float scale, float shift, float* out, float* block_sums);
double exp_shifted_reference(const float* x, int32_t n, float scale, float shift, float* out);
// Largest value of x[0..n) (n > 0); -inf when all are -inf.
float max_value(const float* x, int32_t n);
// The min(k, number of values > -inf) best (value, id) pairs of x[0..n): higher value first,
// equal values lower id first; out is resized and sorted. k > 0.
void select_top_k(const float* x, int32_t n, int32_t k, std::vector<std::pair<float, int32_t>>& out);

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
  std::vector<float> prob_;                      // [n_vocab] exp(scaled logit - max) (top_p, full draws)
  std::vector<float> block_sums_;                // [ceil(n_vocab / kExpBlock)] sums of prob_
};

}  // namespace ts::engine
