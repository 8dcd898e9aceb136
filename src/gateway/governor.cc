#include "gateway/governor.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "gateway/sha256.h"

namespace ts::gateway {
namespace {

constexpr const char* kAnonymousTenant = "anonymous";

std::string seconds_ceil(Millis d) { return std::to_string(std::max<int64_t>(1, (d.count() + 999) / 1000)); }

// Human label of a bucket for messages.
struct BucketLabel {
  std::string owner;   // "key key_abc", "tenant acme", ...
  bool tokens;         // TPM (else RPM)
};

Status refusal(StatusCode code, std::string msg) { return Status(code, std::move(msg)); }

}  // namespace

struct Governor::Owned {
  std::unique_ptr<Clock> clock;
  std::shared_ptr<SqlDb> db;
  std::unique_ptr<LedgerStore> ledger;
  std::unique_ptr<KeyStore> keys;
  std::unique_ptr<LimitStore> limits;
  std::unique_ptr<ConfigHolder> config;
  std::unique_ptr<LedgerWriter> writer;
};

Governor::Governor(GovernorParts parts, GovernorOptions options)
    : parts_(parts), options_(options) {}

Governor::~Governor() {
  if (owned_) (void)shutdown(Millis(5000));
}

Result<std::unique_ptr<Governor>> Governor::open(const GovernanceOptions& o) {
  auto owned = std::make_unique<Owned>();
  const Clock* clock = o.clock;
  if (!clock) {
    owned->clock = std::make_unique<SystemClock>();
    clock = owned->clock.get();
  }
  GovConfig cfg;
  if (!o.config_path.empty()) {
    TS_ASSIGN_OR_RETURN(cfg, load_config(o.config_path));
  }
  Millis ttl = cfg.key_cache_ttl;
  owned->config = std::make_unique<ConfigHolder>(std::move(cfg));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<SqlDb> db, open_sql_db(o.ledger));
  owned->db = std::move(db);
  owned->ledger = make_sql_ledger(owned->db);
  owned->keys = std::make_unique<KeyStore>(owned->db, *clock, KeyStoreOptions{.cache_ttl = ttl});
  if (o.limits.empty()) {
    owned->limits = make_memory_limit_store();
  } else {
    TS_ASSIGN_OR_RETURN(owned->limits, make_redis_limit_store(RedisOptions{.url = o.limits}));
  }
  LedgerWriterOptions writer_options = o.writer;
  if (writer_options.spill_path.empty())
    writer_options.spill_path =
        is_postgres_url(o.ledger) ? "tokenserve-ledger.spool.jsonl" : o.ledger + ".spool.jsonl";
  owned->writer = std::make_unique<LedgerWriter>(*owned->ledger, writer_options);
  GovernorParts parts{.keys = owned->keys.get(), .limits = owned->limits.get(),
                      .ledger = owned->ledger.get(), .writer = owned->writer.get(),
                      .config = owned->config.get(), .clock = clock};
  auto gov = std::make_unique<Governor>(parts, GovernorOptions{.no_auth = o.no_auth});
  log::info("governance: ledger " + owned->ledger->describe() + ", limits " +
            owned->limits->describe() + ", config " +
            (o.config_path.empty() ? std::string("(none)") : o.config_path) + ", " +
            std::to_string(owned->config->get()->tenants.size()) + " tenants configured");
  if (o.no_auth)
    log::warn("*** AUTHENTICATION DISABLED (--no-auth): every request is served as tenant '" +
              std::string(kAnonymousTenant) + "' without an API key ***");
  gov->owned_ = std::move(owned);
  return gov;
}

