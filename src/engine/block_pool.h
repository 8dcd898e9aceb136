// BlockPool: owns the KV block ids of one KvStorage, their reference counts, the prefix-cache
// map (chained hash of a full block -> block id) and the eviction order of cached free blocks.
//
// A block is in exactly one state:
//   used         ref_count > 0 (held by one or more sequences; may also be cached)
//   cached-free  ref_count == 0 but holds a registered full block; kept in LRU order and evicted
//                (forgotten) only when a fresh block is needed and no uncached free block is left
//   free         ref_count == 0, no content worth keeping
// The key of a cached block is hash(parent hash, block tokens, namespace) and its KV group
// (model::KvLayout: a hybrid model's full-attention and sliding-window layers keep separate
// blocks for the same tokens; group 0 is the only group of other models). Lookups compare the
// stored tokens, parent hash, namespace and group too, so a hash collision can never return a
// block with different content.
//
// Not thread-safe: used by the engine thread only.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ts::engine {

class BlockPool {
 public:
  static constexpr uint64_t kRootHash = 0x9E3779B97F4A7C15ull;  // parent hash of a first block

  // num_blocks > 0. With enable_caching false, nothing is ever registered or looked up.
  BlockPool(int32_t num_blocks, bool enable_caching);

  // Chained block hash: depends on the parent's hash, every token and the namespace.
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens,
                             std::string_view ns);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Blocks with ref_count == 0 (plain free + cached-free): what allocate() can hand out.
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }
  int32_t num_cached_free() const { return static_cast<int32_t>(lru_.size()); }
  // Registered blocks (used or cached-free).
  int32_t num_cached() const { return static_cast<int32_t>(map_.size()); }
  bool caching_enabled() const { return caching_; }

  // A fresh block with ref_count 1. Prefers plain free blocks; otherwise evicts the least
  // recently released cached block (its hash is forgotten). Returns -1 when every block is used.
  int32_t allocate();

  // The cached block of KV group `group` holding (parent, tokens, ns) with hash `hash`, or -1.
  // No side effects.
  int32_t find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens,
               std::string_view ns, int32_t group = 0) const;

  // Adds a reference; a cached-free block leaves the LRU and becomes used.
  void acquire(int32_t block);
  // Drops a reference. At zero the block becomes cached-free (most recently used end) when it
  // is registered, plain free otherwise.
  void release(int32_t block);

  // Registers a used block as holding the full block (parent, tokens, ns) with hash `hash`.
  // If another block already holds that key, nothing changes and false is returned (the caller
  // keeps its private copy). Returns true when registered.
  bool register_full(int32_t block, uint64_t hash, uint64_t parent,
                     std::span<const int32_t> tokens, std::string_view ns, int32_t group = 0);

  int32_t ref_count(int32_t block) const { return blocks_[block].ref_count; }
  bool is_cached(int32_t block) const { return blocks_[block].registered; }
  // Drops every cached-free block's registration (they become plain free). For tests/admin.
  void clear_cache();

 private:
  struct Block {
    int32_t ref_count = 0;
    bool registered = false;
    uint64_t hash = 0;               // map key: the chained hash mixed with the group
    uint64_t parent = 0;
    int32_t group = 0;
    std::vector<int32_t> tokens;     // content of a registered block (collision check)
    std::string ns;
    std::list<int32_t>::iterator lru_it;  // valid while cached-free
  };
  void unregister(int32_t block);
  static uint64_t group_key(uint64_t hash, int32_t group);

  bool caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;        // plain free block ids (stack)
  std::list<int32_t> lru_;           // cached-free, front = least recently released
  std::unordered_multimap<uint64_t, int32_t> map_;  // hash -> registered block
};

}  // namespace ts::engine
