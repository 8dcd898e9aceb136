#include "gateway/config.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "gateway/sha256.h"

namespace ts::gateway {
namespace {

// Walks the parsed tree; the first error wins and carries "name:line: ".
class Parser {
 public:
  explicit Parser(std::string name) : name_(std::move(name)) {}

  Status error(const toml::source_region& at, const std::string& msg) {
    return invalid_argument(name_ + ":" + std::to_string(at.begin.line) + ": " + msg);
  }

  // Rejects keys outside `allowed` (typos would otherwise be silently ignored).
  Status only_keys(const toml::table& t, const std::string& where, std::set<std::string> allowed) {
    for (auto&& [k, v] : t)
      if (!allowed.count(std::string(k.str())))
        return error(k.source(), "unknown key '" + std::string(k.str()) + "'" +
                                     (where.empty() ? "" : " in " + where));
    return ok_status();
  }

  Result<const toml::table*> table(const toml::node& n, const std::string& what) {
    if (const toml::table* t = n.as_table()) return t;
    return error(n.source(), what + " must be a table");
  }

  // Non-negative integer field of `t` (absent: unchanged).
  Status count(const toml::table& t, const std::string& where, const char* key, int64_t* out) {
    const toml::node* n = t.get(key);
    if (!n) return ok_status();
    const auto* v = n->as_integer();
    if (!v || v->get() < 0)
      return error(n->source(), where + key + " must be a non-negative integer");
    *out = v->get();
    return ok_status();
  }

  Status limits(const toml::table& t, const std::string& where, int64_t* rpm, int64_t* tpm) {
    TS_RETURN_IF_ERROR(count(t, where, "rpm", rpm));
    return count(t, where, "tpm", tpm);
  }

  Result<std::optional<QuotaConfig>> quota(const toml::table& parent, const std::string& where) {
    const toml::node* n = parent.get("quota");
    if (!n) return std::optional<QuotaConfig>();
    TS_ASSIGN_OR_RETURN(const toml::table* t, table(*n, where + "quota"));
    TS_RETURN_IF_ERROR(only_keys(*t, where + "quota", {"tokens", "period"}));
    QuotaConfig q;
    const toml::node* tokens = t->get("tokens");
    if (!tokens) return error(t->source(), where + "quota.tokens is required");
    const auto* tv = tokens->as_integer();
    if (!tv || tv->get() <= 0)
      return error(tokens->source(), where + "quota.tokens must be a positive integer");
    q.tokens = tv->get();
    const toml::node* period = t->get("period");
    if (!period) return error(t->source(), where + "quota.period is required (day or month)");
    auto p = period->value<std::string>();
    if (!p || (*p != "day" && *p != "month"))
      return error(period->source(), where + "quota.period must be day or month");
    q.period = *p == "day" ? Period::kDay : Period::kMonth;
    return std::optional<QuotaConfig>(q);
  }

  Result<OutageMode> outage(const toml::node& n, const std::string& what) {
    auto s = n.value<std::string>();
    if (!s || (*s != "open" && *s != "closed"))
      return error(n.source(), what + " must be \"open\" or \"closed\"");
    return *s == "open" ? OutageMode::kOpen : OutageMode::kClosed;
  }

  // A secret from <name>_file (first line of the file) or <name>_env (environment variable); at
  // most one. Error messages name the file or variable, never the value.
  Status secret_value(const toml::table& t, const std::string& where, const std::string& name,
                      std::string* out) {
    const toml::node* f = t.get(name + "_file");
    const toml::node* e = t.get(name + "_env");
    if (f && e) return error(t.source(), where + name + "_file and " + name + "_env are exclusive");
    if (f) {
      auto path = f->value<std::string>();
      if (!path || path->empty()) return error(f->source(), where + name + "_file must be a file path");
      std::ifstream in(*path, std::ios::binary);
      std::string v;
      if (!in || !std::getline(in, v)) return error(f->source(), where + name + "_file: cannot read " + *path);
      while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
      if (v.empty()) return error(f->source(), where + name + "_file: " + *path + " is empty");
      *out = v;
    }
    if (e) {
      auto var = e->value<std::string>();
      if (!var || var->empty()) return error(e->source(), where + name + "_env must name a variable");
      const char* v = std::getenv(var->c_str());
      if (!v || !*v) return error(e->source(), where + name + "_env: environment variable " + *var + " is not set");
      *out = v;
    }
    return ok_status();
  }

