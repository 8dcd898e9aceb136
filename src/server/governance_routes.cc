#include "server/governance_routes.h"

#include <chrono>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "api/error.h"
#include "gateway/report.h"
#include "obs/request_log.h"

namespace ts::server {

namespace {

using json = nlohmann::json;

http::Response json_response(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

// Every response carries x-request-id (the client's valid one, or a fresh one).
void send(const http::ExchangePtr& ex, http::Response r) {
  r.set_header("X-Request-Id", obs::resolve_request_id(ex->request().header("x-request-id")));
  ex->respond(std::move(r));
}

void respond_error(const http::ExchangePtr& ex, const Status& st, std::string code = {}) {
  api::ApiError e = api::error_from_status(st, "", std::move(code));
  send(ex, json_response(e.http_status, e.to_json()));
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// "a=1&b=x%20y" -> {a: "1", b: "x y"}; malformed escapes keep the raw text.
std::map<std::string, std::string> parse_query(std::string_view q) {
  std::map<std::string, std::string> out;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    std::string name(part.substr(0, eq)), raw(eq == std::string_view::npos ? "" : part.substr(eq + 1));
    for (char& c : raw)
      if (c == '+') c = ' ';
    std::string value;
    if (!http::percent_decode(raw, &value)) value = raw;
    out[name] = value;
  }
  return out;
}

json key_json(const gateway::KeyInfo& k, gateway::WallTime now) {
  json tiers = json::array();
  for (auto t : k.tiers) tiers.push_back(engine::tier_name(t));
  const char* state = !k.enabled ? (k.replaced_by.empty() ? "disabled" : "rotated")
                      : (k.expires && now >= *k.expires) ? "expired"
                                                         : "active";
  return json{{"id", k.id},
              {"prefix", k.prefix},
              {"tenant", k.tenant},
              {"app", k.app},
              {"models", k.models},
              {"tiers", tiers},
              {"rpm", k.rpm},
              {"tpm", k.tpm},
              {"created", gateway::format_rfc3339(k.created)},
              {"expires", k.expires ? json(gateway::format_rfc3339(*k.expires)) : json(nullptr)},
              {"enabled", k.enabled},
              {"state", state},
              {"replaced_by", k.replaced_by.empty() ? json(nullptr) : json(k.replaced_by)}};
}

Result<gateway::KeySpec> parse_key_spec(const std::string& body, gateway::WallTime now) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_argument("body must be a JSON object");
  gateway::KeySpec spec;
  auto str = [&](const char* name, std::string* out) -> Status {
    if (!j.contains(name) || j[name].is_null()) return ok_status();
    if (!j[name].is_string()) return invalid_argument(std::string("'") + name + "' must be a string");
    *out = j[name].get<std::string>();
    return ok_status();
  };
  auto num = [&](const char* name, int64_t* out) -> Status {
    if (!j.contains(name) || j[name].is_null()) return ok_status();
    if (!j[name].is_number_integer() || j[name].get<int64_t>() < 0)
      return invalid_argument(std::string("'") + name + "' must be an integer >= 0");
    *out = j[name].get<int64_t>();
    return ok_status();
  };
  auto list = [&](const char* name, std::vector<std::string>* out) -> Status {
    if (!j.contains(name) || j[name].is_null()) return ok_status();
    if (!j[name].is_array()) return invalid_argument(std::string("'") + name + "' must be an array of strings");
    for (const auto& v : j[name]) {
      if (!v.is_string()) return invalid_argument(std::string("'") + name + "' must be an array of strings");
      out->push_back(v.get<std::string>());
    }
    return ok_status();
  };
  TS_RETURN_IF_ERROR(str("tenant", &spec.tenant));
  TS_RETURN_IF_ERROR(str("app", &spec.app));
  TS_RETURN_IF_ERROR(num("rpm", &spec.rpm));
  TS_RETURN_IF_ERROR(num("tpm", &spec.tpm));
  TS_RETURN_IF_ERROR(list("models", &spec.models));
  std::vector<std::string> tiers;
  TS_RETURN_IF_ERROR(list("tiers", &tiers));
  for (const auto& t : tiers) {
    TS_ASSIGN_OR_RETURN(engine::Tier tier, engine::parse_tier(t));
    spec.tiers.push_back(tier);
  }
  std::string expires;
  TS_RETURN_IF_ERROR(str("expires", &expires));
  if (!expires.empty()) {
    TS_ASSIGN_OR_RETURN(gateway::WallTime at, gateway::parse_time_or_offset(expires, now));
    spec.expires = at;
  }
  if (spec.tenant.empty() || spec.app.empty()) return invalid_argument("'tenant' and 'app' are required");
  return spec;
}

class Routes {
 public:
  explicit Routes(gateway::Governor& gov) : gov_(gov) {}

