// Hybrid local/remote routing rules for `tokenserve gateway` (SCALEOUT.md §6.2), from the
// gateway's routing TOML (`--rules FILE`). An ordered rule list, first match wins; each rule
// has an id, a description, `match` (request facts), `when` (local state), an `action` and an
// explicit `fallback` list. Remotes are named OpenAI-compatible upstreams.
//
//   [remotes.big]
//   base_url = "https://api.example.com/v1"  # http:// or https:// (TLS verified: chain + host name)
//   ca_file = "/etc/ssl/private-ca.pem"   # https: verify with this CA (PEM) instead of the system store
//   api_key_env = "BIG_API_KEY"           # or api_key_file = "/run/secrets/big" (first line)
//   models = { "small" = "large-70b" }    # model mapping; unmapped names are sent as they are
//   cooldown_after_failures = 3           # consecutive failures before a cooldown
//   cooldown_s = 30                       # cooldown length (a 429's Retry-After wins)
//   timeout_ms = 60000                    # longest silence (no response byte) before the call fails
//   budget_tokens_per_day = 2000000       # remote tokens (prompt + completion, from its usage)
//                                         # per UTC day, shared via Redis like cooldowns; once
//                                         # spent the remote is skipped like a cooling one
//                                         # (checked before routing, charged after: overshoot
//                                         # is bounded by the requests in flight to it)
//
//   [[rules]]
//   id = "long-prompt"
//   description = "big prompts go to the large remote"
//   match = { prompt_tokens_over = 2000 } # also: model, tenant, app (string or list), tier,
//                                         # headers = {name = value}, max_tokens_over,
//                                         # tools = bool, json_mode = bool
//   when = { waiting_per_replica_over = 4 }  # also: healthy_local_below, p95_ttft_ms_over
//   action = "remote:big"                 # "local" | "remote:<name>" | "reject:<4xx|5xx>"
//   fallback = ["local"]                  # tried in order when the action fails before a byte
//
//   default = "local"                     # when no rule matches (default "local")
//
// A rule with neither match nor when matches everything. All conditions of a rule must hold.
// Validation is complete at load; errors name the file and line ("rules.toml:7: ..."), and an
// unknown key, a remote a rule names but nobody defines, a base_url that is not http(s)://, an
// unreadable ca_file or a missing api key env variable / file are errors.
//
// evaluate() is a pure function of the rule set and a RouteInputs snapshot, so `tokenserve
// gateway explain` and the live gateway reach the same decision for the same inputs.
// Thread-safe: a RuleSet is immutable after load.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/request.h"
#include "net/http_client.h"

