#include "tools/pull.h"

#include <curl/curl.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <unistd.h>

namespace fs = std::filesystem;

namespace ts::tools {
namespace {

std::once_flag g_curl_init;

struct Transfer {
  std::FILE* out = nullptr;
  int64_t offset = 0;        // bytes already on disk before this request
  int64_t written = 0;       // bytes written by this request
  int64_t total = -1;        // full file size when the server announced it
  long status = 0;
  bool range_honoured = false;
  bool write_failed = false;
  const PullOptions* opts = nullptr;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  auto lower = line;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.rfind("http/", 0) == 0) {  // a new response (redirects): reset what we learned
    t->total = -1;
    t->range_honoured = false;
    std::sscanf(line.c_str(), "%*s %ld", &t->status);
  } else if (lower.rfind("content-range:", 0) == 0) {
    long long a = 0, b = 0, total = 0;
    if (std::sscanf(lower.c_str() + 14, " bytes %lld-%lld/%lld", &a, &b, &total) == 3) {
      t->range_honoured = (a == t->offset);
      t->total = total;
    }
  } else if (lower.rfind("content-length:", 0) == 0 && t->total < 0) {
    long long len = 0;
    if (std::sscanf(lower.c_str() + 15, " %lld", &len) == 1) t->total = len;  // fixed up in on_write
  }
  return size * n;
}

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  if (t->status >= 300) return size * n;  // error body: discard
  if (t->written == 0 && t->offset > 0 && !t->range_honoured) {
    // The server ignored the Range request and sends the whole file: start over.
    if (std::fseek(t->out, 0, SEEK_SET) != 0 || ftruncate(fileno(t->out), 0) != 0) {
      t->write_failed = true;
      return 0;
    }
    t->offset = 0;
  }
  if (std::fwrite(data, 1, size * n, t->out) != size * n) {
    t->write_failed = true;
    return 0;
  }
  t->written += static_cast<int64_t>(size * n);
  return size * n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->opts->progress && (t->status == 200 || t->status == 206)) {
    // 206: Content-Range carried the full size; 200: Content-Length is the full size.
    t->opts->progress(t->offset + t->written, t->total);
  }
  return 0;
}

bool has_gguf_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char m[4] = {0, 0, 0, 0};
  size_t r = std::fread(m, 1, 4, f);
  std::fclose(f);
  return r == 4 && std::memcmp(m, "GGUF", 4) == 0;
}

}  // namespace

Result<PullSpec> parse_pull_spec(const std::string& spec) {
  size_t a = spec.find('/');
  size_t b = a == std::string::npos ? std::string::npos : spec.find('/', a + 1);
  if (a == 0 || a == std::string::npos || b == std::string::npos || b == a + 1 || b + 1 >= spec.size()) {
    return invalid_argument("'" + spec + "' is not OWNER/REPO/FILE (e.g. " + kDefaultModelSpec + ")");
  }
  PullSpec s{spec.substr(0, b), spec.substr(b + 1)};
  if (s.file.find("..") != std::string::npos || s.file.back() == '/') {
    return invalid_argument("'" + s.file + "' is not a file path inside the repository");
  }
  return s;
}

std::string default_models_dir(const char* env_models, const char* env_home) {
  if (env_models && *env_models) return env_models;
  std::string home = env_home && *env_home ? env_home : ".";
  return home + "/.cache/tokenserve/models";
}

std::string model_path_for(const std::string& models_dir, const PullSpec& spec) {
  return (fs::path(models_dir) / spec.repo / spec.file).string();
}

std::string resolve_url(const PullOptions& o, const PullSpec& s) {
  std::string base = o.endpoint;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + "/" + s.repo + "/resolve/" + o.revision + "/" + s.file;
}

Result<std::string> pull_model(const PullSpec& spec, const PullOptions& opts) {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  const std::string final_path = model_path_for(opts.models_dir, spec);
  const std::string partial = final_path + ".partial";
  std::error_code ec;
  fs::create_directories(fs::path(final_path).parent_path(), ec);
  if (ec) return invalid_argument("cannot create '" + fs::path(final_path).parent_path().string() + "': " + ec.message());
  if (fs::exists(final_path) && has_gguf_magic(final_path)) return final_path;  // already complete

  Transfer t;
  t.opts = &opts;
  t.offset = fs::exists(partial) ? static_cast<int64_t>(fs::file_size(partial)) : 0;
  t.out = std::fopen(partial.c_str(), t.offset > 0 ? "r+b" : "wb");
  if (!t.out) return invalid_argument("cannot write '" + partial + "': " + std::strerror(errno));
  if (t.offset > 0) std::fseek(t.out, 0, SEEK_END);

  CURL* c = curl_easy_init();
  if (!c) {
    std::fclose(t.out);
    return internal_error("curl_easy_init failed");
  }
  const std::string url = resolve_url(opts, spec);
  curl_slist* headers = nullptr;
  if (!opts.token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + opts.token).c_str());
  headers = curl_slist_append(headers, "User-Agent: tokenserve/0.1");
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);    // abort a stalled transfer
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
  if (opts.timeout_seconds > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT, static_cast<long>(opts.timeout_seconds));
  std::string range;
  if (t.offset > 0) {
    range = std::to_string(t.offset) + "-";
    curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  }
  CURLcode rc = curl_easy_perform(c);
  curl_easy_cleanup(c);
  curl_slist_free_all(headers);
  std::fflush(t.out);
  std::fclose(t.out);

  if (t.status == 416 && t.offset > 0) {
    // Range past the end: what we have may already be the whole file; verify below.
  } else if (t.status == 404) {
    return not_found("'" + spec.repo + "/" + spec.file + "' was not found at " + url);
  } else if (t.status == 401 || t.status == 403) {
    return Status(StatusCode::kPermissionDenied, "access to " + url + " was refused (HTTP " +
                                                     std::to_string(t.status) + "); gated repositories need --token or HF_TOKEN");
  } else if (rc != CURLE_OK || t.write_failed) {
    return unavailable(std::string("download interrupted: ") + (t.write_failed ? "write failed" : curl_easy_strerror(rc)) +
                       " (" + std::to_string(t.offset + t.written) + " bytes kept in " + partial + "; run pull again to resume)");
  } else if (t.status >= 300) {
    return unavailable("HTTP " + std::to_string(t.status) + " from " + url);
  }

  const int64_t on_disk = static_cast<int64_t>(fs::file_size(partial));
  int64_t expected = -1;
  if (t.status == 206) expected = t.total;                     // from Content-Range
  else if (t.status == 200) expected = t.total;                // Content-Length of the full body
  if (expected >= 0 && on_disk != expected) {
    if (on_disk > expected) fs::remove(partial, ec);
    return data_loss("size mismatch: " + std::to_string(on_disk) + " bytes on disk, server announced " +
                     std::to_string(expected) + (on_disk < expected ? " (run pull again to resume)" : ""));
  }
  if (!has_gguf_magic(partial)) {
    fs::remove(partial, ec);
    return data_loss("'" + url + "' is not a GGUF file; removed the download");
  }
  fs::rename(partial, final_path, ec);
  if (ec) return invalid_argument("cannot move the download into place: " + ec.message());
  return final_path;
}

}  // namespace ts::tools
