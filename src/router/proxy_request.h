// Internal to the proxy (proxy.cc, proxy_upstream.cc, proxy_gie.cc): the state of one generation
// request as it moves through admission, the routing rules and the targets of its plan. Shared
// (GenPtr) by the steps and the upstream call's handlers, which run one after another (each
// step is posted by the previous one), never at once: no lock. The atomics are the exceptions,
// touched by the client-disconnect callback from the connection's strand.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <vector>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "gateway/governor.h"
#include "net/http_client.h"
#include "http/server.h"
#include "router/attempt_record.h"
#include "router/picker.h"
#include "router/proxy.h"
#include "router/rules.h"
#include "api/error.h"

namespace ts::router {

namespace proxy_detail {
using json = nlohmann::json;


inline http::Response json_response(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

inline api::ApiError make_error(int status, std::string message, std::string type, std::string code = {}) {
  api::ApiError e;
  e.http_status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

inline std::string prompt_text(const json& body, bool chat) { return routing_prompt_text(body, chat); }

// Copies `usage` fields of a response object, when present.
inline void read_usage(const json& j, gateway::UsageRecord* rec, bool* have) {
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return;
  rec->prompt_tokens = u->value("prompt_tokens", int64_t{0});
  rec->completion_tokens = u->value("completion_tokens", int64_t{0});
  if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
    rec->cached_tokens = d->value("cached_tokens", int64_t{0});
  *have = true;
}

// Scans an SSE chunk's `data:` lines for a usage object.
inline void scan_sse_usage(std::string_view chunk, gateway::UsageRecord* rec, bool* have) {
  if (chunk.find("\"usage\"") == std::string_view::npos) return;
  size_t pos = 0;
  while (pos < chunk.size()) {
    size_t end = chunk.find('\n', pos);
    if (end == std::string_view::npos) end = chunk.size();
    std::string_view line = chunk.substr(pos, end - pos);
    pos = end + 1;
    if (!line.starts_with("data:")) continue;
    line.remove_prefix(5);
    json j = json::parse(line, nullptr, false);
    if (j.is_object()) read_usage(j, rec, have);
  }
}

inline bool is_relayed_header(std::string_view name) {
  for (const char* h : {"content-type", "x-tokenserve-served-by", "retry-after", "x-ratelimit-limit-requests",
                        "cache-control"})
    if (http::iequals(name, h)) return true;
  return false;
}

}  // namespace proxy_detail

struct Proxy::Gen {
  explicit Gen(Proxy* p) : owner(p) {}
  ~Gen() {
    local_release();
    owner->gen_ended();
  }
  Gen(const Gen&) = delete;
  Gen& operator=(const Gen&) = delete;

  Proxy* owner;
  http::ExchangePtr ex;
  // Set when the client disconnects (Exchange::on_cancel), which also cancels call_id.
  std::atomic<bool> cancelled{false};
  std::atomic<uint64_t> call_id{0};  // the upstream call running (UpstreamClient), 0 = none
  bool chat = false;
  std::string request_id;
  std::chrono::steady_clock::time_point start;
  // Where a proxied request's time goes (SCALEOUT.md §8.14), sent to the client as Server-Timing:
  // posted = the io thread handed it to a worker, start (above) = the worker took it,
  // upstream_start = the answering attempt's call began.
  std::chrono::steady_clock::time_point posted, upstream_start;
  nlohmann::json body;
  std::string model;
  std::string prompt;          // the text the picker hashes
  bool stream = false;
  std::optional<gateway::Admission> admission;
  std::string tenant = "anonymous";
  engine::Tier tier = engine::Tier::kInteractive;
  gateway::UsageRecord rec;
  bool have_usage = false;
  bool settled = false;

  RouteInputs inputs;
  RouteDecision route;
  std::string current_target;  // "local" / "remote:big" being tried
  std::string fallback_note;   // "remote:big -> local (connect_error)"
  std::string last_failure;    // why the last target failed
  std::vector<AttemptRecord> attempts;
  Decision picker;             // the local picker's record (when local was tried)
  std::string picker_dump;     // picker.to_json() as serialized into the decision record ("" until then)
  bool picked = false;
  std::string served_by;       // endpoint name or "remote:<name>"
  std::string served_target;   // "local:r1" | "remote:big"
  // A 502/503/429 head from the last target, passed through when every target fails.
  std::optional<net::HttpResult> last_refusal;
  std::string last_refusal_from;
  std::string outcome = "error";
  int status = 0;              // what the client got
  // Timestamp (unix ms) of the last signed identity sent (gateway_secret): each attempt is
  // signed with a later one, so no two attempts carry the same signature (replicas refuse a
  // signature seen before, across replicas when they share Redis).
  int64_t last_signed_ms = 0;

  // The plan's walk: the next target's index, the target that failed before it.
  size_t next_plan = 0;
  std::string previous;
  // The local target (pool = builtin) across its attempts.
  std::map<std::string, Endpoint> header_endpoints;  // from a trusted destination header
  std::vector<std::string> ranked_addrs;             // "ip:port" in ranked order
  size_t next_candidate = 0;
  int tries = 0;
  std::string local_served_by;
  std::string reserved;   // counted on the pick's winner (pool begin_request) until the target ends
  std::string in_flight;  // a failover endpoint counted while it is tried
  bool decision_kept = false;

  // Ends the pool counts the local target holds.
  void local_release() {
    if (!reserved.empty()) owner->pool_.end_request(reserved);
    if (!in_flight.empty()) owner->pool_.end_request(in_flight);
    reserved.clear();
    in_flight.clear();
  }
  // Records the upstream call now running, so a disconnect can cancel it (ids only grow).
  void set_call(uint64_t id) {
    uint64_t prev = call_id.load();
    while (prev < id && !call_id.compare_exchange_weak(prev, id)) {
    }
  }

  // x-tokenserve-route for the target now answering.
  std::string route_header(const std::string& target) const {
    std::string h = "rule=" + route.rule_id + "; target=" + target + "; reason=" + route.reason;
    if (!fallback_note.empty()) h += "; fallback=" + fallback_note;
    return h;
  }
};


}  // namespace ts::router