void Governor::add_quota_specs(const GovConfig& cfg, const KeyInfo& key, WallTime now,
                               int64_t amount, std::vector<QuotaSpec>* specs,
                               std::vector<QuotaView>* views) const {
  auto tenant = cfg.tenants.find(key.tenant);
  if (tenant == cfg.tenants.end()) return;
  auto add = [&](const QuotaConfig& q, const char* scope, const std::string& name) {
    WallTime start = period_start(now, q.period), end = period_end(now, q.period);
    std::string k = std::string("q:") + scope + ":" + name + ":" + period_name(q.period) + ":" +
                    std::to_string(to_unix_ms(start));
    Millis ttl = std::chrono::duration_cast<Millis>(end - now) + Millis(86'400'000);
    specs->push_back(QuotaSpec{.key = k, .limit = q.tokens, .amount = amount, .ttl = ttl});
    views->push_back(QuotaView{.scope = scope, .name = name, .period = q.period,
                               .limit = q.tokens, .resets_at = end});
  };
  if (tenant->second.quota) add(*tenant->second.quota, "tenant", key.tenant);
  auto app = tenant->second.apps.find(key.app);
  if (app != tenant->second.apps.end() && app->second.quota)
    add(*app->second.quota, "app", key.tenant + "/" + key.app);
}

Result<int64_t> Governor::seed_quota(const std::string& tenant, const std::string& app,
                                     WallTime now, Period period, const std::string& key,
                                     Millis ttl) {
  TS_ASSIGN_OR_RETURN(int64_t used, parts_.ledger->sum_tokens(tenant, app, period_start(now, period),
                                                             period_end(now, period)));
  TS_RETURN_IF_ERROR(parts_.limits->quota_init(key, used, ttl));
  return used;
}

