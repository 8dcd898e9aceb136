// Presets and per-tensor type rules of `tokenserve quantize` (see quantize.h). The rules follow
// llama-quantize's decisions for the presets offered here; ftypes we do not offer (IQ1-IQ3,
// Q2_K_S, MXFP4) are left out, and so are the imatrix-only branches.
#include <algorithm>
#include <cctype>
#include <cstdio>

#include "gguf/gguf.h"
#include "tensor/quantizer.h"
#include "tools/quantize.h"

namespace ts::tools {
namespace {

using tensor::DType;

// llama_ftype numbers (stable; they are what general.file_type holds).
enum Ftype : uint32_t {
  kAllF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 7, kQ5_0 = 8, kQ5_1 = 9, kQ2_K = 10,
  kQ3_K_S = 11, kQ3_K_M = 12, kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_S = 16,
  kQ5_K_M = 17, kQ6_K = 18, kIQ4_NL = 25, kIQ4_XS = 30, kBF16 = 32,
};

enum class Category { kTokenEmbd, kAttnQ, kAttnV, kAttnK, kAttnQkv, kAttnKvB, kAttnOutput,
                      kFfnUp, kFfnGate, kFfnDown, kOutput, kOther };

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  if (contains(name, "attn_qkv.weight")) return Category::kAttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Category::kAttnKvB;
  if (contains(name, "attn_v.weight")) return Category::kAttnV;
  if (contains(name, "attn_k.weight")) return Category::kAttnK;
  if (contains(name, "attn_q.weight")) return Category::kAttnQ;
  if (contains(name, "attn_output.weight")) return Category::kAttnOutput;
  if (contains(name, "ffn_up")) return Category::kFfnUp;
  if (contains(name, "ffn_gate")) return Category::kFfnGate;
  if (contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

bool is_attn_v_like(Category c) {
  return c == Category::kAttnV || c == Category::kAttnQkv || c == Category::kAttnKvB;
}

bool is_quantized(DType t) { return tensor::type_traits(static_cast<uint32_t>(t))->block_size > 1; }
int64_t block_of(DType t) { return tensor::type_traits(static_cast<uint32_t>(t))->block_size; }

// llama-quantize converts only these tensors; everything else is copied.
bool allows_quantization(const gguf::TensorInfo& t) {
  if (t.shape.size() < 2) return false;
  const std::string& n = t.name;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  static constexpr std::string_view kKeep[] = {
      "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
      "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "time_mix_first.weight",
      "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight",
      "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
      "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
      "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
      ".position_embd", ".rel_pos", ".patch_embd", ".patch_merger"};
  for (std::string_view k : kKeep) {
    if (contains(n, k)) return false;
  }
  return n != "position_embd.weight" && n != "token_types.weight";
}

// Layer number of "blk.N.*", or -1.
int layer_of(const std::string& name) {
  int l = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &l) != 1) return -1;
  return l;
}

struct ModelInfo {
  std::string arch;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_expert = 0;
  bool is_70b = false;
  int n_gqa() const { return n_head_kv > 0 ? n_head / n_head_kv : 0; }
};

int first_int(const gguf::GgufFile& f, const std::string& key, int fallback) {
  if (auto v = f.get_int(key)) return static_cast<int>(*v);
  if (const auto* a = f.get_int_array(key); a && !a->empty()) return static_cast<int>(a->front());
  return fallback;
}

// The running counters llama-quantize keeps while it walks the tensors.
struct State {
  ModelInfo m;
  Ftype ftype;
  bool tied = true;          // no output.weight seen
  int n_attention_wv = 0, i_attention_wv = 0;
  int n_ffn_down = 0, i_ffn_down = 0, n_ffn_gate = 0, i_ffn_gate = 0, n_ffn_up = 0, i_ffn_up = 0;
};

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// Layer for the per-layer rules: the running counter, or for MoE models the name's block number.
Result<int> rule_layer(const State& s, int counter, const std::string& name) {
  if (s.m.n_expert <= 1) return counter;
  const int l = layer_of(name);
  if (l < 0) return invalid_argument("cannot determine the layer of tensor '" + name + "'");
  if (l >= s.m.n_layer) {
    return invalid_argument("tensor '" + name + "' is in layer " + std::to_string(l) + " but the model has " +
                            std::to_string(s.m.n_layer));
  }
  return l;
}

// llama-quantize's mix rules for one tensor (its llama_tensor_get_type_impl, for our ftypes).
Result<DType> mix_type(State& s, DType t, const gguf::TensorInfo& info, Category cat,
                       std::optional<DType> output_type) {
  const Ftype f = s.ftype;
  const bool falcon = s.m.arch == "falcon";
  const std::string& name = info.name;
  if (cat == Category::kOutput || (s.tied && cat == Category::kTokenEmbd)) {
    if (output_type) return *output_type;  // a tied embedding follows --output-tensor-type
    if (falcon || info.shape[0] % block_of(t) != 0) return DType::kQ8_0;
    return t != DType::kQ8_0 ? DType::kQ6_K : t;
  }
  if (cat == Category::kTokenEmbd) return t;  // untied: the preset's type
  if (is_attn_v_like(cat)) {
    const int gqa = s.m.n_gqa();
    if (f == kQ2_K) t = gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
    else if (f == kQ3_K_M) t = s.i_attention_wv < 2 ? DType::kQ5_K : DType::kQ4_K;
    else if (f == kQ3_K_L) t = DType::kQ5_K;
    else if ((f == kIQ4_NL || f == kIQ4_XS) && gqa >= 4) t = DType::kQ5_K;
    else if ((f == kQ4_K_M || f == kQ5_K_M) && use_more_bits(s.i_attention_wv, s.n_attention_wv)) t = DType::kQ6_K;
    else if (f == kQ4_K_S && s.i_attention_wv < 4) t = DType::kQ5_K;
    if (s.m.is_70b && (t == DType::kQ3_K || t == DType::kQ4_K)) t = DType::kQ5_K;
    if (s.m.n_expert == 8) t = DType::kQ8_0;
    ++s.i_attention_wv;
    return t;
  }
  if (cat == Category::kAttnK) return s.m.n_expert == 8 ? DType::kQ8_0 : t;
  if (cat == Category::kFfnDown) {
    TS_ASSIGN_OR_RETURN(int i, rule_layer(s, s.i_ffn_down, name));
    const int n = s.n_ffn_down;
    if (f == kQ2_K) t = DType::kQ3_K;
    else if (f == kQ3_K_M) t = i < n / 16 ? DType::kQ5_K : (!falcon || use_more_bits(i, n)) ? DType::kQ4_K : DType::kQ3_K;
    else if (f == kQ3_K_L) t = falcon ? DType::kQ4_K : DType::kQ5_K;
    else if (f == kQ4_K_M) {
      if (falcon) t = i < n / 16 ? DType::kQ6_K : use_more_bits(i, n) ? DType::kQ5_K : DType::kQ4_K;
      else if (use_more_bits(i, n)) t = DType::kQ6_K;
    } else if (i < n / 8 && (f == kIQ4_NL || f == kIQ4_XS)) t = DType::kQ5_K;
    else if (f == kQ5_K_M && use_more_bits(i, n)) t = DType::kQ6_K;
    else if (f == kQ4_K_S && !falcon && i < n / 8) t = DType::kQ5_K;
    ++s.i_ffn_down;
    return t;
  }
  if (cat == Category::kAttnOutput) {
    if (!falcon) {
      if (s.m.n_expert == 8) {
        if (f == kQ2_K || f == kQ3_K_S || f == kQ3_K_M || f == kIQ4_NL || f == kQ4_K_S || f == kQ4_K_M ||
            f == kIQ4_XS) {
          t = DType::kQ5_K;
        }
      } else if (f == kQ2_K) t = DType::kQ3_K;
      else if (f == kQ3_K_M) t = DType::kQ4_K;
      else if (f == kQ3_K_L) t = DType::kQ5_K;
    } else if (f == kQ3_K_L) {
      t = DType::kQ4_K;
    }
    return t;
  }
  if (cat == Category::kFfnGate) {
    TS_ASSIGN_OR_RETURN(int i, rule_layer(s, s.i_ffn_gate, name));
    (void)i;  // only IQ3_XS (not offered) changes gate types
    ++s.i_ffn_gate;
    return t;
  }
  if (cat == Category::kFfnUp) {
    TS_ASSIGN_OR_RETURN(int i, rule_layer(s, s.i_ffn_up, name));
    (void)i;
    ++s.i_ffn_up;
    return t;
  }
  return t;
}

// Rows that do not fit the type's block: llama-quantize's fallbacks.
DType fallback_type(DType t, int64_t cols, bool* fell_back) {
  if (cols % block_of(t) == 0) return t;
  *fell_back = true;
  DType r;
  switch (t) {
    case DType::kIQ4_XS: r = DType::kIQ4_NL; break;
    case DType::kQ2_K:
    case DType::kQ3_K: r = DType::kQ4_0; break;
    case DType::kQ4_K: r = DType::kQ5_0; break;
    case DType::kQ5_K: r = DType::kQ5_1; break;
    case DType::kQ6_K: r = DType::kQ8_0; break;
    default: r = DType::kF16; break;  // llama-quantize aborts here; see quantize.h
  }
  return cols % block_of(r) == 0 ? r : DType::kF16;
}

}  // namespace

