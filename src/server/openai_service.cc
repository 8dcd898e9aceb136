#include "server/openai_service.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "api/engine_mapping.h"
#include "api/request_parser.h"
#include "api/response_format.h"

namespace ts::server {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

http::Response json_response(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace

OpenAIService::OpenAIService(Backend& backend, PromptBuilder prompts, ServiceOptions opts)
    : backend_(backend), prompts_(std::move(prompts)), opts_(std::move(opts)) {
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  if (opts_.created == 0) opts_.created = unix_now();
}

OpenAIService::~OpenAIService() { stop(); }

void OpenAIService::stop() { pump_.stop(); }

void OpenAIService::begin_drain() {
  draining_.store(true);
  backend_.stop_accepting();
}

http::ErrorRenderer OpenAIService::error_renderer() {
  return [](int status, std::string_view message) {
    return json_response(status, api::error_for_http_status(status, message).to_json());
  };
}

void OpenAIService::register_routes(http::Server& server) {
  http_ = &server;
  using http::Method;
  auto bind = [this](void (OpenAIService::*fn)(const http::ExchangePtr&)) {
    return [this, fn](const http::ExchangePtr& ex) { (this->*fn)(ex); };
  };
  server.route(Method::kPost, "/v1/completions", bind(&OpenAIService::handle_completions));
  server.route(Method::kPost, "/v1/chat/completions", bind(&OpenAIService::handle_chat));
  server.route(Method::kGet, "/v1/models", bind(&OpenAIService::handle_models));
  server.route(Method::kGet, "/v1/models/{id*}", bind(&OpenAIService::handle_model));
  server.route(Method::kPost, "/tokenize", bind(&OpenAIService::handle_tokenize));
  server.route(Method::kPost, "/detokenize", bind(&OpenAIService::handle_detokenize));
  server.route(Method::kGet, "/health", bind(&OpenAIService::handle_health));
  server.route(Method::kGet, "/ready", bind(&OpenAIService::handle_ready));
  server.route(Method::kGet, "/metrics", bind(&OpenAIService::handle_metrics));
}

bool OpenAIService::known_model(const std::string& name) const {
  if (name == opts_.model_id) return true;
  for (const auto& a : opts_.model_aliases)
    if (name == a) return true;
  return false;
}

void OpenAIService::respond_error(const http::ExchangePtr& ex, const api::ApiError& e) {
  counters_.responses_error.fetch_add(1);
  http::Response r = json_response(e.http_status, e.to_json());
  if (e.http_status == 503) r.set_header("Retry-After", std::to_string(opts_.retry_after_seconds));
  std::string_view rid = ex->request().header("x-request-id");
  if (!rid.empty()) r.set_header("X-Request-Id", std::string(rid));
  ex->respond(std::move(r));
}

std::string OpenAIService::next_id(const char* prefix) {
  uint64_t n = id_counter_.fetch_add(1) + 1;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s-%016llx%08llx", prefix,
                static_cast<unsigned long long>(id_salt_), static_cast<unsigned long long>(n));
  return buf;
}

api::ApiResult<int32_t> OpenAIService::fit_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                                                   const char* param) const {
  int64_t ctx = backend_.max_model_len();
  int64_t want = max_tokens ? *max_tokens : ctx - prompt_tokens;
  if (prompt_tokens >= ctx || prompt_tokens + want > ctx) {
    api::ApiError e;
    e.param = param;
    e.code = "context_length_exceeded";
    e.message = "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, you requested " +
                std::to_string(prompt_tokens + std::max<int64_t>(want, 1)) + " tokens (" +
                std::to_string(prompt_tokens) + " in the " + (std::string(param) == "messages" ? "messages" : "prompt") +
                ", " + std::to_string(std::max<int64_t>(want, 1)) +
                " in the completion). Please reduce the length of the " + param + " or completion.";
    return e;
  }
  return static_cast<int32_t>(want);
}

api::ApiResult<std::vector<std::shared_ptr<engine::RequestHandle>>> OpenAIService::submit_all(
    std::vector<engine::Request> reqs) {
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  for (auto& r : reqs) {
    auto h = backend_.submit(std::move(r));
    if (!h.ok()) {
      for (auto& done : handles) done->cancel();
      const Status& st = h.status();
      api::ApiError e = api::error_from_status(st);
      if (st.code() == StatusCode::kResourceExhausted) {
        e.http_status = 400;  // the request cannot fit in the KV cache even alone
        e.type = "invalid_request_error";
        e.code = "context_length_exceeded";
      }
      return e;
    }
    handles.push_back(std::move(h).value());
  }
  return handles;
}

