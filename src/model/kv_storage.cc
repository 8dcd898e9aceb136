#include "model/kv_storage.h"

#include <algorithm>
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

size_t KvStorage::bytes_per_block(const ModelConfig& cfg, KvType type, int32_t block_size) {
  size_t per_head_token = static_cast<size_t>(cfg.head_dim) * kv_elem_bytes(type) +
                          (type == KvType::kQ8_0 ? sizeof(float) : 0);
  return 2ull * cfg.n_layer * cfg.n_head_kv * block_size * per_head_token;
}

uint64_t kv_bytes_per_token(const ModelConfig& cfg, KvType type) {
  return KvStorage::bytes_per_block(cfg, type, 1);
}

uint64_t window_only_kv_bytes(const ModelConfig& cfg, KvType type, int64_t n_tokens) {
  if (cfg.n_layer <= 0) return 0;
  const uint64_t per_layer = kv_bytes_per_token(cfg, type) / static_cast<uint64_t>(cfg.n_layer);
  uint64_t total = 0;
  for (int32_t l = 0; l < cfg.n_layer; ++l) {
    const int64_t held = cfg.layer_is_swa(l) ? std::min<int64_t>(n_tokens, cfg.sliding_window) : n_tokens;
    total += per_layer * static_cast<uint64_t>(held);
  }
  return total;
}

int32_t KvStorage::blocks_for_budget(const ModelConfig& cfg, KvType type, int32_t block_size,
                                     size_t budget_bytes) {
  size_t per = bytes_per_block(cfg, type, block_size);
  if (per == 0) return 0;
  size_t n = budget_bytes / per;
  return n > (1u << 30) ? (1 << 30) : static_cast<int32_t>(n);
}

Result<KvStorage> KvStorage::create(const ModelConfig& cfg, KvType type, int32_t block_size,
                                    int32_t num_blocks) {
  if (block_size <= 0 || num_blocks <= 0) {
    return invalid_argument("KV storage needs a positive block size and block count");
  }
  KvStorage s;
  s.type_ = type;
  s.block_size_ = block_size;
  s.num_blocks_ = num_blocks;
  s.n_layer_ = cfg.n_layer;
  s.n_head_kv_ = cfg.n_head_kv;
  s.head_dim_ = cfg.head_dim;
  s.head_page_bytes_ = static_cast<size_t>(block_size) * cfg.head_dim * kv_elem_bytes(type);
  s.block_bytes_ = static_cast<size_t>(cfg.n_head_kv) * s.head_page_bytes_;
  size_t values = 2ull * cfg.n_layer * num_blocks * s.block_bytes_;
  s.scale_offset_ = values;
  size_t scales = type == KvType::kQ8_0
                      ? 2ull * cfg.n_layer * num_blocks * cfg.n_head_kv * block_size * sizeof(float)
                      : 0;
  try {
    s.data_.assign(values + scales, 0);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("cannot allocate " + std::to_string(values + scales) + " bytes of KV cache");
  }
  return s;
}

uint8_t* KvStorage::page_ptr(int32_t layer, bool is_v, int32_t block, int32_t head) {
  size_t idx = ((static_cast<size_t>(layer) * 2 + (is_v ? 1 : 0)) * num_blocks_ + block);
  return data_.data() + idx * block_bytes_ + head * head_page_bytes_;
}
const uint8_t* KvStorage::page_ptr(int32_t layer, bool is_v, int32_t block, int32_t head) const {
  return const_cast<KvStorage*>(this)->page_ptr(layer, is_v, block, head);
}
float* KvStorage::scale_ptr(int32_t layer, bool is_v, int32_t block, int32_t head, int32_t slot) {
  size_t idx = ((((static_cast<size_t>(layer) * 2 + (is_v ? 1 : 0)) * num_blocks_ + block) * n_head_kv_ + head) *
                block_size_) + slot;
  return reinterpret_cast<float*>(data_.data() + scale_offset_) + idx;
}
const float* KvStorage::scale_ptr(int32_t layer, bool is_v, int32_t block, int32_t head, int32_t slot) const {
  return const_cast<KvStorage*>(this)->scale_ptr(layer, is_v, block, head, slot);
}

}  // namespace ts::model
