// Paged KV memory: one arena holding, per layer slot (KvLayout: a layer's slot in its group's
// blocks; with the full layout slot = layer), K and V pages of `block_size` tokens.
// Layout per slot and per K/V: [num_blocks][n_head_kv][page] elements of the KV type (f32,
// f16, or q8_0 as int8 values with one f32 scale per token per head), where a V page is
// [block_size][head_dim] and a K page is transposed, [head_dim][block_size]: the attention
// kernels read 16 consecutive positions of one dimension as one vector (no transpose per read).
// The storage only holds bytes; which sequence owns which block is the engine's BlockPool's job.
// Not thread-safe; written and read by the engine thread through Model::forward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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

// How a KvStorage's layers map onto block tables ("KV groups", vLLM v1's hybrid KV cache).
// A group is a set of layers that share one block table; every block of the storage has room
// for `layers_per_group` layers (its slots), so one pool of equal-size blocks serves every
// group and memory moves freely between them. Full-attention layers and sliding-window layers
// form separate groups (groups padded to layers_per_group layers); a sliding-window group's
// table keeps only the blocks its window can still reach (the engine's KvCacheManager frees
// the rest and leaves a hole, kNoBlock, in the table).
struct KvLayout {
  static constexpr int32_t kNoBlock = -1;  // a released block in a sliding-window table
  int32_t layers_per_group = 0;            // slots per block (G)
  std::vector<int32_t> group_of_layer;     // [n_layer] -> group
  std::vector<int32_t> slot_of_layer;      // [n_layer] -> slot in [0, G)
  std::vector<int32_t> group_window;       // [num_groups]: 0 full attention, > 0 sliding window
  std::vector<int32_t> group_layers;       // [num_groups]: real (unpadded) layers in the group

  int32_t num_groups() const { return static_cast<int32_t>(group_window.size()); }
  bool hybrid() const { return num_groups() > 1; }

  // Every layer in one group storing every position (sliding-window layers, if any, are masked
  // at attention time): the layout of models without sliding-window layers, and the reference.
  static KvLayout full(const ModelConfig& cfg);
  // Window-only storage for sliding-window layers: full-attention groups first (group 0 is
  // always full attention when the model has such layers), then sliding-window groups. The
  // group size is the largest G <= min(#full, #swa) whose padding stays within 10% of the
  // layers. Models without sliding-window layers get full(cfg).
  static KvLayout windowed(const ModelConfig& cfg);
  // The same from per-layer flags (`swa[l]`: layer l is sliding-window with `window`).
  static KvLayout windowed(const std::vector<bool>& swa, int32_t window);
};

// KV memory of a sequence under a layout, for `block_size`-token blocks: the one formula the
// engine's budget, `plan` and `info` use (q8_0 scales included, group padding included).
struct KvFootprint {
  int32_t block_size = 16;
  int32_t window = 0;                  // sliding window (0: none)
  int32_t num_full_groups = 0, num_swa_groups = 0;
  uint64_t group_block_bytes = 0;      // bytes of one block in one group (G slots, K and V)
  // Bytes per token of the full-attention groups and of the sliding-window groups.
  uint64_t full_bytes_per_token() const;
  uint64_t swa_bytes_per_token() const;
  // Blocks a sliding-window group holds at most between steps: its window of positions
  // [n - window + 1, n] spans at most ceil((window - 1) / block_size) + 1 blocks.
  int64_t swa_blocks_cap() const;
  // Bytes the sliding-window groups of one sequence hold at most between steps.
  uint64_t swa_bytes_cap() const;
  // Blocks (over all groups) and bytes a sequence of n_tokens holds between steps:
  // full groups x ceil(n / bs) + swa groups x min(ceil(n / bs), swa_blocks_cap()).
  int64_t blocks_for_tokens(int64_t n_tokens) const;
  uint64_t bytes_for_tokens(int64_t n_tokens) const;
  // Blocks (over all groups) one sequence of n_tokens needs at its peak, while its last prefill
  // chunk of up to `chunk_tokens` is in flight.
  int64_t peak_blocks(int64_t n_tokens, int32_t chunk_tokens) const;
  // The longest sequence whose blocks fit in num_blocks, while a prefill chunk of up to
  // `chunk_tokens` is in flight (a sliding-window group holds the chunk and the window behind
  // it during that step). 0 when not even one token fits.
  int64_t max_tokens_for_blocks(int64_t num_blocks, int32_t chunk_tokens) const;
};
KvFootprint kv_footprint(const KvLayout& layout, const ModelConfig& cfg, KvType type, int32_t block_size);
// Shape-only variant (`plan` without a model file): n_swa_layers of n_layer use `window`.
KvFootprint kv_footprint(int32_t n_layer, int32_t n_swa_layers, int32_t window, int32_t n_head_kv,
                         int32_t head_dim, KvType type, int32_t block_size);

