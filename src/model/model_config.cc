#include "model/model_config.h"

#include <cmath>
#include <filesystem>

#include "gguf/gguf.h"

namespace ts::model {
namespace {

// Reads `<arch>.<key>` as a positive int; also accepts a per-layer array whose values agree.
Result<int32_t> read_dim(const gguf::GgufFile& f, const std::string& arch, const char* key,
                         std::optional<int32_t> fallback) {
  std::string full = arch + "." + key;
  const gguf::Value* v = f.find(full);
  if (!v) {
    if (fallback) return *fallback;
    return data_loss("model metadata lacks '" + full + "'");
  }
  int64_t x = 0;
  if (v->is_integer()) {
    x = v->i;
  } else if (v->is_array() && !v->ints.empty()) {
    x = v->ints[0];
    for (int64_t e : v->ints) {
      if (e != x) return unimplemented("'" + full + "' varies per layer, which is not supported");
    }
  } else {
    return data_loss("'" + full + "' is not an integer");
  }
  if (x <= 0 || x > (1 << 24)) return data_loss("'" + full + "' = " + std::to_string(x) + " is out of range");
  return static_cast<int32_t>(x);
}

std::string shape_str(const gguf::TensorInfo& t) {
  std::string s;
  for (int64_t d : t.shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// Checks that tensor `name` exists with exactly `want` (ggml order) dimensions.
Status expect_shape(const gguf::GgufFile& f, const std::string& name, std::vector<int64_t> want,
                    const std::string& why) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return data_loss("model lacks tensor '" + name + "'");
  if (t->shape != want) {
    std::string w;
    for (int64_t d : want) w += (w.empty() ? "" : "x") + std::to_string(d);
    return invalid_argument("tensor '" + name + "' has shape " + shape_str(*t) + ", expected " + w + " (" + why + ")");
  }
  return ok_status();
}

// Shapes of layer 0 that follow from the hyper-parameters; the loader checks every layer's
// matrices again as it creates them.
Status check_layer0_shapes(const gguf::GgufFile& f, const ModelConfig& c) {
  const int64_t E = c.n_embd, QD = int64_t{c.n_head} * c.head_dim, KD = int64_t{c.n_head_kv} * c.head_dim;
  const std::string hd = "head_dim " + std::to_string(c.head_dim);
  if (c.spec->fused_qkv) {
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.attn_qkv.weight", {E, QD + 2 * KD},
                                    "(" + std::to_string(c.n_head) + " + 2 x " + std::to_string(c.n_head_kv) +
                                        " heads) x " + hd));
  } else {
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.attn_q.weight", {E, QD}, std::to_string(c.n_head) + " heads x " + hd));
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.attn_k.weight", {E, KD}, std::to_string(c.n_head_kv) + " KV heads x " + hd));
  }
  TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.attn_output.weight", {QD, E}, std::to_string(c.n_head) + " heads x " + hd));
  if (c.spec->qk_norm) {
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.attn_q_norm.weight", {c.head_dim}, "per-head q norm over " + hd));
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.attn_k_norm.weight", {c.head_dim}, "per-head k norm over " + hd));
  }
  if (c.n_expert > 0) {
    const int64_t X = c.n_expert, F = c.n_ff_exp;
    const std::string ex = "expert_count " + std::to_string(X) + ", expert ffn " + std::to_string(F);
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.ffn_gate_inp.weight", {E, X}, "router over expert_count " + std::to_string(X)));
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.ffn_gate_exps.weight", {E, F, X}, ex));
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.ffn_up_exps.weight", {E, F, X}, ex));
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.ffn_down_exps.weight", {F, E, X}, ex));
  } else if (c.spec->fused_gate_up) {
    TS_RETURN_IF_ERROR(expect_shape(f, "blk.0.ffn_up.weight", {E, 2 * int64_t{c.n_ff}},
                                    "fused gate|up: 2 x feed_forward_length " + std::to_string(c.n_ff)));
  }
  return ok_status();
}

}  // namespace