namespace ts::router {

struct RemoteConfig {
  std::string name;
  std::string base_url;                        // as written
  net::Url url;                                // parsed from base_url
  std::string host;                            // url.host
  uint16_t port = 80;                          // url.port
  std::string base_path;                       // url.base_path: "/v1" (no trailing slash)
  std::string ca_file;                         // https: CA (PEM) to verify with; "" = system store
  std::string api_key;                         // resolved at load; "" = none (never logged)
  std::map<std::string, std::string> models;   // client model -> remote model
  int cooldown_after_failures = 3;
  std::chrono::milliseconds cooldown{30'000};
  std::chrono::milliseconds timeout{60'000};
  int64_t budget_tokens_per_day = 0;           // 0 = no budget
  std::string remote_model(const std::string& model) const;
};

enum class TargetKind { kLocal, kRemote, kReject };

struct Target {
  TargetKind kind = TargetKind::kLocal;
  std::string remote;                          // kRemote: remote name
  int reject_status = 0;                       // kReject: HTTP status
  std::string to_string() const;               // "local" | "remote:big" | "reject:429"
  bool operator==(const Target&) const = default;
};
// Parses "local", "remote:<name>", "reject:<400..599>".
Result<Target> parse_target(std::string_view s);

struct RuleMatch {
  std::vector<std::string> models, tenants, apps;  // any of; empty = any
  std::optional<engine::Tier> tier;
  std::map<std::string, std::string> headers;      // lower-case name -> exact value
  std::optional<int64_t> prompt_tokens_over;       // estimated prompt tokens > N
  std::optional<int64_t> max_tokens_over;          // requested max_tokens > N
  std::optional<bool> tools;                       // request has tools
  std::optional<bool> json_mode;                   // response_format json_object/json_schema
};

struct RuleWhen {
  std::optional<int64_t> healthy_local_below;      // healthy local endpoints < N
  std::optional<double> waiting_per_replica_over;  // pool waiting / healthy endpoints > X
  std::optional<int64_t> p95_ttft_ms_over;         // gateway-measured p95 TTFT of local streamed
                                                   // requests over the last 60 s > N ms
};

struct Rule {
  std::string id;
  std::string description;
  RuleMatch match;
  RuleWhen when;
  Target action;
  std::vector<Target> fallback;
};

struct RuleSet {
  std::string source;                          // file name ("" = built in: everything local)
  std::string version;                         // sha256 hex of the file text (first 16 chars)
  std::vector<Rule> rules;
  std::map<std::string, RemoteConfig> remotes;
  Target default_action;                       // when no rule matches
};

// Parses and validates TOML text; `name` prefixes error messages.
Result<RuleSet> parse_rules(std::string_view toml_text, const std::string& name);
// kNotFound when the file cannot be read.
Result<RuleSet> load_rules(const std::string& path);

// What the evaluator sees: the request's facts and a snapshot of local and remote state.
struct RouteInputs {
  std::string model, tenant = "anonymous", app = "default";
  engine::Tier tier = engine::Tier::kInteractive;
  std::map<std::string, std::string> headers;  // lower-case names (only those rules name matter)
  int64_t prompt_tokens = 0;                   // estimate (bytes / 4: the gateway has no tokenizer)
  int64_t max_tokens = 0;
  bool tools = false;
  bool json_mode = false;
  int64_t healthy_local = 0;                   // ready, not ejected local endpoints
  double waiting_per_replica = 0;              // sum of scraped waiting / healthy_local
  int64_t p95_ttft_ms = -1;                    // -1 = no samples in the window
  std::set<std::string> remotes_cooling;       // remotes in cooldown now
  std::map<std::string, int64_t> remote_budget_left;  // remotes with a daily budget: tokens left

  nlohmann::json to_json() const;
  // Appends to_json().dump() to `out`, written directly (no JSON tree: it runs per request).
  void append_json(std::string& out) const;
  // Accepts the to_json() shape; absent fields keep their defaults. kInvalidArgument on a
  // wrong type or an unknown tier.
  static Result<RouteInputs> from_json(const nlohmann::json& j);
};

// The text routing estimates prompt tokens from and the picker hashes: the rendered chat
// (render_chat_prompt) or the completion prompt(s).
std::string routing_prompt_text(const nlohmann::json& body, bool chat);

// Request facts from an OpenAI body (model, max_tokens, tools, json_mode, tier; prompt estimate
// from the given prompt text). Tenant/app/headers/state are the caller's.
void fill_request_facts(const nlohmann::json& body, const std::string& prompt_text, RouteInputs* in);

struct RouteDecision {
  std::string rule_id;                         // matched rule, or "default"
  std::string reason;                          // the matched conditions, e.g. "prompt_tokens 812 > 500"
  std::vector<Target> plan;                    // action then fallbacks, cooling remotes removed
  std::vector<std::string> skipped;            // "remote:big (cooling down)" | "(budget exhausted)"
  nlohmann::json evaluated = nlohmann::json::array();  // [{"id","matched","why"}] up to the match
  // {"rule_id","reason","plan":[...],"skipped":[...],"evaluated":[...]}
  nlohmann::json to_json() const;
  // Appends to_json().dump() to `out` without building the tree (`evaluated` is dumped as is).
  void append_json(std::string& out) const;
};

RouteDecision evaluate(const RuleSet& rules, const RouteInputs& in);

}  // namespace ts::router
