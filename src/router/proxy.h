// The gateway's data plane (pool = builtin): OpenAI requests in, the picked replica's answer
// out, streamed as it arrives.
//
// Per generation request (POST /v1/completions, /v1/chat/completions), on its own worker thread
// (io threads never block; at most max_in_flight workers, more get 503 + Retry-After):
//   1. parse the JSON body (400 OpenAI error on bad JSON or a missing model);
//   2. governance (when a Governor is given): admit with an estimated prompt size (body bytes
//      of the prompt / 4: the gateway has no tokenizer) + max_tokens (default_max_tokens when
//      absent); refusals answer as serve does (401/403/429 + headers);
//   3. pick: the Picker ranks the pool's endpoints (decision record kept, see decisions_json);
//   4. forward down the ranked list, at most max_attempts endpoints, never one twice: a connect
//      error, a send/read error before the response head, or a 502/503 head moves on to the
//      next (failover before the first byte). The last 503/502 is passed through as is.
//   5. answer: a whole response is relayed; a chunked (SSE) one is relayed chunk by chunk as
//      each arrives (no buffering). If the replica fails mid-stream the client gets a clean
//      `data: {"error":{...}}` event and the end of the stream (the ledger row says
//      finish_reason "error", http_status 502);
//   6. settle: usage from the replica's `usage` (the last SSE chunk carrying one, or the body);
//      the ledger row gets the request id the client sees (x-request-id, echoed or minted).
// Response headers added: x-request-id, x-tokenserve-served-by (the replica's, relayed),
// x-gateway-destination-endpoint-served, x-tokenserve-route, governance's x-ratelimit-*.
// Upstream request headers: x-request-id, x-gateway-inference-objective (tier),
// x-gateway-inference-fairness-id (tenant). The client's Authorization is not forwarded: the
// replicas sit on a private network (--trust-gateway signing is not implemented yet).
// With trust_destination_header, a request's x-gateway-destination-endpoint list replaces the
// picker's ranking (the decision record then lists those endpoints with score 0).
//
// Thread-safe. shutdown() waits for the workers (bounded by the deadline).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "gateway/governor.h"
#include "http/server.h"
#include "router/picker.h"
#include "router/pool.h"

namespace ts::router {

struct ProxyOptions {
  int max_attempts = 3;
  int max_in_flight = 512;
  int64_t default_max_tokens = 256;                  // admission estimate when absent
  std::chrono::milliseconds upstream_timeout{120'000};  // per socket wait
  size_t max_decisions = 256;                        // decision records kept for /router/decisions
  gateway::Governor* governor = nullptr;             // null = no governance (tests)
  bool require_auth = false;
  // Honour x-gateway-destination-endpoint ("ip:port[,ip:port...]", GIE's EPP header) from an
  // upstream picker: those endpoints are tried in that order instead of the picker's ranking.
  // Addresses not in the pool are tried too (the upstream picker knows them).
  bool trust_destination_header = false;
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
  void handle_generate(const http::ExchangePtr& ex, bool chat);
  void run_generate(const http::ExchangePtr& ex, bool chat, std::string request_id);
  void handle_models(const http::ExchangePtr& ex);
  void count(const std::string& endpoint, int code);

  EndpointPool& pool_;
  Picker& picker_;
  ProxyOptions opts_;
  std::atomic<bool> draining_{false};
  std::mutex pick_mu_;  // pick + count on the winner, atomically
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  int workers_ = 0;
  std::deque<std::string> decisions_;                   // serialized records
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (endpoint, code) -> count
  std::map<std::pair<std::string, std::string>, int64_t> attempts_;  // (endpoint, result)
  std::atomic<int64_t> prefix_predicted_chars_{0};
};

}  // namespace ts::router