const std::vector<QuantPreset>& quant_presets() {
  static const std::vector<QuantPreset> kPresets = {
      {"Q4_0", kQ4_0, DType::kQ4_0, "4.5 bpw, legacy round-to-nearest"},
      {"Q4_1", kQ4_1, DType::kQ4_1, "5.0 bpw, legacy with offset"},
      {"Q5_0", kQ5_0, DType::kQ5_0, "5.5 bpw, legacy"},
      {"Q5_1", kQ5_1, DType::kQ5_1, "6.0 bpw, legacy with offset"},
      {"Q8_0", kQ8_0, DType::kQ8_0, "8.5 bpw, nearly lossless"},
      {"Q2_K", kQ2_K, DType::kQ2_K, "2-bit K-quant mix (attn_v, ffn_down, attn_output in Q3_K+)"},
      {"Q3_K_S", kQ3_K_S, DType::kQ3_K, "3-bit K-quant"},
      {"Q3_K_M", kQ3_K_M, DType::kQ3_K, "3-bit K-quant mix, attn_v/ffn_down/attn_output raised (alias Q3_K)"},
      {"Q3_K_L", kQ3_K_L, DType::kQ3_K, "3-bit K-quant mix, attn_v/ffn_down/attn_output in Q5_K"},
      {"Q4_K_S", kQ4_K_S, DType::kQ4_K, "4-bit K-quant, first layers raised"},
      {"Q4_K_M", kQ4_K_M, DType::kQ4_K, "4-bit K-quant mix, some attn_v/ffn_down in Q6_K (alias Q4_K)"},
      {"Q5_K_S", kQ5_K_S, DType::kQ5_K, "5-bit K-quant"},
      {"Q5_K_M", kQ5_K_M, DType::kQ5_K, "5-bit K-quant mix, some attn_v/ffn_down in Q6_K (alias Q5_K)"},
      {"Q6_K", kQ6_K, DType::kQ6_K, "6.6 bpw K-quant"},
      {"IQ4_NL", kIQ4_NL, DType::kIQ4_NL, "4.5 bpw non-linear, 32-value blocks"},
      {"IQ4_XS", kIQ4_XS, DType::kIQ4_XS, "4.25 bpw non-linear, 256-value super-blocks"},
      {"BF16", kBF16, DType::kBF16, "bfloat16"},
      {"F16", kF16, DType::kF16, "IEEE half precision"},
      {"F32", kAllF32, DType::kF32, "single precision"},
  };
  return kPresets;
}

