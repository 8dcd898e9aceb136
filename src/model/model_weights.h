// Internal to src/model: the loaded weights of a Model (one Layer per block, each piece present
// or empty as the architecture's ArchSpec says) and their loader.
#pragma once

#include <vector>

#include "model/model.h"
#include "model/moe.h"
#include "tensor/matrix.h"

namespace ts::model {

struct Model::Weights {
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;            // [n_embd]
    std::vector<float> post_attn_norm, post_ffw_norm;  // gemma3 [n_embd], or empty
    std::vector<float> q_norm, k_norm;                 // qwen3/gemma3 [head_dim], or empty
    std::vector<float> bq, bk, bv;                     // q/k/v biases (qwen2), or empty
    tensor::Matrix wq, wk, wv;                         // separate projections, or
    tensor::Matrix wqkv;                               // phi3: fused [(n_head + 2 n_kv) hd][n_embd]
    tensor::Matrix wo;
    tensor::Matrix w_gate, w_up, w_down;               // dense FFN (w_up fused [2 n_ff] for phi3)
    MoeWeights moe;                                    // qwen3moe, or empty
  };
  tensor::Matrix token_embd;              // [n_vocab][n_embd]
  tensor::Matrix output_own;              // untied output, when present
  const tensor::Matrix* output = nullptr; // token_embd when tied
  std::vector<float> output_norm;         // [n_embd]
  std::vector<float> rope_freq_factors;   // [head_dim/2] divisors for global layers, or empty
  std::vector<Layer> layers;
};

// Loads every tensor `c` calls for, checking each shape; returns the bytes one forward step
// reads (all matrices; for MoE, the experts a token uses). Errors as Model::load.
Result<size_t> load_weights(const gguf::GgufFile& f, const ModelConfig& c, Model::Weights& w);

// What the loaded matrices hold in memory (see Model::weight_memory).
WeightMemory weight_memory(const Model::Weights& w);

}  // namespace ts::model
