// Downloading GGUF models from Hugging Face (or any HTTP(S) mirror with the same URL layout):
// `tokenserve pull REPO/FILE`. Resumable (a `.partial` file continued with a Range request and
// an If-Range carrying the ETag of the version it came from, kept in `.partial.etag`, so a
// remote file that changed meanwhile is downloaded whole again instead of spliced), size-verified
// (the server's announced total must equal the bytes on disk), checksum-verified (the SHA-256
// Hugging Face publishes for LFS files as X-Linked-Etag / ETag, over the whole file after a
// resume too) and checked to be GGUF before it is moved into place. Every part of the spec is
// validated (no absolute paths, no '.'/'..' segments, only the characters Hugging Face allows),
// so nothing lands outside the models folder. Uses libcurl (HTTPS, redirects to the CDN).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"

namespace ts::tools {

// The model `serve` uses when started without -m, once pulled.
inline constexpr const char* kDefaultModelSpec =
    "Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf";

struct PullSpec {
  std::string repo;  // "owner/name"
  std::string file;  // path inside the repo, e.g. "model-q8_0.gguf"
};
// "owner/name/path/to/file.gguf" -> {repo, file}. kInvalidArgument (saying which part) when
// malformed: owner and name must be Hugging Face names, the file a relative path of
// [A-Za-z0-9._+-] segments.
Result<PullSpec> parse_pull_spec(const std::string& spec);
// kInvalidArgument unless `revision` is a plausible branch/tag/commit (no '..', no leading '/').
Status validate_revision(const std::string& revision);

struct PullOptions {
  std::string endpoint = "https://huggingface.co";  // base URL (a mirror, or a local test server)
  std::string revision = "main";
  std::string models_dir;        // where models live; see default_models_dir()
  std::string token;             // bearer token for gated repos ("" = none)
  int64_t timeout_seconds = 0;   // whole transfer; 0 = no limit
  // Progress: (bytes on disk, total bytes or -1). Called often; keep it cheap.
  std::function<void(int64_t, int64_t)> progress;
};

// $TOKENSERVE_MODELS, else ~/.cache/tokenserve/models (read by the CLI, passed in options).
std::string default_models_dir(const char* env_models, const char* env_home);
// Where a spec lands: <models_dir>/<repo>/<file>.
std::string model_path_for(const std::string& models_dir, const PullSpec& spec);
// URL of a file: <endpoint>/<repo>/resolve/<revision>/<file>.
std::string resolve_url(const PullOptions& opts, const PullSpec& spec);

// Downloads the file unless it is already complete; returns its path. Errors: kNotFound (404),
// kPermissionDenied (401/403: gated repo, give a token), kUnavailable (network, 5xx; the partial
// file is kept for a later resume), kDataLoss (size mismatch or not a GGUF file; the bad file is
// removed; also a SHA-256 that differs from the published one), kInvalidArgument (bad spec or
// revision).
Result<std::string> pull_model(const PullSpec& spec, const PullOptions& opts);

}  // namespace ts::tools
