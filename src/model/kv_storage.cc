#include "model/kv_storage.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace ts::model {

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    case KvType::kQ8_0: return "q8_0";
  }
  return "?";
}

Result<KvType> parse_kv_type(std::string_view name) {
  if (name == "f32") return KvType::kF32;
  if (name == "f16") return KvType::kF16;
  if (name == "q8_0" || name == "q8") return KvType::kQ8_0;
  return invalid_argument("unknown KV cache type '" + std::string(name) + "' (f16, q8_0, f32)");
}

size_t kv_elem_bytes(KvType t) {
  switch (t) {
    case KvType::kF32: return 4;
    case KvType::kF16: return 2;
    case KvType::kQ8_0: return 1;
  }
  return 4;
}

namespace {

// K and V bytes of one token of one layer slot (all KV heads; q8_0 scales included).
size_t slot_token_bytes(int32_t n_head_kv, int32_t head_dim, KvType type) {
  const size_t per_head_token = static_cast<size_t>(head_dim) * kv_elem_bytes(type) +
                                (type == KvType::kQ8_0 ? sizeof(float) : 0);
  return 2ull * static_cast<size_t>(n_head_kv) * per_head_token;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

KvLayout KvLayout::full(const ModelConfig& cfg) {
  KvLayout L;
  L.layers_per_group = cfg.n_layer;
  L.group_of_layer.assign(static_cast<size_t>(std::max(cfg.n_layer, 0)), 0);
  L.slot_of_layer.resize(L.group_of_layer.size());
  for (int32_t l = 0; l < cfg.n_layer; ++l) L.slot_of_layer[static_cast<size_t>(l)] = l;
  L.group_window = {0};
  L.group_layers = {cfg.n_layer};
  return L;
}

KvLayout KvLayout::windowed(const ModelConfig& cfg) {
  std::vector<bool> swa(static_cast<size_t>(std::max(cfg.n_layer, 0)));
  for (int32_t l = 0; l < cfg.n_layer; ++l) swa[static_cast<size_t>(l)] = cfg.layer_is_swa(l);
  return windowed(swa, cfg.sliding_window);
}

KvLayout KvLayout::windowed(const std::vector<bool>& swa, int32_t window) {
  const int32_t n_layer = static_cast<int32_t>(swa.size());
  std::vector<int32_t> full_layers, swa_layers;
  for (int32_t l = 0; l < n_layer; ++l) (swa[static_cast<size_t>(l)] && window > 0 ? swa_layers : full_layers).push_back(l);
  if (swa_layers.empty()) {
    ModelConfig c;
    c.n_layer = n_layer;
    return full(c);
  }
  const int32_t nf = static_cast<int32_t>(full_layers.size()), ns = static_cast<int32_t>(swa_layers.size());
  const int32_t most = nf > 0 ? std::min(nf, ns) : ns;
  int32_t G = 1;
  for (int32_t g = most; g >= 1; --g) {
    const int64_t pad = ceil_div(nf, g) * g - nf + ceil_div(ns, g) * g - ns;
    if (pad * 10 <= n_layer) {
      G = g;
      break;
    }
  }
  KvLayout L;
  L.layers_per_group = G;
  L.group_of_layer.assign(static_cast<size_t>(n_layer), 0);
  L.slot_of_layer.assign(static_cast<size_t>(n_layer), 0);
  for (const auto* layers : {&full_layers, &swa_layers}) {
    const int32_t win = layers == &full_layers ? 0 : window;
    for (size_t i = 0; i < layers->size(); ++i) {
      if (i % static_cast<size_t>(G) == 0) {
        L.group_window.push_back(win);
        L.group_layers.push_back(0);
      }
      const int32_t l = (*layers)[i];
      L.group_of_layer[static_cast<size_t>(l)] = L.num_groups() - 1;
      L.slot_of_layer[static_cast<size_t>(l)] = static_cast<int32_t>(i % static_cast<size_t>(G));
      ++L.group_layers.back();
    }
  }
  return L;
}

uint64_t KvFootprint::full_bytes_per_token() const {
  return static_cast<uint64_t>(num_full_groups) * group_block_bytes / static_cast<uint64_t>(block_size);
}
uint64_t KvFootprint::swa_bytes_per_token() const {
  return static_cast<uint64_t>(num_swa_groups) * group_block_bytes / static_cast<uint64_t>(block_size);
}

namespace {
// Blocks a sliding-window group holds while a chunk of `chunk` tokens is computed: positions
// [p - window + 1, p + chunk) span at most ceil((window + chunk - 2) / bs) + 1 blocks.
int64_t swa_blocks_during(int32_t window, int32_t bs, int64_t chunk) {
  if (window <= 0) return 0;
  return ceil_div(std::max<int64_t>(0, window + chunk - 2), bs) + 1;
}
}  // namespace

int64_t KvFootprint::swa_blocks_cap() const { return swa_blocks_during(window, block_size, 1); }

uint64_t KvFootprint::swa_bytes_cap() const {
  return static_cast<uint64_t>(num_swa_groups) * static_cast<uint64_t>(swa_blocks_cap()) * group_block_bytes;
}

int64_t KvFootprint::blocks_for_tokens(int64_t n_tokens) const {
  const int64_t nb = ceil_div(std::max<int64_t>(0, n_tokens), block_size);
  return int64_t{num_full_groups} * nb + int64_t{num_swa_groups} * std::min(nb, swa_blocks_cap());
}

uint64_t KvFootprint::bytes_for_tokens(int64_t n_tokens) const {
  return static_cast<uint64_t>(blocks_for_tokens(n_tokens)) * group_block_bytes;
}

int64_t KvFootprint::peak_blocks(int64_t n_tokens, int32_t chunk_tokens) const {
  const int64_t n = std::max<int64_t>(1, n_tokens);
  const int64_t nb = ceil_div(n, block_size);
  const int64_t swa = std::min(nb, swa_blocks_during(window, block_size, std::clamp<int64_t>(chunk_tokens, 1, n)));
  return int64_t{num_full_groups} * nb + int64_t{num_swa_groups} * swa;
}

int64_t KvFootprint::max_tokens_for_blocks(int64_t num_blocks, int32_t chunk_tokens) const {
  auto fits = [&](int64_t n) { return peak_blocks(n, chunk_tokens) <= num_blocks; };
  if (num_blocks <= 0 || !fits(1)) return 0;
  // Without full-attention groups a sequence's blocks stop growing: cap the search.
  int64_t lo = 1, hi = num_full_groups > 0 ? num_blocks * block_size : (int64_t{1} << 40);
  if (fits(hi)) return hi;
  while (hi - lo > 1) {  // fits(lo) && !fits(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

KvFootprint kv_footprint(const KvLayout& layout, const ModelConfig& cfg, KvType type, int32_t block_size) {
  KvFootprint f;
  f.block_size = block_size;
  f.group_block_bytes = static_cast<uint64_t>(layout.layers_per_group) * static_cast<uint64_t>(block_size) *
                        slot_token_bytes(cfg.n_head_kv, cfg.head_dim, type);
  for (int32_t w : layout.group_window) {
    if (w > 0) {
      ++f.num_swa_groups;
      f.window = w;
    } else {
      ++f.num_full_groups;
    }
  }
  return f;
}

KvFootprint kv_footprint(int32_t n_layer, int32_t n_swa_layers, int32_t window, int32_t n_head_kv,
                         int32_t head_dim, KvType type, int32_t block_size) {
  std::vector<bool> swa(static_cast<size_t>(std::max(n_layer, 0)));
  for (int32_t l = 0; l < std::min(n_swa_layers, n_layer); ++l) swa[static_cast<size_t>(l)] = true;
  ModelConfig c;
  c.n_layer = n_layer;
  c.n_head_kv = n_head_kv;
  c.head_dim = head_dim;
  return kv_footprint(KvLayout::windowed(swa, window), c, type, block_size);
}

size_t KvStorage::bytes_per_block(const ModelConfig& cfg, KvType type, int32_t block_size) {
  return static_cast<size_t>(cfg.n_layer) * block_size * slot_token_bytes(cfg.n_head_kv, cfg.head_dim, type);
}

size_t KvStorage::bytes_per_block(const ModelConfig& cfg, KvType type, int32_t block_size, const KvLayout& layout) {
  return static_cast<size_t>(layout.layers_per_group) * block_size * slot_token_bytes(cfg.n_head_kv, cfg.head_dim, type);
}

uint64_t kv_bytes_per_token(const ModelConfig& cfg, KvType type) {
  return KvStorage::bytes_per_block(cfg, type, 1);
}

uint64_t window_only_kv_bytes(const ModelConfig& cfg, KvType type, int64_t n_tokens, int32_t block_size) {
  return kv_footprint(KvLayout::windowed(cfg), cfg, type, block_size).bytes_for_tokens(n_tokens);
}

int32_t KvStorage::blocks_for_budget(const ModelConfig& cfg, KvType type, int32_t block_size,
                                     size_t budget_bytes) {
  return blocks_for_budget(cfg, type, block_size, budget_bytes, KvLayout::full(cfg));
}

int32_t KvStorage::blocks_for_budget(const ModelConfig& cfg, KvType type, int32_t block_size,
                                     size_t budget_bytes, const KvLayout& layout) {
  size_t per = bytes_per_block(cfg, type, block_size, layout);
  if (per == 0) return 0;
  size_t n = budget_bytes / per;
  return n > (1u << 30) ? (1 << 30) : static_cast<int32_t>(n);
}

Result<KvStorage> KvStorage::create(const ModelConfig& cfg, KvType type, int32_t block_size,
                                    int32_t num_blocks) {
  return create(cfg, type, block_size, num_blocks, KvLayout::full(cfg));
}

Result<KvStorage> KvStorage::create(const ModelConfig& cfg, KvType type, int32_t block_size,
                                    int32_t num_blocks, KvLayout layout) {
  if (block_size <= 0 || num_blocks <= 0) {
    return invalid_argument("KV storage needs a positive block size and block count");
  }
  if (static_cast<int32_t>(layout.group_of_layer.size()) != cfg.n_layer ||
      static_cast<int32_t>(layout.slot_of_layer.size()) != cfg.n_layer || layout.layers_per_group <= 0 ||
      layout.group_window.empty()) {
    return invalid_argument("KV layout does not match the model's layers");
  }
  for (int32_t l = 0; l < cfg.n_layer; ++l) {
    const int32_t g = layout.group_of_layer[static_cast<size_t>(l)], s = layout.slot_of_layer[static_cast<size_t>(l)];
    if (g < 0 || g >= layout.num_groups() || s < 0 || s >= layout.layers_per_group) {
      return invalid_argument("KV layout maps layer " + std::to_string(l) + " outside its groups");
    }
  }
  KvStorage s;
  s.type_ = type;
  s.block_size_ = block_size;
  s.num_blocks_ = num_blocks;
  s.n_layer_ = cfg.n_layer;
  s.n_head_kv_ = cfg.n_head_kv;
  s.head_dim_ = cfg.head_dim;
  const size_t slots = static_cast<size_t>(layout.layers_per_group);
  s.identity_slots_ = true;
  for (int32_t l = 0; l < cfg.n_layer; ++l) s.identity_slots_ &= layout.slot_of_layer[static_cast<size_t>(l)] == l;
  s.layout_ = std::move(layout);
  s.head_page_bytes_ = static_cast<size_t>(block_size) * cfg.head_dim * kv_elem_bytes(type);
  s.block_bytes_ = static_cast<size_t>(cfg.n_head_kv) * s.head_page_bytes_;
  size_t values = 2ull * slots * num_blocks * s.block_bytes_;
  s.scale_offset_ = values;
  size_t scales = type == KvType::kQ8_0
                      ? 2ull * slots * num_blocks * cfg.n_head_kv * block_size * sizeof(float)
                      : 0;
  s.bytes_ = values + scales;
  void* p = mmap(nullptr, s.bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    s.bytes_ = 0;
    return resource_exhausted("cannot allocate " + std::to_string(values + scales) + " bytes of KV cache");
  }
  // Advisory: where THP is off, or for a cache under one huge page, 4 KiB pages are used.
  if (s.bytes_ >= (size_t{2} << 20)) madvise(p, s.bytes_, MADV_HUGEPAGE);
  // Fault every page in now (the kernel zeroes it), as the zero-filled vector this replaced
  // did: a lazily faulted 2 MiB page would otherwise be zeroed inside the step that first
  // writes it (perf: ~5 % of an 8-sequence benchmark in do_huge_pmd_anonymous_page).
  if (madvise(p, s.bytes_, MADV_POPULATE_WRITE) != 0) std::memset(p, 0, s.bytes_);  // kernels before 5.14
  s.mem_ = std::unique_ptr<uint8_t[], KvUnmap>(static_cast<uint8_t*>(p), KvUnmap{s.bytes_});
  return s;
}

void KvUnmap::operator()(uint8_t* p) const {
  if (p != nullptr) munmap(p, bytes);
}

uint8_t* KvStorage::page_ptr(int32_t layer, bool is_v, int32_t block, int32_t head) {
  const size_t slot = identity_slots_ ? static_cast<size_t>(layer)
                                      : static_cast<size_t>(layout_.slot_of_layer[static_cast<size_t>(layer)]);
  size_t idx = ((slot * 2 + (is_v ? 1 : 0)) * num_blocks_ + block);
  return mem_.get() + idx * block_bytes_ + head * head_page_bytes_;
}
const uint8_t* KvStorage::page_ptr(int32_t layer, bool is_v, int32_t block, int32_t head) const {
  return const_cast<KvStorage*>(this)->page_ptr(layer, is_v, block, head);
}
float* KvStorage::scale_ptr(int32_t layer, bool is_v, int32_t block, int32_t head, int32_t slot) {
  const size_t sl = identity_slots_ ? static_cast<size_t>(layer)
                                    : static_cast<size_t>(layout_.slot_of_layer[static_cast<size_t>(layer)]);
  size_t idx = ((((sl * 2 + (is_v ? 1 : 0)) * num_blocks_ + block) * n_head_kv_ + head) *
                block_size_) + slot;
  return reinterpret_cast<float*>(mem_.get() + scale_offset_) + idx;
}
const float* KvStorage::scale_ptr(int32_t layer, bool is_v, int32_t block, int32_t head, int32_t slot) const {
  return const_cast<KvStorage*>(this)->scale_ptr(layer, is_v, block, head, slot);
}

}  // namespace ts::model