  // A key given as key_sha256 (hex), key_file (raw key, first line) or key_env (raw key in an
  // environment variable): at most one. The raw key is hashed here and never kept.
  Status secret_hash(const toml::table& t, const std::string& where, std::string* out) {
    const toml::node* h = t.get("key_sha256");
    const toml::node* f = t.get("key_file");
    const toml::node* e = t.get("key_env");
    if (int(h != nullptr) + int(f != nullptr) + int(e != nullptr) > 1)
      return error(t.source(), where + "key_sha256, key_file and key_env are exclusive");
    if (h) {
      auto s = h->value<std::string>();
      bool ok = s && s->size() == 64 && s->find_first_not_of("0123456789abcdef") == std::string::npos;
      if (!ok) return error(h->source(), where + "key_sha256 must be 64 lower-case hex digits");
      *out = *s;
    }
    if (f) {
      auto path = f->value<std::string>();
      if (!path || path->empty()) return error(f->source(), where + "key_file must be a file path");
      std::ifstream in(*path, std::ios::binary);
      std::string key;
      if (!in || !std::getline(in, key))
        return error(f->source(), where + "key_file: cannot read " + *path);
      while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
      if (key.empty()) return error(f->source(), where + "key_file: " + *path + " is empty");
      *out = sha256_hex(key);
    }
    if (e) {
      auto var = e->value<std::string>();
      if (!var || var->empty()) return error(e->source(), where + "key_env must name a variable");
      const char* v = std::getenv(var->c_str());
      if (!v || !*v) return error(e->source(), where + "key_env: environment variable " + *var + " is not set");
      *out = sha256_hex(v);
    }
    return ok_status();
  }

  Status name_ok(const toml::key& k, const char* what) {
    std::string s(k.str());
    bool ok = !s.empty() && s.size() <= 64;
    for (char c : s)
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-');
    if (!ok) return error(k.source(), std::string(what) + " name '" + s + "' must match [A-Za-z0-9._-]{1,64}");
    return ok_status();
  }

  // context_overflow = "error" | "truncate_left" | "truncate_middle" (segment needs its window
  // and overlap, so it is chosen per request).
  Status overflow_mode(const toml::table& t, std::string* out) {
    const toml::node* n = t.get("context_overflow");
    if (!n) return ok_status();
    auto s = n->value<std::string>();
    if (!s || (*s != "error" && *s != "truncate_left" && *s != "truncate_middle"))
      return error(n->source(), "context_overflow must be \"error\", \"truncate_left\" or \"truncate_middle\"");
    *out = *s;
    return ok_status();
  }

  // key = true | false (absent: *out untouched).
  Status flag(const toml::table& t, const char* key, std::optional<bool>* out) {
    const toml::node* n = t.get(key);
    if (!n) return ok_status();
    auto b = n->value<bool>();
    if (!n->is_boolean() || !b) return error(n->source(), std::string(key) + " must be true or false");
    *out = *b;
    return ok_status();
  }

