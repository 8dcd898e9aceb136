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
// Chat tools and reasoning: the output is split into content, reasoning_content and tool_calls
// by the format of the chat template (or ServiceOptions::tool_call_format); tool_choice
// "required" / a named function appends the format's call opener to the prompt
// (api::forced_call_plan; its JSON Schema is the constraint to hand to constrained decoding).
//
// Governance (ServiceOptions::governor): with require_auth every /v1/* endpoint and
// /tokenize, /detokenize need a valid API key (401 otherwise). A generation request is parsed,
// tokenized, then admitted (401/403/400/429 with OpenAI error bodies and x-ratelimit-* /
// Retry-After headers); the engine request runs in the key's tenant's prefix-cache namespace,
// and when it ends, however it ends (finished, engine error, client disconnect, drain), it is
// settled exactly once: one ledger row, metrics (on_request_finished) and one JSON log line.
// Every response carries x-request-id (the client's valid one echoed, or a generated one).
// Handlers never block an io thread on the engine: events are consumed by a ResponsePump.
// With a governor, every handler that may touch a database or Redis (API-key lookups,
// admission, /v1/usage/me, /admin/*) runs on a WorkPool instead of an io thread, so a slow or
// hung store never stalls /health or running streams (503 + Retry-After if that pool's queue is
// full).
//
// Observability: with require_auth and the governance config's [metrics] auth = "key" (the
// default), /metrics, /dashboard and /dashboard/data need the admin key or the metrics key
// (401 otherwise). [metrics] labels = "hash" | "drop" replaces tenant/app names in metric
// labels and dashboard data by a short hash or "redacted".
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
#include <optional>
#include <string>
#include <vector>

#include "api/error.h"
#include "api/tool_parser.h"
#include "gateway/governor.h"
#include "http/server.h"
#include "obs/server_metrics.h"
#include "server/backend.h"
#include "server/context_overflow.h"
#include "server/prompt_builder.h"
#include "server/prompt_routes.h"
#include "server/response_job.h"
#include "server/work_pool.h"

namespace ts::server {

struct ServiceOptions {
  std::string model_id = "default";          // the name clients put in "model"
  std::vector<std::string> model_aliases;    // other accepted names (general.name, file name)
  int64_t created = 0;                       // unix time reported in /v1/models
  int retry_after_seconds = 1;               // Retry-After on 503
  gateway::Governor* governor = nullptr;     // admission, ledger, usage; null = none (tests)
  gateway::PromptRegistry* prompts = nullptr;  // /v1/prompts and chat "prompt" references; null = off
  bool require_auth = false;                 // API key required (needs governor)
  obs::ServerMetrics* metrics = nullptr;     // null = only the built-in counters on /metrics
  bool log_requests = false;                 // one JSON line per generation request
  int num_blocking_threads = 8;              // WorkPool threads (with a governor)
  bool metrics_vllm_compat = false;          // /metrics also emits each tokenserve: family as vllm:
  std::chrono::milliseconds sample_interval{1000};  // engine stats -> metrics period
  // How tool calls are read from the model's output; nullopt = detected from the chat template
  // (api::detect_tool_call_format). Reasoning (<think>, harmony channels) is always detected.
  std::optional<api::ToolCallFormat> tool_call_format;
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
  // For /metrics and /dashboard*: answers 401 (returns false) unless the caller may read them.
  bool metrics_authorized(const http::ExchangePtr& ex);
  // Tenant/app name as metrics may show it ([metrics] labels).
  std::string metric_label(const std::string& name) const;
  // Admits (governor), submits and starts the job; answers the refusal or error otherwise.
  // max_tokens_default: the client gave no max_tokens (reserve an estimate, settle on usage).
  void run_generation(const http::ExchangePtr& ex, const Call& call, JobSpec spec,
                      std::vector<engine::Request> reqs, const std::string& model, engine::Tier tier,
                      bool max_tokens_default = false, PromptUse prompt = {});
  // Ledger row, metrics and log line for a request that reached admission.
  void record_finished(const Call& call, const std::string& response_id,
                       const std::shared_ptr<gateway::Admission>& admission, engine::Tier tier,
                       const JobResult& r, const PromptUse& prompt = {},
                       const std::string& logged_body = {});  // "" = body logging off
  // (segmented requests are not body-logged yet: context_overflow.cc passes none)
  void refresh_metrics();
  void sampler_loop();

  // context_overflow (context_overflow.cc). The truncate_* helpers cut the prompt to fit and
  // return the tokens dropped (-1: cannot fit even then); the segment_* ones validate, build
  // the windows and call run_segmented, answering errors themselves.
  int64_t truncate_chat(std::vector<api::ChatMessage>* messages, const api::ChatRequest& req,
                        OverflowMode mode, int64_t max_tokens, std::vector<int32_t>* ids,
                        int64_t* dropped_messages);
  void segment_completion(const http::ExchangePtr& ex, const Call& call, JobSpec spec,
                          const api::CompletionRequest& req, const OverflowPolicy& policy,
                          std::vector<int32_t> ids);
  void segment_chat(const http::ExchangePtr& ex, const Call& call, JobSpec spec,
                    const api::ChatRequest& req, const OverflowPolicy& policy, PromptUse prompt);
  // Admits the whole segmented request, submits the windows together, runs the map phase on
  // a thread of its own, then the reduce step as a normal ResponseJob.
  void run_segmented(const http::ExchangePtr& ex, const Call& call, JobSpec spec, SegmentRun run,
                     const std::string& model, engine::Tier tier, PromptUse prompt);
  void join_overflow_threads(bool all);
  // The request's context_overflow, else its key's app/tenant default from the config.
  Result<OverflowPolicy> overflow_policy(const http::ExchangePtr& ex, const std::string& body);

  bool known_model(const std::string& name) const;
  void respond_error(const http::ExchangePtr& ex, const api::ApiError& e, const Call& call,
                     const http::HeaderList& headers = {});
  // Resolves max_tokens against the context; 400 with the counts when it does not fit.
  // Without max_tokens: what the context leaves (at most the tier's max_tokens cap when the
  // governance config sets one). The 400 says how much would fit.
  api::ApiResult<int32_t> fit_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                                      const char* param, engine::Tier tier = engine::Tier::kInteractive) const;
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
  api::ToolCallFormat tool_format_ = api::ToolCallFormat::kHermes;
  api::ReasoningFormat reasoning_format_ = api::ReasoningFormat::kNone;
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
  std::unique_ptr<WorkPool> blocking_;       // with a governor; see the header comment
  std::mutex overflow_mu_;           // guards overflow_threads_
  std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> overflow_threads_;  // (thread, done)
  std::atomic<bool> overflow_stop_{false};
};

}  // namespace ts::server
