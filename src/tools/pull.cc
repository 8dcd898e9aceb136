#include "tools/pull.h"

#include <curl/curl.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <unistd.h>

#include "gateway/sha256.h"
#include "net/http_client.h"

namespace fs = std::filesystem;

namespace ts::tools {
namespace {


struct Transfer {
  std::FILE* out = nullptr;
  int64_t offset = 0;        // bytes already on disk before this request
  int64_t written = 0;       // bytes written by this request
  int64_t total = -1;        // full file size when the server announced it
  long status = 0;
  bool range_honoured = false;
  bool write_failed = false;
  std::string linked_etag;   // X-Linked-Etag of any response in the redirect chain (HF: LFS sha256)
  std::string etag;          // ETag of the final response
  const PullOptions* opts = nullptr;
};

// ` W/"abc"\r\n` -> `abc`.
std::string etag_value(std::string v) {
  while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.pop_back();
  size_t i = v.find_first_not_of(' ');
  v = i == std::string::npos ? "" : v.substr(i);
  if (v.rfind("W/", 0) == 0) v = v.substr(2);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

// A SHA-256 in hex (Hugging Face publishes the LFS object's sha256 as its ETag).
bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string read_small(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  char buf[256];
  size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  return std::string(buf, n);
}

bool write_small(const std::string& path, const std::string& data) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  return std::fclose(f) == 0 && ok;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  auto lower = line;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.rfind("http/", 0) == 0) {  // a new response (redirects): reset what we learned
    t->total = -1;
    t->range_honoured = false;
    t->etag.clear();
    std::sscanf(line.c_str(), "%*s %ld", &t->status);
  } else if (lower.rfind("x-linked-etag:", 0) == 0) {
    t->linked_etag = etag_value(line.substr(14));
  } else if (lower.rfind("etag:", 0) == 0) {
    t->etag = etag_value(line.substr(5));
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

namespace {

// Hugging Face names: letters, digits, '-', '_', '.'; no "--" or ".." runs; at most 96.
Status check_repo_part(const std::string& spec, std::string_view part, const char* what) {
  bool ok = !part.empty() && part.size() <= 96 && part != "." && part.find("..") == std::string_view::npos &&
            part.find("--") == std::string_view::npos && part.front() != '-' && part.front() != '.' &&
            part.back() != '-' && part.back() != '.';
  for (char c : part)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  if (ok) return ok_status();
  return invalid_argument("'" + spec + "': the " + what + " '" + std::string(part) +
                          "' is not a valid Hugging Face name (letters, digits, '-', '_', '.'; no '..')");
}

// A relative path inside the repository: segments of [A-Za-z0-9._+-], none empty, "." or "..".
Status check_file_path(const std::string& spec, const std::string& file) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("'" + spec + "': the file part '" + file + "' " + why);
  };
  if (file.empty() || file.size() > 1024) return bad("must be a relative path of 1 to 1024 characters");
  if (file.front() == '/') return bad("must not be an absolute path");
  size_t start = 0;
  while (start <= file.size()) {
    size_t slash = file.find('/', start);
    std::string seg = file.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (seg.empty()) return bad("has an empty path segment");
    if (seg == "." || seg == "..") return bad("must not contain '.' or '..' segments");
    for (char c : seg)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '+'))
        return bad("contains a character outside [A-Za-z0-9._+-]");
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return ok_status();
}

}  // namespace

Result<PullSpec> parse_pull_spec(const std::string& spec) {
  size_t a = spec.find('/');
  size_t b = a == std::string::npos ? std::string::npos : spec.find('/', a + 1);
  if (a == 0 || a == std::string::npos || b == std::string::npos || b == a + 1 || b + 1 >= spec.size()) {
    return invalid_argument("'" + spec + "' is not OWNER/REPO/FILE (e.g. " + kDefaultModelSpec + ")");
  }
  TS_RETURN_IF_ERROR(check_repo_part(spec, std::string_view(spec).substr(0, a), "owner"));
  TS_RETURN_IF_ERROR(check_repo_part(spec, std::string_view(spec).substr(a + 1, b - a - 1), "repository"));
  PullSpec s{spec.substr(0, b), spec.substr(b + 1)};
  TS_RETURN_IF_ERROR(check_file_path(spec, s.file));
  return s;
}

