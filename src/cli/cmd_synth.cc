// tokenserve synth: write a GGUF with seeded random weights of a given shape (see tools/synth.h).
#include "cli/cli_util.h"
#include "tools/synth.h"

namespace ts::cli {

int cmd_synth(int argc, char** argv) {
  CLI::App app("Write a synthetic GGUF (llama, qwen2, qwen3, qwen3moe, gemma3, phi3) with seeded random weights",
               "synth");
  tools::SynthOptions o;
  std::string type = "f16", out, preset;
  app.add_option("--preset", preset,
                 "start from a real model's shape: qwen3-0.6b, qwen3-30b-a3b, gemma3-1b, qwen2.5-0.5b, llama3.2-1b, "
                 "smollm2-135m (other flags override its values)");
  app.add_option("--arch", o.arch, "llama | qwen2 | qwen3 | qwen3moe | gemma3 | phi3")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3"}));
  app.add_option("--layers", o.n_layer, "number of blocks");
  app.add_option("--embd", o.n_embd, "embedding width");
  app.add_option("--heads", o.n_head, "attention heads");
  app.add_option("--kv-heads", o.n_head_kv, "KV heads (default: heads)");
  app.add_option("--head-dim", o.head_dim, "head dimension (default embd / heads; written as attention.key_length)");
  app.add_option("--ffn", o.n_ff, "feed-forward width");
  app.add_option("--experts", o.n_expert, "qwen3moe: experts per layer");
  app.add_option("--experts-used", o.n_expert_used, "qwen3moe: experts per token (top-k)");
  app.add_option("--expert-ffn", o.n_ff_exp, "qwen3moe: one expert's feed-forward width");
  app.add_option("--sliding-window", o.sliding_window, "gemma3: sliding-window size of the local layers");
  app.add_option("--ctx", o.n_ctx, "context length (default 2048)");
  app.add_option("--rope-base", o.rope_base, "RoPE frequency base (default 10000)");
  app.add_flag("--tied", o.tied, "tie the output matrix to token_embd");
  auto* vf = app.add_option("--vocab-from", o.vocab_from, "copy the tokenizer from this GGUF");
  auto* vs = app.add_option("--vocab-size", o.vocab_size, "generate a SentencePiece-style vocabulary of this size");
  vf->excludes(vs);
  app.add_option("--type", type, "weight type: f32 f16 bf16 q8_0 q4_0 q4_k q6_k")->required();
  app.add_option("--seed", o.seed, "random seed (default 1)");
  app.add_option("--std", o.std, "weight standard deviation (default 0.02)");
  app.add_option("--name", o.name, "general.name");
  app.add_option("-o,--output", out, "output GGUF path")->required();
  // Parse once to learn the preset, apply it, then parse again so explicit flags override it.
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (!preset.empty()) {
    tools::SynthOptions base;
    Status ps = tools::apply_synth_preset(preset, base);
    if (!ps.ok()) return fail("synth", ps.message(), 2);
    base.name = preset;
    o = base;
    if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  } else {
    for (const char* req : {"--layers", "--embd", "--heads", "--ffn"}) {
      if (!app.count(req)) return fail("synth", std::string(req) + " is required (or give --preset)", 2);
    }
    if (!app.count("--kv-heads")) o.n_head_kv = o.n_head;
  }
  if (o.vocab_from.empty() && o.vocab_size == 0) return fail("synth", "give --vocab-from GGUF or --vocab-size N", 2);
  auto dt = tensor::parse_dtype(type);
  if (!dt) return fail("synth", "unknown --type '" + type + "' (f32 f16 bf16 q8_0 q4_0 q4_k q6_k)", 2);
  o.type = *dt;
  Status s = tools::synthesize(o, out);
  if (!s.ok()) return fail("synth", s.message());
  std::fprintf(stderr, "synth: wrote %s\n", out.c_str());
  return 0;
}

}  // namespace ts::cli
