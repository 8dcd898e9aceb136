// Open-addressing hash tables for the tokenizer's large load-time maps (150k+ pieces, 280k
// merges). One flat array each, so building and probing touch few cache lines, unlike
// node-based std::unordered_map. Immutable after building; lookups are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace ts::tokenizer::internal {

// text -> id over texts owned elsewhere (they must outlive the index and not move).
class PieceIndex {
 public:
  // Prepares for about `n` entries.
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n + n / 2 + 1) cap <<= 1;
    slots_.assign(cap, Slot{0, -1});
    mask_ = cap - 1;
    texts_.reserve(n);
  }
  // Adds `text` with the next id (0, 1, ...), or, when the text is present, points it at the
  // new id as well (the later id wins, as llama.cpp's map assignment). Returns the new id.
  int32_t add(std::string_view text) {
    if (texts_.size() + 1 > (slots_.size() * 2) / 3) grow();
    const auto id = static_cast<int32_t>(texts_.size());
    texts_.push_back(text);
    place(text, hash(text), id);
    return id;
  }
  // The id of `text`, or -1.
  int32_t find(std::string_view text) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(text);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.tag == tag && texts_[static_cast<size_t>(s.id)] == text) return s.id;
    }
  }
  size_t size() const { return texts_.size(); }

 private:
  struct Slot {
    uint32_t tag;  // high hash bits, checked before the text
    int32_t id;    // -1: empty
  };
  static uint64_t hash(std::string_view s) {
    // FNV-1a, then a final mix so the low bits (the slot) depend on every byte.
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
  }
  void place(std::string_view text, uint64_t h, int32_t id) {
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0 || (s.tag == tag && texts_[static_cast<size_t>(s.id)] == text)) {
        s = Slot{tag, id};
        return;
      }
    }
  }
  void grow() {
    std::vector<std::string_view> texts;
    texts.swap(texts_);
    reserve(texts.size() * 2 + 16);
    // Re-adding in id order keeps "later id wins" for duplicates.
    for (std::string_view t : texts) add(t);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::vector<std::string_view> texts_;  // id -> text
};

// (a, b) int32 pair -> (rank, result) for BPE merges.
class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t result;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n + n / 2 + 1) cap <<= 1;
    slots_.assign(cap, Slot{kEmpty, Value{0, 0}});
    mask_ = cap - 1;
    size_ = 0;
  }
  // Inserts unless the key is present (the first insertion wins). Grows as needed.
  void insert_if_absent(int32_t a, int32_t b, Value v) {
    if (slots_.empty() || (size_ + 1) * 3 > slots_.size() * 2) rehash(size_ * 2 + 16);
    const uint64_t k = key(a, b);
    for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == k) return;
      if (s.key == kEmpty) {
        s = Slot{k, v};
        ++size_;
        return;
      }
    }
  }
  const Value* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;  // ids are >= 0, so (-1, -1) never is a key
  struct Slot {
    uint64_t key;
    Value value;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }
  void rehash(size_t n) {
    std::vector<Slot> old;
    old.swap(slots_);
    reserve(n);
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      insert_if_absent(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xffffffffu),
                       s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace ts::tokenizer::internal
