#include "engine/kv_cache_manager.h"

#include <span>

#include "core/check.h"

namespace ts::engine {

KvCacheManager::KvCacheManager(BlockPool& pool, int32_t block_size)
    : pool_(pool), block_size_(block_size) {
  TS_CHECK(block_size > 0, "block_size must be positive");
}

uint64_t KvCacheManager::block_hash(Sequence& seq, int32_t index) {
  TS_CHECK((index + 1) * block_size_ <= seq.num_tokens(), "hash of a block that is not full");
  while (static_cast<int32_t>(seq.block_hashes.size()) <= index) {
    const int32_t i = static_cast<int32_t>(seq.block_hashes.size());
    const uint64_t parent = i == 0 ? BlockPool::kRootHash : seq.block_hashes[i - 1];
    std::span<const int32_t> toks(seq.tokens.data() + static_cast<size_t>(i) * block_size_,
                                  static_cast<size_t>(block_size_));
    seq.block_hashes.push_back(BlockPool::chain_hash(parent, toks, seq.cache_namespace));
  }
  return seq.block_hashes[index];
}

int32_t KvCacheManager::acquire_cached_prefix(Sequence& seq) {
  TS_CHECK(seq.block_table.empty() && seq.num_computed_tokens == 0,
           "prefix lookup on a sequence that holds blocks");
  seq.num_cached_tokens = 0;
  if (!pool_.caching_enabled()) return 0;
  const int32_t max_blocks = (seq.num_tokens() - 1) / block_size_;
  for (int32_t i = 0; i < max_blocks; ++i) {
    const uint64_t h = block_hash(seq, i);
    const uint64_t parent = i == 0 ? BlockPool::kRootHash : seq.block_hashes[i - 1];
    std::span<const int32_t> toks(seq.tokens.data() + static_cast<size_t>(i) * block_size_,
                                  static_cast<size_t>(block_size_));
    const int32_t b = pool_.find(h, parent, toks, seq.cache_namespace);
    if (b < 0) break;
    pool_.acquire(b);
    seq.block_table.push_back(b);
  }
  seq.num_computed_tokens = static_cast<int32_t>(seq.block_table.size()) * block_size_;
  seq.num_registered_blocks = static_cast<int32_t>(seq.block_table.size());
  seq.num_cached_tokens = seq.num_computed_tokens;
  return seq.num_cached_tokens;
}

int32_t KvCacheManager::num_blocks_needed(const Sequence& seq, int32_t num_new) const {
  const int64_t total = static_cast<int64_t>(seq.num_computed_tokens) + num_new;
  const int64_t blocks = (total + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(seq.block_table.size());
  return blocks > have ? static_cast<int32_t>(blocks - have) : 0;
}

bool KvCacheManager::allocate_slots(Sequence& seq, int32_t num_new) {
  const int32_t need = num_blocks_needed(seq, num_new);
  if (need > pool_.num_free()) return false;
  for (int32_t i = 0; i < need; ++i) {
    const int32_t b = pool_.allocate();
    TS_CHECK(b >= 0, "pool reported free blocks but allocation failed");
    seq.block_table.push_back(b);
  }
  return true;
}

void KvCacheManager::commit_computed(Sequence& seq) {
  if (!pool_.caching_enabled()) return;
  const int32_t full = seq.num_computed_tokens / block_size_;
  TS_CHECK(full <= static_cast<int32_t>(seq.block_table.size()), "computed past block table");
  for (int32_t i = seq.num_registered_blocks; i < full; ++i) {
    const uint64_t h = block_hash(seq, i);
    const uint64_t parent = i == 0 ? BlockPool::kRootHash : seq.block_hashes[i - 1];
    std::span<const int32_t> toks(seq.tokens.data() + static_cast<size_t>(i) * block_size_,
                                  static_cast<size_t>(block_size_));
    pool_.register_full(seq.block_table[i], h, parent, toks, seq.cache_namespace);
  }
  if (full > seq.num_registered_blocks) seq.num_registered_blocks = full;
}

void KvCacheManager::truncate_to_computed(Sequence& seq) {
  const size_t keep = static_cast<size_t>((seq.num_computed_tokens + block_size_ - 1) / block_size_);
  TS_CHECK(static_cast<int32_t>(keep) >= seq.num_registered_blocks, "truncating registered blocks");
  while (seq.block_table.size() > keep) {
    pool_.release(seq.block_table.back());
    seq.block_table.pop_back();
  }
}

void KvCacheManager::free(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) pool_.release(*it);
  seq.block_table.clear();
  seq.num_computed_tokens = 0;
  seq.num_registered_blocks = 0;
}

}  // namespace ts::engine
