// Tiled (flash-style) attention over the paged KV cache and the KV writer. The inner loops are
// the per-ISA kernels of attention_kernels.h; this file walks items, tiles and the softmax
// state. attention_reference.cc keeps the untiled original for tests.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "model/attention.h"
#include "model/attention_kernels.h"
#include "tensor/fp16.h"

namespace ts::model {
namespace {

using attn::kKeyTile;

// Element offset of (token slot, dimension d) in a page (kv_storage.h: K pages transposed).
inline size_t page_offset(const KvStorage& kv, bool is_v, int32_t slot, int32_t d) {
  return is_v ? static_cast<size_t>(slot) * kv.head_dim() + d : static_cast<size_t>(d) * kv.block_size() + slot;
}

void store_vec(KvStorage& kv, const attn::Kernels& k, int32_t layer, bool is_v, int32_t block, int32_t head,
               int32_t slot, const float* x) {
  const int32_t hd = kv.head_dim();
  uint8_t* page = kv.page_ptr(layer, is_v, block, head);
  switch (kv.type()) {
    case KvType::kF32: {
      float* f = reinterpret_cast<float*>(page);
      for (int32_t d = 0; d < hd; ++d) f[page_offset(kv, is_v, slot, d)] = x[d];
      break;
    }
    case KvType::kF16: {
      uint16_t* h = reinterpret_cast<uint16_t*>(page);
      if (is_v) {
        k.cvt_to_f16(x, h + page_offset(kv, true, slot, 0), hd);
      } else {
        thread_local std::vector<uint16_t> tmp;
        if (tmp.size() < static_cast<size_t>(hd)) tmp.resize(hd);
        k.cvt_to_f16(x, tmp.data(), hd);
        for (int32_t d = 0; d < hd; ++d) h[page_offset(kv, false, slot, d)] = tmp[d];
      }
      break;
    }
    case KvType::kQ8_0: {
      float amax = 0;
      for (int32_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float d = amax / 127.f;
      const float id = d > 0 ? 1.f / d : 0.f;
      int8_t* qv = reinterpret_cast<int8_t*>(page);
      for (int32_t i = 0; i < hd; ++i) qv[page_offset(kv, is_v, slot, i)] = static_cast<int8_t>(std::lround(x[i] * id));
      *kv.scale_ptr(layer, is_v, block, head, slot) = d;
      break;
    }
  }
}

// One token's head vector of the cache, as floats (exact for F32/F16; q8_0: scale * int8).
inline void read_vec(const KvStorage& kv, const attn::Kernels& k, int32_t layer, bool is_v, int32_t block,
                     int32_t head, int32_t slot, float* out) {
  const int32_t hd = kv.head_dim();
  const uint8_t* page = kv.page_ptr(layer, is_v, block, head);
  switch (kv.type()) {
    case KvType::kF32: {
      const float* f = reinterpret_cast<const float*>(page);
      for (int32_t i = 0; i < hd; ++i) out[i] = f[page_offset(kv, is_v, slot, i)];
      break;
    }
    case KvType::kF16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(page);
      if (is_v) {
        k.cvt_f16(h + page_offset(kv, true, slot, 0), out, hd);
      } else {
        for (int32_t i = 0; i < hd; ++i) out[i] = tensor::fp16_to_fp32(h[page_offset(kv, false, slot, i)]);
      }
      break;
    }
    case KvType::kQ8_0: {
      const int8_t* qv = reinterpret_cast<const int8_t*>(page);
      const float d = *kv.scale_ptr(layer, is_v, block, head, slot);
      for (int32_t i = 0; i < hd; ++i) out[i] = d * qv[page_offset(kv, is_v, slot, i)];
      break;
    }
  }
}

// Prefetches the K and V lines (into L2: measured better than L1 for cold KV) of the key tile
// starting at position k0 (a multiple of kKeyTile within one block: block size a multiple of
// the tile), and its q8_0 scales.
void prefetch_tile(const KvStorage& kv, int32_t layer, const SeqSlice& s, int32_t head, int32_t k0) {
  const int32_t bs = kv.block_size(), hd = kv.head_dim(), block = s.block_table[k0 / bs], slot0 = k0 % bs;
  const size_t elem = kv.type() == KvType::kF32 ? 4 : kv.type() == KvType::kF16 ? 2 : 1;
  const char* kp = reinterpret_cast<const char*>(kv.page_ptr(layer, false, block, head));
  const char* vp = reinterpret_cast<const char*>(kv.page_ptr(layer, true, block, head));
  constexpr size_t kLine = 64;
  const size_t row = kKeyTile * elem;  // one K dimension's bytes of the tile
  if (static_cast<size_t>(bs) * elem == row) {
    // The tile is the whole page's K: one contiguous run.
    for (size_t off = 0; off < static_cast<size_t>(hd) * row; off += kLine) __builtin_prefetch(kp + off, 0, 2);
  } else {
    for (int32_t d = 0; d < hd; ++d) {
      const char* r = kp + (static_cast<size_t>(d) * bs + slot0) * elem;
      __builtin_prefetch(r);
      __builtin_prefetch(r + row - 1);
    }
  }
  const char* v0 = vp + static_cast<size_t>(slot0) * hd * elem;
  for (size_t off = 0; off < static_cast<size_t>(kKeyTile) * hd * elem; off += kLine) __builtin_prefetch(v0 + off, 0, 2);
  if (kv.type() == KvType::kQ8_0) {
    __builtin_prefetch(kv.scale_ptr(layer, false, block, head, slot0));
    __builtin_prefetch(kv.scale_ptr(layer, true, block, head, slot0));
  }
}

struct TileCtx {
  const KvStorage& kv;
  int32_t layer;
  const AttentionParams& p;
  std::span<const SeqSlice> seqs;
  const std::vector<int64_t>& first;
  const float* q;
  float* out;
  const attn::Kernels& k;
  float* partials;
  const AttentionPrologue* prologue;  // non-null: each item runs it for its heads first (decode)
};

// Floats one partial slot takes for a tile of nq queries.
inline size_t partial_floats(int32_t nq, int32_t group, int32_t hd) {
  return static_cast<size_t>(nq) * group * (2 + static_cast<size_t>(hd));
}

// The online softmax's start for nh rows: max -inf, sum 0, accumulators 0.
inline void start_rows(int32_t nh, int32_t hd, float* mrun, float* srun, float* acc) {
  std::fill(acc, acc + static_cast<size_t>(nh) * hd, 0.f);
  std::fill(mrun, mrun + nh, -INFINITY);
  std::fill(srun, srun + nh, 0.f);
}

// One 16-key sub-tile of KV head `kh` that lies in one block (slots [slot0, slot0 + 16)):
// K as [hd][kKeyTile] lanes, the first n keys' V rows as [n][hd], converted to f32 (exact for
// F32/F16; q8_0: scale * int8, the V rows straight from the row-major page).
void load_subtile(const TileCtx& c, int32_t kh, int32_t block, int32_t slot0, int32_t n, float* kt, float* vt) {
  const int32_t hd = c.p.head_dim, bs = c.kv.block_size();
  const uint8_t* kp = c.kv.page_ptr(c.layer, false, block, kh);
  const uint8_t* vp = c.kv.page_ptr(c.layer, true, block, kh);
  switch (c.kv.type()) {
    case KvType::kF16:
      c.k.load_kt_f16(reinterpret_cast<const uint16_t*>(kp) + slot0, bs, hd, kt);
      c.k.cvt_f16(reinterpret_cast<const uint16_t*>(vp) + static_cast<size_t>(slot0) * hd, vt, n * hd);
      break;
    case KvType::kF32: {
      const float* kf = reinterpret_cast<const float*>(kp) + slot0;
      for (int32_t d = 0; d < hd; ++d)
        std::memcpy(kt + static_cast<size_t>(d) * kKeyTile, kf + static_cast<size_t>(d) * bs, sizeof(float) * kKeyTile);
      std::memcpy(vt, reinterpret_cast<const float*>(vp) + static_cast<size_t>(slot0) * hd, sizeof(float) * n * hd);
      break;
    }
    case KvType::kQ8_0:
      c.k.load_kt_q8(reinterpret_cast<const int8_t*>(kp) + slot0, bs, c.kv.scale_ptr(c.layer, false, block, kh, slot0),
                     hd, kt);
      c.k.load_v_q8(reinterpret_cast<const int8_t*>(vp) + static_cast<size_t>(slot0) * hd,
                    c.kv.scale_ptr(c.layer, true, block, kh, slot0), n, hd, vt);
      break;
  }
}

// o[d] = a[d] * inv (d < hd): blocks of 16 with unaliased pointers, so the baseline build
// vectorizes it (a plain loop over hd stayed scalar: ~10 % of prefill attention).
inline void scale_row(const float* __restrict a, float inv, int32_t hd, float* __restrict o) {
  int32_t d = 0;
  for (; d + 16 <= hd; d += 16)
    for (int l = 0; l < 16; ++l) o[d + l] = a[d + l] * inv;
  for (; d < hd; ++d) o[d] = a[d] * inv;
}

// Query heads [h0, h0 + group) of the item's KV head group: the item's first query head and
// how many it runs (all of the group unless the item is a query-head part).
inline std::pair<int32_t, int32_t> item_heads(const TileCtx& c, const AttentionItem& it) {
  const int32_t h0 = it.head_begin;
  return {h0, (it.head_end > 0 ? it.head_end : c.p.n_head / c.p.n_head_kv) - h0};
}

// The end of an item's KV head: its rows' (max, sum, accumulator) kept for the merge when the
// item is one chunk of several, else the normalized outputs written.
void finish_rows(const TileCtx& c, const AttentionItem& it, int32_t kh, const float* mrun, const float* srun,
                 const float* acc) {
  const int32_t hd = c.p.head_dim;
  const auto [h0, group] = item_heads(c, it);
  const int32_t nq = it.q_end - it.q_begin, nh = nq * group;
  const int64_t QD = int64_t{c.p.n_head} * hd;
  const int32_t gsize = c.p.n_head / c.p.n_head_kv;
  if (it.partial >= 0) {
    // One chunk of several: keep the unnormalized state for the merge.
    float* slot = c.partials + static_cast<size_t>(it.partial);
    std::memcpy(slot, mrun, sizeof(float) * nh);
    std::memcpy(slot + nh, srun, sizeof(float) * nh);
    std::memcpy(slot + 2 * nh, acc, sizeof(float) * nh * hd);
    return;
  }
  for (int32_t j = 0; j < nq; ++j) {
    float* o = c.out + (c.first[static_cast<size_t>(it.seq)] + it.q_begin + j) * QD + (int64_t{kh} * gsize + h0) * hd;
    for (int32_t g = 0; g < group; ++g) {
      const int32_t r = j * group + g;
      const float inv = srun[r] > 0 ? 1.f / srun[r] : 0.f;
      scale_row(acc + static_cast<size_t>(r) * hd, inv, hd, o + static_cast<size_t>(g) * hd);
    }
  }
}

// run_head for a sequence on the f32 tiles (uses_f32_tiles): the item's keys in tiles of
// kFlashKeys positions starting at multiples of kFlashKeys, each converted once (as
// kFlashKeys / kKeyTile sub-tiles) for all the item's rows, and the rows that read the same
// keys of a tile (every row of an off-diagonal tile) run through Kernels::flash_tile together.
// The next tile's K/V lines are requested while a tile runs (past the head's last tile, the
// first tile of next_kh, the item's next KV head, when >= 0): a decode step's cache is cold.
void run_head_f32(const TileCtx& c, const AttentionItem& it, int32_t kh, int32_t next_kh) {
  using attn::kFlashKeys;
  const int32_t hd = c.p.head_dim;
  const auto [h0, group] = item_heads(c, it);
  const int32_t bs = c.kv.block_size();
  const SeqSlice& s = c.seqs[static_cast<size_t>(it.seq)];
  const int32_t nq = it.q_end - it.q_begin, nh = nq * group;
  const int64_t QD = int64_t{c.p.n_head} * hd;
  const int32_t gsize = c.p.n_head / c.p.n_head_kv;
  thread_local std::vector<float> buf;
  const size_t need = 2 * static_cast<size_t>(nh) * hd + 2 * static_cast<size_t>(kFlashKeys) * hd + 2 * nh + hd;
  if (buf.size() < need) buf.resize(need);
  float* qs = buf.data();
  float* acc = qs + static_cast<size_t>(nh) * hd;
  float* kt = acc + static_cast<size_t>(nh) * hd;  // kFlashKeys / kKeyTile sub-tiles [hd][kKeyTile]
  float* vt = kt + static_cast<size_t>(kFlashKeys) * hd;
  float* mrun = vt + static_cast<size_t>(kFlashKeys) * hd;
  float* srun = mrun + nh;
  float* kbuf = srun + nh;
  for (int32_t j = 0; j < nq; ++j) {
    const float* qt = c.q + (c.first[static_cast<size_t>(it.seq)] + it.q_begin + j) * QD + (int64_t{kh} * gsize + h0) * hd;
    std::memcpy(qs + static_cast<size_t>(j) * group * hd, qt, sizeof(float) * group * hd);  // f32, unrounded
  }
  start_rows(nh, hd, mrun, srun, acc);
  const int32_t ctx_first = s.start_pos + it.q_begin + 1;
  const int32_t lo_first = c.p.window > 0 ? std::max(0, ctx_first - c.p.window) : 0;
  const int32_t k_end = it.k_end;
  const int32_t k_first = std::max(it.k_begin, lo_first / kFlashKeys * kFlashKeys);  // k_begin: a chunk start
  auto range_of = [&](int32_t j, int32_t k0, int32_t n) {
    const int32_t ctx = s.start_pos + it.q_begin + j + 1;
    const int32_t lo = c.p.window > 0 ? std::max(0, ctx - c.p.window) : 0;
    return std::pair{std::clamp(lo - k0, 0, n), std::clamp(ctx - k0, 0, n)};
  };
  auto prefetch = [&](int32_t head, int32_t k0) {
    for (int32_t ks = std::max(k0, lo_first / kKeyTile * kKeyTile); ks < std::min(k0 + kFlashKeys, k_end); ks += kKeyTile)
      prefetch_tile(c.kv, c.layer, s, head, ks);
  };
  for (int32_t k0 = k_first; k0 < k_end; k0 += kFlashKeys) {
    const int32_t n = std::min(kFlashKeys, k_end - k0);
    if (bs % kKeyTile == 0) {
      if (k0 + kFlashKeys < k_end) {
        prefetch(kh, k0 + kFlashKeys);
      } else if (next_kh >= 0) {
        prefetch(next_kh, k_first);
      }
    }
    for (int32_t sub = 0; sub * kKeyTile < n; ++sub) {
      const int32_t ks = k0 + sub * kKeyTile, ns = std::min(kKeyTile, n - sub * kKeyTile);
      // Wholly before every query's window: never read (its block may be released); the lanes
      // of keys outside a row's range are masked, so what the buffer holds there is unused.
      if (ks + ns <= lo_first) continue;
      float* ktd = kt + static_cast<size_t>(sub) * hd * kKeyTile;
      float* vtd = vt + static_cast<size_t>(sub) * kKeyTile * hd;
      if (bs % kKeyTile == 0) {
        // The sub-tile lies in one block (16 slots from a multiple of 16).
        load_subtile(c, kh, s.block_table[ks / bs], ks % bs, ns, ktd, vtd);
        continue;
      }
      for (int32_t i = 0; i < ns; ++i) {
        const int32_t pos = ks + i;
        if (pos < lo_first) continue;  // before every window: masked, maybe released
        const int32_t block = s.block_table[pos / bs], slot = pos % bs;
        read_vec(c.kv, c.k, c.layer, false, block, kh, slot, kbuf);
        for (int32_t d = 0; d < hd; ++d) ktd[static_cast<size_t>(d) * kKeyTile + i] = kbuf[d];
        read_vec(c.kv, c.k, c.layer, true, block, kh, slot, vtd + static_cast<size_t>(i) * hd);
      }
    }
    for (int32_t j = 0; j < nq;) {
      const auto [i0, i1] = range_of(j, k0, n);
      int32_t j1 = j + 1;
      while (j1 < nq && range_of(j1, k0, n) == std::pair{i0, i1}) ++j1;
      if (i0 < i1) {
        const size_t r0 = static_cast<size_t>(j) * group;
        c.k.flash_tile(qs + r0 * hd, (j1 - j) * group, hd, kt, vt, i0, i1, c.p.scale, mrun + r0, srun + r0,
                       acc + r0 * hd);
      }
      j = j1;
    }
  }
  finish_rows(c, it, kh, mrun, srun, acc);
}

// Runs one KV head `kh` of an item: queries [q_begin, q_end) of one sequence, the item's query
// heads of that head's group. next_kh >= 0: the item's next KV head, whose first tiles are
// prefetched while this head's last ones run.
void run_head(const TileCtx& c, const AttentionItem& it, int32_t kh, int32_t next_kh) {
  if (uses_f32_tiles(c.p, c.kv.type(), c.seqs[static_cast<size_t>(it.seq)])) {
    run_head_f32(c, it, kh, next_kh);
    return;
  }
  const int32_t hd = c.p.head_dim;
  const int32_t h0 = it.head_begin, group = (it.head_end > 0 ? it.head_end : c.p.n_head / c.p.n_head_kv) - h0;
  const int32_t bs = c.kv.block_size();
  const bool f16_query = c.kv.type() == KvType::kF16;  // fp16-rounded queries (ggml's f16 dot)
  const bool golden = f16_query && c.p.f16_ggml;        // and llama.cpp's fp16 V accumulator
  const SeqSlice& s = c.seqs[static_cast<size_t>(it.seq)];
  const int32_t nq = it.q_end - it.q_begin, nh = nq * group;  // (query, head) rows
  const int64_t QD = int64_t{c.p.n_head} * hd;
  const int32_t gsize = c.p.n_head / c.p.n_head_kv;  // the whole group (query/output stride)

  // Per-thread tile buffers: queries, accumulators [nh][hd]; K^T [hd][16]; V [16][hd];
  // running max / sum [nh]; per-tile scores, weights and rescales [nh][16] and [nh].
  thread_local std::vector<float> buf;
  const size_t need = 2 * static_cast<size_t>(nh) * hd + 2 * static_cast<size_t>(kKeyTile) * hd + 2 * nh +
                      3 * static_cast<size_t>(nh) * kKeyTile + nh;
  if (buf.size() < need) buf.resize(need);
  float* qs = buf.data();
  float* acc = qs + static_cast<size_t>(nh) * hd;
  float* kt = acc + static_cast<size_t>(nh) * hd;
  float* vt = kt + static_cast<size_t>(kKeyTile) * hd;
  float* mrun = vt + static_cast<size_t>(kKeyTile) * hd;
  float* srun = mrun + nh;
  float* sc = srun + nh;
  float* wt = sc + static_cast<size_t>(nh) * kKeyTile;  // [nh][kKeyTile]
  float* ms = wt + static_cast<size_t>(nh) * kKeyTile;  // [nh][kKeyTile]
  float* rescale = ms + static_cast<size_t>(nh) * kKeyTile;

  thread_local std::vector<uint16_t> qh;
  if (f16_query && qh.size() < static_cast<size_t>(group) * hd) qh.resize(static_cast<size_t>(group) * hd);
  for (int32_t j = 0; j < nq; ++j) {
    const float* qt = c.q + (c.first[static_cast<size_t>(it.seq)] + it.q_begin + j) * QD + (int64_t{kh} * gsize + h0) * hd;
    float* dst = qs + static_cast<size_t>(j) * group * hd;
    if (f16_query) {
      // fp16-rounded queries (round to nearest even), through the vector conversions.
      c.k.cvt_to_f16(qt, qh.data(), group * hd);
      c.k.cvt_f16(qh.data(), dst, group * hd);
    } else {
      std::memcpy(dst, qt, sizeof(float) * group * hd);
    }
  }
  start_rows(nh, hd, mrun, srun, acc);

  // Key range of the item: its chunk, from the first query's window start to the last query
  // (causal); k_begin is a multiple of the key tile.
  const int32_t ctx_first = s.start_pos + it.q_begin + 1;
  const int32_t lo_first = c.p.window > 0 ? std::max(0, ctx_first - c.p.window) : 0;
  const int32_t k_end = it.k_end;
  thread_local std::vector<float> kbuf;
  if (kbuf.size() < static_cast<size_t>(hd)) kbuf.resize(hd);
  const int32_t k_first = std::max(it.k_begin, lo_first / kKeyTile * kKeyTile);
  for (int32_t k0 = k_first; k0 < k_end; k0 += kKeyTile) {
    const int32_t n = std::min(kKeyTile, k_end - k0);
    // The K/V lines kAhead tiles ahead are requested now (into L2): in a decode step the cache
    // was last touched a step ago (the weights' stream evicted it), and its pages are scattered
    // over the cache, so the hardware prefetchers do not see them coming.
    // Past this head's last tile, the item's next KV head's first tiles (same positions).
    constexpr int32_t kAhead = 2;
    if (bs % kKeyTile == 0) {
      for (int32_t a = k0 == k_first && kh == it.kv_head ? 1 : kAhead; a <= kAhead; ++a) {
        const int32_t ka = k0 + a * kKeyTile;
        if (ka < k_end) {
          prefetch_tile(c.kv, c.layer, s, kh, ka);
        } else if (next_kh >= 0) {
          // Tile j of the next head (same key range: the tiles from k_first).
          const int32_t j = (ka - k_first) / kKeyTile - (k_end - k_first + kKeyTile - 1) / kKeyTile;
          if (k_first + j * kKeyTile < k_end) prefetch_tile(c.kv, c.layer, s, next_kh, k_first + j * kKeyTile);
        }
      }
    }
    // Queries whose key range in this tile is the same (every query of an off-diagonal tile
    // without a window) run as one block of rows: one softmax step and one accumulate over all
    // their heads, so the kernels' per-row chains overlap. Each row's arithmetic is unchanged.
    auto range_of = [&](int32_t j) {
      const int32_t ctx = s.start_pos + it.q_begin + j + 1;
      const int32_t lo = c.p.window > 0 ? std::max(0, ctx - c.p.window) : 0;
      return std::pair{std::max(0, lo - k0), std::min(n, ctx - k0)};
    };
    // One block of rows for the whole tile (the ranges are monotone in the query, so the first
    // and last agree only when all do; every decode tile): an F16 K tile is then scored straight
    // from its page (scores_rows_f16k), never converted into kt.
    const bool one_block = range_of(0) == range_of(nq - 1);
    const uint16_t* k_page = nullptr;  // set: K not in kt, score from the page
    const uint16_t* v_page = nullptr;  // set: V not in vt, accumulated from the page (fp16 accumulator)
    // Convert the tile once: K as [hd][16] lanes, V row-major.
    if (bs % kKeyTile == 0) {
      // The tile lies in one block: each K dimension is 16 consecutive page elements (lanes
      // past n hold other positions' finite values; their scores are never used). That block
      // holds lo_first or a later position, so it is never a released (window-only) block.
      const int32_t block = s.block_table[k0 / bs], slot0 = k0 % bs;
      const uint8_t* kp = c.kv.page_ptr(c.layer, false, block, kh);
      const uint8_t* vp = c.kv.page_ptr(c.layer, true, block, kh);
      if (c.kv.type() == KvType::kF16) {
        if (one_block) {
          k_page = reinterpret_cast<const uint16_t*>(kp) + slot0;
        } else {
          c.k.load_kt_f16(reinterpret_cast<const uint16_t*>(kp) + slot0, bs, hd, kt);
        }
        if (golden) {
          v_page = reinterpret_cast<const uint16_t*>(vp) + static_cast<size_t>(slot0) * hd;
        } else {
          c.k.cvt_f16(reinterpret_cast<const uint16_t*>(vp) + static_cast<size_t>(slot0) * hd, vt, n * hd);
        }
      } else {
        load_subtile(c, kh, block, slot0, n, kt, vt);
      }
    } else {
      for (int32_t i = 0; i < n; ++i) {
        const int32_t pos = k0 + i;
        if (pos < lo_first) {
          // Before every query's window: never scored, and its block may already be released
          // (window-only KV leaves a hole in the table there).
          for (int32_t d = 0; d < hd; ++d) kt[d * kKeyTile + i] = 0.f;
          std::fill(vt + static_cast<size_t>(i) * hd, vt + static_cast<size_t>(i + 1) * hd, 0.f);
          continue;
        }
        const int32_t block = s.block_table[pos / bs], slot = pos % bs;
        read_vec(c.kv, c.k, c.layer, false, block, kh, slot, kbuf.data());
        for (int32_t d = 0; d < hd; ++d) kt[d * kKeyTile + i] = kbuf[d];
        read_vec(c.kv, c.k, c.layer, true, block, kh, slot, vt + static_cast<size_t>(i) * hd);
      }
      if (n < kKeyTile)
        for (int32_t d = 0; d < hd; ++d)
          for (int32_t i = n; i < kKeyTile; ++i) kt[d * kKeyTile + i] = 0.f;
    }

    for (int32_t j = 0; j < nq;) {
      const auto [i0, i1] = range_of(j);
      int32_t j1 = j + 1;
      while (j1 < nq && range_of(j1) == std::pair{i0, i1}) ++j1;
      if (i0 < i1) {
        const int32_t r0 = j * group, nr = (j1 - j) * group;
        if (k_page != nullptr) {
          c.k.scores_rows_f16k(qs + static_cast<size_t>(r0) * hd, nr, k_page, bs, hd, c.p.scale,
                               sc + static_cast<size_t>(r0) * kKeyTile);
        } else {
          c.k.scores_rows(qs + static_cast<size_t>(r0) * hd, nr, kt, hd, c.p.scale, sc + static_cast<size_t>(r0) * kKeyTile);
        }
        float* a = acc + static_cast<size_t>(r0) * hd;
        float* w = wt + static_cast<size_t>(r0) * kKeyTile;
        float* scr = sc + static_cast<size_t>(r0) * kKeyTile;
        if (golden) {
          float* m = ms + static_cast<size_t>(r0) * kKeyTile;
          c.k.online_f16(scr, nr, i0, i1, mrun + r0, srun + r0, w, m);
          if (v_page != nullptr) {
            c.k.acc_f16_h(a, nr, v_page, w, m, i0, i1, hd);
          } else {
            c.k.acc_f16(a, nr, vt, w, m, i0, i1, hd);
          }
        } else {
          c.k.online_f32(scr, nr, i0, i1, mrun + r0, srun + r0, w, rescale);
          c.k.acc_f32(a, nr, vt, w, rescale, i0, i1, hd);
        }
      }
      j = j1;
    }
  }
  finish_rows(c, it, kh, mrun, srun, acc);
}

// Runs one item, its KV heads in order.
void run_item(const TileCtx& c, const AttentionItem& it) {
  const int32_t kh_end = it.kv_head_end > 0 ? it.kv_head_end : it.kv_head + 1;
  if (c.prologue) (*c.prologue)(it.seq, it.kv_head, kh_end);
  for (int32_t kh = it.kv_head; kh < kh_end; ++kh) run_head(c, it, kh, kh + 1 < kh_end ? kh + 1 : -1);
}

// Merges one query tile's chunk partials, in chunk order, and writes its outputs.
void run_merge(const TileCtx& c, const AttentionMerge& mg) {
  const int32_t hd = c.p.head_dim, group = c.p.n_head / c.p.n_head_kv;
  const int32_t nq = mg.q_end - mg.q_begin, nh = nq * group;
  const int64_t QD = int64_t{c.p.n_head} * hd;
  const size_t stride = partial_floats(nq, group, hd);
  const float* base = c.partials + static_cast<size_t>(mg.first_partial);
  thread_local std::vector<float> accm;
  if (accm.size() < static_cast<size_t>(hd)) accm.resize(hd);
  for (int32_t r = 0; r < nh; ++r) {
    float m = -INFINITY;
    for (int32_t pi = 0; pi < mg.num_parts; ++pi) m = std::max(m, base[pi * stride + r]);
    float sum = 0.f;
    std::fill(accm.begin(), accm.begin() + hd, 0.f);
    for (int32_t pi = 0; pi < mg.num_parts; ++pi) {
      const float* part = base + pi * stride;
      const float e = attn::exp_ref(part[r] - m);  // exp(-inf) = 0: a chunk with no keys for this query
      sum += part[nh + r] * e;
      const float* a = part + 2 * nh + static_cast<size_t>(r) * hd;
      for (int32_t d = 0; d < hd; ++d) accm[d] += a[d] * e;
    }
    const float inv = sum > 0 ? 1.f / sum : 0.f;
    const int32_t j = r / group, g = r % group;
    float* o = c.out + (c.first[static_cast<size_t>(mg.seq)] + mg.q_begin + j) * QD +
               (int64_t{mg.kv_head} * group + g) * hd;
    for (int32_t d = 0; d < hd; ++d) o[d] = accm[d] * inv;
  }
}

}  // namespace

void write_kv(KvStorage& kv, int32_t layer, std::span<const SeqSlice> seqs, const float* k,
              const float* v, int32_t head_begin, int32_t head_end) {
  const int32_t hd = kv.head_dim(), nkv = kv.n_head_kv(), bs = kv.block_size();
  const int32_t h1 = head_end > 0 ? head_end : nkv;
  const attn::Kernels& kern = attn::active_kernels();
  int64_t t = 0;
  for (const SeqSlice& s : seqs) {
    for (int32_t j = 0; j < s.num_tokens; ++j, ++t) {
      const int32_t pos = s.start_pos + j;
      const int32_t block = s.block_table[pos / bs], slot = pos % bs;
      for (int32_t h = head_begin; h < h1; ++h) {
        store_vec(kv, kern, layer, false, block, h, slot, k + (t * nkv + h) * hd);
        store_vec(kv, kern, layer, true, block, h, slot, v + (t * nkv + h) * hd);
      }
    }
  }
}

void paged_attention(const KvStorage& kv, int32_t layer, const AttentionParams& p,
                     std::span<const SeqSlice> seqs, const float* q, float* out,
                     AttentionScratch& scratch, ThreadPool* pool, const AttentionPrologue* prologue) {
  std::vector<int64_t>& first = scratch.first;
  if (first.size() < seqs.size()) first.resize(seqs.size());
  std::vector<AttentionItem>& items = scratch.items;
  std::vector<AttentionMerge>& merges = scratch.merges;
  items.clear();
  merges.clear();
  const int32_t group = p.n_head / p.n_head_kv;
  const int32_t nt = pool ? pool->num_threads() : 1;
  // A decode step: every sequence one token whose keys fit in one chunk. Its items span KV
  // heads: `pieces` contiguous KV-head ranges per sequence, as few as still give the threads
  // about 4 items each (one item per sequence from 4 sequences a thread on), so a thread walks
  // a sequence's heads back to back (the next head's first tiles prefetched) and can run that
  // sequence's prologue itself.
  bool decode = true;
  for (const SeqSlice& s : seqs) {
    const int32_t lo = p.window > 0 ? std::max(0, s.start_pos + 1 - p.window) : 0;
    decode = decode && s.num_tokens == 1 && lo / kKvChunk == s.start_pos / kKvChunk;
  }
  const int32_t nseq = static_cast<int32_t>(seqs.size());
  const int32_t pieces =
      decode ? std::clamp<int32_t>((4 * nt + nseq - 1) / std::max(nseq, 1), 1, p.n_head_kv) : 1;
  int64_t t = 0, partial_end = 0;
  for (size_t si = 0; si < seqs.size(); ++si) {
    const SeqSlice& s = seqs[si];
    first[si] = t;
    t += s.num_tokens;
    if (decode) {
      const int32_t ctx = s.start_pos + 1;
      const int32_t lo = p.window > 0 ? std::max(0, ctx - p.window) : 0;
      for (int32_t part = 0; part < pieces; ++part) {
        const int32_t h0 = p.n_head_kv * part / pieces, h1 = p.n_head_kv * (part + 1) / pieces;
        items.push_back({.seq = static_cast<int32_t>(si), .kv_head = h0, .kv_head_end = h1, .q_begin = 0, .q_end = 1,
                         .k_begin = 0, .k_end = ctx, .cost = int64_t{h1 - h0} * (ctx - lo)});
      }
      continue;
    }
    for (int32_t q0 = 0; q0 < s.num_tokens; q0 += kQueryTile) {
      const int32_t q1 = std::min(s.num_tokens, q0 + kQueryTile);
      const int32_t ctx_last = s.start_pos + q1;
      const int32_t lo = p.window > 0 ? std::max(0, s.start_pos + q0 + 1 - p.window) : 0;
      const int32_t c0 = lo / kKvChunk, c1 = (ctx_last - 1) / kKvChunk;  // chunks this tile reads
      for (int32_t h = 0; h < p.n_head_kv; ++h) {
        if (c0 == c1) {
          items.push_back({.seq = static_cast<int32_t>(si), .kv_head = h, .q_begin = q0, .q_end = q1,
                           .k_begin = 0, .k_end = ctx_last, .cost = int64_t{q1 - q0} * (ctx_last - lo)});
          continue;
        }
        merges.push_back({.seq = static_cast<int32_t>(si), .kv_head = h, .q_begin = q0, .q_end = q1,
                          .first_partial = partial_end, .num_parts = c1 - c0 + 1});
        for (int32_t ch = c0; ch <= c1; ++ch) {
          const int32_t kb = ch * kKvChunk, ke = std::min(ctx_last, kb + kKvChunk);
          items.push_back({.seq = static_cast<int32_t>(si), .kv_head = h, .q_begin = q0, .q_end = q1,
                           .k_begin = kb, .k_end = ke, .partial = partial_end,
                           .cost = int64_t{q1 - q0} * (ke - std::max(kb, lo))});
          partial_end += static_cast<int64_t>(partial_floats(q1 - q0, group, p.head_dim));
        }
      }
    }
  }
  if (static_cast<int64_t>(scratch.partials.size()) < partial_end) scratch.partials.resize(partial_end);
  // Fewer items than threads (decode of one sequence of a model with fewer KV heads than
  // threads): split the whole-context items by query heads. K/V tiles are then converted once
  // per part (the parts of a head run side by side, so the second read mostly hits cache), and a
  // part of one or two rows runs the latency-bound softmax and fp16 accumulator chains with few
  // rows to overlap, so the parts together cost ~1.4x the whole item: splitting whenever there
  // were under 2 items a thread (one SmolLM2 or Qwen sequence: 3 or 2 KV heads, 2 threads) left
  // 2 threads no faster than 1 (attention_bench Decode1). As many items as threads, or more,
  // now stay whole (and keep the prologue inside them).
  bool head_split = false;
  if (nt > 1 && group > 1 && static_cast<int64_t>(items.size()) < nt) {
    const int32_t parts = std::min<int32_t>(group, static_cast<int32_t>((2 * nt + items.size() - 1) / items.size()));
    const size_t n0 = items.size();
    for (size_t i = 0; i < n0; ++i) {
      if (items[i].partial >= 0) continue;  // chunked items stay whole (their merge reads the group)
      head_split = true;
      const AttentionItem whole = items[i];
      const int32_t nkh = whole.kv_head_end > 0 ? whole.kv_head_end - whole.kv_head : 1;
      for (int32_t kh = 0; kh < nkh; ++kh) {
        for (int32_t part = 0; part < parts; ++part) {
          AttentionItem it = whole;
          it.kv_head = whole.kv_head + kh;
          it.kv_head_end = 0;
          it.head_begin = group * part / parts;
          it.head_end = group * (part + 1) / parts;
          it.cost = whole.cost / nkh * (it.head_end - it.head_begin) / group;
          if (kh == 0 && part == 0) {
            items[i] = it;
          } else {
            items.push_back(it);
          }
        }
      }
    }
  }
  // Largest first, so the long tail of a causal prompt does not land on one thread at the end.
  std::stable_sort(items.begin(), items.end(),
                   [](const AttentionItem& a, const AttentionItem& b) { return a.cost > b.cost; });
  // The prologue inside the items when each (sequence, KV head) is in exactly one item and
  // nothing else reads it (a decode step without query-head parts); otherwise first, for whole
  // sequences.
  const bool fused = prologue && decode && !head_split;
  const bool parallel = pool && nt > 1;
  if (prologue && !fused && !parallel) {
    for (int32_t i = 0; i < nseq; ++i) (*prologue)(i, 0, p.n_head_kv);
  }
  const TileCtx ctx{kv, layer, p, seqs, first, q, out, attn::active_kernels(), scratch.partials.data(),
                    fused ? prologue : nullptr};
  const int64_t n = static_cast<int64_t>(items.size()), nm = static_cast<int64_t>(merges.size());
  auto merge = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) run_merge(ctx, merges[static_cast<size_t>(i)]);
  };
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) run_item(ctx, items[static_cast<size_t>(i)]);
    merge(0, nm);
    return;
  }
  // Units [0, np): the prologue of (sequence u / n_head_kv, KV head u % n_head_kv); then the
  // items. The pool hands units out in order, so every prologue unit has been taken (and runs
  // without waiting) before any item is: an item's wait always ends.
  const int64_t np = prologue && !fused ? int64_t{nseq} * p.n_head_kv : 0;
  if (np > 0) {
    if (static_cast<int64_t>(scratch.ready.size()) < np) scratch.ready.resize(np, 0);
    if (++scratch.epoch == 0) {  // wrapped: stamps from 2^32 calls ago must not read as ready
      std::fill(scratch.ready.begin(), scratch.ready.end(), 0u);
      scratch.epoch = 1;
    }
  }
  const uint32_t epoch = scratch.epoch;
  uint32_t* ready = scratch.ready.data();
  auto work = [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      if (u < np) {
        const int32_t si = static_cast<int32_t>(u / p.n_head_kv), h = static_cast<int32_t>(u % p.n_head_kv);
        (*prologue)(si, h, h + 1);
        std::atomic_ref<uint32_t>(ready[u]).store(epoch, std::memory_order_release);
        continue;
      }
      const AttentionItem& it = items[static_cast<size_t>(u - np)];
      if (np > 0) {
        const int32_t kh_end = it.kv_head_end > 0 ? it.kv_head_end : it.kv_head + 1;
        for (int32_t h = it.kv_head; h < kh_end; ++h) {
          std::atomic_ref<uint32_t> r(ready[static_cast<int64_t>(it.seq) * p.n_head_kv + h]);
          while (r.load(std::memory_order_acquire) != epoch) cpu_relax();
        }
      }
      run_item(ctx, it);
    }
  };
  pool->parallel_chunks(np + n, 1, work);
  if (nm > 0) pool->parallel_chunks(nm, 1, merge);
}

}  // namespace ts::model
