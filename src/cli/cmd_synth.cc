// tokenserve synth: write a GGUF with seeded random weights of a given shape (see tools/synth.h).
#include "cli/cli_util.h"
#include "tools/synth.h"

namespace ts::cli {

int cmd_synth(int argc, char** argv) {
  CLI::App app("Write a synthetic Llama-family GGUF with seeded random weights", "synth");
  tools::SynthOptions o;
  std::string type = "f16", out;
  app.add_option("--arch", o.arch, "llama | qwen2")->check(CLI::IsMember({"llama", "qwen2"}));
  app.add_option("--layers", o.n_layer, "number of blocks")->required();
  app.add_option("--embd", o.n_embd, "embedding width")->required();
  app.add_option("--heads", o.n_head, "attention heads")->required();
  app.add_option("--kv-heads", o.n_head_kv, "KV heads (default: heads)");
  app.add_option("--ffn", o.n_ff, "feed-forward width")->required();
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
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (!app.count("--kv-heads")) o.n_head_kv = o.n_head;
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
