// The proxy's targets: the local pool (picker + failover down the ranked list) and named
// remotes, and the relay of an upstream's answer to the client (see proxy.h).
#include <algorithm>
#include <cctype>
#include <cstdio>
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

// Where a call that produced no response head stopped, as an attempt result.
const char* failure_name(net::CallStage stage, const Status& st) {
  if (st.code() == StatusCode::kDeadlineExceeded && stage != net::CallStage::kConnecting) return "timeout";
  switch (stage) {
    case net::CallStage::kConnecting: return "connect_error";
    case net::CallStage::kSending: return "send_error";
    default: return "reset_before_head";
  }
}

// Server-Timing (W3C) for a proxied answer, ms: queue = the io thread's hand-off to a worker
// until the worker ran it; pre = parsing, admission, routing and any failed attempts; upstream =
// the answering call until `upstream_end` (its head for a stream, its whole body otherwise); post
// = from then until this header is made (the answer is handed to the io thread right after).
std::string server_timing(std::chrono::steady_clock::time_point posted, std::chrono::steady_clock::time_point start,
                          std::chrono::steady_clock::time_point upstream_start,
                          std::chrono::steady_clock::time_point upstream_end) {
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  char buf[128];
  std::snprintf(buf, sizeof(buf), "queue;dur=%.3f, pre;dur=%.3f, upstream;dur=%.3f, post;dur=%.3f", ms(posted, start),
                ms(start, upstream_start), ms(upstream_start, upstream_end),
                ms(upstream_end, std::chrono::steady_clock::now()));
  return buf;
}

}  // namespace

std::unique_ptr<net::HttpSession> Proxy::take_session(const std::string& key) {
  {
    std::lock_guard lock(sessions_mu_);
    auto it = idle_sessions_.find(key);
    if (it != idle_sessions_.end() && !it->second.empty()) {
      auto s = std::move(it->second.back());
      it->second.pop_back();
      return s;
    }
  }
  return std::make_unique<net::HttpSession>();
}

void Proxy::give_session(const std::string& key, std::unique_ptr<net::HttpSession> s) {
  constexpr size_t kIdlePerUpstream = 64;
  std::lock_guard lock(sessions_mu_);
  auto& idle = idle_sessions_[key];
  if (idle.size() < kIdlePerUpstream) idle.push_back(std::move(s));
}

