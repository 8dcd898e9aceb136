#include "server/openai_service.h"

#include <algorithm>
#include "obs/replica_metrics.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "api/engine_mapping.h"
#include "api/request_parser.h"
#include "api/response_format.h"
#include "core/log.h"
#include "obs/dashboard_assets.h"
#include "obs/request_log.h"
#include "gateway/circuit_breaker.h"
#include "gateway/sha256.h"
#include "server/governance_routes.h"
#include "server/structured_output.h"

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

namespace {
http::Response with_request_id(http::Response r, const OpenAIService::Call& call) {
  r.set_header("X-Request-Id", call.request_id);
  return r;
}
}  // namespace

OpenAIService::OpenAIService(Backend& backend, PromptBuilder prompts, ServiceOptions opts)
    : backend_(backend), prompts_(std::move(prompts)), opts_(std::move(opts)) {
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  if (opts_.created == 0) opts_.created = unix_now();
  if (opts_.governor) blocking_ = std::make_unique<WorkPool>(opts_.num_blocking_threads, 4096);
  tool_format_ = opts_.tool_call_format.value_or(api::detect_tool_call_format(prompts_.template_source()));
  reasoning_format_ = api::detect_reasoning_format(prompts_.template_source());
  if (tool_format_ == api::ToolCallFormat::kHarmony) reasoning_format_ = api::ReasoningFormat::kHarmony;
  log::info(std::string("chat output: tool calls in the ") + api::tool_call_format_name(tool_format_) +
            " format" + (opts_.tool_call_format ? " (--tool-call-format)" : " (from the chat template)") +
            (reasoning_format_ == api::ReasoningFormat::kThink     ? ", reasoning in <think>"
             : reasoning_format_ == api::ReasoningFormat::kHarmony ? ", reasoning in harmony's analysis channel"
                                                                   : ""));
  if (opts_.metrics) {
    refresh_metrics();
    sampler_ = std::thread([this] { sampler_loop(); });
  }
}

OpenAIService::~OpenAIService() { stop(); }

void OpenAIService::stop() {
  if (blocking_) blocking_->shutdown();  // runs what is queued, joins; later posts answer 503
  overflow_stop_.store(true);     // segmented requests still in their map phase end now
  join_overflow_threads(true);
  pump_.stop();
  {
    std::lock_guard<std::mutex> lock(sampler_mu_);
    sampler_stop_ = true;
  }
  sampler_cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void OpenAIService::refresh_metrics() {
  if (!opts_.metrics) return;
  opts_.metrics->sample_engine(backend_.stats());
  if (opts_.governor) opts_.metrics->set_ledger_spool_depth(opts_.governor->stats().ledger.spool_depth);
}

void OpenAIService::sampler_loop() {
  std::unique_lock<std::mutex> lock(sampler_mu_);
  while (!sampler_cv_.wait_for(lock, opts_.sample_interval, [this] { return sampler_stop_; })) {
    lock.unlock();
    refresh_metrics();
    lock.lock();
  }
}

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
  // Handlers that may wait on a database or Redis run on the blocking pool.
  auto offload = [this](http::Handler h) -> http::Handler {
    if (!blocking_) return h;
    return [this, h = std::move(h)](const http::ExchangePtr& ex) {
      if (blocking_->post([h, ex] { h(ex); })) return;
      api::ApiError e = api::error_for_http_status(503, "The server is overloaded; please retry shortly.");
      http::Response r = json_response(503, e.to_json());
      r.set_header("Retry-After", std::to_string(opts_.retry_after_seconds));
      r.set_header("X-Request-Id", obs::resolve_request_id(ex->request().header("x-request-id")));
      ex->respond(std::move(r));
    };
  };
  auto blocking = [&](void (OpenAIService::*fn)(const http::ExchangePtr&)) { return offload(bind(fn)); };
  server.route(Method::kPost, "/v1/completions", blocking(&OpenAIService::handle_completions));
  server.route(Method::kPost, "/v1/chat/completions", blocking(&OpenAIService::handle_chat));
  server.route(Method::kGet, "/v1/models", blocking(&OpenAIService::handle_models));
  server.route(Method::kGet, "/v1/models/{id*}", blocking(&OpenAIService::handle_model));
  server.route(Method::kPost, "/tokenize", blocking(&OpenAIService::handle_tokenize));
  server.route(Method::kPost, "/detokenize", blocking(&OpenAIService::handle_detokenize));
  server.route(Method::kGet, "/health", bind(&OpenAIService::handle_health));
  server.route(Method::kGet, "/ready", bind(&OpenAIService::handle_ready));
  server.route(Method::kGet, "/metrics", bind(&OpenAIService::handle_metrics));
  if (opts_.governor) register_governance_routes(server, *opts_.governor, offload);
  if (opts_.prompts)
    register_prompt_routes(server, {.registry = opts_.prompts, .governor = opts_.governor,
                                    .require_auth = opts_.require_auth});
  if (opts_.metrics) {
    server.route(Method::kGet, "/dashboard", bind(&OpenAIService::handle_dashboard));
    server.route(Method::kGet, "/dashboard/data", bind(&OpenAIService::handle_dashboard_data));
  }
}

