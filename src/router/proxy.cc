#include "router/proxy.h"

#include "router/proxy_request.h"

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "api/error.h"
#include "core/log.h"
#include "gateway/circuit_breaker.h"
#include "gateway/route_decisions.h"
#include "obs/request_log.h"

namespace ts::router {
using json = nlohmann::json;
using namespace proxy_detail;

namespace {
int64_t utc_day() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
             .count() /
         86'400'000;
}
}  // namespace

Proxy::Proxy(EndpointPool& pool, Picker& picker, ProxyOptions opts)
    : pool_(pool), picker_(picker), opts_(opts),
      workers_(std::make_unique<WorkerPool>(WorkerPool::Options{
          .max_threads = static_cast<size_t>(std::max(1, opts_.max_in_flight)), .slice = opts_.worker_slice})) {}

Proxy::~Proxy() {
  draining_.store(true);
  // The server has stopped (see the header): calls still open can never finish, so they go
  // first (with the requests they hold), then the workers get their time.
  client_.reset();
  shutdown(std::chrono::milliseconds(30'000));
}

void Proxy::register_routes(http::Server& server) {
  using http::Method;
  client_ = std::make_unique<UpstreamClient>(server.io_context());
  server.route(Method::kPost, "/v1/completions", [this](const http::ExchangePtr& ex) { handle_generate(ex, false); });
  server.route(Method::kPost, "/v1/chat/completions", [this](const http::ExchangePtr& ex) { handle_generate(ex, true); });
  server.route(Method::kGet, "/v1/models", [this](const http::ExchangePtr& ex) { handle_models(ex); });
  server.route(Method::kGet, "/health", [](const http::ExchangePtr& ex) {
    ex->respond(json_response(200, R"({"status":"ok"})"));
  });
  server.route(Method::kGet, "/ready", [this](const http::ExchangePtr& ex) {
    bool ok = !draining_.load() && (opts_.gie_pool || pool_.any_ready());
    http::Response r = json_response(ok ? 200 : 503, ok ? R"({"status":"ready"})" : R"({"status":"no ready endpoint"})");
    if (!ok) r.set_header("Retry-After", "1");
    ex->respond(std::move(r));
  });
  server.route(Method::kGet, "/metrics", [this, &server](const http::ExchangePtr& ex) {  // (the server owns its routes)
    http::Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_text() + http::server_metrics_text(server.stats());
    ex->respond(std::move(r));
  });
  server.route(Method::kGet, "/router/decisions", [this](const http::ExchangePtr& ex) {
    ex->respond(json_response(200, decisions_json()));
  });
}

void Proxy::shutdown(std::chrono::milliseconds deadline) {
  draining_.store(true);
  const auto until = std::chrono::steady_clock::now() + deadline;
  {
    std::unique_lock lock(gen_mu_);
    gen_cv_.wait_until(lock, until, [this] { return num_gen_.load() == 0; });
  }
  workers_->wait_idle(std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 until - std::chrono::steady_clock::now())));
}

void Proxy::gen_ended() {
  if (num_gen_.fetch_sub(1) == 1) {
    std::lock_guard lock(gen_mu_);
    gen_cv_.notify_all();
  }
}

void Proxy::resume(const GenPtr& g, std::function<void()> step) {
  (void)g;
  if (opts_.inline_steps || !workers_->post(step)) step();  // a full pool: inline rather than lose it
}

void Proxy::count(const std::string& endpoint, int code) {
  std::lock_guard lock(mu_);
  ++requests_[{endpoint, code}];
}

