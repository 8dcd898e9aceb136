#include "router/prefix_index.h"

namespace ts::router {
namespace {

// FNV-1a 64 then a splitmix64 finaliser: fast, stable across runs (the index is in-process
// only, so no cryptographic strength is needed; collisions only cost a wrong prediction).
uint64_t fnv1a(uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<uint64_t> prefix_block_hashes(std::string_view model, std::string_view tenant,
                                          std::string_view prompt, size_t block_chars) {
  std::vector<uint64_t> out;
  if (block_chars == 0) return out;
  // The namespace seed: length-prefixed so ("ab","c") and ("a","bc") differ.
  uint64_t h = 0xcbf29ce484222325ULL;
  h = fnv1a(h, std::to_string(model.size()));
  h = fnv1a(h, model);
  h = fnv1a(h, std::to_string(tenant.size()));
  h = fnv1a(h, tenant);
  uint64_t parent = mix(h);
  out.reserve(prompt.size() / block_chars);
  for (size_t at = 0; at + block_chars <= prompt.size(); at += block_chars) {
    uint64_t b = fnv1a(parent ^ 0xcbf29ce484222325ULL, prompt.substr(at, block_chars));
    parent = mix(b);
    out.push_back(parent);
  }
  return out;
}

size_t PrefixIndex::match(const std::string& endpoint, const std::vector<uint64_t>& hashes) {
  auto it = lru_.find(endpoint);
  if (it == lru_.end()) return 0;
  Lru& l = it->second;
  size_t n = 0;
  for (uint64_t h : hashes) {
    auto p = l.pos.find(h);
    if (p == l.pos.end()) break;
    l.order.splice(l.order.begin(), l.order, p->second);
    ++n;
  }
  return n;
}

void PrefixIndex::record(const std::string& endpoint, const std::vector<uint64_t>& hashes) {
  if (hashes.empty() || opts_.capacity_blocks == 0) return;
  Lru& l = lru_[endpoint];
  for (uint64_t h : hashes) {
    auto p = l.pos.find(h);
    if (p != l.pos.end()) {
      l.order.splice(l.order.begin(), l.order, p->second);
      continue;
    }
    l.order.push_front(h);
    l.pos[h] = l.order.begin();
    if (l.order.size() > opts_.capacity_blocks) {
      l.pos.erase(l.order.back());
      l.order.pop_back();
    }
  }
}

size_t PrefixIndex::num_blocks(const std::string& endpoint) const {
  auto it = lru_.find(endpoint);
  return it == lru_.end() ? 0 : it->second.order.size();
}

}  // namespace ts::router