OpenAIService::Call OpenAIService::begin_call(const http::ExchangePtr& ex) const {
  return Call{.request_id = obs::resolve_request_id(ex->request().header("x-request-id")),
              .start = std::chrono::steady_clock::now()};
}

bool OpenAIService::authorized(const http::ExchangePtr& ex, const Call& call) {
  if (!opts_.require_auth || !opts_.governor) return true;
  auto key = opts_.governor->keys()->authenticate(ex->request().header("authorization"));
  if (key.ok()) return true;
  bool down = key.status().code() == StatusCode::kUnavailable;
  api::ApiError e = api::error_from_status(key.status(), "", down ? "service_unavailable" : "invalid_api_key");
  respond_error(ex, e, call);
  return false;
}

bool OpenAIService::metrics_authorized(const http::ExchangePtr& ex) {
  if (!opts_.require_auth || !opts_.governor || !opts_.governor->config()->metrics_auth) return true;
  if (opts_.governor->may_read_metrics(ex->request().header("authorization"))) return true;
  api::ApiError e;
  e.http_status = 401;
  e.type = "invalid_request_error";
  e.code = "invalid_api_key";
  e.message = "Metrics and the dashboard need the admin key or the metrics key "
              "(Authorization: Bearer ...).";
  http::Response r = json_response(401, e.to_json());
  r.set_header("WWW-Authenticate", "Bearer");
  r.set_header("X-Request-Id", obs::resolve_request_id(ex->request().header("x-request-id")));
  ex->respond(std::move(r));
  return false;
}

std::string OpenAIService::metric_label(const std::string& name) const {
  if (!opts_.governor || name.empty()) return name;
  switch (opts_.governor->config()->metrics_labels) {
    case gateway::LabelMode::kPlain: return name;
    case gateway::LabelMode::kHash: return "h" + gateway::sha256_hex(name).substr(0, 12);
    case gateway::LabelMode::kDrop: return "redacted";
  }
  return name;
}

bool OpenAIService::known_model(const std::string& name) const {
  if (name == opts_.model_id) return true;
  for (const auto& a : opts_.model_aliases)
    if (name == a) return true;
  return false;
}

