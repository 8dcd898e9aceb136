// The gateway's data plane: OpenAI requests in, the chosen upstream's answer out, streamed as
// it arrives. pool = builtin (below) or pool = gie (gie_pool set: the local target is one
// InferencePool route; its endpoint picker (EPP) chooses the replica: the gateway sends
// x-gateway-inference-objective / -fairness-id, sends no destination header, does no failover
// of its own inside the pool (the data plane retries), and reads the serving endpoint from the
// response's x-gateway-destination-endpoint-served into served_by / the ledger).
//
// Per generation request (POST /v1/completions, /v1/chat/completions), driven by events rather
// than by a thread per request: the upstream transfers run on the HTTP server's io threads
// (UpstreamClient: libcurl multi on the server's Asio loop, register_routes() binds it), and the
// answer is relayed from there. The steps that may block (admission, settlement, Redis-backed
// cooldowns: the "blocking steps") run at once on the io thread when ProxyOptions::inline_steps
// says governance is in process (no Redis, SQLite ledger with group commit), else on a worker
// thread of a pool that keeps its threads (worker_pool.h), which is not held while the
// upstream answers. At most max_in_flight requests at once; more get 503 + Retry-After:
//   1. parse the JSON body (400 OpenAI error on bad JSON or a missing model);
//   2. governance (when a Governor is given): admit with an estimated prompt size (body bytes
//      of the prompt / 4: the gateway has no tokenizer) + max_tokens (default_max_tokens when
//      absent), in the body's `tier`; refusals answer as serve does (401/403/429 + headers);
//   3. route (rules.h): with a RuleSet, the first matching rule gives a plan (its action, then
//      its fallbacks; remotes in cooldown skipped); without one the plan is "local" (rule
//      "builtin"). Each target is tried in order until one answers:
//        local        the Picker ranks the pool (decision record kept, see decisions_json) and
//                     the request goes down the ranked list, at most max_attempts endpoints,
//                     never one twice; a connect error, a send/read error before the response
//                     head, or a 502/503 head moves on (failover before the first byte);
//        remote:<n>   the named OpenAI-compatible upstream (model mapped, its API key, stream
//                     requests ask for stream_options.include_usage so usage can be metered);
//                     connect/read errors, 5xx, 429 and 401/403 (the gateway's key refused)
//                     before the first byte move on; other 4xx are relayed. A 429
//                     with Retry-After starts a cooldown of that length; cooldown_after_failures
//                     consecutive failures start one of cooldown_s (CooldownTracker, shared via
//                     Redis when configured); a success resets the failure count;
//        reject:<c>   an OpenAI error with status c (code "rejected_by_rule");
//      when every target fails, the last 502/503/429 head is passed through, else 502/503;
//   4. answer: a whole response is relayed; a chunked (SSE) one is relayed chunk by chunk as
//      each arrives (no buffering). If the upstream fails mid-stream the client gets a clean
//      `data: {"error":{...}}` event and the end of the stream (the ledger row says
//      finish_reason "error", http_status 502);
//   5. settle: usage from the upstream's `usage` (the last SSE chunk carrying one, or the body;
//      without one an estimate, flagged usage_source "estimated" in the audit row); the ledger
//      row gets the request id the client sees (x-request-id, echoed or minted), local or
//      remote alike;
//   6. audit: with an audit writer, one route_decisions row (rule, rule-set version, inputs
//      snapshot, alternatives with scores, fallback taken, outcome) keyed by the request id.
// Response headers added: x-request-id, x-tokenserve-served-by (the replica's, relayed),
// x-gateway-destination-endpoint-served (local), x-tokenserve-route on every generation
// response ("rule=<id>; target=<local:r2|remote:big|reject:429|none>; reason=<conditions>"
// plus "; fallback=<from> -> <to> (<why>)" when a fallback served), governance's x-ratelimit-*.
// Upstream request headers: x-request-id, x-gateway-inference-objective (tier),
// x-gateway-inference-fairness-id (tenant), and (pool = builtin) x-gateway-destination-endpoint:
// the ranked "ip:port" list from the endpoint attempted on (chain_to: a proxy routes by it). The client's Authorization is not forwarded; with
// gateway_secret, local replicas get a signed identity instead (gateway/trust.h, serve
// --trust-gateway).
// Tier shedding (PickerOptions::shed_batch_waiting): a batch request the picker sheds at
// saturation gets 429 + Retry-After (code "batch_shed"); interactive requests go on.
// With trust_destination_header, a request's x-gateway-destination-endpoint list replaces the
// picker's ranking (the decision record then lists those endpoints with score 0).
//
// Thread-safe. shutdown() waits for the requests in flight and the workers (bounded by the
// deadline). register_routes() must come before the server starts; the Proxy must be destroyed
// after the server stopped (its upstream client is bound to the server's io_context).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "api/error.h"
#include "gateway/governor.h"
#include "net/http_client.h"
#include "http/server.h"
#include "router/picker.h"
#include "router/pool.h"
#include "router/cooldown.h"
#include "router/rules.h"
#include "router/upstream_client.h"
#include "router/worker_pool.h"

