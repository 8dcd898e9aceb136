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
  // F16 KV only: true (the default) llama.cpp's fp16 V accumulator, reproduced bit for bit;
  // false the f32 accumulator of the F32/Q8_0 path (opt-in, see paged_attention).
  bool f16_ggml = true;
};

// Work item of the tiled attention: one sequence, one KV head, a tile of its queries, and one
// chunk of kKvChunk key positions (or all keys when the tile's context fits in one chunk).
struct AttentionItem {
  int32_t seq = 0, kv_head = 0;
  // KV heads [kv_head, kv_head_end) run one after another (kv_head_end = 0: just kv_head). A
  // decode step's one-token sequences get items spanning several KV heads (one item per
  // sequence when there are enough sequences to feed the threads); the item then also runs
  // the sequence's prologue for those heads when paged_attention was given one.
  int32_t kv_head_end = 0;
  int32_t q_begin = 0, q_end = 0;  // query tokens [q_begin, q_end) of the sequence
  int32_t k_begin = 0, k_end = 0;  // key positions [k_begin, k_end) this item reads
  // Query heads [head_begin, head_end) of the KV head's group (head_end = 0: the whole group).
  // A layer with fewer items than threads (decode of one or two sequences) splits its groups so
  // every thread gets work; each head's arithmetic does not depend on the split.
  int32_t head_begin = 0, head_end = 0;
  int64_t partial = -1;            // >= 0: slot of its unnormalized (m, s, acc) in scratch.partials
  int64_t cost = 0;                // query x key pairs, for largest-first scheduling
};
// Query tiles whose keys span several chunks: their items' partials, merged in chunk order.
struct AttentionMerge {
  int32_t seq = 0, kv_head = 0, q_begin = 0, q_end = 0;
  int64_t first_partial = 0;
  int32_t num_parts = 0;
};

// Buffers reused across calls, grown on demand (per-thread tiles live in thread-local storage).
struct AttentionScratch {
  std::vector<std::vector<float>> per_thread;  // paged_attention_reference only
  std::vector<int64_t> first;                  // first batch token of each sequence
  std::vector<AttentionItem> items;
  std::vector<AttentionMerge> merges;
  std::vector<float> partials;  // per partial slot: m [rows], s [rows], acc [rows][head_dim]
  // Per (sequence, KV head): the call's epoch once its prologue has run (paged_attention runs
  // the prologue units and the items in one pool job; an item waits for its heads' stamps).
  std::vector<uint32_t> ready;
  uint32_t epoch = 0;
};

// Work a layer does on the new tokens of one sequence before attention may read them: bias,
// q/k norms, RoPE and the KV store, for KV heads [kv_begin, kv_end) and their GQA groups'
// query heads. Per head independent of every other head and sequence, so it may run on any
// thread; it must touch only those heads' q/k/v values and KV slots.
struct AttentionPrologue {
  void (*fn)(void* ctx, int32_t seq, int32_t kv_begin, int32_t kv_end) = nullptr;
  void* ctx = nullptr;
  void operator()(int32_t seq, int32_t kv_begin, int32_t kv_end) const { fn(ctx, seq, kv_begin, kv_end); }
};

// Block tables: each SeqSlice's block_table (the caller passes the layer's KV group's tables).
// With a window, blocks wholly before the window of the slice's first query may be
// KvLayout::kNoBlock: neither function reads or writes them.
//
// Stores the new tokens' K and V ([T][n_head_kv*head_dim], rows in batch order) into each
// sequence's blocks at positions start_pos.. of `layer`, converting to the storage type.
// Only KV heads [head_begin, head_end) when head_end > 0 (k and v keep their full row stride).
void write_kv(KvStorage& kv, int32_t layer, std::span<const SeqSlice> seqs, const float* k,
              const float* v, int32_t head_begin = 0, int32_t head_end = 0);