void OpenAIService::respond_error(const http::ExchangePtr& ex, const api::ApiError& e, const Call& call,
                                  const http::HeaderList& headers) {
  counters_.responses_error.fetch_add(1);
  // 429s of limits and quotas are counted by on_rate_limited / on_quota_rejected.
  if (opts_.metrics && e.http_status != 429) opts_.metrics->on_error(e.http_status);
  http::Response r = json_response(e.http_status, e.to_json());
  if (e.http_status == 503) r.set_header("Retry-After", std::to_string(opts_.retry_after_seconds));
  for (const auto& h : headers) r.set_header(h.first, h.second);
  r.set_header("X-Request-Id", call.request_id);
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
                                                   const char* param, engine::Tier tier) const {
  int64_t ctx = backend_.max_model_len();
  int64_t want = max_tokens ? *max_tokens : ctx - prompt_tokens;
  if (!max_tokens && opts_.governor != nullptr) {
    // The default output length respects the tier's cap instead of being refused by it.
    const int64_t cap = opts_.governor->config()->tiers[static_cast<size_t>(tier)].max_tokens;
    if (cap > 0 && want > cap) want = cap;
  }
  if (prompt_tokens >= ctx || prompt_tokens + want > ctx) {
    api::ApiError e;
    e.param = param;
    e.code = "context_length_exceeded";
    e.message = "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, you requested " +
                std::to_string(prompt_tokens + std::max<int64_t>(want, 1)) + " tokens (" +
                std::to_string(prompt_tokens) + " in the " + (std::string(param) == "messages" ? "messages" : "prompt") +
                ", " + std::to_string(std::max<int64_t>(want, 1)) +
                " in the completion). Please reduce the length of the " + param + " or completion. " +
                (prompt_tokens < ctx ? "With this " + std::string(param) + ", max_tokens can be at most " +
                                           std::to_string(ctx - prompt_tokens) + "."
                                     : "At most " + std::to_string(ctx - 1) + " tokens fit in the " + param +
                                           ", leaving one for the completion.");
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
                              std::vector<std::shared_ptr<engine::RequestHandle>> handles,
                              std::function<void(const JobResult&)> on_done) {
  auto job = std::make_shared<ResponseJob>(
      std::move(spec), ex, std::move(handles), prompts_.tokenizer(),
      [this, on_done = std::move(on_done)](const JobResult& r) {
        if (r.cancelled) counters_.requests_cancelled.fetch_add(1);
        if (r.error) counters_.responses_error.fetch_add(1);
        counters_.prompt_tokens.fetch_add(static_cast<uint64_t>(r.usage.prompt_tokens));
        counters_.completion_tokens.fetch_add(static_cast<uint64_t>(r.usage.completion_tokens));
        counters_.cached_tokens.fetch_add(static_cast<uint64_t>(r.usage.cached_tokens));
        if (on_done) on_done(r);
      });
  job->begin();
  pump_.add(std::move(job));
}

void OpenAIService::run_generation(const http::ExchangePtr& ex, const Call& call, JobSpec spec,
                                   std::vector<engine::Request> reqs, const std::string& model,
                                   engine::Tier tier, bool max_tokens_default, PromptUse prompt) {
  int64_t prompt_tokens = 0, max_tokens = 0, estimate = 0;
  for (const auto& r : reqs) {
    const int64_t n = std::max<int32_t>(1, r.sampling.n);
    prompt_tokens += static_cast<int64_t>(r.prompt_tokens.size());
    max_tokens += static_cast<int64_t>(r.sampling.max_tokens) * n;
    estimate += std::min<int64_t>(r.sampling.max_tokens, gateway::kDefaultCompletionEstimate) * n;
  }
  http::HeaderList headers = {{"X-Request-Id", call.request_id}};
  std::shared_ptr<gateway::Admission> admission;
  if (gateway::Governor* gov = opts_.governor) {
    gateway::AdmitResult ar = gov->admit({.authorization = ex->request().header("authorization"),
                                          .model = model,
                                          .tier = tier,
                                          .prompt_tokens = prompt_tokens,
                                          .max_tokens = max_tokens,
                                          .completion_estimate = max_tokens_default ? estimate : 0});
    for (const auto& h : ar.headers) headers.push_back(h);
    if (!ar.ok()) {
      api::ApiError e = api::error_from_status(ar.status, "", ar.error_code);
      if (ar.error_code == "insufficient_quota") {
        e.type = "insufficient_quota";
        if (opts_.metrics) opts_.metrics->on_quota_rejected();
      } else if (e.http_status == 429) {
        if (opts_.metrics) opts_.metrics->on_rate_limited();
      }
      if (ar.error_code == "max_tokens_too_large") e.param = "max_tokens";
      return respond_error(ex, e, call, headers);
    }
    admission = std::make_shared<gateway::Admission>(std::move(*ar.admission));
    for (auto& r : reqs) r.cache_namespace = admission->key.tenant;
  }
  spec.headers = headers;
  std::string response_id = spec.meta.id;
  // Body logging (opt-in per tenant/app): the body goes with the ledger row, the output too.
  std::string logged_body;
  if (admission && admission->log_bodies) {
    spec.capture_output = true;
    logged_body = spec.logged_body.empty() ? ex->request().body : std::move(spec.logged_body);
  }
  auto handles = submit_all(std::move(reqs));
  if (!handles.ok()) {
    const api::ApiError& e = handles.error();
    if (opts_.governor && admission) {
      auto elapsed = std::chrono::steady_clock::now() - call.start;
      opts_.governor->settle(
          *admission,
          gateway::UsageRecord{.request_id = response_id,
                               .duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count(),
                               .finish_reason = "error",
                               .http_status = e.http_status,
                               .prompt_id = prompt.id,
                               .prompt_version = prompt.version,
                               .request_body = std::move(logged_body)});
    }
    return respond_error(ex, e, call, headers);
  }
  start_job(std::move(spec), ex, std::move(handles).value(),
            [this, call, response_id, admission, tier, prompt,
             logged_body = std::move(logged_body)](const JobResult& r) {
              record_finished(call, response_id, admission, tier, r, prompt, logged_body);
            });
}

void OpenAIService::record_finished(const Call& call, const std::string& response_id,
                                    const std::shared_ptr<gateway::Admission>& admission, engine::Tier tier,
                                    const JobResult& r, const PromptUse& prompt,
                                    const std::string& logged_body) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  auto now = std::chrono::steady_clock::now();
  engine::FinishReason finish = r.finish == engine::FinishReason::kNone ? engine::FinishReason::kStop : r.finish;
  if (opts_.governor && admission) {
    int64_t ttft_ms = r.timings.first_token == engine::TimePoint{}
                          ? -1
                          : std::max<int64_t>(0, duration_cast<milliseconds>(r.timings.first_token - call.start).count());
    opts_.governor->settle(*admission,
                           gateway::UsageRecord{.request_id = response_id,
                                                .prompt_tokens = r.usage.prompt_tokens,
                                                .cached_tokens = r.usage.cached_tokens,
                                                .completion_tokens = r.usage.completion_tokens,
                                                .reasoning_tokens = r.usage.reasoning_tokens.value_or(0),
                                                .ttft_ms = ttft_ms,
                                                .duration_ms = duration_cast<milliseconds>(now - call.start).count(),
                                                .finish_reason = engine::finish_reason_name(finish),
                                                .http_status = r.http_status,
                                                .prompt_id = prompt.id,
                                                .prompt_version = prompt.version,
                                                .request_body = logged_body,
                                                .output_text = r.output_text});
  }
  if (!opts_.metrics && !opts_.log_requests) return;
  obs::RequestObservation o;
  o.model = opts_.model_id;
  o.tier = tier;
  if (admission) {
    o.tenant = metric_label(admission->key.tenant);
    o.app = metric_label(admission->key.app);
  }
  o.prompt_tokens = r.usage.prompt_tokens;
  o.cached_tokens = r.usage.cached_tokens;
  o.completion_tokens = r.usage.completion_tokens;
  o.arrival = r.timings.arrival;
  o.scheduled = r.timings.scheduled;
  o.first_token = r.timings.first_token;
  o.finished = r.timings.finished == engine::TimePoint{} ? now : r.timings.finished;
  o.finish_reason = finish;
  o.http_status = r.http_status;
  o.num_preemptions = r.timings.num_preemptions;
  o.inter_token_gaps = r.inter_token_gaps;
  if (opts_.metrics) opts_.metrics->on_request_finished(o);
  if (opts_.log_requests) {
    if (admission) {  // the log line keeps the real names (it is not exposition)
      o.tenant = admission->key.tenant;
      o.app = admission->key.app;
    }
    nlohmann::json line = obs::request_log_json(call.request_id, o);
    line["response_id"] = response_id;
    if (admission) line["key_id"] = admission->key.id;
    log::write_json_line(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
}

void OpenAIService::handle_completions(const http::ExchangePtr& ex) {
  counters_.requests_completions.fetch_add(1);
  Call call = begin_call(ex);
  if (!authorized(ex, call)) return;
  auto parsed = api::parse_completion_request(ex->request().body);
  if (!parsed.ok()) return respond_error(ex, parsed.error(), call);
  api::CompletionRequest& req = parsed.value();
  if (!known_model(req.model)) return respond_error(ex, api::model_not_found(req.model), call);

  JobSpec spec;
  spec.chat = false;
  spec.stream = req.stream;
  spec.include_usage = req.include_usage;
  spec.meta = api::ResponseMeta{.id = next_id("cmpl"), .created = unix_now(), .model = req.model};
  spec.n = req.sampling.n;
  spec.logprobs = req.logprobs.has_value();
  auto constraint = constraint_for(req.response_format, prompts_.tokenizer());
  if (!constraint.ok()) return respond_error(ex, constraint.error(), call);
  // context_overflow (context_overflow.h): what a prompt longer than the context does.
  auto overflow = overflow_policy(ex, ex->request().body);
  if (!overflow.ok()) return respond_error(ex, api::error_from_status(overflow.status(), "context_overflow"), call);
  int64_t dropped = 0;
  std::vector<engine::Request> reqs;
  for (size_t i = 0; i < req.prompts.size(); ++i) {
    std::string param = req.prompts.size() == 1 ? "prompt" : "prompt[" + std::to_string(i) + "]";
    auto ids = prompts_.text_prompt(req.prompts[i], /*add_special=*/true, param);
    if (!ids.ok()) return respond_error(ex, ids.error(), call);
    auto budget = fit_context(static_cast<int64_t>(ids->size()), req.sampling.max_tokens, "prompt");
    if (!budget.ok() && overflow->mode == OverflowMode::kSegment)
      return segment_completion(ex, call, std::move(spec), req, *overflow, std::move(ids).value());
    if (!budget.ok() && overflow->mode != OverflowMode::kError) {
      const int64_t keep = backend_.max_model_len() - req.sampling.max_tokens.value_or(16);
      dropped += truncate_tokens(&ids.value(), keep, overflow->mode, special_prefix_len(prompts_));
      budget = fit_context(static_cast<int64_t>(ids->size()), req.sampling.max_tokens, "prompt");
    }
    if (!budget.ok()) return respond_error(ex, budget.error(), call);
    if (req.echo)
      spec.echo.push_back(req.prompts[i].is_tokens ? prompts_.tokenizer().decode(req.prompts[i].tokens)
                                                   : req.prompts[i].text);
    reqs.push_back(api::to_engine_request(spec.meta.id + "-" + std::to_string(i), std::move(ids).value(),
                                          req.sampling, budget.value(), req.logprobs.has_value(),
                                          req.logprobs.value_or(0)));
    reqs.back().constraint = constraint.value();
  }
  if (dropped > 0)
    spec.body_extension = nlohmann::json{{"context_overflow", {{"mode", overflow_mode_name(overflow->mode)},
                                                               {"dropped_tokens", dropped}}}}.dump();
  engine::Tier tier = req.sampling.tier;
  run_generation(ex, call, std::move(spec), std::move(reqs), req.model, tier);
}

void OpenAIService::handle_chat(const http::ExchangePtr& ex) {
  counters_.requests_chat.fetch_add(1);
  Call call = begin_call(ex);
  if (!authorized(ex, call)) return;
  // A registered prompt ("prompt": {"id", ...}) is rendered into "messages" first.
  std::string expanded;
  PromptUse prompt_use;
  if (opts_.prompts && ex->request().body.find("\"prompt\"") != std::string::npos) {
    std::optional<std::string> tenant;
    if (opts_.require_auth && opts_.governor) {
      auto key = opts_.governor->keys()->authenticate(ex->request().header("authorization"));
      if (!key.ok()) return respond_error(ex, api::error_from_status(key.status()), call);
      tenant = key->tenant;  // a key reads its tenant's and shared prompts only
    }
    expanded = ex->request().body;
    std::string param;
    auto used = expand_prompt_reference(&expanded, *opts_.prompts, tenant, &param);
    if (!used.ok()) return respond_error(ex, api::error_from_status(used.status(), param), call);
    if (*used) prompt_use = **used;
    else expanded.clear();
  }
  auto parsed = api::parse_chat_request(prompt_use.id.empty() ? ex->request().body : expanded);
  if (!parsed.ok()) return respond_error(ex, parsed.error(), call);
  api::ChatRequest& req = parsed.value();
  if (!known_model(req.model)) return respond_error(ex, api::model_not_found(req.model), call);
  auto overflow = overflow_policy(ex, prompt_use.id.empty() ? ex->request().body : expanded);
  if (!overflow.ok()) return respond_error(ex, api::error_from_status(overflow.status(), "context_overflow"), call);
  ChatRenderOptions ro;
  ro.tools_json = req.tools_json;  // tool_choice none still shows the tools, as OpenAI does
  ro.add_generation_prompt = req.add_generation_prompt;
  ro.template_kwargs_json = req.chat_template_kwargs_json;
  ro.reasoning_effort = req.reasoning_effort;
  std::optional<api::ForcedCallPlan> plan =
      api::forced_call_plan(tool_format_, req.tools, req.tool_choice, req.parallel_tool_calls);
  if (plan) ro.assistant_prefill = plan->prefill;
  std::string rendered;
  auto ids = prompts_.chat_prompt(req.messages, ro, &rendered);
  if (!ids.ok()) return respond_error(ex, ids.error(), call);
  auto budget = fit_context(static_cast<int64_t>(ids->size()), req.sampling.max_tokens, "messages", req.sampling.tier);

  JobSpec spec;
  spec.chat = true;
  spec.stream = req.stream;
  spec.include_usage = req.include_usage;
  spec.meta = api::ResponseMeta{.id = next_id("chatcmpl"), .created = unix_now(), .model = req.model};
  spec.n = req.sampling.n;
  spec.logprobs = req.logprobs;
  spec.output_parser.tools =
      req.tool_choice.mode == api::ToolChoiceMode::kNone ? api::ToolCallFormat::kNone : tool_format_;
  spec.output_parser.reasoning = reasoning_format_;
  spec.output_parser.starts_in_reasoning =
      reasoning_format_ == api::ReasoningFormat::kThink && api::prompt_opens_reasoning(rendered);
  if (plan) spec.output_prefill = plan->prefill;
  if (!prompt_use.id.empty()) spec.logged_body = expanded;  // body logging: the rendered messages
  // context_overflow (context_overflow.h): what messages longer than the context do.
  if (!budget.ok() && overflow->mode == OverflowMode::kSegment)
    return segment_chat(ex, call, std::move(spec), req, *overflow, prompt_use);
  if (!budget.ok() && overflow->mode != OverflowMode::kError) {
    int64_t dropped_messages = 0;
    const int64_t room = req.sampling.max_tokens.value_or(64);
    const int64_t dropped = truncate_chat(&req.messages, req, overflow->mode, room, &ids.value(), &dropped_messages);
    if (dropped >= 0) {
      budget = fit_context(static_cast<int64_t>(ids->size()), room, "messages", req.sampling.tier);
      spec.body_extension = nlohmann::json{{"context_overflow", {{"mode", overflow_mode_name(overflow->mode)},
                                                                 {"dropped_tokens", dropped},
                                                                 {"dropped_messages", dropped_messages}}}}.dump();
    }
  }
  if (!budget.ok()) return respond_error(ex, budget.error(), call);
  std::vector<engine::Request> reqs;
  reqs.push_back(api::to_engine_request(spec.meta.id, std::move(ids).value(), req.sampling, budget.value(),
                                        req.logprobs, req.top_logprobs));
  // A forced call: the text after the prefill must be the plan's JSON (the call, or its
  // arguments). Otherwise response_format; for a model that reasons first (<think> not closed
  // by the prompt) it applies to the text after "</think>".
  std::string start_after;
  if (reasoning_format_ == api::ReasoningFormat::kThink) {
    std::string_view p = rendered;
    while (!p.empty() && (p.back() == '\n' || p.back() == ' ')) p.remove_suffix(1);
    if (!p.ends_with("</think>")) start_after = "</think>";
  }
  api::ResponseFormat forced;
  if (plan && !plan->schema.empty()) {
    forced.type = api::ResponseFormat::Type::kJsonSchema;
    forced.source = plan->schema;
    start_after.clear();
  }
  auto constraint = constraint_for(plan && !plan->schema.empty() ? forced : req.response_format, prompts_.tokenizer(),
                                   start_after);
  if (!constraint.ok()) return respond_error(ex, constraint.error(), call);
  reqs.back().constraint = constraint.value();

  const bool max_tokens_default = !req.sampling.max_tokens.has_value();
  run_generation(ex, call, std::move(spec), std::move(reqs), req.model, req.sampling.tier, max_tokens_default,
                 prompt_use);
}

void OpenAIService::handle_models(const http::ExchangePtr& ex) {
  counters_.requests_other.fetch_add(1);
  Call call = begin_call(ex);
  if (!authorized(ex, call)) return;
  api::ModelCard card{.id = opts_.model_id, .created = opts_.created, .owned_by = "tokenserve",
                      .max_model_len = backend_.max_model_len()};
  ex->respond(with_request_id(json_response(200, api::model_list_body({card})), call));
}

void OpenAIService::handle_model(const http::ExchangePtr& ex) {
  counters_.requests_other.fetch_add(1);
  Call call = begin_call(ex);
  if (!authorized(ex, call)) return;
  std::string id(ex->request().path_param("id"));
  if (!known_model(id)) return respond_error(ex, api::model_not_found(id), call);
  api::ModelCard card{.id = id, .created = opts_.created, .owned_by = "tokenserve",
                      .max_model_len = backend_.max_model_len()};
  ex->respond(with_request_id(json_response(200, api::model_body(card)), call));
}

void OpenAIService::handle_tokenize(const http::ExchangePtr& ex) {
  counters_.requests_other.fetch_add(1);
  Call call = begin_call(ex);
  if (!authorized(ex, call)) return;
  auto parsed = api::parse_tokenize_request(ex->request().body);
  if (!parsed.ok()) return respond_error(ex, parsed.error(), call);
  const api::TokenizeRequest& req = parsed.value();
  if (!req.model.empty() && !known_model(req.model)) return respond_error(ex, api::model_not_found(req.model), call);
  std::vector<int32_t> tokens;
  if (req.text) {
    tokens = prompts_.tokenizer().encode(*req.text, req.add_special, /*parse_special=*/true);
  } else {
    auto ids = prompts_.chat_prompt(req.messages, "", req.add_generation_prompt);
    if (!ids.ok()) return respond_error(ex, ids.error(), call);
    tokens = std::move(ids).value();
  }
  ex->respond(with_request_id(json_response(200, api::tokenize_body(tokens, backend_.max_model_len())), call));
}

void OpenAIService::handle_detokenize(const http::ExchangePtr& ex) {
  counters_.requests_other.fetch_add(1);
  Call call = begin_call(ex);
  if (!authorized(ex, call)) return;
  auto parsed = api::parse_detokenize_request(ex->request().body);
  if (!parsed.ok()) return respond_error(ex, parsed.error(), call);
  const api::DetokenizeRequest& req = parsed.value();
  if (!req.model.empty() && !known_model(req.model)) return respond_error(ex, api::model_not_found(req.model), call);
  int32_t n_vocab = prompts_.tokenizer().n_vocab();
  for (size_t i = 0; i < req.tokens.size(); ++i) {
    if (req.tokens[i] >= n_vocab)
      return respond_error(ex, api::invalid_value("tokens[" + std::to_string(i) + "]",
                                                  "Invalid 'tokens[" + std::to_string(i) + "]': token id " +
                                                      std::to_string(req.tokens[i]) +
                                                      " is outside the vocabulary (size " +
                                                      std::to_string(n_vocab) + ")."),
                           call);
  }
  ex->respond(with_request_id(json_response(200, api::detokenize_body(prompts_.tokenizer().decode(req.tokens))), call));
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
  if (!metrics_authorized(ex)) return;
  // The render's own time goes out as a Server-Timing header (W3C), so a scraper can split its
  // latency into the server's render and everything else (its own and the io thread's wait for a
  // CPU, the loopback transfer): tests/scaleout/scrape_load.mjs records both (SCALEOUT.md §8.1).
  const auto render_start = std::chrono::steady_clock::now();
  std::string m;
  if (opts_.metrics) {
    refresh_metrics();
    m = opts_.metrics->prometheus_text();
    engine::EngineStats es = backend_.stats();
    m += obs::cache_config_info_text(es.block_size, es.kv_blocks_total);
  }
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
  if (!opts_.metrics) {  // the built-in counters (ServerMetrics covers these otherwise)
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
  }
  gauge("tokenserve_active_responses", "Responses being produced.", static_cast<double>(pump_.num_jobs()));
  if (http_) {
    m += http::server_metrics_text(http_->stats());
  }
  if (opts_.governor) {
    gateway::GovernorStats gs = opts_.governor->stats();
    counter("tokenserve_ledger_written_total", "Usage rows committed to the ledger.", "",
            static_cast<uint64_t>(gs.ledger.num_written));
    counter("tokenserve_ledger_write_failures_total", "Failed ledger write attempts (retried).", "",
            static_cast<uint64_t>(gs.ledger.num_write_failures));
    counter("tokenserve_ledger_dropped_total", "Usage rows lost (spool full or unwritten at close).", "",
            static_cast<uint64_t>(gs.ledger.num_dropped));
    counter("tokenserve_limit_store_errors_total", "Limit store calls that failed (unreachable or circuit open).", "",
            static_cast<uint64_t>(gs.num_limit_errors));
    counter("tokenserve_ledger_journal_failures_total", "Ledger journal writes or syncs that failed.", "",
            static_cast<uint64_t>(gs.ledger.num_journal_failures));
    counter("tokenserve_ledger_backpressure_refusals_total",
            "Requests refused with 503 because the ledger spool was full.", "",
            static_cast<uint64_t>(gs.num_refused_backpressure));
    counter("tokenserve_limit_fail_open_admissions_total",
            "Requests admitted without the limit store (charges journaled).", "",
            static_cast<uint64_t>(gs.num_admitted_fail_open));
    counter("tokenserve_limit_fail_closed_refusals_total",
            "Requests refused with 503: limit store down and the tenant fails closed.", "",
            static_cast<uint64_t>(gs.num_refused_outage));
    counter("tokenserve_limit_journal_replayed_total", "Journaled quota charges applied after an outage.", "",
            static_cast<uint64_t>(gs.journal_replayed));
    gauge("tokenserve_limit_journal_pending_tokens", "Quota tokens journaled, waiting for the limit store.",
          static_cast<double>(gs.journal_pending_tokens));
    m += "# HELP tokenserve_limit_store_circuit Limit store circuit breaker state (1 = in force).\n"
         "# TYPE tokenserve_limit_store_circuit gauge\n";
    for (auto st : {gateway::BreakerState::kClosed, gateway::BreakerState::kOpen, gateway::BreakerState::kHalfOpen})
      m += std::string("tokenserve_limit_store_circuit{state=\"") + gateway::breaker_state_name(st) + "\"} " +
           (gs.limits.breaker == st ? "1" : "0") + "\n";
  }
  if (opts_.metrics_vllm_compat) m = obs::with_vllm_twin(m);
  http::Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = std::move(m);
  char timing[48];
  std::snprintf(timing, sizeof(timing), "render;dur=%.3f",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - render_start).count());
  r.set_header("Server-Timing", timing);
  ex->respond(std::move(r));
}

void OpenAIService::handle_dashboard(const http::ExchangePtr& ex) {
  if (!metrics_authorized(ex)) return;
  http::Response r;
  r.content_type = "text/html; charset=utf-8";
  r.body = std::string(obs::dashboard_html());
  r.set_header("Cache-Control", "no-cache");
  ex->respond(std::move(r));
}

void OpenAIService::handle_dashboard_data(const http::ExchangePtr& ex) {
  if (!metrics_authorized(ex)) return;
  refresh_metrics();
  http::Response r = json_response(200, opts_.metrics->dashboard_json_text());
  r.set_header("Cache-Control", "no-store");
  ex->respond(std::move(r));
}

}  // namespace ts::server