void Proxy::handle_generate(const http::ExchangePtr& ex, bool chat) {
  std::string request_id = obs::resolve_request_id(ex->request().header("x-request-id"));
  auto refuse = [&](int status, const std::string& msg) {
    http::Response r = json_response(status, make_error(status, msg, "server_error", "service_unavailable").to_json());
    r.set_header("Retry-After", "1");
    r.set_header("x-request-id", request_id);
    count("", status);
    ex->respond(std::move(r));
  };
  if (draining_.load()) return refuse(503, "The gateway is shutting down; retry on another instance.");
  if (num_gen_.fetch_add(1) >= std::max(1, opts_.max_in_flight)) {
    gen_ended();
    return refuse(503, "The gateway has too many requests in flight; retry shortly.");
  }
  auto g = std::make_shared<Gen>(this);  // ~Gen undoes the count above
  g->posted = std::chrono::steady_clock::now();
  g->ex = ex;
  g->chat = chat;
  g->request_id = std::move(request_id);
  ex->on_cancel([w = std::weak_ptr<Gen>(g), this] {
    auto gen = w.lock();
    if (!gen) return;
    gen->cancelled.store(true);
    if (uint64_t id = gen->call_id.load(); id != 0 && client_) client_->cancel(id);
  });
  if (opts_.inline_steps) return start_generate(g);
  if (!workers_->post([this, g] { start_generate(g); }))
    refuse(503, "The gateway has too many requests in flight; retry shortly.");
}

void Proxy::add_ttft(int64_t ms) {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  ttft_.emplace_back(now, ms);
  while (!ttft_.empty() && (ttft_.size() > 2048 || now - ttft_.front().first > opts_.ttft_window)) ttft_.pop_front();
}

int64_t Proxy::p95_ttft() {
  // Recomputed at most every kTtftRefresh (the window holds up to 2048 samples: copying and
  // selecting them per request was a measurable share of the gateway's CPU, and its 16 KiB
  // scratch allocation a malloc_consolidate each time). The pool's own metrics are up to a poll
  // interval (50 ms) old, so a `when` rule sees inputs of the same age either way.
  constexpr auto kTtftRefresh = std::chrono::milliseconds(50);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  if (ttft_p95_valid_ && now - ttft_p95_at_ < kTtftRefresh) return ttft_p95_;
  ttft_scratch_.clear();
  for (const auto& [t, ms] : ttft_)
    if (now - t <= opts_.ttft_window) ttft_scratch_.push_back(ms);
  if (ttft_scratch_.empty()) {
    ttft_p95_ = -1;
  } else {
    // The same element a full sort would put there, in O(n).
    const size_t k = std::min(ttft_scratch_.size() - 1, static_cast<size_t>(0.95 * static_cast<double>(ttft_scratch_.size())));
    std::nth_element(ttft_scratch_.begin(), ttft_scratch_.begin() + static_cast<std::ptrdiff_t>(k), ttft_scratch_.end());
    ttft_p95_ = ttft_scratch_[k];
  }
  ttft_p95_at_ = now;
  ttft_p95_valid_ = true;
  return ttft_p95_;
}

void Proxy::fill_state(RouteInputs* in) {
  double waiting = 0;
  int64_t healthy = 0;
  pool_.ready_load(&healthy, &waiting);
  if (opts_.gie_pool) healthy = 1;  // the InferencePool route: its health is the data plane's
  in->healthy_local = healthy;
  in->waiting_per_replica = healthy > 0 ? waiting / static_cast<double>(healthy) : 0;
  in->p95_ttft_ms = p95_ttft();
  in->remotes_cooling.clear();
  in->remote_budget_left.clear();
  if (opts_.rules && opts_.cooldowns)
    for (const auto& [name, r] : opts_.rules->remotes) {
      if (opts_.cooldowns->remaining(name).count() > 0) in->remotes_cooling.insert(name);
      if (r.budget_tokens_per_day > 0)
        in->remote_budget_left[name] = r.budget_tokens_per_day - opts_.cooldowns->usage(name, utc_day());
    }
}

void Proxy::settle(Gen& g, int status, const char* finish) {
  if (g.settled) return;
  g.settled = true;
  g.status = status;
  g.rec.http_status = status;
  g.rec.finish_reason = finish;
  g.rec.duration_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - g.start).count();
  if (!g.have_usage) g.rec.prompt_tokens = static_cast<int64_t>(g.prompt.size() / 4);  // estimate (no usage came back)
  g.rec.served_by = g.served_target;
  g.rec.attempts = static_cast<int64_t>(g.attempts.size());
  if (g.admission) opts_.governor->settle(*g.admission, g.rec);
  if (opts_.cooldowns && g.served_target.starts_with("remote:"))  // the remote's daily budget
    opts_.cooldowns->add_usage(g.served_target.substr(7), utc_day(), g.rec.prompt_tokens + g.rec.completion_tokens);
}

