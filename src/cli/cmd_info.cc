// tokenserve info -m MODEL: architecture, shapes, tensor types, context, KV bytes per token,
// MoE resident vs per-token weight bytes, sliding-window layers.
#include <map>

#include "cli/cli_util.h"
#include "gguf/gguf.h"
#include "model/kv_storage.h"
#include "model/model_config.h"
#include "tensor/dtype.h"

namespace ts::cli {

int cmd_info(int argc, char** argv) {
  CLI::App app("Print a GGUF model's architecture, shapes, tensor types and KV-cache size", "info");
  std::string model_path;
  bool all_meta = false;
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_flag("--metadata", all_meta, "also list every metadata key");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  auto f = gguf::GgufFile::open(model_path);
  if (!f.ok()) return fail("info", f.status().message());
  const gguf::GgufFile& g = **f;
  std::printf("file:            %s (GGUF v%u, %llu bytes)\n", model_path.c_str(), g.version(),
              static_cast<unsigned long long>(g.file_size()));
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t params = 0;
  for (const auto& t : g.tensors()) {
    auto& e = by_type[tensor::type_name(t.type)];
    e.first++;
    e.second += t.num_bytes;
    params += static_cast<uint64_t>(t.num_elements);
  }
  auto cfg = model::read_model_config(g);
  if (cfg.ok()) {
    const auto& c = *cfg;
    std::printf("architecture:    %s (%s)\n", c.arch.c_str(), c.name.c_str());
    std::printf("layers:          %d\n", c.n_layer);
    std::printf("embedding:       %d\n", c.n_embd);
    std::printf("heads:           %d (kv heads %d, head dim %d%s)\n", c.n_head, c.n_head_kv, c.head_dim,
                c.spec->qk_norm ? ", q/k norms" : "");
    std::printf("ffn:             %d\n", c.n_ff);
    std::printf("vocab:           %d\n", c.n_vocab);
    std::printf("context length:  %d\n", c.n_ctx_train);
    std::printf("rope:            base %g, %s%s\n", c.rope_base, c.rope_neox ? "neox" : "normal",
                c.rope_scaling == model::RopeScaling::kLinear ? ", linear scaling"
                : c.rope_scaling == model::RopeScaling::kLlama3 ? ", llama3 scaling" : "");
    std::printf("output:          %s%s\n", c.tied_output ? "tied to token_embd" : "separate",
                c.has_qkv_bias ? ", QKV bias" : "");
    if (c.n_expert > 0) {
      std::printf("experts:         %d per layer, %d used per token, expert ffn %d%s\n", c.n_expert, c.n_expert_used,
                  c.n_ff_exp, c.expert_weights_norm ? ", top-k weights renormalized" : "");
    }
    const model::WeightFootprint fp = model::weight_footprint(g, c);
    std::printf("weights:         %llu bytes resident, %llu bytes read per token%s\n",
                static_cast<unsigned long long>(fp.resident), static_cast<unsigned long long>(fp.active_per_token),
                c.n_expert > 0 ? " (router + shared weights + experts used)" : "");
    if (c.num_swa_layers() > 0) {
      // The engine's layout (16-token blocks): sliding-window layers keep only their window.
      const model::KvLayout layout = model::KvLayout::windowed(c);
      const model::KvFootprint fp = model::kv_footprint(layout, c, model::KvType::kF16, 16);
      std::printf("sliding window:  %d tokens on %d of %d layers (rope base %g); the KV cache keeps only the window "
                  "for them (%d KV groups of %d layers)\n",
                  c.sliding_window, c.num_swa_layers(), c.n_layer, c.rope_base_swa, layout.num_groups(),
                  layout.layers_per_group);
      std::printf("KV per sequence: %llu B/token (f16, full-attention layers) + at most %llu B of window; "
                  "a %d-token context holds %llu B (every position in every layer: %llu)\n",
                  static_cast<unsigned long long>(fp.full_bytes_per_token()),
                  static_cast<unsigned long long>(fp.swa_bytes_cap()), c.n_ctx_train,
                  static_cast<unsigned long long>(fp.bytes_for_tokens(c.n_ctx_train)),
                  static_cast<unsigned long long>(model::kv_bytes_per_token(c, model::KvType::kF16) * c.n_ctx_train));
    }
    std::printf("KV bytes/token:  %llu (f16), %llu (q8_0), %llu (f32)%s\n",
                static_cast<unsigned long long>(model::kv_bytes_per_token(c, model::KvType::kF16)),
                static_cast<unsigned long long>(model::kv_bytes_per_token(c, model::KvType::kQ8_0)),
                static_cast<unsigned long long>(model::kv_bytes_per_token(c, model::KvType::kF32)),
                c.num_swa_layers() > 0 ? " while a sequence is shorter than the window" : "");
  } else {
    std::printf("architecture:    (not a runnable model: %s)\n", cfg.status().message().c_str());
  }
  std::printf("parameters:      %llu\n", static_cast<unsigned long long>(params));
  std::printf("tensors:         %zu\n", g.tensors().size());
  for (const auto& [name, e] : by_type) {
    std::printf("  %-6s %5d tensors, %12llu bytes\n", name.c_str(), e.first,
                static_cast<unsigned long long>(e.second));
  }
  if (auto tm = g.get_string("tokenizer.ggml.model")) {
    std::printf("tokenizer:       %s, pre %s, %zu tokens\n", tm->c_str(),
                g.get_string("tokenizer.ggml.pre").value_or("default").c_str(),
                g.get_string_array("tokenizer.ggml.tokens") ? g.get_string_array("tokenizer.ggml.tokens")->size() : 0);
  }
  std::printf("chat template:   %s\n", g.find("tokenizer.chat_template") ? "yes" : "no");
  if (all_meta) {
    for (const auto& [k, v] : g.metadata()) {
      std::printf("  %s: %s", k.c_str(), std::string(gguf::value_type_name(v.type)).c_str());
      if (v.is_array()) std::printf("[%zu]", v.array_size());
      else if (v.type == gguf::ValueType::kString) std::printf(" = %.60s", v.s.c_str());
      else if (v.is_float()) std::printf(" = %g", v.f);
      else std::printf(" = %lld", static_cast<long long>(v.i));
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace ts::cli
