// The OpenAI-compatible service: registers the endpoints on an http::Server and glues api/
// (parse, validate, format), the prompt builder (tokenize, chat template) and the engine.
//
//   POST /v1/completions, /v1/chat/completions   (stream or not)
//   GET  /v1/models, /v1/models/{id}
//   POST /tokenize, /detokenize
//   GET  /health (alive), /ready (accepting: 503 while draining), /metrics (Prometheus text)
//   GET  /dashboard, /dashboard/data            (with ServiceOptions::metrics)
//   GET  /v1/usage/me; /admin/...                (with ServiceOptions::governor, governance_routes.h)
//
// Errors use OpenAI's body with the matching status: parse/validation 400, unknown model 404,
// prompt + max_tokens past the context 400 (with the counts), engine queue full or draining
// 503 + Retry-After. A client disconnect cancels its engine requests within one step.
//
// Governance (ServiceOptions::governor): with require_auth every /v1/* endpoint and
// /tokenize, /detokenize need a valid API key (401 otherwise). A generation request is parsed,
// tokenized, then admitted (401/403/400/429 with OpenAI error bodies and x-ratelimit-* /
// Retry-After headers); the engine request runs in the key's tenant's prefix-cache namespace,
// and when it ends, however it ends (finished, engine error, client disconnect, drain), it is
// settled exactly once: one ledger row, metrics (on_request_finished) and one JSON log line.
// Every response carries x-request-id (the client's valid one echoed, or a generated one).
// Handlers never block an io thread on the engine: events are consumed by a ResponsePump.
// Thread-safe; the backend, prompt builder's tokenizer and the http server must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/error.h"
#include "gateway/governor.h"
#include "http/server.h"
#include "obs/server_metrics.h"
#include "server/backend.h"
#include "server/prompt_builder.h"
#include "server/response_job.h"

namespace ts::server {

struct ServiceOptions {
  std::string model_id = "default";          // the name clients put in "model"
  std::vector<std::string> model_aliases;    // other accepted names (general.name, file name)
  int64_t created = 0;                       // unix time reported in /v1/models
  int retry_after_seconds = 1;               // Retry-After on 503
  gateway::Governor* governor = nullptr;     // admission, ledger, usage; null = none (tests)
  bool require_auth = false;                 // API key required (needs governor)
  obs::ServerMetrics* metrics = nullptr;     // null = only the built-in counters on /metrics
  bool log_requests = false;                 // one JSON line per generation request
  bool metrics_vllm_compat = false;          // /metrics also emits each tokenserve: family as vllm:
  std::chrono::milliseconds sample_interval{1000};  // engine stats -> metrics period
};

class OpenAIService {
 public:
  OpenAIService(Backend& backend, PromptBuilder prompts, ServiceOptions opts);
  ~OpenAIService();  // stop()

  // Adds every route; call before server.start(). Also remembers the server for /metrics.
  void register_routes(http::Server& server);
  // Renders the transport's own errors (404 route, 413, 431 ...) in OpenAI's shape.
  static http::ErrorRenderer error_renderer();

  // /ready answers 503 and the engine refuses new work (graceful drain).
  void begin_drain();
  // Ends the response pump (after in-flight jobs end or ~2 s of silence; jobs dropped then are
  // still settled) and the metrics sampler. Idempotent.
  void stop();

  struct Counters {
    std::atomic<uint64_t> requests_completions{0}, requests_chat{0}, requests_other{0};
    std::atomic<uint64_t> responses_error{0}, requests_cancelled{0};
    std::atomic<uint64_t> prompt_tokens{0}, completion_tokens{0}, cached_tokens{0};
  };
  const Counters& counters() const { return counters_; }

  // What every API response of one request shares.
  struct Call {
    std::string request_id;                       // x-request-id sent back
    std::chrono::steady_clock::time_point start;  // request received
  };

 private:
  void handle_completions(const http::ExchangePtr& ex);
  void handle_chat(const http::ExchangePtr& ex);
  void handle_models(const http::ExchangePtr& ex);
  void handle_model(const http::ExchangePtr& ex);
  void handle_tokenize(const http::ExchangePtr& ex);
  void handle_detokenize(const http::ExchangePtr& ex);
  void handle_health(const http::ExchangePtr& ex);
  void handle_ready(const http::ExchangePtr& ex);
  void handle_metrics(const http::ExchangePtr& ex);
  void handle_dashboard(const http::ExchangePtr& ex);
  void handle_dashboard_data(const http::ExchangePtr& ex);

  Call begin_call(const http::ExchangePtr& ex) const;
  // With require_auth: checks the key; answers 401 (returns false) when it is not valid.
  bool authorized(const http::ExchangePtr& ex, const Call& call);
  // Admits (governor), submits and starts the job; answers the refusal or error otherwise.
  void run_generation(const http::ExchangePtr& ex, const Call& call, JobSpec spec,
                      std::vector<engine::Request> reqs, const std::string& model, engine::Tier tier);
  // Ledger row, metrics and log line for a request that reached admission.
  void record_finished(const Call& call, const std::string& response_id,
                       const std::shared_ptr<gateway::Admission>& admission, engine::Tier tier,
                       const JobResult& r);
  void refresh_metrics();
  void sampler_loop();

  bool known_model(const std::string& name) const;
  void respond_error(const http::ExchangePtr& ex, const api::ApiError& e, const Call& call,
                     const http::HeaderList& headers = {});
  // Resolves max_tokens against the context; 400 with the counts when it does not fit.
  api::ApiResult<int32_t> fit_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                                      const char* param) const;
  // Submits one engine request per prompt; on failure cancels what was submitted.
  api::ApiResult<std::vector<std::shared_ptr<engine::RequestHandle>>> submit_all(
      std::vector<engine::Request> reqs);
  void start_job(JobSpec spec, const http::ExchangePtr& ex,
                 std::vector<std::shared_ptr<engine::RequestHandle>> handles,
                 std::function<void(const JobResult&)> on_done);
  std::string next_id(const char* prefix);

  Backend& backend_;
  PromptBuilder prompts_;
  ServiceOptions opts_;
  http::Server* http_ = nullptr;
  ResponsePump pump_;
  Counters counters_;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> id_counter_{0};
  uint64_t id_salt_;
  std::mutex sampler_mu_;
  std::condition_variable sampler_cv_;
  bool sampler_stop_ = false;
  std::thread sampler_;
};

}  // namespace ts::server