AdmitResult Governor::admit(const AdmitRequest& req) {
  AdmitResult out;
  auto cfg = parts_.config->get();
  WallTime now = parts_.clock->now();

  // 1. Who is calling, and may they use this model and tier?
  KeyInfo key;
  if (options_.no_auth) {
    key.tenant = kAnonymousTenant;
    key.app = "default";
  } else {
    auto auth = parts_.keys->authenticate(req.authorization);
    if (!auth.ok()) {
      out.status = auth.status();
      out.error_code = out.status.code() == StatusCode::kUnavailable ? "service_unavailable"
                                                                    : "invalid_api_key";
      ++num_refused_auth_;
      return out;
    }
    key = std::move(auth).value();
    Status allowed = KeyStore::authorize(key, req.model, req.tier);
    if (!allowed.ok()) {
      bool model_ok = key.models.empty() ||
                      std::find(key.models.begin(), key.models.end(), req.model) != key.models.end();
      out.status = allowed;
      out.error_code = model_ok ? "tier_not_allowed" : "model_not_allowed";
      ++num_refused_auth_;
      return out;
    }
  }
  const TierConfig& tier_cfg = cfg->tiers[size_t(req.tier)];
  const bool estimated = req.completion_estimate > 0;
  if (!estimated && tier_cfg.max_tokens > 0 && req.max_tokens > tier_cfg.max_tokens) {
    out.status = invalid_argument("max_tokens " + std::to_string(req.max_tokens) + " exceeds the " +
                                  engine::tier_name(req.tier) + " tier's limit of " +
                                  std::to_string(tier_cfg.max_tokens));
    out.error_code = "max_tokens_too_large";
    return out;
  }
  const int64_t completion_reserve =
      estimated ? std::min(req.completion_estimate, std::max<int64_t>(0, req.max_tokens))
                : std::max<int64_t>(0, req.max_tokens);
  int64_t reserve = std::max<int64_t>(0, req.prompt_tokens) + completion_reserve;
  const std::string reserve_parts =
      "prompt " + std::to_string(req.prompt_tokens) +
      (estimated ? " + an estimated " + std::to_string(completion_reserve) + " completion tokens, no max_tokens given"
                 : " + max_tokens " + std::to_string(req.max_tokens));

  // 2. Rate limits: every applicable RPM and TPM bucket, all or nothing.
  std::vector<BucketSpec> buckets;
  std::vector<BucketLabel> labels;
  auto add_pair = [&](const std::string& id, const std::string& owner, int64_t rpm, int64_t tpm) {
    if (rpm > 0) {
      buckets.push_back({.key = "rl:" + id + ":req", .capacity = rpm, .cost = 1});
      labels.push_back({owner, false});
    }
    if (tpm > 0) {
      buckets.push_back({.key = "rl:" + id + ":tok", .capacity = tpm, .cost = reserve});
      labels.push_back({owner, true});
    }
  };
  if (!options_.no_auth)
    add_pair("key:" + key.id, "key " + key.id, key.rpm > 0 ? key.rpm : cfg->key_default_rpm,
             key.tpm > 0 ? key.tpm : cfg->key_default_tpm);
  auto tenant = cfg->tenants.find(key.tenant);
  if (tenant != cfg->tenants.end()) {
    auto app = tenant->second.apps.find(key.app);
    if (app != tenant->second.apps.end())
      add_pair("app:" + key.tenant + "/" + key.app, "app " + key.tenant + "/" + key.app,
               app->second.rpm, app->second.tpm);
    add_pair("tenant:" + key.tenant, "tenant " + key.tenant, tenant->second.rpm, tenant->second.tpm);
  }
  add_pair(std::string("tier:") + engine::tier_name(req.tier) + ":" + key.tenant,
           "tenant " + key.tenant + " (" + engine::tier_name(req.tier) + " tier)", tier_cfg.rpm,
           tier_cfg.tpm);

  for (size_t i = 0; i < buckets.size(); ++i) {
    if (labels[i].tokens && buckets[i].cost > buckets[i].capacity) {
      out.status = refusal(StatusCode::kResourceExhausted,
                           "Request too large: the tokens per minute (tpm) limit of " +
                               labels[i].owner + " is " + std::to_string(buckets[i].capacity) +
                               ", and this request reserves " + std::to_string(reserve) + " (" +
                               reserve_parts + "). Lower max_tokens or the prompt.");
      out.error_code = "rate_limit_exceeded";
      ++num_refused_rate_;
      return out;
    }
  }

  Headers headers;
  bool limits_failed = false;
  std::vector<BucketSpec> taken;
  if (!buckets.empty()) {
    auto take = parts_.limits->take(buckets, now);
    if (!take.ok()) {
      limits_failed = true;
      ++num_limit_errors_;
      log::warn("rate limits unavailable, admitting without them: " + take.status().message());
    } else {
      // Headers report the tightest bucket of each kind.
      int tight[2] = {-1, -1};
      for (size_t i = 0; i < buckets.size(); ++i) {
        int kind = labels[i].tokens ? 1 : 0;
        if (tight[kind] < 0 || take->states[i].remaining < take->states[size_t(tight[kind])].remaining)
          tight[kind] = int(i);
      }
      const char* names[2] = {"requests", "tokens"};
      for (int kind = 0; kind < 2; ++kind) {
        if (tight[kind] < 0) continue;
        const BucketState& s = take->states[size_t(tight[kind])];
        headers.emplace_back(std::string("x-ratelimit-limit-") + names[kind], std::to_string(s.limit));
        headers.emplace_back(std::string("x-ratelimit-remaining-") + names[kind], std::to_string(s.remaining));
        headers.emplace_back(std::string("x-ratelimit-reset-") + names[kind], format_reset(s.reset));
      }
      if (!take->admitted) {
        const BucketLabel& l = labels[size_t(take->refused)];
        const BucketState& s = take->states[size_t(take->refused)];
        headers.emplace_back("retry-after", seconds_ceil(take->retry_after));
        out.headers = std::move(headers);
        out.status = refusal(
            StatusCode::kResourceExhausted,
            std::string("Rate limit reached for ") +
                (l.tokens ? "tokens per minute (tpm)" : "requests per minute (rpm)") + " on " +
                l.owner + ": limit " + std::to_string(s.limit) + ", remaining " +
                std::to_string(s.remaining) + (l.tokens ? ", requested " + std::to_string(reserve) : "") +
                ". Please try again in " + format_reset(take->retry_after) + ".");
        out.error_code = "rate_limit_exceeded";
        ++num_refused_rate_;
        return out;
      }
      taken = buckets;
    }
  }
  auto give_back = [&] {
    for (const BucketSpec& b : taken) (void)parts_.limits->give(b, now);
  };

  // 3. Quotas: reserve on every applicable counter, all or nothing.
  std::vector<QuotaSpec> quotas;
  std::vector<QuotaView> views;
  add_quota_specs(*cfg, key, now, reserve, &quotas, &views);
  std::vector<QuotaHold> holds;
  if (!quotas.empty() && !limits_failed) {
    Result<QuotaTake> q = QuotaTake{};
    for (int attempt = 0; attempt < 3; ++attempt) {
      q = parts_.limits->quota_reserve(quotas);
      if (!q.ok() || q->uninitialized < 0) break;
      const QuotaView& v = views[size_t(q->uninitialized)];
      std::string app = v.scope == std::string("app") ? key.app : "";
      auto seeded = seed_quota(key.tenant, app, now, v.period, quotas[size_t(q->uninitialized)].key,
                               quotas[size_t(q->uninitialized)].ttl);
      if (!seeded.ok()) {
        q = seeded.status();
        break;
      }
    }
    if (!q.ok() || q->uninitialized >= 0) {
      ++num_limit_errors_;
      log::warn("quota store unavailable, admitting without quota: " +
                (q.ok() ? std::string("counter not initialized") : q.status().message()));
    } else if (!q->admitted) {
      give_back();
      const QuotaView& v = views[size_t(q->refused)];
      int64_t used = q->used[size_t(q->refused)];
      headers.emplace_back("retry-after", seconds_ceil(std::chrono::duration_cast<Millis>(v.resets_at - now)));
      out.headers = std::move(headers);
      out.status = refusal(
          StatusCode::kResourceExhausted,
          "You exceeded your token quota: " + v.scope + " " + v.name + " has used " +
              std::to_string(used) + " of " + std::to_string(v.limit) + " tokens this " +
              period_name(v.period) + " (including requests in flight); this request needs " +
              std::to_string(reserve) + ". The quota resets at " + format_rfc3339(v.resets_at) + ".");
      out.error_code = "insufficient_quota";
      ++num_refused_quota_;
      return out;
    } else {
      size_t tight = 0;
      for (size_t i = 0; i < quotas.size(); ++i) {
        holds.push_back({quotas[i].key, quotas[i].ttl});
        if (views[i].limit - q->used[i] < views[tight].limit - q->used[tight]) tight = i;
      }
      headers.emplace_back("x-quota-limit-tokens", std::to_string(views[tight].limit));
      headers.emplace_back("x-quota-remaining-tokens",
                           std::to_string(std::max<int64_t>(0, views[tight].limit - q->used[tight])));
      headers.emplace_back("x-quota-reset", format_rfc3339(views[tight].resets_at));
    }
  }

  Admission a;
  a.key = std::move(key);
  a.model = std::string(req.model);
  a.tier = req.tier;
  a.admitted_at = now;
  a.reserved_tokens = reserve;
  for (size_t i = 0; i < taken.size(); ++i)
    if (labels[i].tokens) a.token_buckets.push_back(taken[i]);
  a.quotas = std::move(holds);
  a.headers = headers;
  out.headers = std::move(headers);
  out.admission = std::move(a);
  ++num_admitted_;
  return out;
}

