// Endpoint discovery from a file in llm-d's file-discovery schema:
//
//   endpoints:
//     - name: r1
//       address: 10.213.0.11
//       port: 8000
//       labels:
//         model: stories260K
//
// Parsed by a small YAML subset reader (no YAML library is packaged for C++ here besides the C
// libyaml, and the schema is tiny): block mappings and sequences by indentation, `- ` items,
// plain, 'single' and "double" quoted scalars, `#` comments, and one-line flow mappings
// `{k: v, ...}` (for labels or whole items). Anchors, multi-line scalars, tags and several
// documents are refused with an error, never misread.
//
// Thread-safety: the functions are pure; EndpointsWatcher is not thread-safe (one owner polls).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ts::router {

struct Endpoint {
  std::string name;                           // unique in the file; "address:port" when omitted
  std::string address;                        // IP literal or host name
  uint16_t port = 0;                          // 1..65535
  std::map<std::string, std::string> labels;  // free-form; "model" restricts the served model

  bool operator==(const Endpoint&) const = default;
};

// Parses the file text. Errors (kInvalidArgument, message "line N: reason"): no top-level
// `endpoints:` list, an item without address or with a bad port, duplicate names, unsupported
// YAML. An empty list is valid (the pool is then empty).
Result<std::vector<Endpoint>> parse_endpoints_yaml(std::string_view text);

// Reads and parses a file; kNotFound when it cannot be read, parse errors prefixed "PATH: ".
Result<std::vector<Endpoint>> load_endpoints_file(const std::filesystem::path& path);

// Re-reads the file when its modification time or size changed. poll() returns the new list
// when it changed and parsed; a file that fails to parse keeps the previous list (the error is
// returned once per change so the caller can log it).
class EndpointsWatcher {
 public:
  explicit EndpointsWatcher(std::filesystem::path path) : path_(std::move(path)) {}

  struct Poll {
    bool changed = false;              // endpoints() differs from before this poll
    Status error;                      // parse/read error of a changed file (list kept)
  };
  Poll poll();
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }

 private:
  std::filesystem::path path_;
  std::filesystem::file_time_type mtime_{};
  uintmax_t size_ = static_cast<uintmax_t>(-1);
  std::vector<Endpoint> endpoints_;
};

}  // namespace ts::router