Proxy::Upstream Proxy::call_upstream(Gen& g, const net::Url& url, const net::HttpRequest& req, net::HttpCallOptions opts,
                                     const std::function<bool(int)>& is_refusal,
                                     const std::function<http::HeaderList(const net::HttpResponseHead&)>& commit,
                                     const std::string& label) {
  enum class Mode { kNone, kRefusing, kBuffering, kStreaming } mode = Mode::kNone;
  const bool local = !label.starts_with("remote:");  // local TTFTs feed the `when` rules' p95
  Upstream out;
  net::HttpResponseHead head;
  http::HeaderList out_headers;
  std::string content_type, body;
  bool first = true, client_gone = false, too_big = false;
  net::SseParser sse;
  std::chrono::steady_clock::time_point head_at;
  net::CallStage stage = net::CallStage::kConnecting;
  opts.stage = &stage;
  opts.cancel = g.cancel.get();
  net::HttpHandlers h;
  h.on_head = [&](const net::HttpResponseHead& hd) {
    head = hd;
    if (is_refusal(hd.status)) {
      mode = Mode::kRefusing;
      return true;
    }
    out_headers = commit(hd);  // the attempt is the answer now: no failover after this byte
    if (g.admission)
      for (const auto& x : g.admission->headers) out_headers.push_back(x);
    out_headers.emplace_back("x-request-id", g.request_id);
    out_headers.emplace_back("x-tokenserve-route", g.route_header(g.served_target));
    head_at = std::chrono::steady_clock::now();
    content_type = hd.header("content-type");
    if (content_type.empty()) content_type = "application/json";
    std::string te = hd.header("transfer-encoding");
    for (char& c : te) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (te.find("chunked") != std::string::npos || content_type.starts_with("text/event-stream")) {
      out_headers.emplace_back("Server-Timing", server_timing(g.posted, g.start, g.upstream_start, head_at));
      g.ex->start_stream(hd.status, content_type, std::move(out_headers));
      g.status = hd.status;
      mode = Mode::kStreaming;
    } else {
      mode = Mode::kBuffering;
    }
    return true;
  };
  h.on_body = [&](std::string_view d) {
    switch (mode) {
      case Mode::kNone:
        return true;
      case Mode::kRefusing:  // an error body, kept (bounded) to pass through if every target fails
        if (body.size() < (64u << 10)) body.append(d.substr(0, (64u << 10) - body.size()));
        return true;
      case Mode::kBuffering:
        if (body.size() + d.size() > (64u << 20)) {
          too_big = true;
          return false;
        }
        body.append(d);
        return true;
      case Mode::kStreaming:
        if (first) {
          g.rec.ttft_ms =
              std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - g.start).count();
          if (local) add_ttft(g.rec.ttft_ms);
          first = false;
        }
        // Usage rides in the last data event; the parser reassembles events split across reads.
        sse.feed(d, [&](const net::SseEvent& ev) {
          if (ev.data.find("\"usage\"") == std::string::npos) return;
          json j = json::parse(ev.data, nullptr, false);
          if (j.is_object()) read_usage(j, &g.rec, &g.have_usage);
        });
        if (!g.ex->write(std::string(d))) {  // the client went away: dropping the call cancels upstream
          client_gone = true;
          return false;
        }
        return true;
    }
    return true;
  };
  const std::string session_key = url.origin() + "|" + opts.ca_file;
  std::unique_ptr<net::HttpSession> session = take_session(session_key);
  g.upstream_start = std::chrono::steady_clock::now();
  auto r = session->stream(url, req, opts, h);
  const auto upstream_end = std::chrono::steady_clock::now();
  give_session(session_key, std::move(session));  // an aborted transfer left no connection in it
  const Status st = r.ok() ? Status() : r.status();
  switch (mode) {
    case Mode::kNone:
      out.end = st.code() == StatusCode::kCancelled ? Upstream::End::kCancelled : Upstream::End::kFailed;
      out.failure = st.code() == StatusCode::kCancelled ? "cancelled" : failure_name(stage, st);
      out.detail = st.message();
      return out;
    case Mode::kRefusing:
      out.end = Upstream::End::kRefused;
      out.failure = std::to_string(head.status);
      out.refusal = net::HttpResult{.head = std::move(head), .body = std::move(body)};
      return out;
    case Mode::kBuffering: {
      out.end = Upstream::End::kAnswered;
      if (!st.ok() || too_big) {
        g.outcome = st.code() == StatusCode::kCancelled ? "cancelled" : "error";
        std::string why = too_big ? std::string("response body over 64 MiB") : st.message();
        respond_error(g, make_error(502, "The upstream " + label + " failed while answering: " + why, "server_error",
                                    "upstream_error"), {}, g.route_header(g.served_target));
        settle(g, g.outcome == "cancelled" ? 499 : 502, g.outcome == "cancelled" ? "cancelled" : "error");
        return out;
      }
      json rj = json::parse(body, nullptr, false);
      if (rj.is_object()) read_usage(rj, &g.rec, &g.have_usage);
      http::Response resp;
      resp.status = head.status;
      resp.content_type = content_type;
      resp.headers = std::move(out_headers);
      resp.headers.emplace_back("Server-Timing", server_timing(g.posted, g.start, g.upstream_start, upstream_end));
      resp.body = std::move(body);
      count(label, resp.status);
      g.status = resp.status;
      g.outcome = head.status < 400 ? "ok" : "error";
      g.ex->respond(std::move(resp));
      settle(g, head.status, head.status < 400 ? "stop" : "error");
      return out;
    }
    case Mode::kStreaming:
      out.end = Upstream::End::kAnswered;
      if (client_gone || st.code() == StatusCode::kCancelled) {
        count(label, 499);
        g.outcome = "partial";
        settle(g, head.status, "cancelled");
        return out;
      }
      if (!st.ok()) {
        api::ApiError e = make_error(502, "The upstream " + label + " failed mid-stream: " + st.message(), "server_error",
                                     "upstream_error");
        g.ex->write("data: " + e.to_json() + "\n\n");
        g.ex->finish();
        count(label, 502);
        g.outcome = "partial";
        settle(g, 502, "error");
        return out;
      }
      g.ex->finish();
      count(label, head.status);
      g.outcome = head.status < 400 ? "ok" : "error";
      settle(g, head.status, "stop");
      return out;
  }
  return out;
}