Result<ModelConfig> read_model_config(const gguf::GgufFile& f, const ConfigOptions& opts) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch) return data_loss("model metadata lacks general.architecture");
  c.arch = *arch;
  c.spec = find_arch(c.arch);
  if (!c.spec) {
    return unimplemented("architecture '" + c.arch + "' is not supported (supported: " + supported_archs() +
                         ", and Llama-family models stored as llama, e.g. SmolLM)");
  }
  const ArchSpec& spec = *c.spec;
  c.name = f.get_string("general.name").value_or(c.arch);
  const std::string& a = c.arch;
  TS_ASSIGN_OR_RETURN(c.n_layer, read_dim(f, a, "block_count", std::nullopt));
  TS_ASSIGN_OR_RETURN(c.n_embd, read_dim(f, a, "embedding_length", std::nullopt));
  TS_ASSIGN_OR_RETURN(c.n_head, read_dim(f, a, "attention.head_count", std::nullopt));
  TS_ASSIGN_OR_RETURN(c.n_head_kv, read_dim(f, a, "attention.head_count_kv", c.n_head));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, read_dim(f, a, "context_length", 2048));
  if (c.n_layer > 4096) return data_loss("block_count " + std::to_string(c.n_layer) + " is out of range");
  if (spec.moe) {
    TS_ASSIGN_OR_RETURN(c.n_expert, read_dim(f, a, "expert_count", std::nullopt));
    TS_ASSIGN_OR_RETURN(c.n_expert_used, read_dim(f, a, "expert_used_count", std::nullopt));
    TS_ASSIGN_OR_RETURN(c.n_ff_exp, read_dim(f, a, "expert_feed_forward_length", std::nullopt));
    if (c.n_expert > 4096) return data_loss("expert_count " + std::to_string(c.n_expert) + " is out of range");
    if (c.n_expert_used > c.n_expert) {
      return data_loss("expert_used_count " + std::to_string(c.n_expert_used) + " exceeds expert_count " +
                       std::to_string(c.n_expert));
    }
    c.expert_weights_norm = f.get_bool(a + ".expert_weights_norm").value_or(spec.moe_norm_w);
    if (auto s = f.get_float(a + ".expert_weights_scale"); s && *s != 0.0 && *s != 1.0) {
      return unimplemented("expert_weights_scale " + std::to_string(*s) + " is not supported");
    }
    auto dense_ff = read_dim(f, a, "feed_forward_length", 0);
    c.n_ff = dense_ff.ok() ? *dense_ff : 0;
  } else {
    TS_ASSIGN_OR_RETURN(c.n_ff, read_dim(f, a, "feed_forward_length", std::nullopt));
  }
  if (c.n_embd % c.n_head != 0 && !f.find(a + ".attention.key_length")) {
    return data_loss("embedding_length " + std::to_string(c.n_embd) + " is not a multiple of head_count " +
                     std::to_string(c.n_head));
  }
  TS_ASSIGN_OR_RETURN(c.head_dim, read_dim(f, a, "attention.key_length", c.n_embd / c.n_head));
  if (auto vl = f.get_int(a + ".attention.value_length"); vl && *vl != c.head_dim) {
    return unimplemented("value_length differs from key_length");
  }
  if (c.n_head % c.n_head_kv != 0) {
    return data_loss("head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                     std::to_string(c.n_head_kv));
  }
  if (c.head_dim % 2 != 0) return data_loss("head dimension must be even for RoPE");
  if (int64_t{c.n_head} * c.head_dim > (1 << 20)) return data_loss("head_count x head_dim is out of range");
  if (auto rot = f.get_int(a + ".rope.dimension_count"); rot && *rot != c.head_dim) {
    return unimplemented("partial rotary embeddings (rope.dimension_count " + std::to_string(*rot) +
                         " < head dim " + std::to_string(c.head_dim) + ") are not supported");
  }
  c.rms_eps = static_cast<float>(f.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_base = static_cast<float>(f.get_float(a + ".rope.freq_base").value_or(10000.0));
  c.rope_neox = spec.rope_neox;
  std::string scaling = f.get_string(a + ".rope.scaling.type").value_or("none");
  double factor = f.get_float(a + ".rope.scaling.factor").value_or(0.0);
  if (auto lin = f.get_float(a + ".rope.scale_linear")) {
    scaling = "linear";
    factor = *lin;
  }
  if (scaling == "linear" && factor > 0 && factor != 1.0) {
    c.rope_scaling = RopeScaling::kLinear;
    c.rope_scale_factor = static_cast<float>(factor);
  } else if (scaling == "llama3") {
    c.rope_scaling = RopeScaling::kLlama3;
    c.rope_scale_factor = static_cast<float>(factor > 0 ? factor : 8.0);
    c.rope_low_freq_factor = static_cast<float>(f.get_float(a + ".rope.scaling.low_freq_factor").value_or(1.0));
    c.rope_high_freq_factor = static_cast<float>(f.get_float(a + ".rope.scaling.high_freq_factor").value_or(4.0));
    c.rope_orig_ctx = static_cast<int32_t>(f.get_int(a + ".rope.scaling.original_context_length").value_or(8192));
    if (c.rope_high_freq_factor <= c.rope_low_freq_factor) {
      return data_loss("rope.scaling.high_freq_factor must exceed low_freq_factor");
    }
  } else if (scaling == "longrope" && spec.longrope) {
    // The factors come from the rope_factors_long/short tensors.
  } else if (scaling != "none" && scaling != "linear") {
    return unimplemented("rope scaling '" + scaling + "' is not supported (none, linear, llama3)");
  }
  if (spec.longrope) {
    const int64_t orig = f.get_int(a + ".rope.scaling.original_context_length").value_or(c.n_ctx_train);
    const int64_t n_ctx = opts.n_ctx > 0 ? opts.n_ctx : c.n_ctx_train;
    c.rope_long_factors = n_ctx > orig;
  }
  // llama.cpp multiplies every RoPE call's attn_factor (cos/sin scale) by this key when present.
  c.rope_attn_factor = static_cast<float>(f.get_float(a + ".rope.scaling.attn_factor").value_or(1.0));
  if (spec.swa_pattern > 0) {
    if (f.find(a + ".attention.sliding_window")) {
      TS_ASSIGN_OR_RETURN(c.sliding_window, read_dim(f, a, "attention.sliding_window", std::nullopt));
    }
    c.swa_pattern = spec.swa_pattern;
    c.rope_base_swa = static_cast<float>(f.get_float(a + ".rope.freq_base_swa").value_or(10000.0));
  }
  // gemma3: llama.cpp scales q by 1/sqrt(n_embd / n_head) for the 27B shape (62 layers, its
  // query_pre_attn_scalar) and by 1/sqrt(head_dim) otherwise; an explicit attention.scale wins.
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.arch == "gemma3" && c.n_layer == 62) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
  if (auto s = f.get_float(a + ".attention.scale"); s && *s > 0) c.attn_scale = static_cast<float>(*s);
  if (auto cap = f.get_float(a + ".final_logit_softcapping"); cap && *cap > 0) {
    c.final_logit_softcap = static_cast<float>(*cap);
  }
  if (auto cap = f.get_float(a + ".attn_logit_softcapping"); cap && *cap > 0) {
    return unimplemented("attention logit softcapping is not supported");
  }

  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) return data_loss("model has no token_embd.weight tensor");
  if (emb->shape.size() != 2 || emb->shape[0] != c.n_embd) {
    return invalid_argument("tensor 'token_embd.weight' has shape " + shape_str(*emb) + ", expected rows of embedding_length " +
                            std::to_string(c.n_embd));
  }
  c.n_vocab = static_cast<int32_t>(emb->rows());
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  c.has_qkv_bias = f.find_tensor(spec.fused_qkv ? "blk.0.attn_qkv.bias" : "blk.0.attn_q.bias") != nullptr;
  c.file_type = static_cast<uint32_t>(f.get_int("general.file_type").value_or(0));
  TS_RETURN_IF_ERROR(check_layer0_shapes(f, c));
  return c;
}

WeightFootprint weight_footprint(const gguf::GgufFile& f, const ModelConfig& c) {
  WeightFootprint w;
  for (const gguf::TensorInfo& t : f.tensors()) {
    w.resident += t.num_bytes;
    const bool expert = t.name.size() > 12 && t.name.compare(t.name.size() - 12, 12, "_exps.weight") == 0;
    if (expert) {
      w.expert_bytes += t.num_bytes;
      if (c.n_expert > 0) w.active_per_token += t.num_bytes / c.n_expert * c.n_expert_used;
    } else if (t.name == "token_embd.weight" && !c.tied_output) {
      w.active_per_token += t.rows() > 0 ? t.num_bytes / t.rows() : 0;  // one row looked up
    } else {
      w.active_per_token += t.num_bytes;
    }
  }
  return w;
}

}  // namespace ts::model
