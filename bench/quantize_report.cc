// quantize_report: for each quantize preset, quantizes an F32 model, runs a fixed text through
// both (teacher forcing) and prints top-1 agreement and KL divergence of the next-token
// distributions against the F32 source. Presets whose types this build cannot compute with yet
// are measured with their weights decoded to F32 and marked "sim" (the real kernels are used
// automatically once they exist).
//
//   quantize_report [--model F32.gguf]... [--preset NAME]... [--text STR] [--threads N]
//
// Without --model it uses ../shared's stories260K (a real pretrained TinyStories Llama; its
// 64-wide rows make every K-quant fall back to the 32-block types) and a synthetic 256-wide
// llama (random weights, where the K-quants apply).
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/dtype.h"
#include "tools/quantize.h"
#include "tools/quantize_eval.h"
#include "tools/synth.h"

namespace {

constexpr const char* kText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
    "with her friends. One day, she saw a big red ball under a tree. She ran to the ball and "
    "picked it up. \"Can I play with you?\" asked a small boy. Lily smiled and said, \"Yes, let's "
    "play together!\" They played all day until the sun went down, and then they went home happy.";

std::string shared_model() {
  const char* env = std::getenv("TOKENSERVE_SHARED");
  for (std::string dir : {env ? std::string(env) : std::string(), std::string("../shared"), std::string("shared")}) {
    if (dir.empty()) continue;
    std::string p = dir + "/models/stories260K/stories260K-f32.gguf";
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

int report(const std::string& model, const std::vector<std::string>& presets, const std::string& text,
           int threads, const std::string& tmp) {
  auto tokens = ts::tools::tokenize_with_model(model, text);
  if (!tokens.ok()) {
    std::fprintf(stderr, "quantize_report: %s: %s\n", model.c_str(), tokens.status().message().c_str());
    return 1;
  }
  std::printf("\nmodel %s, %zu tokens of fixed text\n", model.c_str(), tokens->size());
  std::printf("%-8s %6s %8s %10s %10s %9s  %s\n", "preset", "bpw", "top1", "mean KL", "max KL", "rel RMS", "types");
  for (const auto& name : presets) {
    auto preset = ts::tools::find_quant_preset(name);
    if (!preset) {
      std::fprintf(stderr, "quantize_report: unknown preset '%s'\n", name.c_str());
      return 2;
    }
    const std::string out = tmp + "/" + std::string(preset->name) + ".gguf";
    auto q = ts::tools::quantize_file(model, out, *preset, {.num_threads = threads});
    if (!q.ok()) {
      std::printf("%-8s quantize failed: %s\n", std::string(preset->name).c_str(), q.status().message().c_str());
      continue;
    }
    std::vector<std::string> seen;
    std::string types, missing;
    for (const auto& t : q->tensors) {
      std::string tn = ts::tensor::type_name(t.to_type);
      bool dup = false;
      for (const auto& s : seen) dup |= s == tn;
      if (dup) continue;
      seen.push_back(tn);
      types += (types.empty() ? "" : ",") + tn;
      if (!ts::tensor::type_traits(t.to_type)->compute) missing += (missing.empty() ? "" : ",") + tn;
    }
    const double bpw = 8.0 * static_cast<double>(q->output_bytes) / static_cast<double>(q->num_elements);
    // Types without kernels yet are measured with their weights decoded to F32 (exactly the
    // file's weights, without the kernels' activation rounding) and marked "sim".
    std::string run = out;
    if (!missing.empty()) {
      run = out + ".decoded.gguf";
      if (auto s = ts::tools::write_decoded_copy(out, run); !s.ok()) {
        std::printf("%-8s decode failed: %s\n", std::string(preset->name).c_str(), s.message().c_str());
        continue;
      }
      types += " (sim: no kernels yet for " + missing + ")";
    }
    auto c = ts::tools::compare_models(model, run, *tokens, threads);
    if (!c.ok()) {
      std::printf("%-8s compare failed: %s\n", std::string(preset->name).c_str(), c.status().message().c_str());
      continue;
    }
    std::printf("%-8s %6.2f %7.1f%% %10.6f %10.6f %9.4f  %s\n", std::string(preset->name).c_str(), bpw,
                100.0 * c->top1_agreement, c->mean_kl, c->max_kl, c->rel_rms_error, types.c_str());
    std::filesystem::remove(out);
    std::filesystem::remove(run);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models, presets;
  std::string text = kText;
  int threads = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "quantize_report: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") models.push_back(next());
    else if (a == "--preset") presets.push_back(next());
    else if (a == "--text") text = next();
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--help" || a == "-h") {
      std::printf("usage: quantize_report [--model F32.gguf]... [--preset NAME]... [--text STR] [--threads N]\n");
      return 0;
    } else {
      std::fprintf(stderr, "quantize_report: unknown argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (presets.empty()) {
    for (const auto& p : ts::tools::quant_presets()) presets.emplace_back(p.name);
  }
  std::error_code ec;
  const std::string tmp = (std::filesystem::temp_directory_path() / ("quantize_report." + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(tmp, ec);
  if (models.empty()) {
    if (std::string s = shared_model(); !s.empty()) models.push_back(s);
    ts::tools::SynthOptions o{.arch = "llama", .n_layer = 4, .n_embd = 256, .n_head = 4, .n_head_kv = 2,
                              .n_ff = 768, .n_ctx = 512, .vocab_size = 512, .type = ts::tensor::DType::kF32,
                              .seed = 11, .std = 0.05f, .name = "synthetic-256"};
    const std::string synth = tmp + "/synth-f32.gguf";
    if (auto s = ts::tools::synthesize(o, synth); !s.ok()) {
      std::fprintf(stderr, "quantize_report: synth: %s\n", s.message().c_str());
      return 1;
    }
    models.push_back(synth);
  }
  int rc = 0;
  for (const auto& m : models) rc |= report(m, presets, text, threads, tmp);
  std::filesystem::remove_all(tmp, ec);
  return rc;
}
