// pool = gie: the local target is one upstream URL, the Gateway API Inference Extension route
// (Envoy Gateway HTTPRoute -> InferencePool, whose endpoint picker chooses the replica). The
// gateway does no picking of its own there; it speaks the EPP header contract (see proxy.h).
#include "core/log.h"
#include "router/proxy.h"
#include "router/proxy_request.h"

namespace ts::router {

using namespace proxy_detail;

void Proxy::gie_attempt(const GenPtr& gp) {
  Gen& g = *gp;
  const net::Url& pool = *opts_.gie_pool;
  const std::string label = "gie";
  auto record_attempt = [this, gp, label, origin = pool.origin()](const std::string& result, bool ok) {
    Gen& g = *gp;
    g.attempts.push_back(AttemptRecord{.target = "local:gie", .endpoint = origin, .result = result});
    if (!ok) g.last_failure = "local:gie " + result;
    std::lock_guard lock(mu_);
    ++attempts_[{label, result}];
  };
  // The objective and fairness id drive the EPP's priority and fairness (InferenceObjective);
  // no destination header: the pool's picker chooses.
  net::HttpRequest req{.method = "POST",
                       .path = g.chat ? "/v1/chat/completions" : "/v1/completions",
                       .headers = upstream_headers(g),
                       .body = g.ex->request().body};
  net::HttpCallOptions co;
  co.deadline = std::chrono::steady_clock::now() + std::chrono::hours(24);
  co.idle_timeout = opts_.upstream_timeout;
  co.connect_timeout = std::min<std::chrono::milliseconds>(opts_.upstream_timeout, std::chrono::milliseconds(3000));
  co.ca_file = opts_.gie_ca_file;
  co.direct = true;  // the in-cluster route, never through an egress proxy
  g.served_target = "local:gie";
  call_upstream(
      gp, pool, std::move(req), co, [](int status) { return status == 502 || status == 503; },
      [gp, record_attempt](const net::HttpResponseHead& head) {
        Gen& g = *gp;
        record_attempt("ok", true);
        // The data plane says which endpoint served (GIE's x-gateway-destination-endpoint-served).
        std::string served = head.header("x-gateway-destination-endpoint-served");
        g.served_by = served.empty() ? "gie" : served;
        g.served_target = "local:gie" + (served.empty() ? std::string() : "/" + served);
        http::HeaderList out;
        for (const auto& [k, v] : head.headers)
          if (is_relayed_header(k) && !http::iequals(k, "content-type")) out.emplace_back(k, v);
        if (!served.empty()) out.emplace_back("x-gateway-destination-endpoint-served", served);
        return out;
      },
      label,
      [this, gp, record_attempt](Upstream up) {
        Gen& g = *gp;
        if (up.end == Upstream::End::kAnswered) return audit(g);
        if (up.end == Upstream::End::kCancelled) {
          g.attempts.push_back(AttemptRecord{.target = "local:gie", .result = "cancelled"});
          g.outcome = "cancelled";
          settle(g, 499, "cancelled");
          return audit(g);
        }
        g.served_target.clear();
        record_attempt(up.failure, false);
        if (up.end == Upstream::End::kRefused) {
          g.last_refusal = std::move(up.refusal);
          g.last_refusal_from = "gie";
        } else {
          g.attempts.back().detail = up.detail;
        }
        target_failed(gp);
      });
}

}  // namespace ts::router
