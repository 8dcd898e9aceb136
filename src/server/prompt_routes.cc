#include "server/prompt_routes.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "api/error.h"
#include "chat/chat_template.h"
#include "chat/parser.h"
#include "gateway/report.h"
#include "obs/request_log.h"

namespace ts::server {

namespace {

using json = nlohmann::json;

// ---- Template analysis ----

struct NameUse {
  std::set<std::string> used, bound, guarded;
};

void walk_body(const chat::Body& body, NameUse& u);

void walk_expr(const chat::Expr* e, NameUse& u) {
  if (!e) return;
  if (e->kind == chat::ExprKind::kName) u.used.insert(e->name);
  if (e->kind == chat::ExprKind::kTest && (e->name == "defined" || e->name == "undefined") &&
      !e->children.empty() && e->children[0] && e->children[0]->kind == chat::ExprKind::kName)
    u.guarded.insert(e->children[0]->name);
  if (e->kind == chat::ExprKind::kFilter && e->name == "default" && !e->children.empty() && e->children[0] &&
      e->children[0]->kind == chat::ExprKind::kName)
    u.guarded.insert(e->children[0]->name);
  for (const auto& c : e->children) walk_expr(c.get(), u);
  for (const auto& kw : e->kwargs) walk_expr(kw.second.get(), u);
}

void walk_body(const chat::Body& body, NameUse& u) {
  for (const auto& s : body) {
    if (!s) continue;
    walk_expr(s->expr.get(), u);
    walk_expr(s->cond.get(), u);
    for (const auto& t : s->targets) u.bound.insert(t);
    if (s->kind == chat::StmtKind::kMacro) u.bound.insert(s->text);
    for (const auto& p : s->params) {
      u.bound.insert(p.name);
      walk_expr(p.default_value.get(), u);
    }
    for (const auto& [cond, b] : s->branches) {
      walk_expr(cond.get(), u);
      walk_body(b, u);
    }
    walk_body(s->body, u);
    walk_body(s->else_body, u);
  }
}

Status template_names(const std::string& src, NameUse& u) {
  // The same parser the renderer uses, for its error message with line and column.
  auto parsed = chat::ChatTemplate::parse(src);
  if (!parsed.ok()) return invalid_argument("template: " + parsed.status().message());
  try {
    chat::Body body = chat::parse_template(src);
    walk_body(body, u);
  } catch (const chat::JinjaError& e) {
    return invalid_argument(std::string("template: ") + e.what());
  } catch (const std::exception& e) {
    return invalid_argument(std::string("template: ") + e.what());
  }
  return ok_status();
}

const std::set<std::string>& jinja_globals() {
  static const std::set<std::string> g = {"range", "namespace", "loop", "dict", "lipsum", "cycler", "joiner",
                                          "raise_exception", "strftime_now", "true", "false", "none",
                                          "True", "False", "None", "caller", "varargs", "kwargs"};
  return g;
}

Result<json> parse_messages_content(const std::string& content) {
  json m = json::parse(content, nullptr, false);
  if (!m.is_array() || m.empty()) return invalid_argument("'messages' must be a non-empty array");
  for (size_t i = 0; i < m.size(); ++i) {
    const json& x = m[i];
    if (!x.is_object() || !x.contains("role") || !x["role"].is_string() || !x.contains("content") ||
        !x["content"].is_string())
      return invalid_argument("'messages[" + std::to_string(i) + "]' must be {\"role\": string, \"content\": string}");
  }
  return m;
}

// ---- HTTP plumbing ----

http::Response json_response(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

void send(const http::ExchangePtr& ex, http::Response r) {
  r.set_header("X-Request-Id", obs::resolve_request_id(ex->request().header("x-request-id")));
  ex->respond(std::move(r));
}

void respond_error(const http::ExchangePtr& ex, const Status& st, std::string param = {}, std::string code = {}) {
  api::ApiError e = api::error_from_status(st, std::move(param), std::move(code));
  send(ex, json_response(e.http_status, e.to_json()));
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::map<std::string, std::string> parse_query(std::string_view q) {
  std::map<std::string, std::string> out;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    size_t eq = part.find('=');
    std::string raw(eq == std::string_view::npos ? "" : part.substr(eq + 1)), value;
    if (!http::percent_decode(raw, &value)) value = raw;
    out[std::string(part.substr(0, eq))] = value;
  }
  return out;
}

json version_json(const gateway::PromptVersion& v) {
  json j = {{"object", "prompt.version"}, {"id", v.id},         {"version", v.version},
            {"hash", v.hash},             {"tenant", v.tenant}, {"kind", v.kind},
            {"variables", v.variables},   {"labels", v.labels}, {"created", gateway::format_rfc3339(v.created)}};
  if (v.kind == "messages") j["messages"] = json::parse(v.content, nullptr, false);
  else j["template"] = v.content;
  return j;
}

bool parse_version(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 12 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  *out = std::stoll(s);
  return *out >= 1;
}

// Who is calling: admin (everything), a tenant (read own), or refused (response sent).
struct Caller {
  bool admin = false;
  std::optional<std::string> tenant;  // nullopt for admins
};

class Routes {
 public:
  explicit Routes(PromptRouteOptions o) : o_(o) {}

  std::optional<Caller> caller(const http::ExchangePtr& ex) {
    if (!o_.require_auth || !o_.governor) return Caller{.admin = true};
    std::string_view auth = ex->request().header("authorization");
    if (o_.governor->is_admin(auth)) return Caller{.admin = true};
    auto key = o_.governor->keys()->authenticate(auth);
    if (!key.ok()) {
      respond_error(ex, key.status(), "", key.status().code() == StatusCode::kUnavailable ? "service_unavailable"
                                                                                           : "invalid_api_key");
      return std::nullopt;
    }
    return Caller{.admin = false, .tenant = key->tenant};
  }

  bool require_admin(const http::ExchangePtr& ex, const Caller& c) {
    if (c.admin) return true;
    respond_error(ex, Status(StatusCode::kPermissionDenied, "changing prompts needs the admin key"), "",
                  "admin_required");
    return false;
  }

  void create(const http::ExchangePtr& ex) {
    auto c = caller(ex);
    if (!c || !require_admin(ex, *c)) return;
    auto spec = parse_prompt_create(ex->request().body);
    if (!spec.ok()) return respond_error(ex, spec.status());
    auto r = o_.registry->create(*spec);
    if (!r.ok()) return respond_error(ex, r.status(), r.status().code() == StatusCode::kInvalidArgument ? "id" : "");
    json j = {{"object", "prompt.version"}, {"id", r->version.id},       {"version", r->version.version},
              {"hash", r->version.hash},    {"created", r->created},     {"labels", r->version.labels},
              {"variables", r->version.variables}};
    send(ex, json_response(r->created ? 201 : 200, dump(j)));
  }

  void list(const http::ExchangePtr& ex) {
    auto c = caller(ex);
    if (!c) return;
    auto r = o_.registry->list(c->tenant);
    if (!r.ok()) return respond_error(ex, r.status());
    json data = json::array();
    for (const auto& s : *r)
      data.push_back({{"object", "prompt"}, {"id", s.id}, {"tenant", s.tenant}, {"latest_version", s.latest_version},
                      {"versions", s.num_versions}, {"labels", s.labels}});
    send(ex, json_response(200, dump(json{{"object", "list"}, {"data", data}})));
  }

  void get(const http::ExchangePtr& ex) {
    auto c = caller(ex);
    if (!c) return;
    gateway::PromptRef ref{.id = std::string(ex->request().path_param("id"))};
    auto q = parse_query(ex->request().query);
    if (q.count("version") && q.count("label"))
      return respond_error(ex, invalid_argument("give either version or label, not both"), "version");
    if (q.count("version")) {
      int64_t v = 0;
      if (!parse_version(q["version"], &v))
        return respond_error(ex, invalid_argument("version must be a positive integer"), "version");
      ref.version = v;
    }
    if (q.count("label")) ref.label = q["label"];
    auto r = o_.registry->get(ref, c->tenant);
    if (!r.ok()) return respond_error(ex, r.status());
    send(ex, json_response(200, dump(version_json(*r))));
  }

  void versions(const http::ExchangePtr& ex) {
    auto c = caller(ex);
    if (!c) return;
    auto r = o_.registry->versions(std::string(ex->request().path_param("id")), c->tenant);
    if (!r.ok()) return respond_error(ex, r.status());
    json data = json::array();
    for (const auto& v : *r) data.push_back(version_json(v));
    send(ex, json_response(200, dump(json{{"object", "list"}, {"data", data}})));
  }

  void label(const http::ExchangePtr& ex) {
    auto c = caller(ex);
    if (!c || !require_admin(ex, *c)) return;
    json j = json::parse(ex->request().body, nullptr, false);
    if (!j.is_object()) return respond_error(ex, invalid_argument("body must be a JSON object"));
    if (!j.contains("label") || !j["label"].is_string())
      return respond_error(ex, invalid_argument("'label' must be a string"), "label");
    if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() < 1)
      return respond_error(ex, invalid_argument("'version' must be a positive integer"), "version");
    const std::string id(ex->request().path_param("id"));
    Status st = o_.registry->set_label(id, j["label"].get<std::string>(), j["version"].get<int64_t>());
    if (!st.ok()) return respond_error(ex, st, st.code() == StatusCode::kInvalidArgument ? "label" : "");
    send(ex, json_response(200, dump(json{{"object", "prompt.label"}, {"id", id}, {"label", j["label"]},
                                          {"version", j["version"]}})));
  }

 private:
  PromptRouteOptions o_;
};

}  // namespace

Result<std::vector<std::string>> prompt_variables(const std::string& kind, const std::string& content) {
  NameUse u;
  if (kind == "template") {
    TS_RETURN_IF_ERROR(template_names(content, u));
  } else if (kind == "messages") {
    TS_ASSIGN_OR_RETURN(json m, parse_messages_content(content));
    for (size_t i = 0; i < m.size(); ++i) {
      Status st = template_names(m[i]["content"].get<std::string>(), u);
      if (!st.ok()) return invalid_argument("messages[" + std::to_string(i) + "]: " + st.message());
    }
  } else {
    return invalid_argument("prompt kind must be 'messages' or 'template'");
  }
  std::vector<std::string> out;
  for (const auto& n : u.used)
    if (!u.bound.count(n) && !u.guarded.count(n) && !jinja_globals().count(n)) out.push_back(n);
  return out;
}

Result<gateway::PromptSpec> parse_prompt_create(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return invalid_argument("body must be a JSON object");
  gateway::PromptSpec s;
  if (!j.contains("id") || !j["id"].is_string()) return invalid_argument("'id' must be a string");
  s.id = j["id"].get<std::string>();
  TS_RETURN_IF_ERROR(gateway::PromptRegistry::check_id(s.id));
  const bool has_m = j.contains("messages"), has_t = j.contains("template");
  if (has_m == has_t) return invalid_argument("give exactly one of 'messages' and 'template'");
  if (has_t) {
    if (!j["template"].is_string() || j["template"].get<std::string>().empty())
      return invalid_argument("'template' must be a non-empty string");
    s.kind = "template";
    s.content = j["template"].get<std::string>();
  } else {
    s.kind = "messages";
    // Stored compactly with only role and content, so the hash ignores formatting.
    TS_ASSIGN_OR_RETURN(json m, parse_messages_content(j["messages"].dump()));
    json clean = json::array();
    for (const auto& x : m) clean.push_back({{"role", x["role"]}, {"content", x["content"]}});
    s.content = clean.dump();
  }
  TS_ASSIGN_OR_RETURN(s.variables, prompt_variables(s.kind, s.content));
  if (j.contains("labels")) {
    if (!j["labels"].is_array()) return invalid_argument("'labels' must be an array of strings");
    for (const auto& l : j["labels"]) {
      if (!l.is_string()) return invalid_argument("'labels' must be an array of strings");
      TS_RETURN_IF_ERROR(gateway::PromptRegistry::check_label(l.get<std::string>()));
      s.labels.push_back(l.get<std::string>());
    }
  }
  if (j.contains("tenant") && !j["tenant"].is_null()) {
    if (!j["tenant"].is_string()) return invalid_argument("'tenant' must be a string");
    s.tenant = j["tenant"].get<std::string>();
  }
  return s;
}

Result<json> render_prompt(const gateway::PromptVersion& v, const json& variables) {
  if (!variables.is_object()) return invalid_argument("'prompt.variables' must be an object");
  std::vector<std::string> missing;
  for (const auto& name : v.variables)
    if (!variables.contains(name)) missing.push_back(name);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return invalid_argument("prompt '" + v.id + "' version " + std::to_string(v.version) +
                            " needs variable(s) missing from 'prompt.variables': " + list);
  }
  json out = json::array();
  auto render_one = [&](const std::string& src) -> Result<std::string> {
    auto r = chat::render(src, variables);
    if (!r.ok()) return invalid_argument("prompt '" + v.id + "' version " + std::to_string(v.version) + ": " +
                                         r.status().message());
    return std::move(r).value();
  };
  if (v.kind == "template") {
    TS_ASSIGN_OR_RETURN(std::string text, render_one(v.content));
    out.push_back({{"role", "user"}, {"content", text}});
    return out;
  }
  TS_ASSIGN_OR_RETURN(json m, parse_messages_content(v.content));
  for (const auto& x : m) {
    TS_ASSIGN_OR_RETURN(std::string text, render_one(x["content"].get<std::string>()));
    out.push_back({{"role", x["role"]}, {"content", text}});
  }
  return out;
}

