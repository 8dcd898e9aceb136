// Hyper-parameters of a Llama-family model, read from GGUF metadata (`<arch>.*` keys).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace ts::gguf { class GgufFile; }

namespace ts::model {

enum class RopeScaling { kNone, kLinear, kLlama3 };

struct ModelConfig {
  std::string arch;          // "llama", "qwen2", "mistral" ...
  std::string name;          // general.name, or the file stem
  int32_t n_layer = 0;
  int32_t n_embd = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;      // n_embd / n_head unless the file says otherwise
  int32_t n_ff = 0;
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

  // 2 (K and V) x layers x kv heads x head_dim x bytes per element.
  int64_t kv_bytes_per_token(int bytes_per_elem) const {
    return 2LL * n_layer * n_head_kv * head_dim * bytes_per_elem;
  }
};

// Reads and validates the hyper-parameters. Errors: kUnimplemented for unsupported
// architectures, kDataLoss/kInvalidArgument for missing or inconsistent values.
Result<ModelConfig> read_model_config(const gguf::GgufFile& file);

}  // namespace ts::model
