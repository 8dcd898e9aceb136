#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <span>

#include "core/check.h"

namespace ts::engine {

KvCacheManager::KvCacheManager(BlockPool& pool, int32_t block_size, std::vector<int32_t> group_windows)
    : pool_(pool), block_size_(block_size), windows_(std::move(group_windows)) {
  TS_CHECK(block_size > 0, "block_size must be positive");
  TS_CHECK(!windows_.empty(), "a KV cache has at least one group");
}

std::vector<int32_t>& KvCacheManager::table(Sequence& seq, int32_t g) {
  return g == 0 ? seq.block_table : seq.more_block_tables[static_cast<size_t>(g - 1)];
}
const std::vector<int32_t>& KvCacheManager::table(const Sequence& seq, int32_t g) {
  return g == 0 ? seq.block_table : seq.more_block_tables[static_cast<size_t>(g - 1)];
}

void KvCacheManager::ensure_tables(Sequence& seq) const {
  if (static_cast<int32_t>(seq.more_block_tables.size()) != num_groups() - 1) {
    seq.more_block_tables.resize(static_cast<size_t>(num_groups() - 1));
  }
}

int32_t KvCacheManager::num_held_blocks(const Sequence& seq) const {
  if (num_groups() == 1) return static_cast<int32_t>(seq.block_table.size());
  int32_t n = 0;
  for (int32_t b : seq.block_table) n += b != kNoBlock ? 1 : 0;
  for (const auto& t : seq.more_block_tables) {  // absent until the sequence first gets blocks
    for (int32_t b : t) n += b != kNoBlock ? 1 : 0;
  }
  return n;
}

int32_t KvCacheManager::released_prefix(int32_t window, int64_t num_computed) const {
  if (window <= 0) return 0;
  const int64_t first_needed = num_computed - window + 1;
  return first_needed > 0 ? static_cast<int32_t>(first_needed / block_size_) : 0;
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
  ensure_tables(seq);
  seq.num_cached_tokens = 0;
  if (!pool_.caching_enabled()) return 0;
  const int32_t max_blocks = (seq.num_tokens() - 1) / block_size_;
  auto lookup = [&](int32_t g, int32_t i) {
    const uint64_t h = block_hash(seq, i);
    const uint64_t parent = i == 0 ? BlockPool::kRootHash : seq.block_hashes[i - 1];
    std::span<const int32_t> toks(seq.tokens.data() + static_cast<size_t>(i) * block_size_,
                                  static_cast<size_t>(block_size_));
    return pool_.find(h, parent, toks, seq.cache_namespace, g);
  };
  // Full-attention groups: the longest run of cached leading blocks.
  int32_t n = max_blocks;
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (windows_[static_cast<size_t>(g)] > 0) continue;
    int32_t i = 0;
    while (i < n && lookup(g, i) >= 0) ++i;
    n = i;
  }
  // Sliding-window groups: a hit of k blocks needs only the blocks its window reaches. Each
  // group's answer can only shorten k, which may break another group's: repeat to a fixed point.
  std::vector<std::vector<int32_t>> found(static_cast<size_t>(num_groups()));
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (windows_[static_cast<size_t>(g)] <= 0) continue;
    auto& f = found[static_cast<size_t>(g)];
    f.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) f[static_cast<size_t>(i)] = lookup(g, i);
  }
  for (bool changed = true; changed && n > 0;) {
    changed = false;
    for (int32_t g = 0; g < num_groups(); ++g) {
      const int32_t w = windows_[static_cast<size_t>(g)];
      if (w <= 0) continue;
      const auto& f = found[static_cast<size_t>(g)];
      int32_t k = n;
      for (; k > 0; --k) {
        const int32_t lo = released_prefix(w, int64_t{k} * block_size_);
        bool all = true;
        for (int32_t i = k - 1; i >= lo && all; --i) all = f[static_cast<size_t>(i)] >= 0;
        if (all) break;
      }
      if (k < n) {
        n = k;
        changed = true;
      }
    }
  }
  for (int32_t g = 0; g < num_groups(); ++g) {
    const int32_t w = windows_[static_cast<size_t>(g)];
    auto& t = table(seq, g);
    const int32_t lo = released_prefix(w, int64_t{n} * block_size_);
    for (int32_t i = 0; i < n; ++i) {
      if (i < lo) {
        t.push_back(kNoBlock);
        continue;
      }
      const int32_t b = w > 0 ? found[static_cast<size_t>(g)][static_cast<size_t>(i)] : lookup(g, i);
      TS_CHECK(b >= 0, "prefix block vanished during lookup");
      pool_.acquire(b);
      t.push_back(b);
    }
  }
  seq.num_computed_tokens = n * block_size_;
  seq.num_registered_blocks = n;
  seq.num_cached_tokens = seq.num_computed_tokens;
  return seq.num_cached_tokens;
}

