// Attention over the paged KV cache (PERFORMANCE.md "Attention over paged KV").
// Pure functions over the model's activations and a KvStorage; the engine thread calls them
// through Model::forward.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "model/kv_storage.h"
#include "model/model.h"

namespace ts::model {

struct AttentionParams {
  int32_t n_head = 0;     // query heads
  int32_t n_head_kv = 0;  // key/value heads (GQA groups of n_head / n_head_kv)
  int32_t head_dim = 0;
  float scale = 1.f;      // 1/sqrt(head_dim)
  int32_t window = 0;     // > 0: a query at pos attends only to (pos - window, pos] (sliding window)
};

// Per-thread buffers, grown on demand.
struct AttentionScratch {
  std::vector<std::vector<float>> per_thread;
  std::vector<int64_t> first;  // first batch token of each sequence
};

// Stores the new tokens' K and V ([T][n_head_kv*head_dim], rows in batch order) into each
// sequence's blocks at positions start_pos.. of `layer`, converting to the storage type.
void write_kv(KvStorage& kv, int32_t layer, std::span<const SeqSlice> seqs, const float* k,
              const float* v);

// Causal attention for every token of the batch: out[t][h*head_dim..] = softmax(q·K^T·scale)·V
// over positions 0..pos(t) of its own sequence (max(0, pos(t) - window + 1)..pos(t) when
// p.window > 0). Work is split over (sequence, KV head) items.
void paged_attention(const KvStorage& kv, int32_t layer, const AttentionParams& p,
                     std::span<const SeqSlice> seqs, const float* q, float* out,
                     AttentionScratch& scratch, ThreadPool* pool);

}  // namespace ts::model
