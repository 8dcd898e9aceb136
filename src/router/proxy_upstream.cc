// The proxy's targets: the local pool (picker + failover down the ranked list) and named
// remotes, and the relay of an upstream's answer to the client (see proxy.h).
#include <cstdlib>

#include "core/log.h"
#include "gateway/trust.h"
#include "router/proxy.h"
#include "router/proxy_request.h"

namespace ts::router {

using namespace proxy_detail;

namespace {
int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Proxy::relay(Gen& g, http::Client& client, http::ClientResponse& head, http::HeaderList out_headers,
                  const std::string& label) {
  const bool local = g.served_target.starts_with("local:");
  if (g.admission)
    for (const auto& h : g.admission->headers) out_headers.push_back(h);
  out_headers.emplace_back("x-request-id", g.request_id);
  out_headers.emplace_back("x-tokenserve-route", g.route_header(g.served_target));
  std::string content_type(head.header("content-type"));
  if (content_type.empty()) content_type = "application/json";
  if (!head.chunked) {
    if (Status st = client.read_body(&head); !st.ok()) {
      g.outcome = "error";
      respond_error(g, make_error(502, "The upstream " + label + " failed while answering: " + st.message(), "server_error",
                                  "upstream_error"), {}, g.route_header(g.served_target));
      settle(g, 502, "error");
      return;
    }
    json rj = json::parse(head.body, nullptr, false);
    if (rj.is_object()) read_usage(rj, &g.rec, &g.have_usage);
    http::Response r;
    r.status = head.status;
    r.content_type = content_type;
    r.headers = std::move(out_headers);
    r.body = std::move(head.body);
    count(label, r.status);
    g.status = r.status;
    g.outcome = head.status < 400 ? "ok" : "error";
    g.ex->respond(std::move(r));
    settle(g, head.status, head.status < 400 ? "stop" : "error");
    return;
  }
  g.ex->start_stream(head.status, content_type, std::move(out_headers));
  g.status = head.status;
  bool first = true;
  while (true) {
    auto chunk = client.read_chunk();
    if (!chunk.ok()) {
      api::ApiError e = make_error(502, "The upstream " + label + " failed mid-stream: " + chunk.status().message(),
                                   "server_error", "upstream_error");
      g.ex->write("data: " + e.to_json() + "\n\n");
      g.ex->finish();
      count(label, 502);
      g.outcome = "partial";
      settle(g, 502, "error");
      return;
    }
    if (chunk->empty()) break;
    if (first) {
      g.rec.ttft_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - g.start).count();
      if (local) add_ttft(g.rec.ttft_ms);
      first = false;
    }
    scan_sse_usage(*chunk, &g.rec, &g.have_usage);
    if (!g.ex->write(std::move(chunk).value())) {  // the client went away: dropping the connection cancels upstream
      count(label, 499);
      g.outcome = "partial";
      settle(g, head.status, "cancelled");
      return;
    }
  }
  g.ex->finish();
  count(label, head.status);
  g.outcome = head.status < 400 ? "ok" : "error";
  settle(g, head.status, "stop");
}

TryResult Proxy::try_local(Gen& g) {
  const http::Request& in = g.ex->request();
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
  Decision& decision = g.picker;
  g.picked = true;
  {
    std::lock_guard lock(pick_mu_);
    decision = picker_.pick(PickRequest{.model = g.model, .tenant = g.tenant, .prompt = g.prompt}, pool_.snapshot(),
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
  std::string served_by;
  auto keep_decision = [&]() {
    json rj = {{"request_id", g.request_id}, {"model", g.model},        {"tenant", g.tenant},
               {"served_by", served_by},     {"attempts", g.attempts}, {"decision", decision.to_json()}};
    std::lock_guard lock(mu_);
    decisions_.push_back(rj.dump());
    while (decisions_.size() > opts_.max_decisions) decisions_.pop_front();
  };
  if (decision.ranked.empty()) {
    keep_decision();
    g.last_failure = "no ready local endpoint";
    return TryResult::kFailed;
  }

  http::HeaderList up_headers = {{"Content-Type", "application/json"},
                                 {"x-request-id", g.request_id},
                                 {"x-gateway-inference-objective", engine::tier_name(g.tier)},
                                 {"x-gateway-inference-fairness-id", g.tenant}};
  if (!opts_.gateway_secret.empty()) {  // replicas run with --trust-gateway
    gateway::TrustedIdentity id{.tenant = g.tenant,
                                .app = g.admission ? g.admission->key.app : "default",
                                .tier = engine::tier_name(g.tier),
                                .request_id = g.request_id};
    up_headers.emplace_back("Authorization", gateway::gateway_authorization(opts_.gateway_secret, id, unix_ms_now()));
  }
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
  const std::string target = g.chat ? "/v1/chat/completions" : "/v1/completions";
  int tries = 0;
  for (const Candidate& cand : decision.ranked) {
    if (tries >= opts_.max_attempts || g.ex->cancelled()) break;
    Endpoint ep;
    if (auto h = header_endpoints.find(cand.name); h != header_endpoints.end()) ep = h->second;
    else if (!pool_.lookup(cand.name, &ep)) continue;
    ++tries;
    auto record_attempt = [&](const char* result, bool ok) {
      g.attempts.push_back({{"target", "local:" + ep.name}, {"endpoint", ep.name}, {"result", result}});
      if (!ok) g.last_failure = "local:" + ep.name + " " + result;
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
        g.last_refusal = std::move(*head);
        g.last_refusal_from = ep.name;
      }
      continue;
    }
    // Committed to this endpoint from here on: no failover after the first byte.
    record_attempt("ok", true);
    served_by = ep.name;
    g.served_by = ep.name;
    g.served_target = "local:" + ep.name;
    prefix_predicted_chars_.fetch_add(cand.prefix_blocks * static_cast<int64_t>(picker_.options().prefix.block_chars));
    http::HeaderList out_headers;
    for (const auto& [k, v] : head->headers)
      if (is_relayed_header(k) && !http::iequals(k, "content-type")) out_headers.emplace_back(k, v);
    out_headers.emplace_back("x-gateway-destination-endpoint-served", ep.address + ":" + std::to_string(ep.port));
    if (decision.guard_applied && g.route.rule_id == "builtin") g.route.reason = "imbalance-guard";
    keep_decision();
    relay(g, client, *head, std::move(out_headers), ep.name);
    return TryResult::kAnswered;
  }
  keep_decision();
  if (tries == 0) g.last_failure = "no reachable local endpoint";
  return TryResult::kFailed;
}

TryResult Proxy::try_remote(Gen& g, const RemoteConfig& remote) {
  const std::string label = "remote:" + remote.name;
  auto record_attempt = [&](const std::string& result, bool ok) {
    g.attempts.push_back({{"target", label}, {"result", result}});
    if (!ok) g.last_failure = label + " " + result;
    std::lock_guard lock(mu_);
    ++attempts_[{label, result}];
  };
  // Counts a failure toward the cooldown (or starts one for a 429's Retry-After).
  auto failed = [&](const std::string& result, std::optional<Millis> retry_after = std::nullopt) {
    record_attempt(result, false);
    if (!opts_.cooldowns) return;
    if (retry_after) {
      opts_.cooldowns->trip(remote.name, *retry_after);
      return;
    }
    if (opts_.cooldowns->record_failure(remote.name, std::max(remote.cooldown, Millis(60'000))) >=
        remote.cooldown_after_failures)
      opts_.cooldowns->trip(remote.name, remote.cooldown);
  };
  json body = g.body;
  body["model"] = remote.remote_model(g.model);
  body.erase("tier");  // ours, not OpenAI's
  if (g.stream) {  // so the ledger gets real usage
    if (!body.contains("stream_options") || !body["stream_options"].is_object()) body["stream_options"] = json::object();
    body["stream_options"]["include_usage"] = true;
  }
  http::HeaderList headers = {{"Content-Type", "application/json"}, {"x-request-id", g.request_id}};
  if (!remote.api_key.empty()) headers.emplace_back("Authorization", "Bearer " + remote.api_key);
  http::Client client;
  client.set_timeout(remote.timeout);
  if (!client.connect(remote.host, remote.port).ok()) {
    failed("connect_error");
    return TryResult::kFailed;
  }
  const std::string path = remote.base_path + (g.chat ? "/chat/completions" : "/completions");
  if (!client.send_request("POST", path, body.dump(), headers).ok()) {
    failed("send_error");
    return TryResult::kFailed;
  }
  auto head = client.read_head();
  if (!head.ok()) {
    failed("reset_before_head");
    return TryResult::kFailed;
  }
  if (head->status == 429 || head->status >= 500) {
    std::optional<Millis> retry_after;
    if (head->status == 429) {
      std::string ra(head->header("retry-after"));
      char* end = nullptr;
      double secs = std::strtod(ra.c_str(), &end);
      if (!ra.empty() && *end == '\0' && secs > 0) retry_after = Millis(static_cast<int64_t>(secs * 1000));
      else retry_after = remote.cooldown;
    }
    failed(std::to_string(head->status), retry_after);
    if (client.read_body(&*head).ok()) {
      g.last_refusal = std::move(*head);
      g.last_refusal_from = label;
    }
    return TryResult::kFailed;
  }
  if (head->status == 401 || head->status == 403) {
    // The remote refused the gateway's own key: a configuration problem, not the client's.
    log::warn("remote " + remote.name + " answered " + std::to_string(head->status) + " to the gateway's API key");
    failed(std::to_string(head->status));
    if (client.read_body(&*head).ok()) {
      g.last_refusal = std::move(*head);
      g.last_refusal_from = label;
    }
    return TryResult::kFailed;
  }
  record_attempt("ok", true);
  if (opts_.cooldowns) opts_.cooldowns->record_success(remote.name);
  g.served_by = label;
  g.served_target = label;
  http::HeaderList out_headers;
  for (const auto& [k, v] : head->headers)
    if (is_relayed_header(k) && !http::iequals(k, "content-type")) out_headers.emplace_back(k, v);
  relay(g, client, *head, std::move(out_headers), label);
  return TryResult::kAnswered;
}

}  // namespace ts::router