  void usage_me(const http::ExchangePtr& ex) {
    auto me = gov_.usage_me(ex->request().header("authorization"));
    if (!me.ok()) {
      bool down = me.status().code() == StatusCode::kUnavailable;
      return respond_error(ex, me.status(), down ? "service_unavailable" : "invalid_api_key");
    }
    send(ex, json_response(200, gateway::usage_me_json(*me)));
  }

  // True when the caller holds the admin key; answers 401 otherwise.
  bool admin(const http::ExchangePtr& ex) {
    if (gov_.is_admin(ex->request().header("authorization"))) return true;
    bool configured = !gov_.config()->admin_key_sha256.empty();
    respond_error(ex,
                  Status(StatusCode::kUnauthenticated,
                         configured ? "This endpoint needs the admin key (Authorization: Bearer <admin key>)."
                                    : "The admin API is disabled: set [admin] key_sha256 in the governance config."),
                  "invalid_admin_key");
    return false;
  }

  void create_key(const http::ExchangePtr& ex) {
    if (!admin(ex)) return;
    gateway::WallTime now = std::chrono::system_clock::now();
    auto spec = parse_key_spec(ex->request().body, now);
    if (!spec.ok()) return respond_error(ex, spec.status());
    auto created = gov_.keys()->create(*spec);
    if (!created.ok()) return respond_error(ex, created.status());
    json j = key_json(created->info, now);
    j["key"] = created->secret;
    send(ex, json_response(201, dump(j)));
  }

  void list_keys(const http::ExchangePtr& ex) {
    if (!admin(ex)) return;
    auto q = parse_query(ex->request().query);
    auto keys = gov_.keys()->list(q["tenant"]);
    if (!keys.ok()) return respond_error(ex, keys.status());
    gateway::WallTime now = std::chrono::system_clock::now();
    json data = json::array();
    for (const auto& k : *keys) data.push_back(key_json(k, now));
    send(ex, json_response(200, dump(json{{"object", "list"}, {"data", data}})));
  }

  void disable_key(const http::ExchangePtr& ex) {
    if (!admin(ex)) return;
    std::string id(ex->request().path_param("id"));
    if (Status st = gov_.keys()->disable(id); !st.ok()) return respond_error(ex, st);
    send(ex, json_response(200, dump(json{{"id", id}, {"enabled", false}})));
  }

  void rotate_key(const http::ExchangePtr& ex) {
    if (!admin(ex)) return;
    std::string id(ex->request().path_param("id"));
    auto created = gov_.keys()->rotate(id);
    if (!created.ok()) return respond_error(ex, created.status());
    json j = key_json(created->info, std::chrono::system_clock::now());
    j["key"] = created->secret;
    j["replaces"] = id;
    send(ex, json_response(201, dump(j)));
  }

  void usage(const http::ExchangePtr& ex) {
    if (!admin(ex)) return;
    auto q = parse_query(ex->request().query);
    auto by = gateway::parse_group_by(q.count("by") ? q["by"] : "tenant");
    if (!by.ok()) return respond_error(ex, by.status());
    gateway::LedgerFilter filter;
    filter.tenant = q["tenant"];
    if (!q["from"].empty()) {
      auto from = gateway::parse_rfc3339(q["from"]);
      if (!from.ok()) return respond_error(ex, from.status());
      filter.from = *from;
    }
    if (!q["to"].empty()) {
      auto to = gateway::parse_rfc3339(q["to"]);
      if (!to.ok()) return respond_error(ex, to.status());
      filter.to = q["to"].size() == 10 ? *to + std::chrono::days(1) : *to;  // a bare date: that whole day
    }
    auto report = gateway::build_report(*gov_.ledger(), *by, filter, gov_.config()->prices);
    if (!report.ok()) return respond_error(ex, report.status());
    send(ex, json_response(200, gateway::format_report(*report, gateway::ReportFormat::kJson)));
  }

 private:
  gateway::Governor& gov_;
};

}  // namespace

void register_governance_routes(http::Server& server, gateway::Governor& governor,
                                std::function<http::Handler(http::Handler)> offload) {
  auto routes = std::make_shared<Routes>(governor);
  using http::Method;
  auto bind = [routes, offload](void (Routes::*fn)(const http::ExchangePtr&)) {
    http::Handler h = [routes, fn](const http::ExchangePtr& ex) { ((*routes).*fn)(ex); };
    return offload ? offload(std::move(h)) : h;
  };
  server.route(Method::kGet, "/v1/usage/me", bind(&Routes::usage_me));
  server.route(Method::kPost, "/admin/keys", bind(&Routes::create_key));
  server.route(Method::kGet, "/admin/keys", bind(&Routes::list_keys));
  server.route(Method::kPost, "/admin/keys/{id}/disable", bind(&Routes::disable_key));
  server.route(Method::kPost, "/admin/keys/{id}/rotate", bind(&Routes::rotate_key));
  server.route(Method::kGet, "/admin/usage", bind(&Routes::usage));
}

}  // namespace ts::server