int32_t KvCacheManager::num_blocks_needed(const Sequence& seq, int32_t num_new) const {
  const int64_t total = static_cast<int64_t>(seq.num_computed_tokens) + num_new;
  const int64_t blocks = (total + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(seq.block_table.size());  // every group's length
  return blocks > have ? static_cast<int32_t>((blocks - have) * num_groups()) : 0;
}

bool KvCacheManager::allocate_slots(Sequence& seq, int32_t num_new) {
  const int32_t need = num_blocks_needed(seq, num_new);
  if (need > pool_.num_free()) return false;
  ensure_tables(seq);
  const int32_t per_group = need / num_groups();
  for (int32_t g = 0; g < num_groups(); ++g) {
    auto& t = table(seq, g);
    for (int32_t i = 0; i < per_group; ++i) {
      const int32_t b = pool_.allocate();
      TS_CHECK(b >= 0, "pool reported free blocks but allocation failed");
      t.push_back(b);
    }
  }
  return true;
}

void KvCacheManager::commit_computed(Sequence& seq) {
  ensure_tables(seq);
  const int32_t full = seq.num_computed_tokens / block_size_;
  TS_CHECK(full <= static_cast<int32_t>(seq.block_table.size()), "computed past block table");
  if (pool_.caching_enabled()) {
    for (int32_t i = seq.num_registered_blocks; i < full; ++i) {
      const uint64_t h = block_hash(seq, i);
      const uint64_t parent = i == 0 ? BlockPool::kRootHash : seq.block_hashes[i - 1];
      std::span<const int32_t> toks(seq.tokens.data() + static_cast<size_t>(i) * block_size_,
                                    static_cast<size_t>(block_size_));
      for (int32_t g = 0; g < num_groups(); ++g) {
        const int32_t b = table(seq, g)[static_cast<size_t>(i)];
        if (b != kNoBlock) pool_.register_full(b, h, parent, toks, seq.cache_namespace, g);
      }
    }
    if (full > seq.num_registered_blocks) seq.num_registered_blocks = full;
  }
  // Sliding-window groups: release what no future query reaches (holes stay leading).
  for (int32_t g = 0; g < num_groups(); ++g) {
    const int32_t w = windows_[static_cast<size_t>(g)];
    if (w <= 0) continue;
    auto& t = table(seq, g);
    const int32_t lo = std::min(released_prefix(w, seq.num_computed_tokens), static_cast<int32_t>(t.size()));
    for (int32_t i = lo - 1; i >= 0 && t[static_cast<size_t>(i)] != kNoBlock; --i) {
      pool_.release(t[static_cast<size_t>(i)]);
      t[static_cast<size_t>(i)] = kNoBlock;
    }
  }
}

void KvCacheManager::truncate_to_computed(Sequence& seq) {
  const size_t keep = static_cast<size_t>((seq.num_computed_tokens + block_size_ - 1) / block_size_);
  TS_CHECK(static_cast<int32_t>(keep) >= seq.num_registered_blocks, "truncating registered blocks");
  ensure_tables(seq);
  for (int32_t g = 0; g < num_groups(); ++g) {
    auto& t = table(seq, g);
    while (t.size() > keep) {
      if (t.back() != kNoBlock) pool_.release(t.back());
      t.pop_back();
    }
  }
}

void KvCacheManager::free(Sequence& seq) {
  ensure_tables(seq);
  for (size_t i = seq.block_table.size(); i-- > 0;) {
    for (int32_t g = 0; g < num_groups(); ++g) {
      auto& t = table(seq, g);
      if (i < t.size() && t[i] != kNoBlock) pool_.release(t[i]);
    }
  }
  for (int32_t g = 0; g < num_groups(); ++g) table(seq, g).clear();
  seq.num_computed_tokens = 0;
  seq.num_registered_blocks = 0;
}

}  // namespace ts::engine
