#include "engine/block_pool.h"

#include <algorithm>

#include "core/check.h"

namespace ts::engine {
namespace {

inline uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

}  // namespace

BlockPool::BlockPool(int32_t num_blocks, bool enable_caching)
    : caching_(enable_caching), blocks_(static_cast<size_t>(std::max(num_blocks, 0))) {
  TS_CHECK(num_blocks > 0, "BlockPool needs at least one block");
  free_.reserve(blocks_.size());
  // Stack order hands out low ids first (easier to read in logs).
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

uint64_t BlockPool::chain_hash(uint64_t parent, std::span<const int32_t> tokens,
                               std::string_view ns) {
  uint64_t h = mix(parent ^ 0x5851F42D4C957F2Dull);
  for (int32_t t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x632BE59BD9B4E019ull));
  uint64_t hn = 0xCBF29CE484222325ull;  // FNV-1a over the namespace
  for (char c : ns) hn = (hn ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return mix(h ^ mix(hn + ns.size()));
}

int32_t BlockPool::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    unregister(b);
  } else {
    return -1;
  }
  TS_CHECK(blocks_[b].ref_count == 0, "allocated block still referenced");
  blocks_[b].ref_count = 1;
  return b;
}

uint64_t BlockPool::group_key(uint64_t hash, int32_t group) {
  return group == 0 ? hash : mix(hash ^ (0xA24BAED4963EE407ull * static_cast<uint64_t>(group)));
}

int32_t BlockPool::find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens,
                        std::string_view ns, int32_t group) const {
  if (!caching_) return -1;
  auto [lo, hi] = map_.equal_range(group_key(hash, group));
  for (auto it = lo; it != hi; ++it) {
    const Block& blk = blocks_[it->second];
    if (blk.parent == parent && blk.group == group && blk.ns == ns &&
        std::equal(blk.tokens.begin(), blk.tokens.end(), tokens.begin(), tokens.end())) {
      return it->second;
    }
  }
  return -1;
}

void BlockPool::acquire(int32_t block) {
  Block& blk = blocks_[block];
  if (blk.ref_count == 0) {
    TS_CHECK(blk.registered, "acquire of a plain free block (use allocate)");
    lru_.erase(blk.lru_it);
  }
  ++blk.ref_count;
}

void BlockPool::release(int32_t block) {
  Block& blk = blocks_[block];
  TS_CHECK(blk.ref_count > 0, "release of an unreferenced block");
  if (--blk.ref_count > 0) return;
  if (blk.registered) {
    blk.lru_it = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

bool BlockPool::register_full(int32_t block, uint64_t hash, uint64_t parent,
                              std::span<const int32_t> tokens, std::string_view ns, int32_t group) {
  if (!caching_) return false;
  Block& blk = blocks_[block];
  TS_CHECK(blk.ref_count > 0, "register_full of an unreferenced block");
  const uint64_t key = group_key(hash, group);
  if (blk.registered) return blk.hash == key;
  if (find(hash, parent, tokens, ns, group) >= 0) return false;
  blk.registered = true;
  blk.hash = key;
  blk.group = group;
  blk.parent = parent;
  blk.tokens.assign(tokens.begin(), tokens.end());
  blk.ns.assign(ns);
  map_.emplace(key, block);
  return true;
}

void BlockPool::unregister(int32_t block) {
  Block& blk = blocks_[block];
  if (!blk.registered) return;
  auto [lo, hi] = map_.equal_range(blk.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == block) {
      map_.erase(it);
      break;
    }
  }
  blk.registered = false;
  blk.tokens.clear();
  blk.ns.clear();
}

void BlockPool::clear_cache() {
  while (!lru_.empty()) {
    int32_t b = lru_.front();
    lru_.pop_front();
    unregister(b);
    free_.push_back(b);
  }
}

}  // namespace ts::engine
