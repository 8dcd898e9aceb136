// KvCacheManager: turns a Sequence into block tables using the BlockPool, one table per KV
// group of the storage (model::KvLayout: one group for most models; a hybrid model such as
// gemma3 has full-attention groups and sliding-window groups). It looks up cached prefixes at
// admission, allocates blocks for the tokens a step will compute, offers newly filled blocks to
// the prefix cache, releases sliding-window blocks that no future query can reach, and gives
// blocks back on finish / preemption / cancel.
//
// Sliding-window groups: after a step, a block wholly before position
// num_computed_tokens - window + 1 (the first position the next query, at num_computed_tokens,
// attends to; later queries start later) is released and its table entry becomes kNoBlock.
// So the holes of such a table are exactly its leading floor(max(0, num_computed - window + 1)
// / block_size) entries. num_computed_tokens never goes back except to 0 (free), so a released
// block is never needed again; speculative rollback only drops tail blocks.
// Not thread-safe: engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_pool.h"
#include "engine/sequence.h"

namespace ts::engine {

class KvCacheManager {
 public:
  static constexpr int32_t kNoBlock = -1;  // = model::KvLayout::kNoBlock

  // group_windows: per KV group, 0 (full attention) or its sliding window (KvLayout::
  // group_window); the default is one full-attention group.
  KvCacheManager(BlockPool& pool, int32_t block_size, std::vector<int32_t> group_windows = {0});

  int32_t block_size() const { return block_size_; }
  int32_t num_groups() const { return static_cast<int32_t>(windows_.size()); }
  int32_t group_window(int32_t g) const { return windows_[static_cast<size_t>(g)]; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // Group g's block table of `seq` (group 0 is seq.block_table).
  static std::vector<int32_t>& table(Sequence& seq, int32_t g);
  static const std::vector<int32_t>& table(const Sequence& seq, int32_t g);
  // Blocks the sequence holds over all groups (holes not counted).
  int32_t num_held_blocks(const Sequence& seq) const;

  // For a sequence holding no blocks (num_computed_tokens == 0): takes a reference on the
  // cached blocks of the longest usable prefix, at most up to the last token (which is always
  // left to compute so the step yields logits). A prefix of k full blocks is usable when every
  // full-attention group has blocks 0..k-1 cached and every sliding-window group has the blocks
  // covering [k * block_size - window + 1, k * block_size). Sets num_computed_tokens and
  // num_cached_tokens and returns the cached token count.
  int32_t acquire_cached_prefix(Sequence& seq);

  // Blocks (over all groups) that must be newly allocated to hold num_computed_tokens + num_new.
  int32_t num_blocks_needed(const Sequence& seq, int32_t num_new) const;

  // Makes every block table cover num_computed_tokens + num_new tokens. Returns false, changing
  // nothing, when the pool has too few free blocks.
  bool allocate_slots(Sequence& seq, int32_t num_new);

  // After a step computed tokens: registers the sequence's newly full, computed blocks in the
  // prefix cache (chained hashes with its namespace, per group), then releases the
  // sliding-window blocks no future query can reach.
  void commit_computed(Sequence& seq);

  // Speculative rollback: releases the tail blocks beyond those covering num_computed_tokens
  // (blocks allocated for rejected draft tokens; never registered in the prefix cache), in
  // every group.
  void truncate_to_computed(Sequence& seq);

  // Releases every block (tail first, so the tail is evicted first) and resets
  // num_computed_tokens to 0. The memoized block hashes stay valid.
  void free(Sequence& seq);

 private:
  uint64_t block_hash(Sequence& seq, int32_t index);  // memoized chained hash of full block
  // Leading blocks a sliding-window group no longer needs once num_computed tokens are in KV.
  int32_t released_prefix(int32_t window, int64_t num_computed) const;
  void ensure_tables(Sequence& seq) const;
  BlockPool& pool_;
  int32_t block_size_;
  std::vector<int32_t> windows_;
};

}  // namespace ts::engine