void OpenAIService::start_job(JobSpec spec, const http::ExchangePtr& ex,
                              std::vector<std::shared_ptr<engine::RequestHandle>> handles) {
  auto job = std::make_shared<ResponseJob>(
      std::move(spec), ex, std::move(handles), prompts_.tokenizer(), [this](const JobResult& r) {
        if (r.cancelled) counters_.requests_cancelled.fetch_add(1);
        if (r.error) counters_.responses_error.fetch_add(1);
        counters_.prompt_tokens.fetch_add(static_cast<uint64_t>(r.usage.prompt_tokens));
        counters_.completion_tokens.fetch_add(static_cast<uint64_t>(r.usage.completion_tokens));
        counters_.cached_tokens.fetch_add(static_cast<uint64_t>(r.usage.cached_tokens));
      });
  job->begin();
  pump_.add(std::move(job));
}

void OpenAIService::handle_completions(const http::ExchangePtr& ex) {
  counters_.requests_completions.fetch_add(1);
  auto parsed = api::parse_completion_request(ex->request().body);
  if (!parsed.ok()) return respond_error(ex, parsed.error());
  api::CompletionRequest& req = parsed.value();
  if (!known_model(req.model)) return respond_error(ex, api::model_not_found(req.model));

  JobSpec spec;
  spec.chat = false;
  spec.stream = req.stream;
  spec.include_usage = req.include_usage;
  spec.meta = api::ResponseMeta{.id = next_id("cmpl"), .created = unix_now(), .model = req.model};
  spec.n = req.sampling.n;
  spec.logprobs = req.logprobs.has_value();
  std::vector<engine::Request> reqs;
  for (size_t i = 0; i < req.prompts.size(); ++i) {
    std::string param = req.prompts.size() == 1 ? "prompt" : "prompt[" + std::to_string(i) + "]";
    auto ids = prompts_.text_prompt(req.prompts[i], /*add_special=*/true, param);
    if (!ids.ok()) return respond_error(ex, ids.error());
    auto budget = fit_context(static_cast<int64_t>(ids->size()), req.sampling.max_tokens, "prompt");
    if (!budget.ok()) return respond_error(ex, budget.error());
    if (req.echo)
      spec.echo.push_back(req.prompts[i].is_tokens ? prompts_.tokenizer().decode(req.prompts[i].tokens)
                                                   : req.prompts[i].text);
    reqs.push_back(api::to_engine_request(spec.meta.id + "-" + std::to_string(i), std::move(ids).value(),
                                          req.sampling, budget.value(), req.logprobs.has_value(),
                                          req.logprobs.value_or(0)));
  }
  auto handles = submit_all(std::move(reqs));
  if (!handles.ok()) return respond_error(ex, handles.error());
  start_job(std::move(spec), ex, std::move(handles).value());
}

void OpenAIService::handle_chat(const http::ExchangePtr& ex) {
  counters_.requests_chat.fetch_add(1);
  auto parsed = api::parse_chat_request(ex->request().body);
  if (!parsed.ok()) return respond_error(ex, parsed.error());
  api::ChatRequest& req = parsed.value();
  if (!known_model(req.model)) return respond_error(ex, api::model_not_found(req.model));
  auto ids = prompts_.chat_prompt(req.messages, req.tools_json, req.add_generation_prompt);
  if (!ids.ok()) return respond_error(ex, ids.error());
  auto budget = fit_context(static_cast<int64_t>(ids->size()), req.sampling.max_tokens, "messages");
  if (!budget.ok()) return respond_error(ex, budget.error());

  JobSpec spec;
  spec.chat = true;
  spec.stream = req.stream;
  spec.include_usage = req.include_usage;
  spec.meta = api::ResponseMeta{.id = next_id("chatcmpl"), .created = unix_now(), .model = req.model};
  spec.n = req.sampling.n;
  spec.logprobs = req.logprobs;
  std::vector<engine::Request> reqs;
  reqs.push_back(api::to_engine_request(spec.meta.id, std::move(ids).value(), req.sampling, budget.value(),
                                        req.logprobs, req.top_logprobs));
  auto handles = submit_all(std::move(reqs));
  if (!handles.ok()) return respond_error(ex, handles.error());
  start_job(std::move(spec), ex, std::move(handles).value());
}

void OpenAIService::handle_models(const http::ExchangePtr& ex) {
  counters_.requests_other.fetch_add(1);
  api::ModelCard card{.id = opts_.model_id, .created = opts_.created, .owned_by = "tokenserve",
                      .max_model_len = backend_.max_model_len()};
  ex->respond(json_response(200, api::model_list_body({card})));
}

void OpenAIService::handle_model(const http::ExchangePtr& ex) {
  counters_.requests_other.fetch_add(1);
  std::string id(ex->request().path_param("id"));
  if (!known_model(id)) return respond_error(ex, api::model_not_found(id));
  api::ModelCard card{.id = id, .created = opts_.created, .owned_by = "tokenserve",
                      .max_model_len = backend_.max_model_len()};
  ex->respond(json_response(200, api::model_body(card)));
}