void Proxy::respond_error(Gen& g, const api::ApiError& e, const gateway::Headers& extra, const std::string& route) {
  http::Response r = json_response(e.http_status, e.to_json());
  for (const auto& [k, v] : extra) r.set_header(k, v);
  if (e.http_status == 503 || e.http_status == 429) {
    bool has = false;
    for (const auto& [k, v] : extra) has = has || http::iequals(k, "retry-after");
    if (!has) r.set_header("Retry-After", "1");
  }
  r.set_header("x-request-id", g.request_id);
  r.set_header("x-tokenserve-route", route);
  count("", e.http_status);
  g.status = e.http_status;
  g.ex->respond(std::move(r));
}

void Proxy::audit(Gen& g) {
  {
    std::lock_guard lock(mu_);
    ++routed_[{g.route.rule_id, g.served_target.empty() ? "none" : g.served_target, g.status}];
  }
  if (!opts_.audit) return;
  gateway::RouteDecisionRow row;
  row.request_id = g.request_id;
  row.time = std::chrono::system_clock::now();
  row.rule_id = g.route.rule_id;
  row.ruleset_version = opts_.rules ? opts_.rules->version : "builtin";
  row.target = g.served_target.empty() ? "none" : g.served_target;
  row.reason = g.route.reason;
  row.fallback = g.fallback_note;
  // Written straight to text (json_text.h; no JSON trees on the request path), the same text
  // the to_json() forms dump to (tests/router/audit_json_test.cc).
  row.inputs_json.reserve(384);
  g.inputs.append_json(row.inputs_json);
  // {"attempts":[...], "picker":..., "route":...}, the picker's text as kept for /router/decisions.
  std::string& alt = row.alternatives_json;
  alt.reserve(160 + g.picker_dump.size() + 96 * g.attempts.size());
  alt = "{\"attempts\":";
  append_attempts_json(alt, g.attempts);
  if (g.picked) {
    alt += ",\"picker\":";
    if (g.picker_dump.empty()) g.picker.append_json(alt);
    else alt += g.picker_dump;
  }
  alt += ",\"route\":";
  g.route.append_json(alt);
  alt += "}";
  row.outcome = g.outcome;
  row.http_status = g.status;
  row.usage_source = g.have_usage ? "reported" : (g.served_target.empty() ? "none" : "estimated");
  opts_.audit->append(std::move(row));
}

void Proxy::start_generate(const GenPtr& gp) {
  Gen& g = *gp;
  const http::ExchangePtr& ex = g.ex;
  const bool chat = g.chat;
  g.start = std::chrono::steady_clock::now();
  const http::Request& in = ex->request();
  const std::string no_route = "rule=none; target=none; reason=request refused before routing";
  g.body = json::parse(in.body, nullptr, false);
  if (!g.body.is_object())
    return respond_error(g, make_error(400, "We could not parse the JSON body of your request.", "invalid_request_error",
                                       "invalid_json"), {}, no_route);
  auto model_it = g.body.find("model");
  if (model_it == g.body.end() || !model_it->is_string())
    return respond_error(g, make_error(400, "you must provide a model parameter", "invalid_request_error",
                                       "missing_required_parameter"), {}, no_route);
  g.model = model_it->get<std::string>();
  g.stream = g.body.value("stream", false);
  g.prompt = prompt_text(g.body, chat);
  fill_request_facts(g.body, g.prompt, &g.inputs);
  if (auto t = g.body.find("tier"); t != g.body.end()) {
    auto tier = t->is_string() ? engine::parse_tier(t->get<std::string>()) : Result<engine::Tier>(invalid_argument(""));
    if (!tier.ok())
      return respond_error(g, make_error(400, "Invalid 'tier': expected \"interactive\" or \"batch\".", "invalid_request_error",
                                         "invalid_value"), {}, no_route);
    g.tier = *tier;
  }
  int64_t max_tokens = g.inputs.max_tokens > 0 ? g.inputs.max_tokens : opts_.default_max_tokens;

  // Governance at the edge.
  std::string app = "default";
  if (opts_.governor) {
    gateway::AdmitResult ar = opts_.governor->admit(gateway::AdmitRequest{.authorization = in.header("authorization"),
                                                                          .model = g.model,
                                                                          .tier = g.tier,
                                                                          .prompt_tokens = g.inputs.prompt_tokens,
                                                                          .max_tokens = std::max<int64_t>(1, max_tokens)});
    if (!ar.ok()) return respond_error(g, api::error_from_status(ar.status, "", ar.error_code), ar.headers, no_route);
    g.admission = std::move(ar.admission);
    g.tenant = g.admission->key.tenant;
    app = g.admission->key.app;
    g.tier = g.admission->tier;
  }
  g.rec.request_id = g.request_id;
  g.rec.model = g.model;

  // Route.
  g.inputs.tenant = g.tenant;
  g.inputs.app = app;
  g.inputs.tier = g.tier;
  if (opts_.rules) {
    for (const Rule& r : opts_.rules->rules)
      for (const auto& [name, v] : r.match.headers) g.inputs.headers[name] = std::string(in.header(name));
  }
  fill_state(&g.inputs);
  if (opts_.rules) {
    g.route = evaluate(*opts_.rules, g.inputs);
  } else {
    g.route.rule_id = "builtin";
    g.route.reason = "picker";
    g.route.plan = {Target{}};
  }

  next_target(gp);
}

