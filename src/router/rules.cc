#include "router/rules.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>
#include <toml++/toml.h>

#include "gateway/json_text.h"
#include "gateway/sha256.h"
#include "router/picker.h"

namespace ts::router {
namespace {

using json = nlohmann::json;

class Parser {
 public:
  explicit Parser(std::string name) : name_(std::move(name)) {}

  Status error(const toml::source_region& at, const std::string& msg) const {
    return invalid_argument(name_ + ":" + std::to_string(at.begin.line) + ": " + msg);
  }
  Status only_keys(const toml::table& t, const std::string& where, const std::set<std::string>& allowed) const {
    for (auto&& [k, v] : t)
      if (!allowed.count(std::string(k.str())))
        return error(k.source(), "unknown key '" + std::string(k.str()) + "' in " + where);
    return ok_status();
  }
  Result<std::string> str(const toml::node& n, const std::string& what) const {
    if (auto s = n.value<std::string>()) return *s;
    return error(n.source(), what + " must be a string");
  }
  Result<int64_t> integer(const toml::node& n, const std::string& what, int64_t lo, int64_t hi) const {
    auto v = n.value<int64_t>();
    if (!n.is_integer() || !v || *v < lo || *v > hi)
      return error(n.source(), what + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return *v;
  }
  Result<double> number(const toml::node& n, const std::string& what) const {
    if (n.is_integer() || n.is_floating_point()) {
      double d = *n.value<double>();
      if (d >= 0) return d;
    }
    return error(n.source(), what + " must be a non-negative number");
  }
  Result<bool> boolean(const toml::node& n, const std::string& what) const {
    if (auto b = n.value<bool>(); n.is_boolean() && b) return *b;
    return error(n.source(), what + " must be true or false");
  }
  // A string or an array of strings.
  Result<std::vector<std::string>> strings(const toml::node& n, const std::string& what) const {
    std::vector<std::string> out;
    if (auto s = n.value<std::string>(); n.is_string() && s) {
      out.push_back(*s);
      return out;
    }
    if (const toml::array* a = n.as_array()) {
      for (const toml::node& x : *a) {
        TS_ASSIGN_OR_RETURN(std::string s, str(x, what + " items"));
        out.push_back(std::move(s));
      }
      if (!out.empty()) return out;
    }
    return error(n.source(), what + " must be a string or a non-empty array of strings");
  }

  Result<RemoteConfig> remote(const std::string& rname, const toml::node& n) const {
    const std::string where = "remotes." + rname;
    const toml::table* t = n.as_table();
    if (!t) return error(n.source(), where + " must be a table");
    TS_RETURN_IF_ERROR(only_keys(*t, where, {"base_url", "api_key_env", "api_key_file", "models",
                                             "cooldown_after_failures", "cooldown_s", "timeout_ms",
                                             "budget_tokens_per_day", "ca_file"}));
    RemoteConfig r;
    r.name = rname;
    const toml::node* url = t->get("base_url");
    if (!url) return error(n.source(), where + ".base_url is required");
    TS_ASSIGN_OR_RETURN(r.base_url, str(*url, where + ".base_url"));
    auto parsed = net::parse_url(r.base_url);
    if (!parsed.ok()) return error(url->source(), where + ".base_url: " + parsed.status().message());
    r.url = *parsed;
    r.host = r.url.host;
    r.port = r.url.port;
    r.base_path = r.url.base_path;
    if (const toml::node* ca = t->get("ca_file")) {
      TS_ASSIGN_OR_RETURN(r.ca_file, str(*ca, where + ".ca_file"));
      if (!r.url.tls) return error(ca->source(), where + ".ca_file is only for https:// remotes");
      std::ifstream f(r.ca_file);
      if (!f) return error(ca->source(), where + ".ca_file: cannot read " + r.ca_file);
    }
    const toml::node* env = t->get("api_key_env");
    const toml::node* file = t->get("api_key_file");
    if (env && file) return error(env->source(), where + ": give api_key_env or api_key_file, not both");
    if (env) {
      TS_ASSIGN_OR_RETURN(std::string var, str(*env, where + ".api_key_env"));
      const char* v = std::getenv(var.c_str());
      if (!v || !*v) return error(env->source(), where + ".api_key_env: environment variable " + var + " is not set");
      r.api_key = v;
    }
    if (file) {
      TS_ASSIGN_OR_RETURN(std::string path, str(*file, where + ".api_key_file"));
      std::ifstream f(path);
      if (!f || !std::getline(f, r.api_key) || r.api_key.empty())
        return error(file->source(), where + ".api_key_file: cannot read a key from " + path);
      while (!r.api_key.empty() && (r.api_key.back() == '\r' || r.api_key.back() == ' ')) r.api_key.pop_back();
    }
    if (const toml::node* m = t->get("models")) {
      const toml::table* mt = m->as_table();
      if (!mt) return error(m->source(), where + ".models must be a table of model = \"remote model\"");
      for (auto&& [k, v] : *mt) {
        TS_ASSIGN_OR_RETURN(std::string to, str(v, where + ".models." + std::string(k.str())));
        r.models[std::string(k.str())] = to;
      }
    }
    if (const toml::node* x = t->get("cooldown_after_failures")) {
      TS_ASSIGN_OR_RETURN(int64_t v, integer(*x, where + ".cooldown_after_failures", 1, 1000));
      r.cooldown_after_failures = static_cast<int>(v);
    }
    if (const toml::node* x = t->get("cooldown_s")) {
      TS_ASSIGN_OR_RETURN(double v, number(*x, where + ".cooldown_s"));
      if (v <= 0 || v > 86400) return error(x->source(), where + ".cooldown_s must be in (0, 86400]");
      r.cooldown = std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
    }
    if (const toml::node* x = t->get("budget_tokens_per_day")) {
      TS_ASSIGN_OR_RETURN(r.budget_tokens_per_day, integer(*x, where + ".budget_tokens_per_day", 1, int64_t{1} << 50));
    }
    if (const toml::node* x = t->get("timeout_ms")) {
      TS_ASSIGN_OR_RETURN(int64_t v, integer(*x, where + ".timeout_ms", 1, 3'600'000));
      r.timeout = std::chrono::milliseconds(v);
    }
    return r;
  }

  Result<Target> target(const toml::node& n, const std::string& what) const {
    TS_ASSIGN_OR_RETURN(std::string s, str(n, what));
    auto t = parse_target(s);
    if (!t.ok()) return error(n.source(), what + ": " + t.status().message());
    return *t;
  }

  Result<Rule> rule(const toml::node& n, size_t index) const {
    std::string where = "rules[" + std::to_string(index) + "]";
    const toml::table* t = n.as_table();
    if (!t) return error(n.source(), where + " must be a table");
    TS_RETURN_IF_ERROR(only_keys(*t, where, {"id", "description", "match", "when", "action", "fallback"}));
    Rule r;
    const toml::node* id = t->get("id");
    if (!id) return error(n.source(), where + ".id is required");
    TS_ASSIGN_OR_RETURN(r.id, str(*id, where + ".id"));
    if (r.id.empty() || r.id.find_first_of(";= \t\r\n") != std::string::npos)
      return error(id->source(), where + ".id must be non-empty without spaces, ';' or '='");
    where = "rule '" + r.id + "'";
    if (const toml::node* d = t->get("description")) { TS_ASSIGN_OR_RETURN(r.description, str(*d, where + ".description")); }
    const toml::node* action = t->get("action");
    if (!action) return error(n.source(), where + ".action is required");
    TS_ASSIGN_OR_RETURN(r.action, target(*action, where + ".action"));
    if (const toml::node* f = t->get("fallback")) {
      const toml::array* a = f->as_array();
      if (!a) return error(f->source(), where + ".fallback must be an array of targets");
      for (const toml::node& x : *a) {
        TS_ASSIGN_OR_RETURN(Target tg, target(x, where + ".fallback"));
        r.fallback.push_back(std::move(tg));
      }
    }
    if (const toml::node* m = t->get("match")) {
      const toml::table* mt = m->as_table();
      if (!mt) return error(m->source(), where + ".match must be a table");
      TS_RETURN_IF_ERROR(only_keys(*mt, where + ".match", {"model", "tenant", "app", "tier", "headers",
                                                           "prompt_tokens_over", "max_tokens_over", "tools", "json_mode"}));
      if (auto* x = mt->get("model")) { TS_ASSIGN_OR_RETURN(r.match.models, strings(*x, where + ".match.model")); }
      if (auto* x = mt->get("tenant")) { TS_ASSIGN_OR_RETURN(r.match.tenants, strings(*x, where + ".match.tenant")); }
      if (auto* x = mt->get("app")) { TS_ASSIGN_OR_RETURN(r.match.apps, strings(*x, where + ".match.app")); }
      if (auto* x = mt->get("tier")) {
        TS_ASSIGN_OR_RETURN(std::string s, str(*x, where + ".match.tier"));
        auto tier = engine::parse_tier(s);
        if (!tier.ok()) return error(x->source(), where + ".match.tier must be interactive or batch");
        r.match.tier = *tier;
      }
      if (auto* x = mt->get("headers")) {
        const toml::table* ht = x->as_table();
        if (!ht) return error(x->source(), where + ".match.headers must be a table of name = \"value\"");
        for (auto&& [k, v] : *ht) {
          std::string name(k.str());
          for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          TS_ASSIGN_OR_RETURN(r.match.headers[name], str(v, where + ".match.headers." + name));
        }
      }
      if (auto* x = mt->get("prompt_tokens_over")) {
        TS_ASSIGN_OR_RETURN(r.match.prompt_tokens_over, integer(*x, where + ".match.prompt_tokens_over", 0, int64_t{1} << 40));
      }
      if (auto* x = mt->get("max_tokens_over")) {
        TS_ASSIGN_OR_RETURN(r.match.max_tokens_over, integer(*x, where + ".match.max_tokens_over", 0, int64_t{1} << 40));
      }
      if (auto* x = mt->get("tools")) { TS_ASSIGN_OR_RETURN(r.match.tools, boolean(*x, where + ".match.tools")); }
      if (auto* x = mt->get("json_mode")) { TS_ASSIGN_OR_RETURN(r.match.json_mode, boolean(*x, where + ".match.json_mode")); }
    }
    if (const toml::node* w = t->get("when")) {
      const toml::table* wt = w->as_table();
      if (!wt) return error(w->source(), where + ".when must be a table");
      TS_RETURN_IF_ERROR(only_keys(*wt, where + ".when", {"healthy_local_below", "waiting_per_replica_over", "p95_ttft_ms_over"}));
      if (auto* x = wt->get("healthy_local_below")) {
        TS_ASSIGN_OR_RETURN(r.when.healthy_local_below, integer(*x, where + ".when.healthy_local_below", 1, 1 << 20));
      }
      if (auto* x = wt->get("waiting_per_replica_over")) {
        TS_ASSIGN_OR_RETURN(r.when.waiting_per_replica_over, number(*x, where + ".when.waiting_per_replica_over"));
      }
      if (auto* x = wt->get("p95_ttft_ms_over")) {
        TS_ASSIGN_OR_RETURN(r.when.p95_ttft_ms_over, integer(*x, where + ".when.p95_ttft_ms_over", 0, int64_t{1} << 40));
      }
    }
    return r;
  }

 private:
  std::string name_;
};

std::string fmt_num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

bool any_of(const std::vector<std::string>& xs, const std::string& v) {
  if (xs.empty()) return true;
  for (const auto& x : xs)
    if (x == v) return true;
  return false;
}

std::string join_list(const std::vector<std::string>& xs) {
  std::string out;
  for (const auto& x : xs) out += (out.empty() ? "" : "|") + x;
  return out;
}

// Whether `r` matches; `why` gets the matched conditions (or the first failed one).
bool rule_matches(const Rule& r, const RouteInputs& in, std::string* why) {
  std::vector<std::string> held;
  auto fail = [&](std::string s) {
    *why = "not " + s;
    return false;
  };
  const RuleMatch& m = r.match;
  if (!m.models.empty()) {
    if (!any_of(m.models, in.model)) return fail("model " + join_list(m.models));
    held.push_back("model " + in.model);
  }
  if (!m.tenants.empty()) {
    if (!any_of(m.tenants, in.tenant)) return fail("tenant " + join_list(m.tenants));
    held.push_back("tenant " + in.tenant);
  }
  if (!m.apps.empty()) {
    if (!any_of(m.apps, in.app)) return fail("app " + join_list(m.apps));
    held.push_back("app " + in.app);
  }
  if (m.tier) {
    if (in.tier != *m.tier) return fail(std::string("tier ") + engine::tier_name(*m.tier));
    held.push_back(std::string("tier ") + engine::tier_name(in.tier));
  }
  for (const auto& [k, v] : m.headers) {
    auto it = in.headers.find(k);
    if (it == in.headers.end() || it->second != v) return fail("header " + k + "=" + v);
    held.push_back("header " + k + "=" + v);
  }
  if (m.prompt_tokens_over) {
    if (!(in.prompt_tokens > *m.prompt_tokens_over))
      return fail("prompt_tokens " + std::to_string(in.prompt_tokens) + " > " + std::to_string(*m.prompt_tokens_over));
    held.push_back("prompt_tokens " + std::to_string(in.prompt_tokens) + " > " + std::to_string(*m.prompt_tokens_over));
  }
  if (m.max_tokens_over) {
    if (!(in.max_tokens > *m.max_tokens_over))
      return fail("max_tokens " + std::to_string(in.max_tokens) + " > " + std::to_string(*m.max_tokens_over));
    held.push_back("max_tokens " + std::to_string(in.max_tokens) + " > " + std::to_string(*m.max_tokens_over));
  }
  if (m.tools) {
    if (in.tools != *m.tools) return fail(std::string("tools=") + (*m.tools ? "true" : "false"));
    held.push_back(std::string("tools=") + (in.tools ? "true" : "false"));
  }
  if (m.json_mode) {
    if (in.json_mode != *m.json_mode) return fail(std::string("json_mode=") + (*m.json_mode ? "true" : "false"));
    held.push_back(std::string("json_mode=") + (in.json_mode ? "true" : "false"));
  }
  const RuleWhen& w = r.when;
  if (w.healthy_local_below) {
    if (!(in.healthy_local < *w.healthy_local_below))
      return fail("healthy_local " + std::to_string(in.healthy_local) + " < " + std::to_string(*w.healthy_local_below));
    held.push_back("healthy_local " + std::to_string(in.healthy_local) + " < " + std::to_string(*w.healthy_local_below));
  }
  if (w.waiting_per_replica_over) {
    if (!(in.waiting_per_replica > *w.waiting_per_replica_over))
      return fail("waiting_per_replica " + fmt_num(in.waiting_per_replica) + " > " + fmt_num(*w.waiting_per_replica_over));
    held.push_back("waiting_per_replica " + fmt_num(in.waiting_per_replica) + " > " + fmt_num(*w.waiting_per_replica_over));
  }
  if (w.p95_ttft_ms_over) {
    if (in.p95_ttft_ms < 0 || !(in.p95_ttft_ms > *w.p95_ttft_ms_over))
      return fail("p95_ttft_ms " + std::to_string(in.p95_ttft_ms) + " > " + std::to_string(*w.p95_ttft_ms_over));
    held.push_back("p95_ttft_ms " + std::to_string(in.p95_ttft_ms) + " > " + std::to_string(*w.p95_ttft_ms_over));
  }
  std::string s;
  for (const auto& h : held) s += (s.empty() ? "" : ", ") + h;
  *why = s.empty() ? "always" : s;
  return true;
}

void add_plan(const RuleSet& rules, const Target& t, const RouteInputs& in, RouteDecision* d) {
  for (const Target& x : d->plan)
    if (x == t) return;  // never the same target twice
  if (t.kind == TargetKind::kRemote) {
    if (in.remotes_cooling.count(t.remote)) {
      d->skipped.push_back(t.to_string() + " (cooling down)");
      return;
    }
    if (auto b = in.remote_budget_left.find(t.remote); b != in.remote_budget_left.end() && b->second <= 0) {
      d->skipped.push_back(t.to_string() + " (budget exhausted)");
      return;
    }
    if (!rules.remotes.count(t.remote)) {  // validated at load; kept defensive for from_json inputs
      d->skipped.push_back(t.to_string() + " (unknown remote)");
      return;
    }
  }
  d->plan.push_back(t);
}

}  // namespace

std::string RemoteConfig::remote_model(const std::string& model) const {
  auto it = models.find(model);
  return it == models.end() ? model : it->second;
}

std::string Target::to_string() const {
  switch (kind) {
    case TargetKind::kLocal: return "local";
    case TargetKind::kRemote: return "remote:" + remote;
    case TargetKind::kReject: return "reject:" + std::to_string(reject_status);
  }
  return "?";
}

Result<Target> parse_target(std::string_view s) {
  Target t;
  if (s == "local") return t;
  if (s.starts_with("remote:") && s.size() > 7) {
    t.kind = TargetKind::kRemote;
    t.remote = std::string(s.substr(7));
    return t;
  }
  if (s.starts_with("reject:")) {
    std::string code(s.substr(7));
    char* end = nullptr;
    long v = std::strtol(code.c_str(), &end, 10);
    if (!code.empty() && *end == '\0' && v >= 400 && v <= 599) {
      t.kind = TargetKind::kReject;
      t.reject_status = static_cast<int>(v);
      return t;
    }
  }
  return invalid_argument("target '" + std::string(s) + "' must be local, remote:<name> or reject:<400..599>");
}

Result<RuleSet> parse_rules(std::string_view text, const std::string& name) {
  toml::table root;
  try {
    root = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return invalid_argument(name + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  Parser p(name);
  TS_RETURN_IF_ERROR(p.only_keys(root, "the rules file", {"remotes", "rules", "default"}));
  RuleSet rs;
  rs.source = name;
  rs.version = gateway::sha256_hex(text).substr(0, 16);
  if (const toml::node* r = root.get("remotes")) {
    const toml::table* rt = r->as_table();
    if (!rt) return p.error(r->source(), "remotes must be a table of [remotes.<name>]");
    for (auto&& [k, v] : *rt) {
      TS_ASSIGN_OR_RETURN(RemoteConfig rc, p.remote(std::string(k.str()), v));
      rs.remotes[rc.name] = std::move(rc);
    }
  }
  if (const toml::node* d = root.get("default")) { TS_ASSIGN_OR_RETURN(rs.default_action, p.target(*d, "default")); }
  std::set<std::string> ids;
  if (const toml::node* r = root.get("rules")) {
    const toml::array* a = r->as_array();
    if (!a) return p.error(r->source(), "rules must be an array of tables ([[rules]])");
    for (size_t i = 0; i < a->size(); ++i) {
      TS_ASSIGN_OR_RETURN(Rule rule, p.rule((*a)[i], i));
      if (!ids.insert(rule.id).second) return p.error((*a)[i].source(), "duplicate rule id '" + rule.id + "'");
      std::vector<Target> all = rule.fallback;
      all.push_back(rule.action);
      for (const Target& t : all)
        if (t.kind == TargetKind::kRemote && !rs.remotes.count(t.remote))
          return p.error((*a)[i].source(), "rule '" + rule.id + "' names remote '" + t.remote + "', which no [remotes." +
                                               t.remote + "] defines");
      rs.rules.push_back(std::move(rule));
    }
  }
  if (rs.default_action.kind == TargetKind::kRemote && !rs.remotes.count(rs.default_action.remote))
    return invalid_argument(name + ": default names remote '" + rs.default_action.remote + "', which is not defined");
  return rs;
}

Result<RuleSet> load_rules(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot read the rules file " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_rules(ss.str(), path);
}

json RouteInputs::to_json() const {
  json cooling = json::array();
  for (const auto& r : remotes_cooling) cooling.push_back(r);
  return {{"model", model},
          {"tenant", tenant},
          {"app", app},
          {"tier", engine::tier_name(tier)},
          {"headers", headers},
          {"prompt_tokens", prompt_tokens},
          {"max_tokens", max_tokens},
          {"tools", tools},
          {"json_mode", json_mode},
          {"healthy_local", healthy_local},
          {"waiting_per_replica", waiting_per_replica},
          {"p95_ttft_ms", p95_ttft_ms},
          {"remotes_cooling", cooling},
          {"remote_budget_left", remote_budget_left}};
}

void RouteInputs::append_json(std::string& out) const {
  using namespace gateway;  // json_text.h; keys in to_json()'s (sorted) order
  out += '{';
  append_json_key(out, "app", true);
  append_json_string(out, app);
  append_json_key(out, "headers");
  out += '{';
  bool first = true;
  for (const auto& [k, v] : headers) {  // a std::map: sorted as nlohmann sorts an object
    if (!first) out += ',';
    first = false;
    append_json_string(out, k);
    out += ':';
    append_json_string(out, v);
  }
  out += '}';
  append_json_key(out, "healthy_local");
  append_json_int(out, healthy_local);
  append_json_key(out, "json_mode");
  append_json_bool(out, json_mode);
  append_json_key(out, "max_tokens");
  append_json_int(out, max_tokens);
  append_json_key(out, "model");
  append_json_string(out, model);
  append_json_key(out, "p95_ttft_ms");
  append_json_int(out, p95_ttft_ms);
  append_json_key(out, "prompt_tokens");
  append_json_int(out, prompt_tokens);
  append_json_key(out, "remote_budget_left");
  out += '{';
  first = true;
  for (const auto& [k, v] : remote_budget_left) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, k);
    out += ':';
    append_json_int(out, v);
  }
  out += '}';
  append_json_key(out, "remotes_cooling");
  out += '[';
  first = true;
  for (const auto& r : remotes_cooling) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, r);
  }
  out += ']';
  append_json_key(out, "tenant");
  append_json_string(out, tenant);
  append_json_key(out, "tier");
  append_json_string(out, engine::tier_name(tier));
  append_json_key(out, "tools");
  append_json_bool(out, tools);
  append_json_key(out, "waiting_per_replica");
  append_json_double(out, waiting_per_replica);
  out += '}';
}

