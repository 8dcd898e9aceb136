// Samples many sequences' logits rows of one step in parallel on the engine's pool.
//
// Each row draws from its own sequence's Rng with its own parameters, so the tokens are exactly
// those of sampling the rows one after another with one Sampler (the Sampler keeps only
// scratch state). Rows run in chunks claimed by whichever pool threads are free; each chunk
// borrows one of num_threads Samplers, so memory is num_threads vocabulary-sized buffers.
//
// Not thread-safe: the engine thread only (like ThreadPool::parallel_chunks).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "engine/request.h"
#include "engine/sampler.h"

namespace ts::engine {

// One row to sample (no token mask: constrained rows stay on the serial path).
struct SampleRow {
  const float* logits = nullptr;     // [n_vocab] raw model output
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt;   // penalties
  std::span<const int32_t> output;
  Rng* rng = nullptr;                // the sequence's generator (advanced as by Sampler::sample)
  // Results.
  bool ready = false;                // token drawn; false: the row had a non-finite logit or
                                     // sampling threw (the caller handles the row itself)
  int32_t token = -1;
  LogprobEntry lp;                   // when params->logprobs
};

// True when no logit is inf or NaN: exponent bits tested with an integer OR per 4096-value block
// (a loop the compiler vectorizes, unlike an isfinite scan that may exit at every element).
bool all_finite(const float* x, size_t n);

class BatchSampler {
 public:
  explicit BatchSampler(int32_t n_vocab) : n_vocab_(n_vocab) {}
  // Samples every row (in parallel when the pool has threads and there are two rows or more).
  void sample(ThreadPool& pool, std::span<SampleRow> rows);

 private:
  int32_t n_vocab_;
  std::vector<std::unique_ptr<Sampler>> samplers_;
  std::unique_ptr<std::atomic<bool>[]> busy_;
};

}  // namespace ts::engine
