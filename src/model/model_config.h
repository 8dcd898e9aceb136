// Hyper-parameters of a decoder-only transformer (llama, mistral, qwen2, qwen3, qwen3moe,
// gemma3, phi3), read from GGUF metadata (`<arch>.*` keys) and checked against the tensor
// shapes, so that a file whose metadata and tensors disagree is refused before anything is
// allocated from them.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/arch.h"

namespace ts::gguf { class GgufFile; }

namespace ts::model {

enum class RopeScaling { kNone, kLinear, kLlama3 };

struct ModelConfig {
  std::string arch;          // "llama", "qwen2", "mistral" ...
  const ArchSpec* spec = nullptr;  // per-architecture pieces (never null after read_model_config)
  std::string name;          // general.name, or the file stem
  int32_t n_layer = 0;
  int32_t n_embd = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;      // n_embd / n_head unless the file says otherwise
  int32_t n_ff = 0;          // dense FFN width (0 for MoE models without a dense FFN)
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;   // context_length
  float rms_eps = 1e-5f;
  float rope_base = 10000.f;
  bool rope_neox = false;    // qwen2: rotate pairs (i, i + head_dim/2); llama: (2i, 2i+1)
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scale_factor = 1.f;       // linear / llama3 factor
  float rope_low_freq_factor = 1.f;    // llama3
  float rope_high_freq_factor = 4.f;   // llama3
  int32_t rope_orig_ctx = 8192;        // llama3 original_context_length
  bool has_qkv_bias = false;
  bool tied_output = false;
  uint32_t file_type = 0;    // general.file_type

  // Attention.
  float attn_scale = 0.f;    // softmax scale of q.k (1/sqrt(head_dim) unless the arch says otherwise)
  float final_logit_softcap = 0.f;  // > 0: logits = cap * tanh(logits / cap) (gemma)

  // Sliding-window attention (gemma3): layers for which layer_is_swa() holds attend only to the
  // last `sliding_window` positions (the query's own included) and use their own RoPE base.
  int32_t sliding_window = 0;       // 0 = no sliding-window layers
  int32_t swa_pattern = 0;          // see ArchSpec::swa_pattern
  float rope_base_swa = 10000.f;    // rope.freq_base_swa

  // LongRoPE (phi3): when the file carries rope_factors_long/short, which set applies.
  bool rope_long_factors = false;   // context beyond rope.scaling.original_context_length
  float rope_attn_factor = 1.f;     // rope.scaling.attn_factor: scales cos/sin of every RoPE (as llama.cpp)

  // Mixture of experts (qwen3moe).
  int32_t n_expert = 0;             // experts per layer (0 = dense)
  int32_t n_expert_used = 0;        // top-k experts per token
  int32_t n_ff_exp = 0;             // width of one expert's FFN
  bool expert_weights_norm = false; // renormalize the top-k router weights to sum to 1

  bool layer_is_swa(int32_t layer) const {
    return sliding_window > 0 && swa_pattern > 0 && layer % swa_pattern < swa_pattern - 1;
  }
  // Positions a layer's attention reads for a query at `pos`: [first, pos].
  int32_t attn_first_pos(int32_t layer, int32_t pos) const {
    if (!layer_is_swa(layer)) return 0;
    return pos - sliding_window + 1 > 0 ? pos - sliding_window + 1 : 0;
  }

  // KV bytes per token and per sequence live with the storage layout: kv_storage.h
  // (kv_bytes_per_token, KvLayout, kv_footprint).
  int32_t num_swa_layers() const {
    int32_t n = 0;
    for (int32_t l = 0; l < n_layer; ++l) n += layer_is_swa(l) ? 1 : 0;
    return n;
  }
};

// Options that change which hyper-parameters apply (not what the file holds).
struct ConfigOptions {
  int32_t n_ctx = 0;   // context the engine will run (0 = context_length): picks LongRoPE factors
};

// Reads and validates the hyper-parameters. Errors: kUnimplemented for unsupported
// architectures, kDataLoss/kInvalidArgument for missing or inconsistent values.
// Also validates the tensor shapes the architecture needs (q/k/v widths vs head_dim, expert
// counts vs stacked tensor dims, fused widths), naming the first mismatch.
Result<ModelConfig> read_model_config(const gguf::GgufFile& file, const ConfigOptions& opts = {});

// Weight memory of a model file: `resident` = all tensor bytes; `active_per_token` = bytes one
// token's forward reads (for MoE, only expert_used_count of expert_count experts per layer;
// the token embedding counts one row unless it doubles as the output matrix).
struct WeightFootprint {
  uint64_t resident = 0;
  uint64_t active_per_token = 0;
  uint64_t expert_bytes = 0;   // all stacked expert tensors (0 for dense models)
};
WeightFootprint weight_footprint(const gguf::GgufFile& file, const ModelConfig& cfg);

}  // namespace ts::model
