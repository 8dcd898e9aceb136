// Paged KV memory: one arena holding, per layer, K and V pages of `block_size` tokens.
// Layout per layer and per K/V: [num_blocks][n_head_kv][page] elements of the KV type (f32,
// f16, or q8_0 as int8 values with one f32 scale per token per head), where a V page is
// [block_size][head_dim] and a K page is transposed, [head_dim][block_size]: the attention
// kernels read 16 consecutive positions of one dimension as one vector (no transpose per read).
// The storage only holds bytes; which sequence owns which block is the engine's BlockPool's job.
// Not thread-safe; written and read by the engine thread through Model::forward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/model_config.h"

namespace ts::model {

enum class KvType { kF32, kF16, kQ8_0 };
const char* kv_type_name(KvType t);
Result<KvType> parse_kv_type(std::string_view name);
// Bytes of one element (q8_0: 1, plus per-token-per-head scales accounted in bytes_per_block).
size_t kv_elem_bytes(KvType t);

// KV bytes one token takes in KvStorage over all layers (K and V, q8_0 scales included): the one
// formula `plan` and `info` use. Sliding-window layers (gemma3) are stored in full today: they
// are masked to their window at attention time, because a window-only (ring) layout needs the
// engine's block tables to give those layers sequence-private blocks (prefix-cached blocks are
// shared), which this storage cannot know. window_only_kv_bytes() says what such a layout
// would hold, for reports.
uint64_t kv_bytes_per_token(const ModelConfig& cfg, KvType type);
// Bytes a sequence of n_tokens would hold if sliding-window layers kept only their window.
uint64_t window_only_kv_bytes(const ModelConfig& cfg, KvType type, int64_t n_tokens);

class KvStorage {
 public:
  // Bytes one block takes over all layers (K and V, including q8_0 scales).
  static size_t bytes_per_block(const ModelConfig& cfg, KvType type, int32_t block_size);
  // Number of blocks that fit in `budget_bytes` (>= 0).
  static int32_t blocks_for_budget(const ModelConfig& cfg, KvType type, int32_t block_size,
                                   size_t budget_bytes);

  // Allocates num_blocks blocks (zeroed). Errors: kResourceExhausted when allocation fails,
  // kInvalidArgument for non-positive sizes.
  static Result<KvStorage> create(const ModelConfig& cfg, KvType type, int32_t block_size,
                                  int32_t num_blocks);

  KvType type() const { return type_; }
  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t n_layer() const { return n_layer_; }
  int32_t n_head_kv() const { return n_head_kv_; }
  int32_t head_dim() const { return head_dim_; }
  size_t total_bytes() const { return data_.size(); }

  // Start of one page (see the layout above): K (is_v=false) or V of `layer`, `block`, `head`.
  // Token `slot`, dimension d is element d * block_size + slot of a K page and
  // slot * head_dim + d of a V page.
  uint8_t* page_ptr(int32_t layer, bool is_v, int32_t block, int32_t head);
  const uint8_t* page_ptr(int32_t layer, bool is_v, int32_t block, int32_t head) const;
  // q8_0 only: the f32 scale of one token's head vector.
  float* scale_ptr(int32_t layer, bool is_v, int32_t block, int32_t head, int32_t slot);
  const float* scale_ptr(int32_t layer, bool is_v, int32_t block, int32_t head, int32_t slot) const;

 private:
  KvType type_ = KvType::kF16;
  int32_t block_size_ = 0, num_blocks_ = 0, n_layer_ = 0, n_head_kv_ = 0, head_dim_ = 0;
  size_t head_page_bytes_ = 0;   // block_size * head_dim * elem bytes
  size_t block_bytes_ = 0;       // per layer per K/V: n_head_kv * head_page_bytes_
  size_t scale_offset_ = 0;      // where q8_0 scales start
  std::vector<uint8_t> data_;
};

}  // namespace ts::model
