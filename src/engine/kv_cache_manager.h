// KvCacheManager: turns a Sequence into a block table using the BlockPool. It looks up cached
// prefixes at admission, allocates blocks for the tokens a step will compute, offers newly
// filled blocks to the prefix cache, and gives blocks back on finish / preemption / cancel.
// Not thread-safe: engine thread only.
#pragma once

#include <cstdint>

#include "engine/block_pool.h"
#include "engine/sequence.h"

namespace ts::engine {

class KvCacheManager {
 public:
  KvCacheManager(BlockPool& pool, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // For a sequence holding no blocks (num_computed_tokens == 0): takes a reference on every
  // leading full block found in the cache, at most up to the last token (which is always left
  // to compute so the step yields logits). Sets num_computed_tokens and num_cached_tokens and
  // returns the cached token count.
  int32_t acquire_cached_prefix(Sequence& seq);

  // Blocks that must be newly allocated to hold num_computed_tokens + num_new tokens.
  int32_t num_blocks_needed(const Sequence& seq, int32_t num_new) const;

  // Makes the block table cover num_computed_tokens + num_new tokens. Returns false, changing
  // nothing, when the pool has too few free blocks.
  bool allocate_slots(Sequence& seq, int32_t num_new);

  // After a step computed tokens: registers the sequence's newly full, computed blocks in the
  // prefix cache (chained hashes with its namespace).
  void commit_computed(Sequence& seq);

  // Speculative rollback: releases the tail blocks beyond those covering num_computed_tokens
  // (blocks allocated for rejected draft tokens; never registered in the prefix cache).
  void truncate_to_computed(Sequence& seq);

  // Releases every block (tail first, so the tail is evicted first) and resets
  // num_computed_tokens to 0. The memoized block hashes stay valid.
  void free(Sequence& seq);

 private:
  uint64_t block_hash(Sequence& seq, int32_t index);  // memoized chained hash of full block
  BlockPool& pool_;
  int32_t block_size_;
};

}  // namespace ts::engine