void Proxy::next_target(const GenPtr& gp) {
  Gen& g = *gp;
  if (g.next_plan >= g.route.plan.size() || g.ex->cancelled()) return all_failed(gp);
  const Target& t = g.route.plan[g.next_plan++];
  g.current_target = t.to_string();
  if (!g.previous.empty()) g.fallback_note = g.previous + " -> " + g.current_target + " (" + g.last_failure + ")";
  if (t.kind == TargetKind::kLocal) return opts_.gie_pool ? gie_attempt(gp) : local_begin(gp);
  if (t.kind == TargetKind::kRemote) return remote_attempt(gp, opts_.rules->remotes.at(t.remote));
  g.served_target = t.to_string();
  g.outcome = "rejected";
  api::ApiError e = make_error(t.reject_status, "Request rejected by routing rule '" + g.route.rule_id + "'.",
                               t.reject_status >= 500 ? "server_error" : "invalid_request_error", "rejected_by_rule");
  respond_error(g, e, g.admission ? g.admission->headers : gateway::Headers{}, g.route_header(g.served_target));
  settle(g, t.reject_status, "error");
  audit(g);
}

void Proxy::target_failed(const GenPtr& gp) {
  gp->previous = gp->current_target;
  next_target(gp);
}

void Proxy::all_failed(const GenPtr& gp) {
  Gen& g = *gp;
  const http::ExchangePtr& ex = g.ex;
  // Every target failed before the first byte.
  if (g.last_refusal && (g.last_refusal->head.status == 401 || g.last_refusal->head.status == 403)) {
    g.last_refusal.reset();  // a remote refusing the gateway's key must not read as the client's 401
    g.last_failure += " (the remote refused the gateway's API key)";
  }
  if (g.last_refusal) {
    http::Response r;
    r.status = g.last_refusal->head.status;
    r.content_type = g.last_refusal->head.header("content-type");
    if (r.content_type.empty()) r.content_type = "application/json";
    r.body = std::move(g.last_refusal->body);
    std::string ra = g.last_refusal->head.header("retry-after");
    r.set_header("Retry-After", ra.empty() ? "1" : ra);
    r.set_header("x-request-id", g.request_id);
    r.set_header("x-gateway-destination-endpoint-served", g.last_refusal_from);
    r.set_header("x-tokenserve-route", g.route_header("none"));
    count(g.last_refusal_from, r.status);
    g.status = r.status;
    ex->respond(std::move(r));
    settle(g, g.status, "error");
    return audit(g);
  }
  api::ApiError e =
      g.route.plan.empty()
          ? make_error(503, "Routing rule '" + g.route.rule_id + "' has no target available (" +
                                (g.route.skipped.empty() ? std::string("empty plan") : g.route.skipped[0]) + ").",
                       "server_error", "no_route")
      : g.picked && g.picker.ranked.empty() && g.route.plan.size() == 1
          ? make_error(503, "No ready endpoint serves model '" + g.model + "'.", "server_error", "no_endpoint")
          : make_error(502, "No upstream could be reached (" + g.last_failure + ").", "server_error", "upstream_unavailable");
  respond_error(g, e, {}, g.route_header("none"));
  settle(g, e.http_status, "error");
  audit(g);
}

