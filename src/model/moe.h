// Mixture-of-experts FFN (qwen3moe, llama.cpp's build_moe_ffn semantics):
//   probs   = softmax(router · x) over all experts            (router F32 [n_expert][n_embd])
//   top-k   = the expert_used_count most probable experts     (ties: lower expert id first)
//   weights = probs of the top-k, divided by their sum (clamped below at 2^-14) when
//             expert_weights_norm is set
//   out     = sum over the k slots, in slot order, of weight * down(act(gate x) * up x)
// Experts are computed in one batched pass per expert over the tokens routed to it, so each
// expert's weights are read once per step however many tokens chose it.
// Thread-safety: route_top_k is pure; moe_ffn uses the scratch it is given.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/arch.h"
#include "tensor/matrix.h"

namespace ts::model {

// probs_logits: [n_tok][n_expert] router logits. Writes ids/weights: [n_tok][k].
// k must be in 1..n_expert.
void route_top_k(const float* router_logits, int64_t n_tok, int32_t n_expert, int32_t k, bool norm_weights,
                 int32_t* ids, float* weights);

// One layer's experts: per-expert slices of the stacked ffn_{gate,up,down}_exps tensors.
struct MoeWeights {
  tensor::Matrix router;               // [n_expert][n_embd]
  std::vector<tensor::Matrix> gate;    // per expert [n_ff_exp][n_embd]
  std::vector<tensor::Matrix> up;      // per expert [n_ff_exp][n_embd]
  std::vector<tensor::Matrix> down;    // per expert [n_embd][n_ff_exp]
};

struct MoeScratch {
  std::vector<float> logits, weights, xe, ge, ue, de, slots;
  std::vector<int32_t> ids, tok, slot;
  tensor::PreparedActivations xe_prep;  // one expert's gathered inputs, shared by its gate and up
};

struct MoeParams {
  int32_t n_embd = 0;
  int32_t n_ff_exp = 0;
  int32_t n_expert_used = 0;
  bool norm_weights = true;
  FfnAct act = FfnAct::kSilu;
};

// x: [n_tok][n_embd] (normed hidden states); out: [n_tok][n_embd].
void moe_ffn(const MoeWeights& w, const MoeParams& p, const float* x, int64_t n_tok, float* out,
             MoeScratch& s, ThreadPool* pool);

}  // namespace ts::model