namespace ts::gateway {
class RouteDecisionWriter;
}

namespace ts::router {

struct ProxyOptions {
  int max_attempts = 3;
  int max_in_flight = 512;
  int64_t default_max_tokens = 256;                  // admission estimate when absent
  std::chrono::milliseconds upstream_timeout{120'000};  // longest upstream silence (no byte)
  size_t max_decisions = 256;                        // decision records kept for /router/decisions
  gateway::Governor* governor = nullptr;             // null = no governance (tests)
  bool require_auth = false;
  // Honour x-gateway-destination-endpoint ("ip:port[,ip:port...]", GIE's EPP header) from an
  // upstream picker: those endpoints are tried in that order instead of the picker's ranking.
  // Addresses not in the pool are tried too (the upstream picker knows them).
  bool trust_destination_header = false;
  const RuleSet* rules = nullptr;                    // null = everything local (rule "builtin")
  CooldownTracker* cooldowns = nullptr;              // needed when rules name remotes
  gateway::RouteDecisionWriter* audit = nullptr;     // route_decisions rows; null = none
  // Signs tenant/app/tier headers for replicas running --trust-gateway ("" = not sent).
  std::string gateway_secret;
  std::chrono::seconds ttft_window{60};              // p95 TTFT window for `when` rules
  int shed_retry_after_s = 1;                        // Retry-After of a shed batch request
  // pool = gie: the local target is this one URL (an InferencePool route); nothing is picked
  // here and `pool` is not consulted. Empty = pool = builtin.
  std::optional<net::Url> gie_pool;
  std::string gie_ca_file;                           // https gie_pool: CA (PEM); "" = system store
  // pool = builtin chained to an external proxy (GIE's EPP role for it, e.g. HAProxy set-dst):
  // each attempt goes to this URL with x-gateway-destination-endpoint = the ranked list from
  // the attempted endpoint on; the proxy routes to its first entry. Empty = direct.
  std::optional<net::Url> chain_to;
  // Scheduler slice hint for the worker threads (worker_pool.h); 0 = kernel default.
  std::chrono::microseconds worker_slice{0};
  // Run the blocking steps (see the header comment) on the io thread. Only when none of them
  // waits on the network or a disk sync: no governor or an in-process limit store, a SQLite
  // ledger whose journal syncs off the request path, in-process cooldowns. false = on workers.
  bool inline_steps = false;
};

class Proxy {
 public:
  Proxy(EndpointPool& pool, Picker& picker, ProxyOptions opts);
  ~Proxy();  // shutdown(30 s)

  // POST /v1/completions, /v1/chat/completions; GET /v1/models, /health, /ready, /metrics,
  // /router/decisions.
  void register_routes(http::Server& server);
  // Refuse new work (503 + Retry-After) and wait for the workers up to `deadline`.
  void shutdown(std::chrono::milliseconds deadline);

  // The last max_decisions decision records, oldest first:
  // [{"request_id","model","tenant","served_by","attempts":[{"endpoint","result"}],
  //   "decision":Decision::to_json()}]
  std::string decisions_json() const;
  // tokenserve_gateway_* families (Prometheus text).
  std::string metrics_text() const;

 private:
  struct Gen;  // proxy_request.h
  using GenPtr = std::shared_ptr<Gen>;
  // How one upstream call ended.
  struct Upstream {
    enum class End {
      kFailed,     // no response head (failure: connect_error | send_error | reset_before_head | timeout)
      kRefused,    // is_refusal(status): nothing reached the client; refusal holds the answer
      kAnswered,   // the client got the upstream's answer (whole, streamed, or cut by an SSE error)
      kCancelled,  // the client left before a head came
    };
    End end = End::kFailed;
    std::string failure;       // attempt result for kFailed / kRefused ("503", "429", ...)
    std::string detail;        // the client library's message, for kFailed
    net::HttpResult refusal;   // kRefused: head and (bounded) body
    int settle_status = 0;     // kAnswered: settle() with these (a blocking step)
    const char* settle_finish = nullptr;
  };
  using Then = std::function<void(Upstream)>;

