// tokenserve pull OWNER/REPO/FILE: download a GGUF from Hugging Face with progress and resume.
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "cli/cli_util.h"
#include "tools/pull.h"

namespace ts::cli {

int cmd_pull(int argc, char** argv) {
  CLI::App app("Download a GGUF model from Hugging Face (resumable, size-verified)", "pull");
  std::string spec_text = tools::kDefaultModelSpec;
  tools::PullOptions o;
  const char* env_endpoint = std::getenv("HF_ENDPOINT");
  const char* env_token = std::getenv("HF_TOKEN");
  if (env_endpoint && *env_endpoint) o.endpoint = env_endpoint;
  if (env_token) o.token = env_token;
  o.models_dir = tools::default_models_dir(std::getenv("TOKENSERVE_MODELS"), std::getenv("HOME"));
  app.add_option("spec", spec_text, std::string("OWNER/REPO/FILE (default ") + tools::kDefaultModelSpec + ")");
  app.add_option("--endpoint", o.endpoint, "base URL (default https://huggingface.co, or $HF_ENDPOINT)");
  app.add_option("--revision", o.revision, "branch, tag or commit (default main)");
  app.add_option("--dir", o.models_dir, "models directory (default $TOKENSERVE_MODELS or ~/.cache/tokenserve/models)");
  app.add_option("--token", o.token, "Hugging Face token for gated repositories (default $HF_TOKEN)");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto spec = tools::parse_pull_spec(spec_text);
  if (!spec.ok()) return fail("pull", spec.status().message(), 2);

  const bool tty = isatty(fileno(stderr));
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  o.progress = [&](int64_t done, int64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (!tty || now - last < std::chrono::milliseconds(200)) return;
    last = now;
    if (total > 0) {
      int width = 40, filled = static_cast<int>(width * done / total);
      std::fprintf(stderr, "\r[%.*s%*s] %5.1f%% %lld/%lld MiB", filled, "########################################",
                   width - filled, "", 100.0 * done / total, static_cast<long long>(done >> 20),
                   static_cast<long long>(total >> 20));
    } else {
      std::fprintf(stderr, "\r%lld MiB", static_cast<long long>(done >> 20));
    }
  };
  auto path = tools::pull_model(*spec, o);
  if (tty) std::fprintf(stderr, "\n");
  if (!path.ok()) return fail("pull", path.status().message());
  std::printf("%s\n", path->c_str());
  return 0;
}

}  // namespace ts::cli
