// Per-architecture pieces of the one transformer forward pass (model.cc). Each supported
// `general.architecture` maps to an ArchSpec: a plain table of switches that the loader and the
// forward skeleton consult, following llama.cpp's graph for that architecture. Adding an
// architecture means adding a row here (and, only if it needs a new kind of piece, a hook in
// model.cc), never a second copy of the forward pass.
//
// Thread-safety: the table is immutable.
#pragma once

#include <string>
#include <string_view>

namespace ts::model {

enum class FfnAct {
  kSilu,      // SwiGLU: silu(gate) * up (llama, qwen*, phi3)
  kGeluTanh,  // GeGLU with tanh-approximated GELU, as ggml computes it (gemma3)
};

struct ArchSpec {
  std::string_view name;        // general.architecture
  bool rope_neox = false;       // rotate pairs (i, i + d/2) instead of (2i, 2i+1)
  bool qk_norm = false;         // per-head RMSNorm of q and k (attn_q_norm / attn_k_norm [head_dim])
  bool fused_qkv = false;       // one attn_qkv matrix [(n_head + 2 n_head_kv) head_dim][n_embd]
  bool fused_gate_up = false;   // ffn_up holds [gate; up] ([2 n_ff][n_embd]), no ffn_gate
  bool post_norms = false;      // post_attention_norm and post_ffw_norm before each residual add
  bool embd_scale = false;      // token embeddings multiplied by sqrt(n_embd)
  bool moe = false;             // router ffn_gate_inp + stacked experts ffn_{gate,up,down}_exps
  bool moe_norm_w = false;      // default of expert_weights_norm: renormalize the top-k weights
  bool longrope = false;        // rope_factors_long / rope_factors_short tensors are honoured
  int swa_pattern = 0;          // n > 0: layer l is sliding-window unless l % n == n - 1
  FfnAct act = FfnAct::kSilu;
};

// The spec for `arch`, or nullptr when unsupported.
const ArchSpec* find_arch(std::string_view arch);
// "llama, mistral, qwen2, qwen3, qwen3moe, gemma3, phi3" for error messages.
std::string supported_archs();

}  // namespace ts::model