void OpenAIService::handle_tokenize(const http::ExchangePtr& ex) {
  counters_.requests_other.fetch_add(1);
  auto parsed = api::parse_tokenize_request(ex->request().body);
  if (!parsed.ok()) return respond_error(ex, parsed.error());
  const api::TokenizeRequest& req = parsed.value();
  if (!req.model.empty() && !known_model(req.model)) return respond_error(ex, api::model_not_found(req.model));
  std::vector<int32_t> tokens;
  if (req.text) {
    tokens = prompts_.tokenizer().encode(*req.text, req.add_special, /*parse_special=*/true);
  } else {
    auto ids = prompts_.chat_prompt(req.messages, "", req.add_generation_prompt);
    if (!ids.ok()) return respond_error(ex, ids.error());
    tokens = std::move(ids).value();
  }
  ex->respond(json_response(200, api::tokenize_body(tokens, backend_.max_model_len())));
}

void OpenAIService::handle_detokenize(const http::ExchangePtr& ex) {
  counters_.requests_other.fetch_add(1);
  auto parsed = api::parse_detokenize_request(ex->request().body);
  if (!parsed.ok()) return respond_error(ex, parsed.error());
  const api::DetokenizeRequest& req = parsed.value();
  if (!req.model.empty() && !known_model(req.model)) return respond_error(ex, api::model_not_found(req.model));
  int32_t n_vocab = prompts_.tokenizer().n_vocab();
  for (size_t i = 0; i < req.tokens.size(); ++i) {
    if (req.tokens[i] >= n_vocab)
      return respond_error(ex, api::invalid_value("tokens[" + std::to_string(i) + "]",
                                                  "Invalid 'tokens[" + std::to_string(i) + "]': token id " +
                                                      std::to_string(req.tokens[i]) +
                                                      " is outside the vocabulary (size " +
                                                      std::to_string(n_vocab) + ")."));
  }
  ex->respond(json_response(200, api::detokenize_body(prompts_.tokenizer().decode(req.tokens))));
}

void OpenAIService::handle_health(const http::ExchangePtr& ex) {
  ex->respond(json_response(200, R"({"status":"ok"})"));
}

void OpenAIService::handle_ready(const http::ExchangePtr& ex) {
  if (draining_.load()) {
    http::Response r = json_response(503, R"({"status":"draining"})");
    r.set_header("Retry-After", std::to_string(opts_.retry_after_seconds));
    return ex->respond(std::move(r));
  }
  ex->respond(json_response(200, R"({"status":"ready"})"));
}

void OpenAIService::handle_metrics(const http::ExchangePtr& ex) {
  std::string m;
  auto counter = [&m](const char* name, const char* help, const std::string& labels, uint64_t v) {
    m += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
    m += std::string(name) + labels + " " + std::to_string(v) + "\n";
  };
  auto gauge = [&m](const char* name, const char* help, double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    m += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n";
    m += std::string(name) + " " + buf + "\n";
  };
  m += "# HELP tokenserve_requests_total API requests received by endpoint.\n"
       "# TYPE tokenserve_requests_total counter\n";
  m += "tokenserve_requests_total{endpoint=\"completions\"} " + std::to_string(counters_.requests_completions.load()) + "\n";
  m += "tokenserve_requests_total{endpoint=\"chat\"} " + std::to_string(counters_.requests_chat.load()) + "\n";
  m += "tokenserve_requests_total{endpoint=\"other\"} " + std::to_string(counters_.requests_other.load()) + "\n";
  counter("tokenserve_error_responses_total", "Requests answered with an error.", "", counters_.responses_error.load());
  counter("tokenserve_cancelled_requests_total", "Requests cancelled by a client disconnect.", "",
          counters_.requests_cancelled.load());
  counter("tokenserve_prompt_tokens_total", "Prompt tokens of finished requests.", "", counters_.prompt_tokens.load());
  counter("tokenserve_completion_tokens_total", "Generated tokens of finished requests.", "",
          counters_.completion_tokens.load());
  counter("tokenserve_cached_prompt_tokens_total", "Prompt tokens served from the prefix cache.", "",
          counters_.cached_tokens.load());
  engine::EngineStats s = backend_.stats();
  gauge("tokenserve_running_sequences", "Sequences running in the engine.", s.num_running);
  gauge("tokenserve_waiting_requests", "Requests waiting in the engine queues.", s.num_waiting[0] + s.num_waiting[1]);
  gauge("tokenserve_kv_blocks_used", "KV blocks referenced by sequences.", s.kv_blocks_used);
  gauge("tokenserve_kv_blocks_total", "KV blocks in the pool.", s.kv_blocks_total);
  gauge("tokenserve_active_responses", "Responses being produced.", static_cast<double>(pump_.num_jobs()));
  if (http_) {
    http::ServerStats hs = http_->stats();
    gauge("tokenserve_http_connections_open", "Open HTTP connections.", static_cast<double>(hs.num_connections_open));
    counter("tokenserve_http_requests_total", "HTTP requests received.", "", hs.num_requests);
  }
  http::Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = std::move(m);
  ex->respond(std::move(r));
}

}  // namespace ts::server