void Proxy::handle_models(const http::ExchangePtr& ex) {
  bool posted = workers_->post([this, ex] {
    std::vector<net::Url> urls;
    if (opts_.gie_pool) urls.push_back(*opts_.gie_pool);
    for (const EndpointState& s : pool_.snapshot()) {
      if (!s.ready || s.ejected) continue;
      Endpoint ep;
      if (pool_.lookup(s.name, &ep)) urls.push_back(net::Url{.host = ep.address, .port = ep.port});
    }
    for (const net::Url& url : urls) {
      net::HttpCallOptions co;
      co.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(5000);
      co.ca_file = opts_.gie_ca_file;
      co.direct = true;
      auto r = net::http_fetch(url, net::HttpRequest{.path = "/v1/models"}, co, 4u << 20);
      if (!r.ok() || r->head.status != 200) continue;
      ex->respond(json_response(200, r->body));
      return;
    }
    ex->respond(json_response(503, make_error(503, "No ready endpoint.", "server_error", "no_endpoint").to_json()));
  });
  if (!posted) {
    http::Response r = json_response(503, make_error(503, "The gateway has too many requests in flight; retry shortly.",
                                                     "server_error", "service_unavailable").to_json());
    r.set_header("Retry-After", "1");
    ex->respond(std::move(r));
  }
}

std::string Proxy::decisions_json() const {
  std::lock_guard lock(mu_);
  std::string out = "[";
  for (size_t i = 0; i < decisions_.size(); ++i) {
    if (i) out += ",";
    out += decisions_[i];
  }
  return out + "]";
}