// KV bytes one token takes over all layers (K and V, q8_0 scales included) while every layer
// holds it: the full-storage layout's per-token bytes. With window-only storage (KvLayout::
// windowed) a long sequence holds less: see kv_footprint().
uint64_t kv_bytes_per_token(const ModelConfig& cfg, KvType type);
// Bytes a sequence of n_tokens holds with window-only storage (kv_footprint of the windowed
// layout; block rounding included).
uint64_t window_only_kv_bytes(const ModelConfig& cfg, KvType type, int64_t n_tokens, int32_t block_size = 16);

// Deleter of KvStorage's mapping.
struct KvUnmap {
  size_t bytes = 0;
  void operator()(uint8_t* p) const;
};

class KvStorage {
 public:
  // Bytes one block takes over all its slots (K and V, including q8_0 scales); the full
  // layout by default (slots = layers).
  static size_t bytes_per_block(const ModelConfig& cfg, KvType type, int32_t block_size);
  static size_t bytes_per_block(const ModelConfig& cfg, KvType type, int32_t block_size,
                                const KvLayout& layout);
  // Number of blocks that fit in `budget_bytes` (>= 0).
  static int32_t blocks_for_budget(const ModelConfig& cfg, KvType type, int32_t block_size,
                                   size_t budget_bytes);
  static int32_t blocks_for_budget(const ModelConfig& cfg, KvType type, int32_t block_size,
                                   size_t budget_bytes, const KvLayout& layout);

  // Allocates num_blocks blocks (zeroed), with the full layout unless one is given (it must
  // come from KvLayout::full/windowed for this cfg). Errors: kResourceExhausted when
  // allocation fails, kInvalidArgument for non-positive sizes or a layout of another shape.
  static Result<KvStorage> create(const ModelConfig& cfg, KvType type, int32_t block_size,
                                  int32_t num_blocks);
  static Result<KvStorage> create(const ModelConfig& cfg, KvType type, int32_t block_size,
                                  int32_t num_blocks, KvLayout layout);

  KvType type() const { return type_; }
  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t n_layer() const { return n_layer_; }
  int32_t n_head_kv() const { return n_head_kv_; }
  int32_t head_dim() const { return head_dim_; }
  size_t total_bytes() const { return bytes_; }
  const KvLayout& layout() const { return layout_; }

  // Start of one page (see the layout above): K (is_v=false) or V of `layer` (its slot),
  // `block`, `head`.
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
  KvLayout layout_;
  bool identity_slots_ = true;   // slot = layer (the full layout): page_ptr skips the lookup
  size_t head_page_bytes_ = 0;   // block_size * head_dim * elem bytes
  size_t block_bytes_ = 0;       // per layer per K/V: n_head_kv * head_page_bytes_
  size_t scale_offset_ = 0;      // where q8_0 scales start
  // Zeroed anonymous memory with transparent huge pages requested: attention reads the pages
  // of a step scattered over the whole cache after the weights' stream evicted the TLB, and
  // with 4 KiB pages nearly every 16-token page costs a page walk.
  std::unique_ptr<uint8_t[], KvUnmap> mem_;
  size_t bytes_ = 0;
};

}  // namespace ts::model
