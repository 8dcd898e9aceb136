#include "engine/batch_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>

namespace ts::engine {
// Stops after the first block holding a bad value.
bool all_finite(const float* x, size_t n) {
  constexpr uint32_t kExp = 0x7f800000u;
  constexpr size_t kBlock = 4096;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = std::min(n, b + kBlock);
    uint32_t bad = 0;
    for (size_t i = b; i < e; ++i) {
      uint32_t u;
      std::memcpy(&u, x + i, sizeof(u));
      bad |= static_cast<uint32_t>((u & kExp) == kExp);
    }
    if (bad != 0) return false;
  }
  return true;
}

void BatchSampler::sample(ThreadPool& pool, std::span<SampleRow> rows) {
  const size_t nt = static_cast<size_t>(std::max(1, pool.num_threads()));
  if (samplers_.size() < nt) {
    samplers_.clear();
    for (size_t i = 0; i < nt; ++i) samplers_.push_back(std::make_unique<Sampler>(n_vocab_));
    busy_ = std::make_unique<std::atomic<bool>[]>(nt);
    for (size_t i = 0; i < nt; ++i) busy_[i].store(false);
  }
  const size_t V = static_cast<size_t>(n_vocab_);
  pool.parallel_chunks(static_cast<int64_t>(rows.size()), 1, [&](int64_t b, int64_t e) {
    // At most one chunk per pool thread runs at a time, so a free sampler always exists.
    size_t k = 0;
    for (bool f = false;; k = (k + 1) % nt, f = false) {
      if (busy_[k].compare_exchange_strong(f, true)) break;
    }
    Sampler& sm = *samplers_[k];
    for (int64_t j = b; j < e; ++j) {
      SampleRow& r = rows[static_cast<size_t>(j)];
      r.ready = false;
      if (!all_finite(r.logits, V)) continue;
      try {
        r.token = sm.sample(std::span<const float>(r.logits, V), *r.params, r.prompt, r.output, *r.rng,
                            r.params->logprobs ? &r.lp : nullptr);
        r.ready = true;
      } catch (const std::exception&) {
        // Left to the caller, which samples the row again under its own guard.
      }
    }
    busy_[k].store(false);
  });
}

}  // namespace ts::engine
