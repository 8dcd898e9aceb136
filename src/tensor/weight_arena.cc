#include "tensor/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <mutex>

namespace ts::tensor {

namespace {

// Repacked weights live in anonymous slabs, 2 MB-aligned and advised MADV_HUGEPAGE before the
// repack first touches them, shared by the matrices created one after another (PERFORMANCE.md:
// one arena). Before, each matrix had its own mapping: only one of >= 2 MB got the advice, and
// transparent huge pages then covered just its 2 MB-aligned interior, so every per-layer matrix
// of a 0.1-0.5B model (SmolLM2-135M: 0.1-0.9 MB each) streamed through 4 KB pages: a TLB miss
// every 64 lines. Allocations are 4 KB-aligned bump pointers in the current slab (32 MB; larger
// requests get a slab of their own) and never reused; a slab is unmapped when its last matrix
// goes. Untouched slab pages cost nothing; the one partly used 2 MB page at a slab's end is
// the only memory the sharing adds.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kSlabBytes = size_t{32} << 20;

}  // namespace

struct Slab {
  uint8_t* base = nullptr;
  size_t bytes = 0;  // mapped
  size_t used = 0;   // bump offset
  size_t live = 0;   // allocations not yet freed
};

namespace {

std::mutex& slab_mutex() {
  static std::mutex mu;
  return mu;
}
Slab*& current_slab() {  // guarded by slab_mutex()
  static Slab* cur = nullptr;
  return cur;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A zeroed, 2 MB-aligned anonymous mapping of round_up(bytes, 2 MB), advised for huge pages.
Slab* map_slab(size_t bytes) {
  bytes = round_up(bytes, kHugePage);
  const size_t span = bytes + kHugePage;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
  const uintptr_t a = round_up(raw, kHugePage);
  if (a > raw) munmap(p, a - raw);
  if (raw + span > a + bytes) munmap(reinterpret_cast<void*>(a + bytes), raw + span - (a + bytes));
  madvise(reinterpret_cast<void*>(a), bytes, MADV_HUGEPAGE);
  return new Slab{reinterpret_cast<uint8_t*>(a), bytes, 0, 0};
}

void unmap_slab(Slab* s) {
  munmap(s->base, s->bytes);
  delete s;
}

}  // namespace

void ArenaFree::operator()(uint8_t* p) const {
  if (p == nullptr || slab == nullptr) return;
  std::lock_guard<std::mutex> lock(slab_mutex());
  if (--slab->live > 0) return;
  if (current_slab() == slab) current_slab() = nullptr;
  unmap_slab(slab);
}

Arena make_arena(size_t bytes) {
  const size_t need = round_up(std::max<size_t>(bytes, 1), 4096);
  std::lock_guard<std::mutex> lock(slab_mutex());
  Slab* s = nullptr;
  if (need > kSlabBytes / 2) {
    s = map_slab(need);  // a slab of its own
    if (s == nullptr) return Arena(nullptr, ArenaFree{});
  } else {
    Slab*& cur = current_slab();
    if (cur == nullptr || cur->bytes - cur->used < need) {
      if (cur != nullptr && cur->live == 0) unmap_slab(cur);
      cur = map_slab(kSlabBytes);
      if (cur == nullptr) return Arena(nullptr, ArenaFree{});
    }
    s = cur;
  }
  uint8_t* p = s->base + s->used;
  s->used += need;
  ++s->live;
  return Arena(p, ArenaFree{s});
}

}  // namespace ts::tensor