  Result<GovConfig> parse(const toml::table& root) {
    GovConfig c;
    c.source = name_;
    TS_RETURN_IF_ERROR(only_keys(root, "", {"log_level", "keys", "admin", "metrics", "ledger", "limits", "tiers", "tenants", "prices"}));
    if (const toml::node* n = root.get("log_level")) {
      auto s = n->value<std::string>();
      if (!s || !log::parse_level(*s, &c.log_level))
        return error(n->source(), "log_level must be debug, info, warn, error or off");
    }
    if (const toml::node* n = root.get("keys")) {
      TS_ASSIGN_OR_RETURN(const toml::table* t, table(*n, "keys"));
      TS_RETURN_IF_ERROR(only_keys(*t, "[keys]", {"default_rpm", "default_tpm", "cache_ttl_ms"}));
      TS_RETURN_IF_ERROR(count(*t, "keys.", "default_rpm", &c.key_default_rpm));
      TS_RETURN_IF_ERROR(count(*t, "keys.", "default_tpm", &c.key_default_tpm));
      int64_t ttl = c.key_cache_ttl.count();
      TS_RETURN_IF_ERROR(count(*t, "keys.", "cache_ttl_ms", &ttl));
      c.key_cache_ttl = Millis(ttl);
    }
    if (const toml::node* n = root.get("admin")) {
      TS_ASSIGN_OR_RETURN(const toml::table* t, table(*n, "admin"));
      TS_RETURN_IF_ERROR(only_keys(*t, "[admin]", {"key_sha256", "key_file", "key_env"}));
      TS_RETURN_IF_ERROR(secret_hash(*t, "admin.", &c.admin_key_sha256));
    }
    if (const toml::node* n = root.get("metrics")) {
      TS_ASSIGN_OR_RETURN(const toml::table* t, table(*n, "metrics"));
      TS_RETURN_IF_ERROR(only_keys(*t, "[metrics]", {"auth", "labels", "key_sha256", "key_file", "key_env"}));
      if (const toml::node* a = t->get("auth")) {
        auto s = a->value<std::string>();
        if (!s || (*s != "key" && *s != "none"))
          return error(a->source(), "metrics.auth must be \"key\" or \"none\"");
        c.metrics_auth = *s == "key";
      }
      if (const toml::node* l = t->get("labels")) {
        auto s = l->value<std::string>();
        if (!s || (*s != "plain" && *s != "hash" && *s != "drop"))
          return error(l->source(), "metrics.labels must be plain, hash or drop");
        c.metrics_labels = *s == "plain" ? LabelMode::kPlain : *s == "hash" ? LabelMode::kHash : LabelMode::kDrop;
      }
      TS_RETURN_IF_ERROR(secret_hash(*t, "metrics.", &c.metrics_key_sha256));
    }
    if (const toml::node* n = root.get("ledger")) {
      TS_ASSIGN_OR_RETURN(const toml::table* t, table(*n, "ledger"));
      TS_RETURN_IF_ERROR(only_keys(*t, "[ledger]", {"url_file", "url_env"}));
      TS_RETURN_IF_ERROR(secret_value(*t, "ledger.", "url", &c.ledger_url));
    }
    if (const toml::node* n = root.get("limits")) {
      TS_ASSIGN_OR_RETURN(const toml::table* t, table(*n, "limits"));
      TS_RETURN_IF_ERROR(only_keys(*t, "[limits]", {"on_outage", "url_file", "url_env"}));
      TS_RETURN_IF_ERROR(secret_value(*t, "limits.", "url", &c.limits_url));
      if (const toml::node* o = t->get("on_outage")) {
        TS_ASSIGN_OR_RETURN(c.limits_on_outage, outage(*o, "limits.on_outage"));
      }
    }
    if (const toml::node* n = root.get("tiers")) {
      TS_ASSIGN_OR_RETURN(const toml::table* t, table(*n, "tiers"));
      for (auto&& [k, v] : *t) {
        auto tier = engine::parse_tier(k.str());
        if (!tier.ok())
          return error(k.source(), "unknown tier '" + std::string(k.str()) + "': expected interactive or batch");
        std::string where = "tiers." + std::string(k.str()) + ".";
        TS_ASSIGN_OR_RETURN(const toml::table* tt, table(v, "tiers." + std::string(k.str())));
        TS_RETURN_IF_ERROR(only_keys(*tt, "[tiers." + std::string(k.str()) + "]",
                                     {"rpm", "tpm", "max_tokens", "max_running", "max_queued", "priority",
                                      "latency_target_ms", "kv_share"}));
        TierConfig& tc = c.tiers[size_t(*tier)];
        TS_RETURN_IF_ERROR(limits(*tt, where, &tc.rpm, &tc.tpm));
        TS_RETURN_IF_ERROR(count(*tt, where, "max_tokens", &tc.max_tokens));
        TS_RETURN_IF_ERROR(count(*tt, where, "max_running", &tc.max_running));
        TS_RETURN_IF_ERROR(count(*tt, where, "max_queued", &tc.max_queued));
        TS_RETURN_IF_ERROR(count(*tt, where, "priority", &tc.priority));
        TS_RETURN_IF_ERROR(count(*tt, where, "latency_target_ms", &tc.latency_target_ms));
        if (const toml::node* ks = tt->get("kv_share")) {
          std::optional<double> share = ks->value<double>();
          if (!share || *share <= 0 || *share > 1)
            return error(ks->source(), where + "kv_share must be a number in (0, 1]");
          tc.kv_share = *share;
        }
      }
    }
    if (const toml::node* n = root.get("tenants")) {
      TS_ASSIGN_OR_RETURN(const toml::table* t, table(*n, "tenants"));
      for (auto&& [k, v] : *t) {
        TS_RETURN_IF_ERROR(name_ok(k, "tenant"));
        std::string tname(k.str());
        std::string where = "tenants." + tname + ".";
        TS_ASSIGN_OR_RETURN(const toml::table* tt, table(v, "tenants." + tname));
        TS_RETURN_IF_ERROR(only_keys(*tt, "[tenants." + tname + "]", {"rpm", "tpm", "quota", "apps", "on_limit_outage", "context_overflow", "log_bodies"}));
        TenantConfig tc;
        if (const toml::node* o = tt->get("on_limit_outage")) {
          TS_ASSIGN_OR_RETURN(tc.on_limit_outage, outage(*o, where + "on_limit_outage"));
        }
        TS_RETURN_IF_ERROR(overflow_mode(*tt, &tc.context_overflow));
        std::optional<bool> lb;
        TS_RETURN_IF_ERROR(flag(*tt, "log_bodies", &lb));
        tc.log_bodies = lb.value_or(false);
        TS_RETURN_IF_ERROR(limits(*tt, where, &tc.rpm, &tc.tpm));
        TS_ASSIGN_OR_RETURN(tc.quota, quota(*tt, where));
        if (const toml::node* apps = tt->get("apps")) {
          TS_ASSIGN_OR_RETURN(const toml::table* at, table(*apps, where + "apps"));
          for (auto&& [ak, av] : *at) {
            TS_RETURN_IF_ERROR(name_ok(ak, "app"));
            std::string aw = where + "apps." + std::string(ak.str()) + ".";
            TS_ASSIGN_OR_RETURN(const toml::table* app, table(av, aw.substr(0, aw.size() - 1)));
            TS_RETURN_IF_ERROR(only_keys(*app, "[" + aw.substr(0, aw.size() - 1) + "]", {"rpm", "tpm", "quota", "context_overflow", "log_bodies"}));
            AppConfig ac;
            TS_RETURN_IF_ERROR(overflow_mode(*app, &ac.context_overflow));
            TS_RETURN_IF_ERROR(flag(*app, "log_bodies", &ac.log_bodies));
            TS_RETURN_IF_ERROR(limits(*app, aw, &ac.rpm, &ac.tpm));
            TS_ASSIGN_OR_RETURN(ac.quota, quota(*app, aw));
            tc.apps[std::string(ak.str())] = ac;
          }
        }
        c.tenants[tname] = std::move(tc);
      }
    }
    if (const toml::node* n = root.get("prices")) {
      TS_ASSIGN_OR_RETURN(const toml::table* t, table(*n, "prices"));
      for (auto&& [k, v] : *t) {
        std::string model(k.str());
        std::string where = "prices.\"" + model + "\".";
        TS_ASSIGN_OR_RETURN(const toml::table* pt, table(v, "prices.\"" + model + "\""));
        TS_RETURN_IF_ERROR(only_keys(*pt, "[prices.\"" + model + "\"]", {"input", "cached", "output"}));
        Price p;
        bool has_cached = false;
        for (auto [key, out] : {std::pair{"input", &p.input}, std::pair{"cached", &p.cached},
                                std::pair{"output", &p.output}}) {
          const toml::node* pn = pt->get(key);
          if (!pn) continue;
          auto d = pn->value<double>();
          if (!d || !std::isfinite(*d) || *d < 0 || *d > 1e6)
            return error(pn->source(), where + key + " must be a number in [0, 1e6] (money per million tokens)");
          *out = std::llround(*d * 1e6);
          if (std::string(key) == "cached") has_cached = true;
        }
        if (!has_cached) p.cached = p.input;  // no discount unless one is given
        c.prices[model] = p;
      }
    }
    return c;
  }

