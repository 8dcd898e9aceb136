#include "router/proxy.h"

#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/error.h"
#include "core/log.h"
#include "http/client.h"
#include "obs/request_log.h"

namespace ts::router {
namespace {

using json = nlohmann::json;

http::Response json_response(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

api::ApiError make_error(int status, std::string message, std::string type, std::string code = {}) {
  api::ApiError e;
  e.http_status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

// The text the picker hashes: the rendered chat, or the completion prompt(s).
std::string prompt_text(const json& body, bool chat) {
  if (chat) return render_chat_prompt(body.value("messages", json::array()));
  auto p = body.find("prompt");
  if (p == body.end()) return {};
  if (p->is_string()) return p->get<std::string>();
  std::string out;
  if (p->is_array()) {
    for (const auto& x : *p) {
      if (x.is_string()) out += x.get<std::string>();
      else if (x.is_number_integer()) out += std::to_string(x.get<int64_t>()) + " ";
      else if (x.is_array())  // token ids
        for (const auto& t : x)
          if (t.is_number_integer()) out += std::to_string(t.get<int64_t>()) + " ";
    }
  }
  return out;
}

// Copies `usage` fields of a response object, when present.
void read_usage(const json& j, gateway::UsageRecord* rec, bool* have) {
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return;
  rec->prompt_tokens = u->value("prompt_tokens", int64_t{0});
  rec->completion_tokens = u->value("completion_tokens", int64_t{0});
  if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
    rec->cached_tokens = d->value("cached_tokens", int64_t{0});
  *have = true;
}

// Scans an SSE chunk's `data:` lines for a usage object.
void scan_sse_usage(std::string_view chunk, gateway::UsageRecord* rec, bool* have) {
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

bool is_relayed_header(std::string_view name) {
  for (const char* h : {"content-type", "x-tokenserve-served-by", "retry-after", "x-ratelimit-limit-requests",
                        "cache-control"})
    if (http::iequals(name, h)) return true;
  return false;
}

}  // namespace

Proxy::Proxy(EndpointPool& pool, Picker& picker, ProxyOptions opts) : pool_(pool), picker_(picker), opts_(opts) {}

Proxy::~Proxy() { shutdown(std::chrono::milliseconds(30'000)); }

void Proxy::register_routes(http::Server& server) {
  using http::Method;
  server.route(Method::kPost, "/v1/completions", [this](const http::ExchangePtr& ex) { handle_generate(ex, false); });
  server.route(Method::kPost, "/v1/chat/completions", [this](const http::ExchangePtr& ex) { handle_generate(ex, true); });
  server.route(Method::kGet, "/v1/models", [this](const http::ExchangePtr& ex) { handle_models(ex); });
  server.route(Method::kGet, "/health", [](const http::ExchangePtr& ex) {
    ex->respond(json_response(200, R"({"status":"ok"})"));
  });
  server.route(Method::kGet, "/ready", [this](const http::ExchangePtr& ex) {
    bool ok = !draining_.load() && pool_.any_ready();
    http::Response r = json_response(ok ? 200 : 503, ok ? R"({"status":"ready"})" : R"({"status":"no ready endpoint"})");
    if (!ok) r.set_header("Retry-After", "1");
    ex->respond(std::move(r));
  });
  server.route(Method::kGet, "/metrics", [this](const http::ExchangePtr& ex) {
    http::Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_text();
    ex->respond(std::move(r));
  });
  server.route(Method::kGet, "/router/decisions", [this](const http::ExchangePtr& ex) {
    ex->respond(json_response(200, decisions_json()));
  });
}

void Proxy::shutdown(std::chrono::milliseconds deadline) {
  draining_.store(true);
  std::unique_lock lock(mu_);
  idle_cv_.wait_for(lock, deadline, [this] { return workers_ == 0; });
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
  {
    std::lock_guard lock(mu_);
    if (workers_ >= opts_.max_in_flight) {
      // fallthrough to refuse below, outside the lock
    } else {
      ++workers_;
      std::thread([this, ex, chat, request_id]() mutable {
        run_generate(ex, chat, std::move(request_id));
        std::lock_guard g(mu_);
        if (--workers_ == 0) idle_cv_.notify_all();
      }).detach();
      return;
    }
  }
  refuse(503, "The gateway has too many requests in flight; retry shortly.");
}

void Proxy::run_generate(const http::ExchangePtr& ex, bool chat, std::string request_id) {
  const auto start = std::chrono::steady_clock::now();
  const http::Request& in = ex->request();
  auto fail = [&](const api::ApiError& e, const gateway::Headers& extra = {}) {
    http::Response r = json_response(e.http_status, e.to_json());
    for (const auto& [k, v] : extra) r.set_header(k, v);
    if (e.http_status == 503) r.set_header("Retry-After", "1");
    r.set_header("x-request-id", request_id);
    count("", e.http_status);
    ex->respond(std::move(r));
  };
  json body = json::parse(in.body, nullptr, false);
  if (!body.is_object())
    return fail(make_error(400, "We could not parse the JSON body of your request.", "invalid_request_error", "invalid_json"));
  auto model_it = body.find("model");
  if (model_it == body.end() || !model_it->is_string())
    return fail(make_error(400, "you must provide a model parameter", "invalid_request_error", "missing_required_parameter"));
  const std::string model = model_it->get<std::string>();
  const bool stream = body.value("stream", false);
  const std::string prompt = prompt_text(body, chat);
  int64_t max_tokens = opts_.default_max_tokens;
  for (const char* k : {"max_completion_tokens", "max_tokens"})
    if (auto m = body.find(k); m != body.end() && m->is_number_integer()) max_tokens = m->get<int64_t>();

  // Governance at the edge.
  std::optional<gateway::Admission> admission;
  std::string tenant = "anonymous";
  engine::Tier tier = engine::Tier::kInteractive;
  if (opts_.governor) {
    gateway::AdmitResult ar = opts_.governor->admit(gateway::AdmitRequest{
        .authorization = in.header("authorization"),
        .model = model,
        .tier = tier,
        .prompt_tokens = static_cast<int64_t>(prompt.size() / 4),
        .max_tokens = std::max<int64_t>(1, max_tokens)});
    if (!ar.ok()) {
      api::ApiError e = api::error_from_status(ar.status, "", ar.error_code);
      return fail(e, ar.headers);
    }
    admission = std::move(ar.admission);
    tenant = admission->key.tenant;
    tier = admission->tier;
  }
  gateway::UsageRecord rec;
  rec.request_id = request_id;
  rec.model = model;
  bool have_usage = false;
  auto settle = [&](int status, const char* finish) {
    rec.http_status = status;
    rec.finish_reason = finish;
    rec.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    if (!have_usage) rec.prompt_tokens = static_cast<int64_t>(prompt.size() / 4);  // estimate (no usage came back)
    if (admission) opts_.governor->settle(*admission, rec);
  };

  // Pick and count the request on the winner in one step, so concurrent picks see each other
  // (a scrape lags; without this, simultaneous requests all pick the same idle endpoint).
  struct InFlight {
    EndpointPool* p = nullptr;
    std::string n;
    ~InFlight() {
      if (p) p->end_request(n);
    }
  };
  InFlight reserved;
  Decision decision;
  {
    std::lock_guard lock(pick_mu_);
    decision = picker_.pick(PickRequest{.model = model, .tenant = tenant, .prompt = prompt}, pool_.snapshot(),
                            Clock::now());
    if (!decision.ranked.empty()) {
      reserved.p = &pool_;
      reserved.n = decision.ranked[0].name;
      pool_.begin_request(reserved.n);
      // Index the prompt at once (as GIE's approximate scorer does on pick), so requests with
      // the same prefix that arrive while this one runs find it.
      picker_.record(reserved.n, decision);
    }
  }
  // An upstream picker's choice (GIE EPP header), when trusted: walk its list in order.
  std::map<std::string, Endpoint> header_endpoints;
  if (opts_.trust_destination_header) {
    std::string_view list = in.header("x-gateway-destination-endpoint");
    std::vector<Candidate> ranked;
    while (!list.empty()) {
      size_t comma = list.find(',');
      std::string_view item = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      size_t colon = item.rfind(':');
      if (colon == std::string_view::npos || colon == 0) continue;
      int p = std::atoi(std::string(item.substr(colon + 1)).c_str());
      if (p <= 0 || p > 65535) continue;
      Endpoint ep{.name = std::string(item), .address = std::string(item.substr(0, colon)), .port = static_cast<uint16_t>(p)};
      for (const EndpointState& s : pool_.snapshot()) {  // a pool member keeps its name
        Endpoint known;
        if (pool_.lookup(s.name, &known) && known.address == ep.address && known.port == ep.port) ep = known;
      }
      if (header_endpoints.emplace(ep.name, ep).second) ranked.push_back(Candidate{.name = ep.name});
    }
    if (!ranked.empty()) decision.ranked = std::move(ranked);
  }
  json attempts = json::array();
  std::string served_by;
  auto keep_decision = [&]() {
    json rj = {{"request_id", request_id}, {"model", model},      {"tenant", tenant},
               {"served_by", served_by},   {"attempts", attempts}, {"decision", decision.to_json()}};
    std::lock_guard lock(mu_);
    decisions_.push_back(rj.dump());
    while (decisions_.size() > opts_.max_decisions) decisions_.pop_front();
  };
  if (decision.ranked.empty()) {
    keep_decision();
    settle(503, "error");
    return fail(make_error(503, "No ready endpoint serves model '" + model + "'.", "server_error", "no_endpoint"));
  }

  http::HeaderList up_headers = {{"Content-Type", "application/json"},
                                 {"x-request-id", request_id},
                                 {"x-gateway-inference-objective", engine::tier_name(tier)},
                                 {"x-gateway-inference-fairness-id", tenant}};
  {
    std::string ranked_list;  // GIE's EPP header, for a chained proxy (HAProxy set-dst)
    for (const Candidate& c : decision.ranked) {
      Endpoint e;
      auto h = header_endpoints.find(c.name);
      if (h != header_endpoints.end()) e = h->second;
      else if (!pool_.lookup(c.name, &e)) continue;
      if (!ranked_list.empty()) ranked_list += ",";
      ranked_list += e.address + ":" + std::to_string(e.port);
    }
    up_headers.emplace_back("x-gateway-destination-endpoint", ranked_list);
  }
  const std::string target = chat ? "/v1/chat/completions" : "/v1/completions";
  std::optional<http::ClientResponse> last_refusal;  // a 502/503 head, passed through if all fail
  std::string last_refusal_from;
  int tries = 0;
  for (const Candidate& cand : decision.ranked) {
    if (tries >= opts_.max_attempts || ex->cancelled()) break;
    Endpoint ep;
    if (auto h = header_endpoints.find(cand.name); h != header_endpoints.end()) ep = h->second;
    else if (!pool_.lookup(cand.name, &ep)) continue;
    ++tries;
    auto record_attempt = [&](const char* result, bool ok) {
      attempts.push_back({{"endpoint", ep.name}, {"result", result}});
      pool_.report_attempt(ep.name, ok);
      std::lock_guard lock(mu_);
      ++attempts_[{ep.name, result}];
    };
    http::Client client;
    client.set_timeout(opts_.upstream_timeout);
    if (!client.connect(ep.address, ep.port).ok()) {
      record_attempt("connect_error", false);
      continue;
    }
    InFlight in_flight;  // failover targets are counted while tried
    if (ep.name != reserved.n) {
      picker_.record(ep.name, decision);
      pool_.begin_request(ep.name);
      in_flight.p = &pool_;
      in_flight.n = ep.name;
    }
    if (!client.send_request("POST", target, in.body, up_headers).ok()) {
      record_attempt("send_error", false);
      continue;
    }
    auto head = client.read_head();
    if (!head.ok()) {
      record_attempt("reset_before_head", false);
      continue;
    }
    if (head->status == 502 || head->status == 503) {
      record_attempt(head->status == 503 ? "503" : "502", false);
      if (client.read_body(&*head).ok()) {
        last_refusal = std::move(*head);
        last_refusal_from = ep.name;
      }
      continue;
    }
    // Committed to this endpoint from here on: no failover after the first byte.
    record_attempt("ok", true);
    served_by = ep.name;
    prefix_predicted_chars_.fetch_add(cand.prefix_blocks * static_cast<int64_t>(picker_.options().prefix.block_chars));
    http::HeaderList out_headers;
    for (const auto& [k, v] : head->headers)
      if (is_relayed_header(k) && !http::iequals(k, "content-type")) out_headers.emplace_back(k, v);
    if (admission)
      for (const auto& h : admission->headers) out_headers.push_back(h);
    out_headers.emplace_back("x-request-id", request_id);
    out_headers.emplace_back("x-gateway-destination-endpoint-served", ep.address + ":" + std::to_string(ep.port));
    out_headers.emplace_back("x-tokenserve-route", "rule=builtin; target=local:" + ep.name +
                                                       (decision.guard_applied ? "; reason=imbalance-guard" : "; reason=picker"));
    std::string content_type(head->header("content-type"));
    if (content_type.empty()) content_type = "application/json";
    keep_decision();
    if (!head->chunked) {
      if (Status st = client.read_body(&*head); !st.ok()) {
        settle(502, "error");
        return fail(make_error(502, "The replica " + ep.name + " failed while answering: " + st.message(), "server_error",
                               "upstream_error"));
      }
      json rj = json::parse(head->body, nullptr, false);
      if (rj.is_object()) read_usage(rj, &rec, &have_usage);
      http::Response r;
      r.status = head->status;
      r.content_type = content_type;
      r.headers = std::move(out_headers);
      r.body = std::move(head->body);
      count(ep.name, r.status);
      ex->respond(std::move(r));
      settle(head->status, head->status < 400 ? "stop" : "error");
      return;
    }
    ex->start_stream(head->status, content_type, std::move(out_headers));
    bool first = true;
    while (true) {
      auto chunk = client.read_chunk();
      if (!chunk.ok()) {
        api::ApiError e = make_error(502, "The replica " + ep.name + " failed mid-stream: " + chunk.status().message(),
                                     "server_error", "upstream_error");
        ex->write("data: " + e.to_json() + "\n\n");
        ex->finish();
        count(ep.name, 502);
        settle(502, "error");
        return;
      }
      if (chunk->empty()) break;
      if (first) {
        rec.ttft_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
        first = false;
      }
      scan_sse_usage(*chunk, &rec, &have_usage);
      if (!ex->write(std::move(chunk).value())) {  // the client went away: dropping the connection cancels upstream
        count(ep.name, 499);
        settle(head->status, "cancelled");
        return;
      }
    }
    ex->finish();
    count(ep.name, head->status);
    settle(head->status, "stop");
    (void)stream;
    return;
  }
  keep_decision();
  if (last_refusal) {
    http::Response r;
    r.status = last_refusal->status;
    r.content_type = std::string(last_refusal->header("content-type"));
    if (r.content_type.empty()) r.content_type = "application/json";
    r.body = std::move(last_refusal->body);
    r.set_header("Retry-After", "1");
    r.set_header("x-request-id", request_id);
    r.set_header("x-gateway-destination-endpoint-served", last_refusal_from);
    count(last_refusal_from, r.status);
    ex->respond(std::move(r));
    settle(r.status, "error");
    return;
  }
  settle(502, "error");
  fail(make_error(502, "No replica could be reached (" + std::to_string(tries) + " attempts).", "server_error",
                  "upstream_unavailable"));
}

void Proxy::handle_models(const http::ExchangePtr& ex) {
  {
    std::lock_guard lock(mu_);
    ++workers_;  // shutdown() waits for this thread too
  }
  std::thread([this, ex] {
    struct Done {
      Proxy* p;
      ~Done() {
        std::lock_guard g(p->mu_);
        if (--p->workers_ == 0) p->idle_cv_.notify_all();
      }
    } done{this};
    for (const EndpointState& s : pool_.snapshot()) {
      if (!s.ready || s.ejected) continue;
      Endpoint ep;
      if (!pool_.lookup(s.name, &ep)) continue;
      http::Client c;
      c.set_timeout(std::chrono::milliseconds(5000));
      if (!c.connect(ep.address, ep.port).ok()) continue;
      auto r = c.request("GET", "/v1/models");
      if (!r.ok() || r->status != 200) continue;
      ex->respond(json_response(200, r->body));
      return;
    }
    ex->respond(json_response(503, make_error(503, "No ready endpoint.", "server_error", "no_endpoint").to_json()));
  }).detach();
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
  m += "# HELP tokenserve_gateway_endpoint_up 1 when the endpoint is ready and not ejected.\n"
       "# TYPE tokenserve_gateway_endpoint_up gauge\n";
  for (const EndpointState& s : pool_.snapshot())
    m += "tokenserve_gateway_endpoint_up{endpoint=\"" + s.name + "\"} " + ((s.ready && !s.ejected) ? "1" : "0") + "\n";
  return m;
}

}  // namespace ts::router