http::HeaderList Proxy::upstream_headers(Gen& g) const {
  http::HeaderList h = {{"Content-Type", "application/json"},
                        {"x-request-id", g.request_id},
                        {"x-gateway-inference-objective", engine::tier_name(g.tier)},
                        {"x-gateway-inference-fairness-id", g.tenant}};
  if (!opts_.gateway_secret.empty()) {  // replicas run with --trust-gateway
    gateway::TrustedIdentity id{.tenant = g.tenant,
                                .app = g.admission ? g.admission->key.app : "default",
                                .tier = engine::tier_name(g.tier),
                                .request_id = g.request_id};
    g.last_signed_ms = std::max(unix_ms_now(), g.last_signed_ms + 1);
    h.emplace_back("Authorization", gateway::gateway_authorization(opts_.gateway_secret, id, g.last_signed_ms));
  }
  return h;
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
    decision = picker_.pick(PickRequest{.model = g.model, .tenant = g.tenant, .prompt = g.prompt,
                                        .batch = g.tier == engine::Tier::kBatch},
                            pool_.snapshot(),
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
    std::string record = rj.dump();
    g.picker_json = std::move(rj["decision"]);  // the audit row's "picker", not built twice
    std::lock_guard lock(mu_);
    decisions_.push_back(std::move(record));
    while (decisions_.size() > opts_.max_decisions) decisions_.pop_front();
  };
  if (decision.shed && decision.ranked.empty()) {
    // Batch is sheddable (GIE InferenceObjective priority < 0): at saturation it gets 429 +
    // Retry-After so the pool's queue serves interactive traffic first.
    keep_decision();
    shed_batch_.fetch_add(1);
    g.outcome = "shed";
    g.route.reason += "; batch shed (every endpoint waiting >= " +
                      std::to_string(static_cast<int64_t>(picker_.options().shed_batch_waiting)) + ")";
    gateway::Headers extra = g.admission ? g.admission->headers : gateway::Headers{};
    extra.emplace_back("Retry-After", std::to_string(opts_.shed_retry_after_s));
    respond_error(g, make_error(429, "The local pool is saturated; batch requests are shed first. Retry after " +
                                         std::to_string(opts_.shed_retry_after_s) + " s.",
                                "rate_limit_error", "batch_shed"),
                  extra, g.route_header("none"));
    settle(g, 429, "error");
    return TryResult::kAnswered;
  }
  if (decision.ranked.empty()) {
    keep_decision();
    g.last_failure = "no ready local endpoint";
    return TryResult::kFailed;
  }

  // GIE's EPP header for a chained proxy (HAProxy set-dst): the ranked list from `from` on, so a
  // retry through the chain names the next endpoint first.
  std::vector<std::string> ranked_addrs;
  for (const Candidate& c : decision.ranked) {
    Endpoint e;
    auto h = header_endpoints.find(c.name);
    if (h != header_endpoints.end()) e = h->second;
    else if (!pool_.lookup(c.name, &e)) continue;
    ranked_addrs.push_back(e.address + ":" + std::to_string(e.port));
  }
  auto headers_from = [&](const std::string& first) {
    http::HeaderList hl = upstream_headers(g);  // signed per attempt
    std::string list;
    bool on = false;
    for (const std::string& a : ranked_addrs) {
      on = on || a == first;
      if (!on) continue;
      if (!list.empty()) list += ",";
      list += a;
    }
    hl.emplace_back("x-gateway-destination-endpoint", list);
    return hl;
  };
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
    InFlight in_flight;  // failover targets are counted while tried
    if (ep.name != reserved.n) {
      picker_.record(ep.name, decision);
      pool_.begin_request(ep.name);
      in_flight.p = &pool_;
      in_flight.n = ep.name;
    }
    // Direct to the endpoint, or through the chained proxy that routes by the header.
    const std::string addr = ep.address + ":" + std::to_string(ep.port);
    net::Url url = opts_.chain_to ? *opts_.chain_to : net::Url{.host = ep.address, .port = ep.port};
    net::HttpRequest req{.method = "POST", .path = target, .headers = headers_from(addr), .body = in.body};
    net::HttpCallOptions co;
    co.deadline = std::chrono::steady_clock::now() + std::chrono::hours(24);  // a stream may be long;
    co.idle_timeout = opts_.upstream_timeout;                                  // a silent upstream may not
    co.connect_timeout = std::min<std::chrono::milliseconds>(opts_.upstream_timeout, std::chrono::milliseconds(3000));
    co.direct = true;  // local endpoints: never through an egress proxy from the environment
    Upstream up = call_upstream(
        g, url, req, co, [](int status) { return status == 502 || status == 503; },
        [&](const net::HttpResponseHead& head) {
          // Committed to this endpoint from here on: no failover after the first byte.
          record_attempt("ok", true);
          served_by = ep.name;
          g.served_by = ep.name;
          g.served_target = "local:" + ep.name;
          prefix_predicted_chars_.fetch_add(cand.prefix_blocks *
                                            static_cast<int64_t>(picker_.options().prefix.block_chars));
          http::HeaderList out_headers;
          for (const auto& [k, v] : head.headers)
            if (is_relayed_header(k) && !http::iequals(k, "content-type")) out_headers.emplace_back(k, v);
          out_headers.emplace_back("x-gateway-destination-endpoint-served", ep.address + ":" + std::to_string(ep.port));
          if (decision.guard_applied && g.route.rule_id == "builtin") g.route.reason = "imbalance-guard";
          keep_decision();
          return out_headers;
        },
        ep.name);
    if (up.end == Upstream::End::kAnswered) return TryResult::kAnswered;
    if (up.end == Upstream::End::kCancelled) {  // the client left before an answer: nobody to fail over for
      g.attempts.push_back({{"target", "local:" + ep.name}, {"endpoint", ep.name}, {"result", "cancelled"}});
      keep_decision();
      g.outcome = "cancelled";
      settle(g, 499, "cancelled");
      return TryResult::kAnswered;
    }
    record_attempt(up.failure.c_str(), false);
    if (up.end == Upstream::End::kRefused) {
      g.last_refusal = std::move(up.refusal);
      g.last_refusal_from = ep.name;
    } else {
      g.attempts.back()["detail"] = up.detail;
    }
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
  const std::string path = g.chat ? "/chat/completions" : "/completions";
  net::HttpRequest req{.method = "POST", .path = path, .headers = headers, .body = body.dump()};
  net::HttpCallOptions co;
  co.deadline = std::chrono::steady_clock::now() + std::chrono::hours(24);
  co.idle_timeout = remote.timeout;
  co.connect_timeout = std::min<std::chrono::milliseconds>(remote.timeout, std::chrono::milliseconds(10'000));
  co.ca_file = remote.ca_file;
  Upstream up = call_upstream(
      g, remote.url, req, co,
      // 429 and 5xx: the remote is busy or broken; 401/403: it refused the gateway's own key (a
      // configuration problem, never the client's). Other 4xx are the client's and relayed.
      [](int status) { return status == 429 || status >= 500 || status == 401 || status == 403; },
      [&](const net::HttpResponseHead& head) {
        record_attempt("ok", true);
        if (opts_.cooldowns) opts_.cooldowns->record_success(remote.name);
        g.served_by = label;
        g.served_target = label;
        http::HeaderList out_headers;
        for (const auto& [k, v] : head.headers)
          if (is_relayed_header(k) && !http::iequals(k, "content-type")) out_headers.emplace_back(k, v);
        return out_headers;
      },
      label);
  if (up.end == Upstream::End::kAnswered) return TryResult::kAnswered;
  if (up.end == Upstream::End::kCancelled) {
    g.attempts.push_back({{"target", label}, {"result", "cancelled"}});
    g.outcome = "cancelled";
    settle(g, 499, "cancelled");
    return TryResult::kAnswered;
  }
  if (up.end == Upstream::End::kFailed) {
    failed(up.failure);
    g.attempts.back()["detail"] = up.detail;
    return TryResult::kFailed;
  }
  const int status = up.refusal.head.status;
  std::optional<Millis> retry_after;
  if (status == 429) {
    std::string ra = up.refusal.head.header("retry-after");
    char* end = nullptr;
    double secs = std::strtod(ra.c_str(), &end);
    if (!ra.empty() && *end == '\0' && secs > 0) retry_after = Millis(static_cast<int64_t>(secs * 1000));
    else retry_after = remote.cooldown;
  }
  if (status == 401 || status == 403)
    log::warn("remote " + remote.name + " answered " + std::to_string(status) + " to the gateway's API key");
  failed(up.failure, retry_after);
  g.last_refusal = std::move(up.refusal);
  g.last_refusal_from = label;
  return TryResult::kFailed;
}

}  // namespace ts::router