void Governor::settle(Admission& a, UsageRecord r) {
  if (a.settled) return;
  a.settled = true;
  if (r.tenant.empty()) r.tenant = a.key.tenant;
  if (r.app.empty()) r.app = a.key.app;
  if (r.key_id.empty()) r.key_id = a.key.id;
  if (r.model.empty()) r.model = a.model;
  if (r.time == WallTime{}) r.time = a.admitted_at;
  r.tier = a.tier;
  int64_t actual = billable_tokens(r);
  int64_t unused = a.reserved_tokens - actual;
  WallTime now = parts_.clock->now();
  if (unused != 0) {
    // unused < 0 (admitted on an estimate, used more): a negative give debits the excess.
    for (BucketSpec b : a.token_buckets) {
      b.cost = unused;
      if (!parts_.limits->give(b, now).ok()) ++num_limit_errors_;
    }
  }
  for (const QuotaHold& q : a.quotas)
    if (!parts_.limits->quota_add(q.key, actual - a.reserved_tokens, q.ttl).ok()) ++num_limit_errors_;
  parts_.writer->append(std::move(r));
}

Result<UsageMe> Governor::usage_me(std::string_view authorization) {
  UsageMe me;
  if (options_.no_auth) {
    me.key.tenant = kAnonymousTenant;
    me.key.app = "default";
  } else {
    TS_ASSIGN_OR_RETURN(me.key, parts_.keys->authenticate(authorization));
  }
  auto cfg = parts_.config->get();
  me.rpm = me.key.rpm > 0 ? me.key.rpm : (options_.no_auth ? 0 : cfg->key_default_rpm);
  me.tpm = me.key.tpm > 0 ? me.key.tpm : (options_.no_auth ? 0 : cfg->key_default_tpm);
  WallTime now = parts_.clock->now();
  std::vector<QuotaSpec> specs;
  add_quota_specs(*cfg, me.key, now, 0, &specs, &me.quotas);
  for (size_t i = 0; i < specs.size(); ++i) {
    QuotaView& v = me.quotas[i];
    TS_ASSIGN_OR_RETURN(std::optional<int64_t> used, parts_.limits->quota_used(specs[i].key));
    if (!used) {
      TS_ASSIGN_OR_RETURN(int64_t seeded, seed_quota(me.key.tenant, v.scope == "app" ? me.key.app : "",
                                                    now, v.period, specs[i].key, specs[i].ttl));
      used = seeded;
    }
    v.used = *used;
    v.remaining = std::max<int64_t>(0, v.limit - v.used);
  }
  return me;
}

