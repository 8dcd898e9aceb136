#include "router/replica_scrape.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace ts::router {
namespace {

// Name of a sample line (up to '{' or ' ') and its value (the field after the labels).
bool split_sample(std::string_view line, std::string_view* name, double* value) {
  size_t name_end = line.find_first_of("{ ");
  if (name_end == std::string_view::npos) return false;
  *name = line.substr(0, name_end);
  size_t after = name_end;
  if (line[name_end] == '{') {
    // Label values may hold '}' inside quotes; scan respecting them.
    bool quoted = false;
    for (after = name_end + 1; after < line.size(); ++after) {
      char c = line[after];
      if (quoted && c == '\\') {
        ++after;
      } else if (c == '"') {
        quoted = !quoted;
      } else if (c == '}' && !quoted) {
        break;
      }
    }
    if (after >= line.size()) return false;
    ++after;
  }
  std::string v(line.substr(after));
  char* end = nullptr;
  const char* s = v.c_str();
  while (*s == ' ') ++s;
  *value = std::strtod(s, &end);
  return end != s;
}

}  // namespace

Result<ReplicaLoad> parse_replica_metrics(std::string_view text) {
  struct Acc {
    double waiting = 0, running = 0, kv = 0, q = 0, h = 0;
    bool any = false;
  } ours, vllm;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line.front() == '#') continue;
    std::string_view name;
    double v = 0;
    if (!split_sample(line, &name, &v)) continue;
    Acc* a = nullptr;
    if (name.starts_with("tokenserve:")) {
      a = &ours;
      name.remove_prefix(11);
    } else if (name.starts_with("vllm:")) {
      a = &vllm;
      name.remove_prefix(5);
    } else {
      continue;
    }
    if (name == "num_requests_waiting") {
      a->waiting += v;
      a->any = true;
    } else if (name == "num_requests_running") {
      a->running += v;
      a->any = true;
    } else if (name == "kv_cache_usage_perc" || name == "gpu_cache_usage_perc") {
      a->kv = std::max(a->kv, v);
      a->any = true;
    } else if (name == "prefix_cache_queries_total") {
      a->q += v;
    } else if (name == "prefix_cache_hits_total") {
      a->h += v;
    }
  }
  const Acc& a = ours.any ? ours : vllm;
  if (!a.any) return invalid_argument("no num_requests_waiting/num_requests_running/kv_cache_usage_perc in the metrics");
  return ReplicaLoad{.waiting = a.waiting, .running = a.running, .kv_usage = std::clamp(a.kv, 0.0, 1.0),
                     .prefix_queries = a.q, .prefix_hits = a.h};
}

}  // namespace ts::router
