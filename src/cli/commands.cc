#include "cli/commands.h"

#include <cstring>

namespace ts::cli {

int cmd_info(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_keys(int argc, char** argv);
int cmd_usage(int argc, char** argv);
int cmd_pull(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_contamination(int argc, char** argv);
int cmd_prompts(int argc, char** argv);
int cmd_gateway(int argc, char** argv);

namespace {
const Command kCommands[] = {
    {"serve", "serve a model over an OpenAI-compatible HTTP API", cmd_serve},
    {"gateway", "route requests across serve replicas (picker, failover, shared governance)", cmd_gateway},
    {"info", "print a GGUF model's architecture, shapes, tensor types and KV bytes/token", cmd_info},
    {"generate", "generate a continuation of a prompt (streams to stdout)", cmd_generate},
    {"tokenize", "tokenize text with a model's tokenizer", cmd_tokenize},
    {"template", "render a chat template (Jinja) with messages", cmd_template},
    {"bench", "load-test an OpenAI-compatible server", cmd_bench},
    {"plan", "plan KV-cache memory and concurrency", cmd_plan},
    {"keys", "create, list, disable and rotate API keys", cmd_keys},
    {"usage", "usage reports from the ledger", cmd_usage},
    {"eval", "run a layered eval suite against a server, compare with a baseline", cmd_eval},
    {"contamination", "n-gram and near-duplicate overlap between a suite and a corpus", cmd_contamination},
    {"prompts", "versioned prompts: create, list, get, label, render", cmd_prompts},
    {"pull", "download a GGUF model from Hugging Face", cmd_pull},
    {"synth", "write a synthetic GGUF with seeded random weights", cmd_synth},
    {"quantize", "quantize a GGUF model (llama-quantize presets and per-tensor rules)", cmd_quantize},
};
}  // namespace

const Command* find_command(const char* name) {
  for (const Command& c : kCommands)
    if (!std::strcmp(c.name, name)) return &c;
  return nullptr;
}

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: tokenserve <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n'tokenserve <command> --help' for a command's options.\n");
}

}  // namespace ts::cli