Result<RouteInputs> RouteInputs::from_json(const json& j) {
  if (!j.is_object()) return invalid_argument("route inputs must be a JSON object");
  RouteInputs in;
  try {
    auto str = [&](const char* k, std::string* out) {
      if (j.contains(k)) *out = j.at(k).get<std::string>();
    };
    str("model", &in.model);
    str("tenant", &in.tenant);
    str("app", &in.app);
    if (j.contains("tier")) {
      auto t = engine::parse_tier(j.at("tier").get<std::string>());
      if (!t.ok()) return invalid_argument("tier must be interactive or batch");
      in.tier = *t;
    }
    if (j.contains("headers")) in.headers = j.at("headers").get<std::map<std::string, std::string>>();
    if (j.contains("prompt_tokens")) in.prompt_tokens = j.at("prompt_tokens").get<int64_t>();
    if (j.contains("max_tokens")) in.max_tokens = j.at("max_tokens").get<int64_t>();
    if (j.contains("tools")) in.tools = j.at("tools").get<bool>();
    if (j.contains("json_mode")) in.json_mode = j.at("json_mode").get<bool>();
    if (j.contains("healthy_local")) in.healthy_local = j.at("healthy_local").get<int64_t>();
    if (j.contains("waiting_per_replica")) in.waiting_per_replica = j.at("waiting_per_replica").get<double>();
    if (j.contains("p95_ttft_ms")) in.p95_ttft_ms = j.at("p95_ttft_ms").get<int64_t>();
    if (j.contains("remote_budget_left"))
      in.remote_budget_left = j.at("remote_budget_left").get<std::map<std::string, int64_t>>();
    if (j.contains("remotes_cooling"))
      for (const auto& r : j.at("remotes_cooling")) in.remotes_cooling.insert(r.get<std::string>());
  } catch (const json::exception& e) {
    return invalid_argument(std::string("route inputs: ") + e.what());
  }
  return in;
}

