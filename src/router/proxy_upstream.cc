// The proxy's targets: the local pool (picker + failover down the ranked list) and named
// remotes, and the relay of an upstream's answer to the client (see proxy.h).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"
#include "gateway/json_text.h"
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

void Proxy::call_upstream(const GenPtr& gp, const net::Url& url, net::HttpRequest req, net::HttpCallOptions opts,
                          std::function<bool(int)> is_refusal,
                          std::function<http::HeaderList(const net::HttpResponseHead&)> commit, std::string label,
                          Then then) {
  enum class Mode { kNone, kRefusing, kBuffering, kStreaming };
  // What the handlers gather; shared by them and the completion (all on the client's strand).
  struct Relay {
    Mode mode = Mode::kNone;
    net::HttpResponseHead head;
    std::string content_type, body;
    bool first = true, client_gone = false, too_big = false;
    net::SseParser sse;
    std::function<bool(int)> is_refusal;
    std::function<http::HeaderList(const net::HttpResponseHead&)> commit;
  };
  auto relay = std::make_shared<Relay>();
  relay->is_refusal = std::move(is_refusal);
  relay->commit = std::move(commit);
  const bool local = !label.starts_with("remote:");  // local TTFTs feed the `when` rules' p95
  Gen& g = *gp;
  net::HttpHandlers h;
  h.on_head = [this, gp, relay](const net::HttpResponseHead& hd) {
    Gen& g = *gp;
    Relay& r = *relay;
    r.head = hd;
    if (r.is_refusal(hd.status)) {
      r.mode = Mode::kRefusing;
      return true;
    }
    http::HeaderList out_headers = r.commit(hd);  // the attempt is the answer now: no failover after this byte
    if (g.admission)
      for (const auto& x : g.admission->headers) out_headers.push_back(x);
    out_headers.emplace_back("x-request-id", g.request_id);
    out_headers.emplace_back("x-tokenserve-route", g.route_header(g.served_target));
    r.content_type = hd.header("content-type");
    if (r.content_type.empty()) r.content_type = "application/json";
    std::string te = hd.header("transfer-encoding");
    for (char& c : te) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (te.find("chunked") != std::string::npos || r.content_type.starts_with("text/event-stream")) {
      out_headers.emplace_back("Server-Timing", server_timing(g.posted, g.start, g.upstream_start, std::chrono::steady_clock::now()));
      g.ex->start_stream(hd.status, r.content_type, std::move(out_headers));
      g.status = hd.status;
      r.mode = Mode::kStreaming;
    } else {
      r.head.headers = std::move(out_headers);  // relayed with the whole body (the upstream's own are no longer needed)
      r.mode = Mode::kBuffering;
    }
    return true;
  };
  h.on_body = [this, gp, relay, local](std::string_view d) {
    Gen& g = *gp;
    Relay& r = *relay;
    switch (r.mode) {
      case Mode::kNone:
        return true;
      case Mode::kRefusing:  // an error body, kept (bounded) to pass through if every target fails
        if (r.body.size() < (64u << 10)) r.body.append(d.substr(0, (64u << 10) - r.body.size()));
        return true;
      case Mode::kBuffering:
        if (r.body.size() + d.size() > (64u << 20)) {
          r.too_big = true;
          return false;
        }
        r.body.append(d);
        return true;
      case Mode::kStreaming:
        if (r.first) {
          g.rec.ttft_ms =
              std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - g.start).count();
          if (local) add_ttft(g.rec.ttft_ms);
          r.first = false;
        }
        // Usage rides in the last data event; the parser reassembles events split across reads.
        r.sse.feed(d, [&](const net::SseEvent& ev) {
          if (ev.data.find("\"usage\"") == std::string::npos) return;
          json j = json::parse(ev.data, nullptr, false);
          if (j.is_object()) read_usage(j, &g.rec, &g.have_usage);
        });
        if (!g.ex->write(std::string(d))) {  // the client went away: stopping the call cancels upstream
          r.client_gone = true;
          return false;
        }
        return true;
    }
    return true;
  };
  auto done = [this, gp, relay, label, then = std::move(then)](UpstreamEnd end) mutable {
    Gen& g = *gp;
    Relay& r = *relay;
    const auto upstream_end = std::chrono::steady_clock::now();
    const Status st = end.result.ok() ? Status() : end.result.status();
    Upstream out;
    switch (r.mode) {
      case Mode::kNone:
        out.end = st.code() == StatusCode::kCancelled ? Upstream::End::kCancelled : Upstream::End::kFailed;
        out.failure = st.code() == StatusCode::kCancelled ? "cancelled" : failure_name(end.stage, st);
        out.detail = st.message();
        break;
      case Mode::kRefusing:
        out.end = Upstream::End::kRefused;
        out.failure = std::to_string(r.head.status);
        out.refusal = net::HttpResult{.head = std::move(r.head), .body = std::move(r.body)};
        break;
      case Mode::kBuffering: {
        out.end = Upstream::End::kAnswered;
        if (!st.ok() || r.too_big) {
          g.outcome = st.code() == StatusCode::kCancelled ? "cancelled" : "error";
          std::string why = r.too_big ? std::string("response body over 64 MiB") : st.message();
          respond_error(g, make_error(502, "The upstream " + label + " failed while answering: " + why, "server_error",
                                      "upstream_error"), {}, g.route_header(g.served_target));
          out.settle_status = g.outcome == "cancelled" ? 499 : 502;
          out.settle_finish = g.outcome == "cancelled" ? "cancelled" : "error";
          break;
        }
        if (r.body.find("\"usage\"") != std::string::npos) {
          json rj = json::parse(r.body, nullptr, false);
          if (rj.is_object()) read_usage(rj, &g.rec, &g.have_usage);
        }
        http::Response resp;
        resp.status = r.head.status;
        resp.content_type = std::move(r.content_type);
        resp.headers = std::move(r.head.headers);
        resp.headers.emplace_back("Server-Timing", server_timing(g.posted, g.start, g.upstream_start, upstream_end));
        resp.body = std::move(r.body);
        count(label, resp.status);
        g.status = resp.status;
        g.outcome = resp.status < 400 ? "ok" : "error";
        out.settle_status = resp.status;
        out.settle_finish = resp.status < 400 ? "stop" : "error";
        g.ex->respond(std::move(resp));
        break;
      }
      case Mode::kStreaming:
        out.end = Upstream::End::kAnswered;
        if (r.client_gone || st.code() == StatusCode::kCancelled) {
          count(label, 499);
          g.outcome = "partial";
          out.settle_status = r.head.status;
          out.settle_finish = "cancelled";
          break;
        }
        if (!st.ok()) {
          api::ApiError e = make_error(502, "The upstream " + label + " failed mid-stream: " + st.message(), "server_error",
                                       "upstream_error");
          g.ex->write("data: " + e.to_json() + "\n\n");
          g.ex->finish();
          count(label, 502);
          g.outcome = "partial";
          out.settle_status = 502;
          out.settle_finish = "error";
          break;
        }
        g.ex->finish();
        count(label, r.head.status);
        g.outcome = r.head.status < 400 ? "ok" : "error";
        out.settle_status = r.head.status;
        out.settle_finish = "stop";
        break;
    }
    const bool answered = out.end == Upstream::End::kAnswered;
    auto step = [this, gp, out = std::move(out), then = std::move(then)]() mutable {
      if (out.settle_finish) settle(*gp, out.settle_status, out.settle_finish);
      then(std::move(out));
    };
    // The answer (or the stream's end) is queued on the client's connection now. With inline
    // steps the settlement (the ledger's journal line, a file write) and the audit row go behind
    // it in the io thread's queue, so the client's bytes leave first; on workers they run beside.
    if (answered && opts_.inline_steps) client_->post(std::move(step));
    else resume(gp, std::move(step));
  };
  g.upstream_start = std::chrono::steady_clock::now();
  const uint64_t id = client_->start(url, std::move(req), std::move(opts), std::move(h), std::move(done));
  g.set_call(id);
  if (g.cancelled.load()) client_->cancel(id);  // the client left while this call was being set up
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