// Causal attention for every token of the batch: out[t][h*head_dim..] = softmax(q·K^T·scale)·V
// over positions 0..pos(t) of its own sequence (max(0, pos(t) - window + 1)..pos(t) when
// p.window > 0). q: [T][n_head*head_dim], out: same shape.
//
// Flash-style (PERFORMANCE.md "Attention over paged KV"): work items are (sequence, KV head,
// tile of up to kQueryTile queries), run largest first on the pool (one long prompt still
// feeds every thread); each item keeps the GQA group's query heads together and walks its keys
// in tiles of 16 positions, each K/V tile converted from the cache once for all the item's
// queries and heads (F16 and Q8_0 values are read straight from the pages into the tile), and
// tiles past the item's last query (causal) or before its window are never read. Within a key
// tile, the item's queries with the same key range (all of them off the causal diagonal) run
// as one block of rows through the softmax and accumulate kernels, so their independent chains
// overlap; heads narrower than a vector (stories260K's 8) are packed several rows to a vector.
// Keys are also split into chunks of kKvChunk positions (fixed boundaries), each chunk its own
// item, so one long sequence's decode step still feeds every thread; a query whose context
// spans several chunks gets its chunks' (max, sum, accumulator) merged in chunk order.
// Arithmetic per query is independent of the tiling, the batch and the thread count; it
// depends only on the query's own context and, for the default F16 cache, on whether its
// sequence brings kF32TileMinQueries or more new tokens to the call (uses_f32_tiles):
//  - F16 KV (p.f16_ggml, the default), decode steps and chunks of fewer than
//    kF32TileMinQueries tokens: llama.cpp's CPU flash attention reproduced bit for bit (fp16
//    query, ggml's f16 dot order, fp16 V accumulator rounded after every key, online softmax
//    with one key a step), the contract the golden tests hold it to; past kKvChunk positions
//    the chunks' fp16 accumulators are merged in f32 (llama.cpp keeps one accumulator: a small,
//    documented departure that only contexts longer than kKvChunk see);
//  - F16 KV, prompt chunks of kF32TileMinQueries tokens or more (llama.cpp's rule too: its CPU
//    flash attention runs a batch of 64 or more queries through f32 tiles, with no fp16
//    rounding of the query or the accumulator), and every query of Q8_0 KV and of F16 KV with
//    the opt-in f32 accumulator (LoadOptions::f16_ggml_attention = false,
//    TOKENSERVE_F16_ATTN=f32): f32 tiles of attn::kFlashKeys keys starting at multiples of
//    kFlashKeys: f32 query, scores as one fma chain per key, the online softmax once per tile
//    (attn::exp_flash), f32 accumulators (Kernels::flash_tile gives the exact operations). A
//    small GEMM per tile instead of a chain of dependent steps per key: attention_bench
//    Prefill 512 tokens x2.5-2.8 faster than the fp16 emulation (AVX-512 and AVX2). llama.cpp's
//    f32 tiles take the same steps (same tile positions and fma orders; its exp and softmax sum
//    are evaluated otherwise): long-prompt logits agree with its own to ~1e-6 on the golden
//    models (tests/model/f32_tiles_golden_test.cc; the fp16 emulation there was 0.4-0.8 off). The f32
//    accumulator is not the F16 default: with it the golden test's teacher-forced F16 greedy
//    ids flip at a step whose reference gap is 0.585 logits (tiny-quant-q5_1 step 18); its
//    logits stay within the distance between llama.cpp's own F16 and F32 K/V contexts
//    (tests/model/f16_acc_drift_test.cc prints both);
//  - F32 KV, and head sizes the tiles do not take (not a multiple of 16: stories260K's 8) with
//    a cache other than the emulated F16 one: an online softmax per 16-key tile with f32
//    accumulators, scores in ggml's dot order (F16: of llama.cpp's fp16-rounded query).
// The SIMD tier follows tensor::active_isa() (AVX-512, AVX2, scalar); all give identical bits.
//
// prologue (optional): run exactly once for every (sequence, KV head) of the batch, and for a
// (sequence, KV head) always before anything reads its queries or its new K/V. A decode step
// (every sequence one token with one key chunk) whose items need no query-head split runs it
// inside the items, each thread on the heads it is about to attend (no separate pool job and
// barrier); otherwise (prefill) it runs per (sequence, KV head) at the head of the items' pool
// job: the threads take those units first, then the items, and an item whose heads' prologue
// is still running on another thread waits for it (one long prompt's RoPE and KV store, which
// ran on one thread, now split over its KV heads and overlapped with the other heads' items).
// `kv` is written only through the prologue.
void paged_attention(const KvStorage& kv, int32_t layer, const AttentionParams& p,
                     std::span<const SeqSlice> seqs, const float* q, float* out,
                     AttentionScratch& scratch, ThreadPool* pool, const AttentionPrologue* prologue = nullptr);
inline constexpr int32_t kQueryTile = 16;
inline constexpr int32_t kKvChunk = 1024;  // a multiple of the 16-key tile and of attn::kFlashKeys

// Whether the sequence's queries run on the f32 tiles (see paged_attention), given a head size
// the tiles take (a multiple of 16): with the llama.cpp emulation (F16 KV, p.f16_ggml) a prompt
// chunk of kF32TileMinQueries tokens or more; with Q8_0 or F16 with the f32 accumulator every
// query, decode steps included; with F32 none (the cache that mirrors llama.cpp's F32 K/V
// without flash attention keeps ggml's dot order for the scores: the golden tests compare it
// to 0.05 logits, which the tiles' order, through re-quantized activations, exceeds).
inline constexpr int32_t kF32TileMinQueries = 64;
inline bool uses_f32_tiles(const AttentionParams& p, KvType kv, const SeqSlice& s) {
  if (p.head_dim % 16 != 0 || kv == KvType::kF32) return false;
  const bool ggml = kv == KvType::kF16 && p.f16_ggml;
  return !ggml || s.num_tokens >= kF32TileMinQueries;
}

// The untiled original, one query at a time with each page reconverted per query (its F16 path
// is the same llama.cpp emulation; F32/Q8_0 use an exact two-pass softmax). Tests compare the
// tiled kernels with it; not used by the model.
void paged_attention_reference(const KvStorage& kv, int32_t layer, const AttentionParams& p,
                               std::span<const SeqSlice> seqs, const float* q, float* out,
                               AttentionScratch& scratch, ThreadPool* pool);

}  // namespace ts::model