// The text the picker hashes: the rendered chat, or the completion prompt(s).
std::string routing_prompt_text(const json& body, bool chat) {
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

void fill_request_facts(const json& body, const std::string& prompt_text, RouteInputs* in) {
  in->model = body.value("model", std::string());
  in->prompt_tokens = static_cast<int64_t>(prompt_text.size() / 4);
  in->max_tokens = 0;
  for (const char* k : {"max_completion_tokens", "max_tokens"})
    if (auto m = body.find(k); m != body.end() && m->is_number_integer()) in->max_tokens = m->get<int64_t>();
  auto tools = body.find("tools");
  in->tools = tools != body.end() && tools->is_array() && !tools->empty();
  in->json_mode = false;
  if (auto rf = body.find("response_format"); rf != body.end() && rf->is_object()) {
    std::string type = rf->value("type", std::string());
    in->json_mode = type == "json_object" || type == "json_schema";
  }
  if (auto t = body.find("tier"); t != body.end() && t->is_string()) {
    auto tier = engine::parse_tier(t->get<std::string>());
    if (tier.ok()) in->tier = *tier;
  }
}

json RouteDecision::to_json() const {
  json p = json::array();
  for (const Target& t : plan) p.push_back(t.to_string());
  return {{"rule_id", rule_id}, {"reason", reason}, {"plan", p}, {"skipped", skipped}, {"evaluated", evaluated}};
}

void RouteDecision::append_json(std::string& out) const {
  using namespace gateway;
  auto strings = [&](const auto& xs) {
    out += '[';
    bool first = true;
    for (const auto& x : xs) {
      if (!first) out += ',';
      first = false;
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, Target>) append_json_string(out, x.to_string());
      else append_json_string(out, x);
    }
    out += ']';
  };
  out += '{';
  append_json_key(out, "evaluated", true);
  out += evaluated.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  append_json_key(out, "plan");
  strings(plan);
  append_json_key(out, "reason");
  append_json_string(out, reason);
  append_json_key(out, "rule_id");
  append_json_string(out, rule_id);
  append_json_key(out, "skipped");
  strings(skipped);
  out += '}';
}

RouteDecision evaluate(const RuleSet& rules, const RouteInputs& in) {
  RouteDecision d;
  for (const Rule& r : rules.rules) {
    std::string why;
    bool hit = rule_matches(r, in, &why);
    d.evaluated.push_back({{"id", r.id}, {"matched", hit}, {"why", why}});
    if (!hit) continue;
    d.rule_id = r.id;
    d.reason = why;
    add_plan(rules, r.action, in, &d);
    for (const Target& t : r.fallback) add_plan(rules, t, in, &d);
    return d;
  }
  d.rule_id = "default";
  d.reason = "no rule matched";
  add_plan(rules, rules.default_action, in, &d);
  return d;
}

}  // namespace ts::router
