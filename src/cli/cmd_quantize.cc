// tokenserve quantize IN.gguf OUT.gguf TYPE: re-encode a model's weights with llama-quantize's
// per-tensor rules (see tools/quantize.h).
#include <unistd.h>

#include <cctype>
#include <map>
#include <optional>

#include "cli/cli_util.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"
#include "tensor/quantizer.h"
#include "tools/quantize.h"

namespace ts::cli {
namespace {

std::string preset_list() {
  std::string s;
  for (const auto& p : tools::quant_presets()) s += (s.empty() ? "" : " ") + std::string(p.name);
  return s;
}

std::string preset_help() {
  std::string s = "TYPE is a llama-quantize preset (case-insensitive; Q3_K, Q4_K, Q5_K mean the _M mixes):\n";
  for (const auto& p : tools::quant_presets()) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-7s %s\n", std::string(p.name).c_str(), std::string(p.summary).c_str());
    s += line;
  }
  return s;
}

// One-line progress bar on stderr, redrawn in place on a terminal and printed every 10% otherwise.
class ProgressBar {
 public:
  ProgressBar() : tty_(::isatty(STDERR_FILENO)) {}
  void update(int64_t done, int64_t total, uint64_t bytes, uint64_t total_bytes, const std::string& name) {
    const int pct = total_bytes ? static_cast<int>(100.0 * static_cast<double>(bytes) / static_cast<double>(total_bytes)) : 100;
    if (!tty_ && pct / 10 == last_ / 10 && done != total) return;
    last_ = pct;
    constexpr int kWidth = 30;
    const int fill = pct * kWidth / 100;
    std::string bar(static_cast<size_t>(fill), '=');
    bar.resize(kWidth, ' ');
    // On a terminal the name is padded so a shorter one overwrites the previous line fully.
    std::fprintf(stderr, tty_ ? "\rquantize: [%s] %3d%% %lld/%lld %-40.40s" : "quantize: [%s] %3d%% %lld/%lld %s\n",
                 bar.c_str(), pct, static_cast<long long>(done), static_cast<long long>(total), name.c_str());
    if (tty_ && done == total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  bool tty_;
  int last_ = -10;
};

// A tensor type name (f16, q4_k, iq4_xs ...) that quantize can write.
std::optional<tensor::DType> parse_tensor_type(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (uint32_t id = 0; id < 64; ++id) {
    auto t = tensor::type_traits(id);
    if (t && t->name == lower && tensor::can_quantize_to(id)) return static_cast<tensor::DType>(id);
  }
  return std::nullopt;
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  CLI::App app("Quantize a GGUF model with llama-quantize's presets and per-tensor rules", "quantize");
  std::string in, out, type;
  int threads = 0;
  bool pure = false, dry_run = false;
  app.add_option("input", in, "source GGUF (F32, F16, BF16 or any type this build can read)")->required();
  app.add_option("output", out, "GGUF to write (via a temporary file, renamed when complete)")->required();
  app.add_option("type", type, "preset, see below")->required();
  app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  app.add_flag("--pure", pure, "every quantizable tensor in the preset's type (no mixes, no output rule)");
  app.add_flag("--dry-run", dry_run, "print each tensor's chosen type and write nothing");
  std::string output_type, embd_type;
  app.add_option("--output-tensor-type", output_type, "type of output.weight (e.g. q8_0, f16), overriding the rules");
  app.add_option("--token-embedding-type", embd_type, "type of token_embd.weight, overriding the rules");
  app.footer(preset_help());
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  auto preset = tools::find_quant_preset(type);
  if (!preset) return fail("quantize", "unknown type '" + type + "' (one of: " + preset_list() + ")", 2);

  tools::QuantizeOptions opts{.plan = {.pure = pure}, .num_threads = threads};
  const std::string kTypes = "f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs";
  if (!output_type.empty()) {
    opts.plan.output_type = parse_tensor_type(output_type);
    if (!opts.plan.output_type) return fail("quantize", "unknown --output-tensor-type '" + output_type + "' (" + kTypes + ")", 2);
  }
  if (!embd_type.empty()) {
    opts.plan.token_embd_type = parse_tensor_type(embd_type);
    if (!opts.plan.token_embd_type) return fail("quantize", "unknown --token-embedding-type '" + embd_type + "' (" + kTypes + ")", 2);
  }
  if (dry_run) {
    auto f = gguf::GgufFile::open(in);
    if (!f.ok()) return fail("quantize", f.status().message());
    auto plan = tools::plan_quantization(**f, *preset, opts.plan);
    if (!plan.ok()) return fail("quantize", plan.status().message());
    for (const auto& p : *plan) {
      std::string shape;
      for (int64_t d : p.shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
      std::printf("%-40s %-18s %-7s -> %s%s\n", p.name.c_str(), shape.c_str(), tensor::type_name(p.from_type).c_str(),
                  tensor::type_name(p.to_type).c_str(), p.fallback ? " (fallback)" : "");
    }
    return 0;
  }

  ProgressBar bar;
  opts.progress = [&bar](int64_t done, int64_t total, uint64_t bytes, uint64_t total_bytes, const std::string& name) {
    bar.update(done, total, bytes, total_bytes, name);
  };
  auto r = tools::quantize_file(in, out, *preset, opts);
  if (!r.ok()) return fail("quantize", r.status().message());
  const auto& s = *r;
  std::map<std::string, int> by_type;
  for (const auto& p : s.tensors) by_type[tensor::type_name(p.to_type)]++;
  std::string types;
  for (const auto& [name, n] : by_type) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  const double mib = 1024.0 * 1024.0;
  std::fprintf(stderr, "quantize: wrote %s (%s): %.2f MiB -> %.2f MiB, %.2f bits per weight; tensors: %s\n",
               out.c_str(), std::string(preset->name).c_str(), static_cast<double>(s.input_bytes) / mib,
               static_cast<double>(s.output_bytes) / mib,
               s.num_elements ? 8.0 * static_cast<double>(s.output_bytes) / static_cast<double>(s.num_elements) : 0.0,
               types.c_str());
  if (s.num_fallbacks) {
    std::fprintf(stderr, "quantize: %d tensor(s) use a fallback type (rows not divisible by the block size)\n",
                 s.num_fallbacks);
  }
  if (s.num_requantized) {
    std::fprintf(stderr, "quantize: note: %d tensor(s) were re-quantized from an already quantized type\n",
                 s.num_requantized);
  }
  return 0;
}

}  // namespace ts::cli