std::string usage_me_json(const UsageMe& me) {
  nlohmann::ordered_json j;
  j["tenant"] = me.key.tenant;
  j["app"] = me.key.app;
  j["key_id"] = me.key.id;
  j["limits"] = {{"rpm", me.rpm}, {"tpm", me.tpm}};
  j["quotas"] = nlohmann::ordered_json::array();
  for (const QuotaView& q : me.quotas) {
    nlohmann::ordered_json o;
    o["scope"] = q.scope;
    o["name"] = q.name;
    o["period"] = period_name(q.period);
    o["limit"] = q.limit;
    o["used"] = q.used;
    o["remaining"] = q.remaining;
    o["resets_at"] = format_rfc3339(q.resets_at);
    j["quotas"].push_back(o);
  }
  return j.dump();
}

bool Governor::is_admin(std::string_view authorization) const {
  auto cfg = parts_.config->get();
  if (cfg->admin_key_sha256.empty()) return false;
  std::string h = sha256_hex(strip_bearer(authorization));
  unsigned diff = 0;  // constant time in the hash
  for (size_t i = 0; i < h.size(); ++i) diff |= unsigned(h[i] ^ cfg->admin_key_sha256[i]);
  return diff == 0;
}

Status Governor::reload_config() {
  Status st = parts_.config->reload();
  if (st.ok()) {
    log::set_level(parts_.config->get()->log_level);
    log::info("governance config reloaded from " + parts_.config->get()->source);
  } else {
    log::error("config reload failed, keeping the previous config: " + st.message());
  }
  return st;
}

Status Governor::shutdown(Millis timeout) {
  if (!parts_.writer) return ok_status();
  return parts_.writer->close(timeout);
}

GovernorStats Governor::stats() const {
  GovernorStats s;
  s.num_admitted = num_admitted_.load();
  s.num_refused_auth = num_refused_auth_.load();
  s.num_refused_rate = num_refused_rate_.load();
  s.num_refused_quota = num_refused_quota_.load();
  s.num_limit_errors = num_limit_errors_.load();
  if (parts_.writer) s.ledger = parts_.writer->stats();
  return s;
}

}  // namespace ts::gateway