std::string Proxy::metrics_text() const {
  std::string m;
  {
    std::lock_guard lock(mu_);
    m += "# HELP tokenserve_gateway_requests_total Requests answered, by endpoint and status code.\n"
         "# TYPE tokenserve_gateway_requests_total counter\n";
    for (const auto& [k, v] : requests_)
      m += "tokenserve_gateway_requests_total{endpoint=\"" + k.first + "\",code=\"" + std::to_string(k.second) + "\"} " +
           std::to_string(v) + "\n";
    m += "# HELP tokenserve_gateway_upstream_attempts_total Attempts to reach an endpoint, by result.\n"
         "# TYPE tokenserve_gateway_upstream_attempts_total counter\n";
    for (const auto& [k, v] : attempts_)
      m += "tokenserve_gateway_upstream_attempts_total{endpoint=\"" + k.first + "\",result=\"" + k.second + "\"} " +
           std::to_string(v) + "\n";
  }
  {
    std::lock_guard lock(mu_);
    m += "# HELP tokenserve_gateway_routed_total Generation requests by routing rule, target and status code.\n"
         "# TYPE tokenserve_gateway_routed_total counter\n";
    for (const auto& [k, v] : routed_)
      m += "tokenserve_gateway_routed_total{rule=\"" + std::get<0>(k) + "\",target=\"" + std::get<1>(k) + "\",code=\"" +
           std::to_string(std::get<2>(k)) + "\"} " + std::to_string(v) + "\n";
  }
  if (opts_.rules && opts_.cooldowns) {
    m += "# HELP tokenserve_gateway_remote_cooldown_active 1 while the remote is cooling down (shared via Redis when configured).\n"
         "# TYPE tokenserve_gateway_remote_cooldown_active gauge\n";
    for (const auto& [name, r] : opts_.rules->remotes)
      m += "tokenserve_gateway_remote_cooldown_active{remote=\"" + name + "\"} " +
           (opts_.cooldowns->remaining(name).count() > 0 ? "1" : "0") + "\n";
    m += "# HELP tokenserve_gateway_cooldown_store_errors_total Cooldown store (Redis) calls that failed.\n"
         "# TYPE tokenserve_gateway_cooldown_store_errors_total counter\n"
         "tokenserve_gateway_cooldown_store_errors_total " + std::to_string(opts_.cooldowns->num_store_errors()) + "\n";
  }
  if (opts_.governor) {  // the same governance families as serve's /metrics
    gateway::GovernorStats gs = opts_.governor->stats();
    auto counter = [&](const char* name, const char* help, int64_t v) {
      m += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
           std::to_string(v) + "\n";
    };
    counter("tokenserve_ledger_written_total", "Usage rows committed to the ledger.", gs.ledger.num_written);
    counter("tokenserve_ledger_dropped_total", "Usage rows lost (spool full or unwritten at close).", gs.ledger.num_dropped);
    counter("tokenserve_limit_store_errors_total", "Limit store calls that failed (unreachable or circuit open).",
            gs.num_limit_errors);
    counter("tokenserve_limit_fail_open_admissions_total", "Requests admitted without the limit store (charges journaled).",
            gs.num_admitted_fail_open);
    counter("tokenserve_limit_fail_closed_refusals_total",
            "Requests refused with 503: limit store down and the tenant fails closed.", gs.num_refused_outage);
    m += "# HELP tokenserve_limit_store_circuit Limit store circuit breaker state (1 = in force).\n"
         "# TYPE tokenserve_limit_store_circuit gauge\n";
    for (auto st : {gateway::BreakerState::kClosed, gateway::BreakerState::kOpen, gateway::BreakerState::kHalfOpen})
      m += std::string("tokenserve_limit_store_circuit{state=\"") + gateway::breaker_state_name(st) + "\"} " +
           (gs.limits.breaker == st ? "1" : "0") + "\n";
    if (opts_.audit)
      counter("tokenserve_gateway_route_decisions_dropped_total", "Audit rows lost (database away at close, or queue full).",
              opts_.audit->num_dropped());
  }
  m += "# HELP tokenserve_gateway_shed_total Requests shed by tier at saturation (429 + Retry-After).\n"
       "# TYPE tokenserve_gateway_shed_total counter\n"
       "tokenserve_gateway_shed_total{tier=\"batch\"} " + std::to_string(shed_batch_.load()) + "\n";
  if (client_) {  // the native upstream transport (router/upstream_native.h)
    const UpstreamClient::NativeStats ns = client_->native_stats();
    m += "# HELP tokenserve_gateway_upstream_connections_total Upstream connections opened by the native transport.\n"
         "# TYPE tokenserve_gateway_upstream_connections_total counter\n"
         "tokenserve_gateway_upstream_connections_total " + std::to_string(ns.connects) + "\n"
         "# HELP tokenserve_gateway_upstream_reused_total Upstream calls sent on a kept-alive connection (native transport).\n"
         "# TYPE tokenserve_gateway_upstream_reused_total counter\n"
         "tokenserve_gateway_upstream_reused_total " + std::to_string(ns.reuses) + "\n"
         "# HELP tokenserve_gateway_upstream_stale_retries_total Calls re-sent on a fresh connection after a kept-alive one was found closed.\n"
         "# TYPE tokenserve_gateway_upstream_stale_retries_total counter\n"
         "tokenserve_gateway_upstream_stale_retries_total " + std::to_string(ns.retries) + "\n"
         "# HELP tokenserve_gateway_upstream_idle_connections Kept-alive upstream connections now idle (native transport).\n"
         "# TYPE tokenserve_gateway_upstream_idle_connections gauge\n"
         "tokenserve_gateway_upstream_idle_connections " + std::to_string(ns.idle) + "\n";
  }
  m += "# HELP tokenserve_gateway_endpoint_up 1 when the endpoint is ready and not ejected.\n"
       "# TYPE tokenserve_gateway_endpoint_up gauge\n";
  for (const EndpointState& s : pool_.snapshot())
    m += "tokenserve_gateway_endpoint_up{endpoint=\"" + s.name + "\"} " + ((s.ready && !s.ejected) ? "1" : "0") + "\n";
  return m;
}

}  // namespace ts::router