std::optional<QuantPreset> find_quant_preset(std::string_view name) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "Q3_K") upper = "Q3_K_M";
  if (upper == "Q4_K") upper = "Q4_K_M";
  if (upper == "Q5_K") upper = "Q5_K_M";
  for (const QuantPreset& p : quant_presets()) {
    if (p.name == upper) return p;
  }
  return std::nullopt;
}

Result<std::vector<TensorPlan>> plan_quantization(const gguf::GgufFile& in, const QuantPreset& preset,
                                                  const QuantPlanOptions& options) {
  State s;
  s.ftype = static_cast<Ftype>(preset.ftype);
  auto arch = in.get_string("general.architecture");
  if (!arch || arch->empty()) return invalid_argument("the file has no general.architecture");
  s.m.arch = *arch;
  const std::string& a = s.m.arch;
  s.m.n_layer = first_int(in, a + ".block_count", 0);
  s.m.n_head = first_int(in, a + ".attention.head_count", 0);
  s.m.n_head_kv = first_int(in, a + ".attention.head_count_kv", s.m.n_head);
  s.m.n_expert = first_int(in, a + ".expert_count", 0);
  s.m.is_70b = a == "llama" && s.m.n_layer == 80 && s.m.n_head != s.m.n_head_kv;

  // llama-quantize's order: by layer number (non-layer tensors first), then by name.
  std::vector<const gguf::TensorInfo*> order;
  for (const auto& t : in.tensors()) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const gguf::TensorInfo* x, const gguf::TensorInfo* y) {
    const int lx = layer_of(x->name), ly = layer_of(y->name);
    return lx != ly ? lx < ly : x->name < y->name;
  });
  for (const auto* t : order) {
    const Category c = category_of(t->name);
    if (is_attn_v_like(c)) ++s.n_attention_wv;
    if (c == Category::kOutput) s.tied = false;
  }
  s.n_ffn_down = s.n_ffn_gate = s.n_ffn_up = s.m.n_layer;

  std::vector<TensorPlan> plan;
  plan.reserve(order.size());
  for (const auto* t : order) {
    TensorPlan p{.name = t->name, .shape = t->shape, .from_type = t->type, .to_type = t->type};
    const Category cat = category_of(t->name);
    const bool embd_override = options.token_embd_type && cat == Category::kTokenEmbd;
    const bool output_override = options.output_type && cat == Category::kOutput;
    if (allows_quantization(*t) && (embd_override || output_override)) {
      const DType to = embd_override ? *options.token_embd_type : *options.output_type;
      if (!tensor::can_quantize_to(static_cast<uint32_t>(to)) || t->shape[0] % block_of(to) != 0) {
        return invalid_argument("cannot store '" + t->name + "' (rows of " + std::to_string(t->shape[0]) +
                                ") as " + tensor::type_name(static_cast<uint32_t>(to)));
      }
      p.to_type = static_cast<uint32_t>(to);
    } else if (allows_quantization(*t)) {
      DType to = preset.default_type;
      if (is_quantized(to)) {
        if (!options.pure) {
          TS_ASSIGN_OR_RETURN(to, mix_type(s, to, *t, cat, options.output_type));
        }
        to = fallback_type(to, t->shape[0], &p.fallback);
      } else if (t->shape[0] % block_of(to) != 0) {
        to = DType::kF16;  // unreachable for F32/F16/BF16 (block 1); kept for safety
      }
      p.to_type = static_cast<uint32_t>(to);
    }
    plan.push_back(std::move(p));
  }
  return plan;
}

}  // namespace ts::tools
