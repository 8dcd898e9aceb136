// Synthetic models: a GGUF with seeded random weights (normal, mean 0) for a Llama-family
// architecture and shape, with a vocabulary copied from another GGUF or generated.
// Used by tests and benchmarks to get realistic shapes (SmolLM2-135M, Qwen2.5-0.5B,
// Llama-3.2-1B) without downloading weights.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "tensor/dtype.h"

namespace ts::tools {

struct SynthOptions {
  std::string arch = "llama";     // "llama" | "qwen2" (QKV bias, NeoX RoPE)
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
};

// Writes the model to `out_path`. Matrices whose row length is not a multiple of the type's
// block size are stored as F16 instead (as llama-quantize falls back). Errors:
// kInvalidArgument (bad shape/options), kNotFound / kDataLoss (vocab source), write errors.
Status synthesize(const SynthOptions& opts, const std::string& out_path);

}  // namespace ts::tools