void Proxy::keep_decision(Gen& g) {
  if (g.decision_kept) return;
  g.decision_kept = true;
  // The picker's record is serialized once: the /router/decisions record and the audit row's
  // "picker" splice the same text (a JSON tree per record, copied and dumped twice, was a
  // visible share of the io thread's time per request).
  // Both written straight to text (json_text.h), as their to_json() forms dump.
  g.picker_dump.clear();
  g.picker.append_json(g.picker_dump);
  std::string record;
  record.reserve(128 + g.request_id.size() + g.model.size() + g.picker_dump.size() + 96 * g.attempts.size());
  record = "{\"request_id\":";
  gateway::append_json_string(record, g.request_id);
  record += ",\"model\":";
  gateway::append_json_string(record, g.model);
  record += ",\"tenant\":";
  gateway::append_json_string(record, g.tenant);
  record += ",\"served_by\":";
  gateway::append_json_string(record, g.local_served_by);
  record += ",\"attempts\":";
  append_attempts_json(record, g.attempts);
  record += ",\"decision\":";
  record += g.picker_dump;
  record += "}";
  std::lock_guard lock(mu_);
  decisions_.push_back(std::move(record));
  while (decisions_.size() > opts_.max_decisions) decisions_.pop_front();
}

void Proxy::local_begin(const GenPtr& gp) {
  Gen& g = *gp;
  const http::Request& in = g.ex->request();
  g.local_release();  // a plan naming local twice starts afresh
  g.header_endpoints.clear();
  g.ranked_addrs.clear();
  g.next_candidate = 0;
  g.tries = 0;
  g.local_served_by.clear();
  g.decision_kept = false;
  // Pick and count the request on the winner in one step, so concurrent picks see each other
  // (a scrape lags; without this, simultaneous requests all pick the same idle endpoint).
  Decision& decision = g.picker;
  g.picked = true;
  {
    std::lock_guard lock(pick_mu_);
    decision = picker_.pick(PickRequest{.model = g.model, .tenant = g.tenant, .prompt = g.prompt,
                                        .batch = g.tier == engine::Tier::kBatch},
                            pool_.snapshot(),
                            Clock::now());
    if (!decision.ranked.empty()) {
      g.reserved = decision.ranked[0].name;
      pool_.begin_request(g.reserved);
      // Index the prompt at once (as GIE's approximate scorer does on pick), so requests with
      // the same prefix that arrive while this one runs find it.
      picker_.record(g.reserved, decision);
    }
  }
  // An upstream picker's choice (GIE EPP header), when trusted: walk its list in order.
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
      if (g.header_endpoints.emplace(ep.name, ep).second) ranked.push_back(Candidate{.name = ep.name});
    }
    if (!ranked.empty()) decision.ranked = std::move(ranked);
  }
  if (decision.shed && decision.ranked.empty()) {
    // Batch is sheddable (GIE InferenceObjective priority < 0): at saturation it gets 429 +
    // Retry-After so the pool's queue serves interactive traffic first.
    keep_decision(g);
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
    g.local_release();
    return audit(g);
  }
  if (decision.ranked.empty()) {
    keep_decision(g);
    g.last_failure = "no ready local endpoint";
    g.local_release();
    return target_failed(gp);
  }
  // GIE's EPP header for a chained proxy (HAProxy set-dst): the ranked list from `from` on, so a
  // retry through the chain names the next endpoint first.
  for (const Candidate& c : decision.ranked) {
    Endpoint e;
    auto h = g.header_endpoints.find(c.name);
    if (h != g.header_endpoints.end()) e = h->second;
    else if (!pool_.lookup(c.name, &e)) continue;
    g.ranked_addrs.push_back(e.address + ":" + std::to_string(e.port));
  }
  local_attempt(gp);
}

