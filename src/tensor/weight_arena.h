// The arena for repacked weights (matrix.cc's Matrix::Impl): anonymous 2 MB-aligned slabs advised
// MADV_HUGEPAGE, shared by the matrices created one after another. Internal to src/tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ts::tensor {

struct Slab;

// Frees one allocation; the slab is unmapped when its last allocation goes.
struct ArenaFree {
  Slab* slab = nullptr;
  void operator()(uint8_t* p) const;
};
using Arena = std::unique_ptr<uint8_t[], ArenaFree>;

// `bytes` of zeroed memory, 4 KB-aligned, in a huge-page slab. Returns null on failure.
Arena make_arena(size_t bytes);

}  // namespace ts::tensor