 private:
  std::string name_;
};

}  // namespace

Result<GovConfig> parse_config(std::string_view text, const std::string& name) {
  toml::table root;
  try {
    root = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return invalid_argument(name + ":" + std::to_string(e.source().begin.line) + ": " +
                            std::string(e.description()));
  }
  return Parser(name).parse(root);
}

Result<GovConfig> load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

const char* outage_mode_name(OutageMode m) { return m == OutageMode::kOpen ? "open" : "closed"; }

OutageMode outage_mode_for(const GovConfig& c, const std::string& tenant) {
  auto t = c.tenants.find(tenant);
  if (t != c.tenants.end() && t->second.on_limit_outage) return *t->second.on_limit_outage;
  return c.limits_on_outage;
}

int64_t cost_pico(const Price& p, int64_t prompt, int64_t cached, int64_t completion) {
  return (prompt - cached) * p.input + cached * p.cached + completion * p.output;
}

std::string format_money(int64_t pico) {
  bool neg = pico < 0;
  uint64_t v = neg ? uint64_t(-(pico + 1)) + 1 : uint64_t(pico);
  std::string frac = std::to_string(v % 1'000'000'000'000ULL);
  frac.insert(0, 12 - frac.size(), '0');
  while (frac.size() > 2 && frac.back() == '0') frac.pop_back();
  return (neg ? "-" : "") + std::to_string(v / 1'000'000'000'000ULL) + "." + frac;
}

Status ConfigHolder::reload() {
  std::string path = get()->source;
  if (path.empty()) return ok_status();
  TS_ASSIGN_OR_RETURN(GovConfig next, load_config(path));
  set(std::move(next));
  return ok_status();
}

std::string context_overflow_default(const GovConfig& c, const std::string& tenant, const std::string& app) {
  auto t = c.tenants.find(tenant);
  if (t == c.tenants.end()) return "";
  auto a = t->second.apps.find(app);
  if (a != t->second.apps.end() && !a->second.context_overflow.empty()) return a->second.context_overflow;
  return t->second.context_overflow;
}

bool log_bodies_for(const GovConfig& c, const std::string& tenant, const std::string& app) {
  auto t = c.tenants.find(tenant);
  if (t == c.tenants.end()) return false;
  auto a = t->second.apps.find(app);
  if (a != t->second.apps.end() && a->second.log_bodies) return *a->second.log_bodies;
  return t->second.log_bodies;
}

}  // namespace ts::gateway
