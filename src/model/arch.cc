#include "model/arch.h"

namespace ts::model {
namespace {

// Semantics checked against llama.cpp's graphs (llm_build_llama, _qwen2, _qwen3, _qwen3moe,
// _gemma3_iswa, _phi3) and its rope-type table (NEOX for qwen*, gemma*, phi3).
constexpr ArchSpec kArchs[] = {
    {.name = "llama"},
    {.name = "mistral"},
    {.name = "qwen2", .rope_neox = true},
    {.name = "qwen3", .rope_neox = true, .qk_norm = true},
    {.name = "qwen3moe", .rope_neox = true, .qk_norm = true, .moe = true, .moe_norm_w = true},
    // gemma3: layer il is sliding-window when il % 6 < 5 (llama.cpp set_swa_pattern(6)); the GGUF
    // converter already stores the Gemma RMSNorm weights as (1 + w), so they are used as stored.
    {.name = "gemma3", .rope_neox = true, .qk_norm = true, .post_norms = true, .embd_scale = true,
     .swa_pattern = 6, .act = FfnAct::kGeluTanh},
    // phi3: llama.cpp disables Phi-3's sliding window (it warns and attends globally); so do we.
    {.name = "phi3", .rope_neox = true, .fused_qkv = true, .fused_gate_up = true, .longrope = true},
};

}  // namespace

const ArchSpec* find_arch(std::string_view arch) {
  for (const ArchSpec& a : kArchs)
    if (a.name == arch) return &a;
  return nullptr;
}

std::string supported_archs() {
  std::string s;
  for (const ArchSpec& a : kArchs) {
    if (!s.empty()) s += ", ";
    s += a.name;
  }
  return s;
}

}  // namespace ts::model
