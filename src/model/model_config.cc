#include "model/model_config.h"

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

}  // namespace

Result<ModelConfig> read_model_config(const gguf::GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch) return data_loss("model metadata lacks general.architecture");
  c.arch = *arch;
  if (c.arch != "llama" && c.arch != "mistral" && c.arch != "qwen2") {
    return unimplemented("architecture '" + c.arch +
                         "' is not supported (supported: llama, mistral, qwen2 and Llama-family models stored as llama, e.g. SmolLM)");
  }
  c.name = f.get_string("general.name").value_or(c.arch);
  const std::string& a = c.arch;
  TS_ASSIGN_OR_RETURN(c.n_layer, read_dim(f, a, "block_count", std::nullopt));
  TS_ASSIGN_OR_RETURN(c.n_embd, read_dim(f, a, "embedding_length", std::nullopt));
  TS_ASSIGN_OR_RETURN(c.n_head, read_dim(f, a, "attention.head_count", std::nullopt));
  TS_ASSIGN_OR_RETURN(c.n_head_kv, read_dim(f, a, "attention.head_count_kv", c.n_head));
  TS_ASSIGN_OR_RETURN(c.n_ff, read_dim(f, a, "feed_forward_length", std::nullopt));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, read_dim(f, a, "context_length", 2048));
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
  if (auto rot = f.get_int(a + ".rope.dimension_count"); rot && *rot != c.head_dim) {
    return unimplemented("partial rotary embeddings (rope.dimension_count " + std::to_string(*rot) +
                         " < head dim " + std::to_string(c.head_dim) + ") are not supported");
  }
  c.rms_eps = static_cast<float>(f.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_base = static_cast<float>(f.get_float(a + ".rope.freq_base").value_or(10000.0));
  c.rope_neox = (a == "qwen2");
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
  } else if (scaling != "none" && scaling != "linear") {
    return unimplemented("rope scaling '" + scaling + "' is not supported (none, linear, llama3)");
  }
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) return data_loss("model has no token_embd.weight tensor");
  c.n_vocab = static_cast<int32_t>(emb->rows());
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  c.has_qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.file_type = static_cast<uint32_t>(f.get_int("general.file_type").value_or(0));
  return c;
}

}  // namespace ts::model
