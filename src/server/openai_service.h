// The OpenAI-compatible service: registers the endpoints on an http::Server and glues api/
// (parse, validate, format), the prompt builder (tokenize, chat template) and the engine.
//
//   POST /v1/completions, /v1/chat/completions   (stream or not)
//   GET  /v1/models, /v1/models/{id}
//   POST /tokenize, /detokenize
//   GET  /health (alive), /ready (accepting: 503 while draining), /metrics (Prometheus text)
//
// Errors use OpenAI's body with the matching status: parse/validation 400, unknown model 404,
// prompt + max_tokens past the context 400 (with the counts), engine queue full or draining
// 503 + Retry-After. A client disconnect cancels its engine requests within one step.
// Handlers never block an io thread on the engine: events are consumed by a ResponsePump.
// Thread-safe; the backend, prompt builder's tokenizer and the http server must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/error.h"
#include "http/server.h"
#include "server/backend.h"
#include "server/prompt_builder.h"
#include "server/response_job.h"

namespace ts::server {

struct ServiceOptions {
  std::string model_id = "default";          // the name clients put in "model"
  std::vector<std::string> model_aliases;    // other accepted names (general.name, file name)
  int64_t created = 0;                       // unix time reported in /v1/models
  int retry_after_seconds = 1;               // Retry-After on 503
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
  // Ends the response pump (after in-flight jobs end or ~2 s of silence).
  void stop();

  struct Counters {
    std::atomic<uint64_t> requests_completions{0}, requests_chat{0}, requests_other{0};
    std::atomic<uint64_t> responses_error{0}, requests_cancelled{0};
    std::atomic<uint64_t> prompt_tokens{0}, completion_tokens{0}, cached_tokens{0};
  };
  const Counters& counters() const { return counters_; }

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

  bool known_model(const std::string& name) const;
  void respond_error(const http::ExchangePtr& ex, const api::ApiError& e);
  // Resolves max_tokens against the context; 400 with the counts when it does not fit.
  api::ApiResult<int32_t> fit_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                                      const char* param) const;
  // Submits one engine request per prompt; on failure cancels what was submitted.
  api::ApiResult<std::vector<std::shared_ptr<engine::RequestHandle>>> submit_all(
      std::vector<engine::Request> reqs);
  void start_job(JobSpec spec, const http::ExchangePtr& ex,
                 std::vector<std::shared_ptr<engine::RequestHandle>> handles);
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
};

}  // namespace ts::server