void Proxy::local_attempt(const GenPtr& gp) {
  Gen& g = *gp;
  const Decision& decision = g.picker;
  // The next candidate that still resolves to an endpoint.
  Endpoint ep;
  const Candidate* cand = nullptr;
  while (g.next_candidate < decision.ranked.size() && g.tries < opts_.max_attempts && !g.ex->cancelled()) {
    const Candidate& c = decision.ranked[g.next_candidate++];
    if (auto h = g.header_endpoints.find(c.name); h != g.header_endpoints.end()) ep = h->second;
    else if (!pool_.lookup(c.name, &ep)) continue;
    cand = &c;
    break;
  }
  if (!cand) {
    keep_decision(g);
    if (g.tries == 0) g.last_failure = "no reachable local endpoint";
    g.local_release();
    return target_failed(gp);
  }
  ++g.tries;
  if (ep.name != g.reserved) {  // failover targets are counted while tried
    picker_.record(ep.name, decision);
    pool_.begin_request(ep.name);
    g.in_flight = ep.name;
  }
  const std::string addr = ep.address + ":" + std::to_string(ep.port);
  http::HeaderList hl = upstream_headers(g);  // signed per attempt
  {
    std::string list;
    bool on = false;
    for (const std::string& a : g.ranked_addrs) {
      on = on || a == addr;
      if (!on) continue;
      if (!list.empty()) list += ",";
      list += a;
    }
    hl.emplace_back("x-gateway-destination-endpoint", std::move(list));
  }
  // Direct to the endpoint, or through the chained proxy that routes by the header.
  net::Url url = opts_.chain_to ? *opts_.chain_to : net::Url{.host = ep.address, .port = ep.port};
  net::HttpRequest req{.method = "POST", .path = g.chat ? "/v1/chat/completions" : "/v1/completions",
                       .headers = std::move(hl), .body = g.ex->request().body};
  net::HttpCallOptions co;
  co.deadline = std::chrono::steady_clock::now() + std::chrono::hours(24);  // a stream may be long;
  co.idle_timeout = opts_.upstream_timeout;                                  // a silent upstream may not
  co.connect_timeout = std::min<std::chrono::milliseconds>(opts_.upstream_timeout, std::chrono::milliseconds(3000));
  co.direct = true;  // local endpoints: never through an egress proxy from the environment
  const int64_t prefix_blocks = cand->prefix_blocks;
  auto record_attempt = [this, gp, name = ep.name](const char* result, bool ok) {
    Gen& g = *gp;
    g.attempts.push_back(AttemptRecord{.target = "local:" + name, .endpoint = name, .result = result});
    if (!ok) g.last_failure = "local:" + name + " " + result;
    pool_.report_attempt(name, ok);
    std::lock_guard lock(mu_);
    ++attempts_[{name, result}];
  };
  call_upstream(
      gp, url, std::move(req), co, [](int status) { return status == 502 || status == 503; },
      [this, gp, ep, prefix_blocks, record_attempt](const net::HttpResponseHead& head) {
        // Committed to this endpoint from here on: no failover after the first byte.
        Gen& g = *gp;
        record_attempt("ok", true);
        g.local_served_by = ep.name;
        g.served_by = ep.name;
        g.served_target = "local:" + ep.name;
        prefix_predicted_chars_.fetch_add(prefix_blocks * static_cast<int64_t>(picker_.options().prefix.block_chars));
        http::HeaderList out_headers;
        for (const auto& [k, v] : head.headers)
          if (is_relayed_header(k) && !http::iequals(k, "content-type")) out_headers.emplace_back(k, v);
        out_headers.emplace_back("x-gateway-destination-endpoint-served", ep.address + ":" + std::to_string(ep.port));
        if (g.picker.guard_applied && g.route.rule_id == "builtin") g.route.reason = "imbalance-guard";
        keep_decision(g);
        return out_headers;
      },
      ep.name,
      [this, gp, name = ep.name, record_attempt](Upstream up) {
        Gen& g = *gp;
        if (!g.in_flight.empty()) {
          pool_.end_request(g.in_flight);
          g.in_flight.clear();
        }
        if (up.end == Upstream::End::kAnswered) {
          g.local_release();
          return audit(g);
        }
        if (up.end == Upstream::End::kCancelled) {  // the client left before an answer: nobody to fail over for
          g.attempts.push_back(AttemptRecord{.target = "local:" + name, .endpoint = name, .result = "cancelled"});
          keep_decision(g);
          g.outcome = "cancelled";
          settle(g, 499, "cancelled");
          g.local_release();
          return audit(g);
        }
        record_attempt(up.failure.c_str(), false);
        if (up.end == Upstream::End::kRefused) {
          g.last_refusal = std::move(up.refusal);
          g.last_refusal_from = name;
        } else {
          g.attempts.back().detail = up.detail;
        }
        local_attempt(gp);
      });
}