  void handle_generate(const http::ExchangePtr& ex, bool chat);
  // A blocking step of `g`: inline (inline_steps) or on a worker (inline when the pool is full).
  void resume(const GenPtr& g, std::function<void()> step);
  // Parse, admit, route (blocking), then the plan's targets in order.
  void start_generate(const GenPtr& g);
  void next_target(const GenPtr& g);
  void target_failed(const GenPtr& g);  // the current target failed before the first byte
  void all_failed(const GenPtr& g);     // every target did: the last refusal or an error
  // Routing inputs from the pool, the TTFT window and the cooldowns.
  void fill_state(RouteInputs* in);
  void local_begin(const GenPtr& g);    // pick, then local_attempt
  void local_attempt(const GenPtr& g);  // the ranked list's next endpoint (failover)
  void gie_attempt(const GenPtr& g);    // proxy_gie.cc
  void remote_attempt(const GenPtr& g, const RemoteConfig& remote);
  // Headers of every local upstream request: x-request-id, content type, GIE's objective and
  // fairness id, the signed identity when gateway_secret is set (signed afresh at each call:
  // one call per attempt).
  http::HeaderList upstream_headers(Gen& g) const;
  // One upstream call (UpstreamClient; http or https; keep-alive connections reused). A head
  // whose status is_refusal() is collected, not relayed (failover material); any other head
  // commits: commit() (on the io thread; it must not block) records the attempt and returns the
  // upstream headers to relay, and the answer goes to the client as it arrives (SSE chunk by
  // chunk, unbuffered; a failure mid-stream ends it with an SSE error event). When the call
  // ends, the client-facing part is done on the io thread, then `then` runs as a blocking step
  // (after settle() on kAnswered).
  void call_upstream(const GenPtr& g, const net::Url& url, net::HttpRequest req, net::HttpCallOptions opts,
                     std::function<bool(int)> is_refusal,
                     std::function<http::HeaderList(const net::HttpResponseHead&)> commit, std::string label, Then then);
  void settle(Gen& g, int status, const char* finish);
  void respond_error(Gen& g, const api::ApiError& e, const gateway::Headers& extra, const std::string& route);
  void audit(Gen& g);
  void keep_decision(Gen& g);  // the local picker's record into decisions_ (once per local target)
  void add_ttft(int64_t ms);
  // p95 of the local TTFT samples in ttft_window (-1 when none), cached for up to 50 ms.
  int64_t p95_ttft();
  void handle_models(const http::ExchangePtr& ex);
  void count(const std::string& endpoint, int code);
  void gen_ended();  // a Gen was destroyed

  EndpointPool& pool_;
  Picker& picker_;
  ProxyOptions opts_;
  std::mutex gen_mu_;                   // with gen_cv_: shutdown() waits for num_gen_ == 0
  std::condition_variable gen_cv_;
  std::atomic<int> num_gen_{0};         // generation requests in flight
  std::atomic<bool> draining_{false};
  std::mutex pick_mu_;  // pick + count on the winner, atomically
  mutable std::mutex mu_;
  std::deque<std::string> decisions_;                   // serialized records
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (endpoint, code) -> count
  std::map<std::pair<std::string, std::string>, int64_t> attempts_;  // (endpoint, result)
  std::atomic<int64_t> prefix_predicted_chars_{0};
  std::atomic<int64_t> shed_batch_{0};
  std::map<std::tuple<std::string, std::string, int>, int64_t> routed_;  // (rule, target, code)
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> ttft_;  // local TTFT samples
  std::vector<int64_t> ttft_scratch_;                   // p95_ttft's selection buffer (under mu_)
  int64_t ttft_p95_ = -1;                               // p95_ttft's cache (under mu_)
  std::chrono::steady_clock::time_point ttft_p95_at_;
  bool ttft_p95_valid_ = false;
  // Destroyed first (last members), so no transfer or worker outlives the state it uses.
  std::unique_ptr<WorkerPool> workers_;
  std::unique_ptr<UpstreamClient> client_;  // set by register_routes()
};

}  // namespace ts::router
