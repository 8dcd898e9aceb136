// Approximate prefix index of the gateway's built-in picker (GIE's approximate prefix-cache
// scorer, keyed by model and tenant as the engine keys its prefix cache).
//
// The gateway has no tokenizer, so the rendered prompt is cut into blocks of
// `block_chars` bytes (default 64 bytes, about 16 tokens of English text, one engine KV block).
// Block i's hash chains block i-1's hash, the way the engine chains KV block hashes, and the
// first block is seeded with hash(model, tenant): two tenants with the same prompt never share
// an entry, exactly as their KV caches are isolated. Only whole blocks are indexed.
//
// Each endpoint has an LRU of at most `capacity_blocks` hashes. match() counts, per endpoint,
// how many leading blocks of a prompt that endpoint has been sent before; record() inserts a
// prompt's blocks for the endpoint the request went to. The index predicts, it does not know:
// a replica may have evicted blocks the index still holds.
//
// Not thread-safe (the Picker that owns it serialises access).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ts::router {

struct PrefixIndexOptions {
  size_t block_chars = 64;         // bytes per block of the rendered prompt
  size_t capacity_blocks = 65536;  // per endpoint LRU capacity
};

// The chained block hashes of a prompt: [number of whole blocks].
std::vector<uint64_t> prefix_block_hashes(std::string_view model, std::string_view tenant,
                                          std::string_view prompt, size_t block_chars);

class PrefixIndex {
 public:
  explicit PrefixIndex(PrefixIndexOptions opts = {}) : opts_(opts) {}

  // Leading blocks of `hashes` that `endpoint` holds (0..hashes.size()). Refreshes their LRU
  // position (a match is a use).
  size_t match(const std::string& endpoint, const std::vector<uint64_t>& hashes);
  // Inserts all of `hashes` for `endpoint`, evicting its least recently used blocks past capacity.
  void record(const std::string& endpoint, const std::vector<uint64_t>& hashes);
  // Forgets an endpoint (removed from the pool).
  void erase(const std::string& endpoint) { lru_.erase(endpoint); }
  size_t num_blocks(const std::string& endpoint) const;
  const PrefixIndexOptions& options() const { return opts_; }

 private:
  struct Lru {
    std::list<uint64_t> order;  // front = most recent
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> pos;
  };
  PrefixIndexOptions opts_;
  std::unordered_map<std::string, Lru> lru_;
};

}  // namespace ts::router