void Proxy::remote_attempt(const GenPtr& gp, const RemoteConfig& remote) {
  Gen& g = *gp;
  const std::string label = "remote:" + remote.name;
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
  net::HttpRequest req{.method = "POST", .path = path, .headers = std::move(headers), .body = body.dump()};
  net::HttpCallOptions co;
  co.deadline = std::chrono::steady_clock::now() + std::chrono::hours(24);
  co.idle_timeout = remote.timeout;
  co.connect_timeout = std::min<std::chrono::milliseconds>(remote.timeout, std::chrono::milliseconds(10'000));
  co.ca_file = remote.ca_file;
  auto record_attempt = [this, gp, label](const std::string& result, bool ok) {
    Gen& g = *gp;
    g.attempts.push_back(AttemptRecord{.target = label, .result = result});
    if (!ok) g.last_failure = label + " " + result;
    std::lock_guard lock(mu_);
    ++attempts_[{label, result}];
  };
  call_upstream(
      gp, remote.url, std::move(req), co,
      // 429 and 5xx: the remote is busy or broken; 401/403: it refused the gateway's own key (a
      // configuration problem, never the client's). Other 4xx are the client's and relayed.
      [](int status) { return status == 429 || status >= 500 || status == 401 || status == 403; },
      [gp, label, record_attempt](const net::HttpResponseHead& head) {
        Gen& g = *gp;
        record_attempt("ok", true);
        g.served_by = label;
        g.served_target = label;
        http::HeaderList out_headers;
        for (const auto& [k, v] : head.headers)
          if (is_relayed_header(k) && !http::iequals(k, "content-type")) out_headers.emplace_back(k, v);
        return out_headers;
      },
      label,
      [this, gp, &remote, label, record_attempt](Upstream up) {
        Gen& g = *gp;
        // Counts a failure toward the cooldown (or starts one for a 429's Retry-After). The
        // tracker may be Redis-backed: this runs as a blocking step.
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
        if (up.end == Upstream::End::kAnswered) {
          if (opts_.cooldowns && g.served_target == label) opts_.cooldowns->record_success(remote.name);
          return audit(g);
        }
        if (up.end == Upstream::End::kCancelled) {
          g.attempts.push_back(AttemptRecord{.target = label, .result = "cancelled"});
          g.outcome = "cancelled";
          settle(g, 499, "cancelled");
          return audit(g);
        }
        if (up.end == Upstream::End::kFailed) {
          failed(up.failure);
          g.attempts.back().detail = up.detail;
          return target_failed(gp);
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
        target_failed(gp);
      });
}

}  // namespace ts::router