Result<std::optional<PromptUse>> expand_prompt_reference(std::string* body, gateway::PromptRegistry& registry,
                                                         const std::optional<std::string>& tenant,
                                                         std::string* param) {
  json j = json::parse(*body, nullptr, false);
  if (!j.is_object() || !j.contains("prompt")) return std::optional<PromptUse>();
  *param = "prompt";
  if (j.contains("messages")) return invalid_argument("send either 'messages' or 'prompt', not both");
  const json& p = j["prompt"];
  if (!p.is_object()) return invalid_argument("'prompt' must be an object {\"id\", \"version\" | \"label\", \"variables\"}");
  if (!p.contains("id") || !p["id"].is_string()) {
    *param = "prompt.id";
    return invalid_argument("'prompt.id' must be a string");
  }
  gateway::PromptRef ref{.id = p["id"].get<std::string>()};
  if (p.contains("version") && p.contains("label")) {
    *param = "prompt.version";
    return invalid_argument("give either 'prompt.version' or 'prompt.label', not both");
  }
  if (p.contains("version")) {
    *param = "prompt.version";
    if (!p["version"].is_number_integer() || p["version"].get<int64_t>() < 1)
      return invalid_argument("'prompt.version' must be a positive integer");
    ref.version = p["version"].get<int64_t>();
  }
  if (p.contains("label")) {
    *param = "prompt.label";
    if (!p["label"].is_string()) return invalid_argument("'prompt.label' must be a string");
    ref.label = p["label"].get<std::string>();
  }
  json vars = json::object();
  if (p.contains("variables")) {
    *param = "prompt.variables";
    if (!p["variables"].is_object()) return invalid_argument("'prompt.variables' must be an object");
    vars = p["variables"];
  }
  *param = ref.version ? "prompt.version" : !ref.label.empty() ? "prompt.label" : "prompt.id";
  TS_ASSIGN_OR_RETURN(gateway::PromptVersion v, registry.get(ref, tenant));
  *param = "prompt.variables";
  TS_ASSIGN_OR_RETURN(json messages, render_prompt(v, vars));
  j.erase("prompt");
  j["messages"] = std::move(messages);
  *body = j.dump();
  param->clear();
  return std::optional<PromptUse>(PromptUse{.id = v.id, .version = v.version});
}

void register_prompt_routes(http::Server& server, PromptRouteOptions options) {
  auto routes = std::make_shared<Routes>(options);
  using http::Method;
  auto bind = [routes](void (Routes::*fn)(const http::ExchangePtr&)) {
    return [routes, fn](const http::ExchangePtr& ex) { ((*routes).*fn)(ex); };
  };
  server.route(Method::kPost, "/v1/prompts", bind(&Routes::create));
  server.route(Method::kGet, "/v1/prompts", bind(&Routes::list));
  server.route(Method::kGet, "/v1/prompts/{id}", bind(&Routes::get));
  server.route(Method::kGet, "/v1/prompts/{id}/versions", bind(&Routes::versions));
  server.route(Method::kPost, "/v1/prompts/{id}/labels", bind(&Routes::label));
}

}  // namespace ts::server