Status validate_revision(const std::string& rev) {
  bool ok = !rev.empty() && rev.size() <= 255 && rev.find("..") == std::string::npos && rev.front() != '/';
  for (char c : rev)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/');
  if (ok) return ok_status();
  return invalid_argument("revision '" + rev + "' must be a branch, tag or commit ([A-Za-z0-9._/-], no '..')");
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
  // Specs built by hand (not by parse_pull_spec) are checked the same way.
  TS_RETURN_IF_ERROR(parse_pull_spec(spec.repo + "/" + spec.file).status());
  TS_RETURN_IF_ERROR(validate_revision(opts.revision));
  net::curl_init();
  const std::string final_path = model_path_for(opts.models_dir, spec);
  const std::string partial = final_path + ".partial";
  const std::string partial_etag = partial + ".etag";  // validator of the partial file's version
  std::error_code ec;
  fs::create_directories(fs::path(final_path).parent_path(), ec);
  if (ec) return invalid_argument("cannot create '" + fs::path(final_path).parent_path().string() + "': " + ec.message());
  if (fs::exists(final_path) && has_gguf_magic(final_path)) return final_path;  // already complete

  Transfer t;
  t.opts = &opts;
  t.offset = fs::exists(partial) ? static_cast<int64_t>(fs::file_size(partial)) : 0;
  // A partial file is resumed only with the validator of the version it came from (If-Range):
  // without one it could be spliced into a newer revision, so start over.
  const std::string resume_etag = t.offset > 0 ? read_small(partial_etag) : "";
  if (t.offset > 0 && resume_etag.empty()) t.offset = 0;
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
    // Changed remote file: the server sends it whole (200) and on_write starts over.
    headers = curl_slist_append(headers, ("If-Range: \"" + resume_etag + "\"").c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  }
  CURLcode rc = curl_easy_perform(c);
  curl_easy_cleanup(c);
  curl_slist_free_all(headers);
  std::fflush(t.out);
  std::fclose(t.out);
  std::error_code ec2;
  if (!t.etag.empty() && (t.status == 200 || t.status == 206)) {
    (void)write_small(partial_etag, t.etag);
  } else if (t.status == 200 || t.status == 206) {
    fs::remove(partial_etag, ec2);  // no validator: a later attempt restarts instead of resuming
  }

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
  // The SHA-256 Hugging Face publishes for LFS files (X-Linked-Etag on the resolve response,
  // else a sha256-shaped ETag), checked over the whole file, resumed parts included.
  std::string want = is_sha256_hex(t.linked_etag) ? t.linked_etag
                     : is_sha256_hex(t.etag)      ? t.etag
                     : is_sha256_hex(resume_etag) ? resume_etag
                                                  : "";
  if (!want.empty()) {
    auto got = gateway::sha256_file_hex(partial);
    if (!got.ok()) return unavailable("cannot read back " + partial + ": " + got.status().message());
    if (*got != want) {
      fs::remove(partial, ec);
      fs::remove(partial_etag, ec);
      return data_loss("checksum mismatch for '" + url + "': SHA-256 " + *got + ", the server published " +
                       want + "; removed the download");
    }
  }
  if (!has_gguf_magic(partial)) {
    fs::remove(partial, ec);
    fs::remove(partial_etag, ec);
    return data_loss("'" + url + "' is not a GGUF file; removed the download");
  }
  fs::remove(partial_etag, ec);
  fs::rename(partial, final_path, ec);
  if (ec) return invalid_argument("cannot move the download into place: " + ec.message());
  return final_path;
}

}  // namespace ts::tools
