// Synthetic models: a GGUF with seeded random weights (normal, mean 0) for any architecture the
// model code runs (llama, qwen2, qwen3, qwen3moe, gemma3, phi3) and shape, with a vocabulary
// copied from another GGUF or generated. Used by tests and benchmarks to get realistic shapes
// (SmolLM2-135M, Qwen2.5-0.5B, Llama-3.2-1B, Qwen3-0.6B, Qwen3-30B-A3B's MoE layer,
// Gemma-3-1B) without downloading weights. Norm weights are 1.0 (gemma3 stores them as the
// GGUF converter does, i.e. already 1 + w).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tensor/dtype.h"

namespace ts::tools {

struct SynthOptions {
  std::string arch = "llama";     // llama | qwen2 (QKV bias) | qwen3 | qwen3moe | gemma3 | phi3
  int32_t n_layer = 2;
  int32_t n_embd = 64;
  int32_t n_head = 4;
  int32_t n_head_kv = 4;
  int32_t n_ff = 128;
  int32_t n_ctx = 2048;
  float rope_base = 10000.f;
  float rms_eps = 1e-5f;
  bool tied = false;              // output shares token_embd
  std::string vocab_from;         // GGUF whose tokenizer.* metadata is copied, or ""
  int32_t vocab_size = 0;         // generated SentencePiece-style vocab size when vocab_from is ""
  tensor::DType type = tensor::DType::kF16;  // type of the 2-D weights
  uint64_t seed = 1;
  float std = 0.02f;              // weight standard deviation
  std::string name = "synthetic";
  int32_t head_dim = 0;           // 0 = n_embd / n_head; otherwise written as attention.key_length
  int32_t n_expert = 0;           // qwen3moe: experts per layer
  int32_t n_expert_used = 0;      // qwen3moe: top-k
  int32_t n_ff_exp = 0;           // qwen3moe: expert FFN width
  int32_t sliding_window = 0;     // gemma3: attention.sliding_window (0 = omit the key)
  float rope_base_swa = 10000.f;  // gemma3: rope.freq_base_swa
};

// Shapes of real models by name: "qwen3-0.6b", "qwen3-30b-a3b" (its MoE layer shape; 48
// layers unless n_layer is changed afterwards), "gemma3-1b", "qwen2.5-0.5b", "llama3.2-1b",
// "smollm2-135m". Fills arch and shape fields of `o`, keeping vocab, type, seed and name.
// Errors: kInvalidArgument naming the known presets.
Status apply_synth_preset(std::string_view preset, SynthOptions& o);

// Writes the model to `out_path`. Matrices whose row length is not a multiple of the type's
// block size are stored as F16 instead (as llama-quantize falls back). Errors:
// kInvalidArgument (bad shape/options), kNotFound / kDataLoss (vocab source), write errors.
Status synthesize(const SynthOptions& opts, const std::string& out_path);

}  // namespace ts::tools
