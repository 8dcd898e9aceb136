#include "gateway/governor.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "gateway/circuit_breaker.h"
#include "gateway/sha256.h"
#include "gateway/trust.h"

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
    : parts_(parts), options_(options) {
  if (!options_.quota_journal_path.empty()) {
    Status st = journal_.open(options_.quota_journal_path);
    if (!st.ok()) log::error(st.message() + "; quota charges during a limit-store outage are kept in memory only");
  }
  if (options_.replay_interval.count() > 0 && parts_.limits)
    replay_thread_ = std::thread([this] { replay_loop(); });
}

Governor::~Governor() {
  {
    std::lock_guard lock(replay_mu_);
    replay_stop_ = true;
  }
  replay_cv_.notify_all();
  if (replay_thread_.joinable()) replay_thread_.join();
  if (owned_) (void)shutdown(Millis(5000));
}

void Governor::replay_loop() {
  std::unique_lock lock(replay_mu_);
  while (!replay_cv_.wait_for(lock, options_.replay_interval, [this] { return replay_stop_; })) {
    if (journal_.num_pending() == 0) continue;
    lock.unlock();
    auto r = replay_limit_journal();
    if (r.ok() && *r > 0)
      log::info("limit store back: replayed " + std::to_string(*r) +
                " journaled quota charges from the outage");
    lock.lock();
  }
}

Result<int64_t> Governor::replay_limit_journal() {
  std::shared_lock lock(seed_mu_);
  return journal_.replay(*parts_.limits);
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
  // Secrets from [ledger]/[limits] url_file / url_env replace the flags.
  const std::string ledger_url = cfg.ledger_url.empty() ? o.ledger : cfg.ledger_url;
  const std::string limits_url = cfg.limits_url.empty() ? o.limits : cfg.limits_url;
  owned->config = std::make_unique<ConfigHolder>(std::move(cfg));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<SqlDb> db, open_sql_db(ledger_url));
  owned->db = std::move(db);
  owned->ledger = make_sql_ledger(owned->db);
  owned->keys = std::make_unique<KeyStore>(owned->db, *clock, KeyStoreOptions{.cache_ttl = ttl});
  if (limits_url.empty()) {
    owned->limits = make_memory_limit_store();
  } else {
    TS_ASSIGN_OR_RETURN(auto redis, make_redis_limit_store(RedisOptions{.url = limits_url}));
    std::string name = "limit store " + redis->describe();
    owned->limits = make_breaker_limit_store(std::move(redis), BreakerOptions{.name = name});
  }
  LedgerWriterOptions writer_options = o.writer;
  if (writer_options.spill_path.empty())
    writer_options.spill_path =
        is_postgres_url(ledger_url) ? "tokenserve-ledger.spool.jsonl" : ledger_url + ".spool.jsonl";
  owned->writer = std::make_unique<LedgerWriter>(*owned->ledger, writer_options);
  GovernorParts parts{.keys = owned->keys.get(), .limits = owned->limits.get(),
                      .ledger = owned->ledger.get(), .writer = owned->writer.get(),
                      .config = owned->config.get(), .clock = clock};
  // The quota journal sits beside the ledger journal (not `<spill_path>.<n>`, its segments).
  std::string quota_journal = writer_options.spill_path;
  const std::string spool_suffix = ".spool.jsonl";
  if (quota_journal.ends_with(spool_suffix))
    quota_journal.resize(quota_journal.size() - spool_suffix.size());
  quota_journal += ".quota-journal.jsonl";
  auto gov = std::make_unique<Governor>(
      parts, GovernorOptions{.no_auth = o.no_auth, .trust_gateway_secret = o.trust_gateway_secret,
                             .quota_journal_path = quota_journal});
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
  // Rows of requests already settled but not yet committed by the ledger writer would be
  // missing from the sum (a settle that found the counter gone relies on the seed): wait for
  // the writer, with settles and replays held off, so the sum covers every settled request.
  // A database that is down fails the plain sum fast; only then wait for the writer.
  TS_RETURN_IF_ERROR(parts_.ledger->sum_tokens(tenant, app, period_start(now, period),
                                               period_end(now, period)).status());
  std::unique_lock lock(seed_mu_);
  if (parts_.writer) {
    Status flushed = parts_.writer->flush(options_.seed_flush_timeout);
    if (!flushed.ok())
      return unavailable("quota counter not seeded: the ledger writer has not caught up (" +
                         flushed.message() + ")");
  }
  TS_ASSIGN_OR_RETURN(int64_t used, parts_.ledger->sum_tokens(tenant, app, period_start(now, period),
                                                             period_end(now, period)));
  TS_RETURN_IF_ERROR(parts_.limits->quota_init(key, used, ttl));
  journal_.drop_key(key);  // their rows are in the sum
  return used;
}

// What the admission steps share.
struct Governor::AdmitContext {
  const AdmitRequest& req;
  std::shared_ptr<const GovConfig> cfg;
  WallTime now;
  KeyInfo key;
  int64_t reserve = 0;                 // prompt + max_tokens (or a bounded completion estimate)
  std::string reserve_parts;           // how `reserve` was made up, for messages
  std::vector<BucketSpec> buckets;     // every applicable RPM/TPM bucket
  std::vector<BucketLabel> labels;     // one per bucket, for messages
  std::vector<BucketSpec> taken;       // buckets actually debited (given back on a refusal)
  bool limits_down = false;            // the store failed: admitted fail-open
  std::vector<QuotaHold> holds, unheld;
  Headers headers;
};

AdmitResult Governor::admit(const AdmitRequest& req) {
  AdmitResult out;
  AdmitContext c{.req = req, .cfg = parts_.config->get(), .now = parts_.clock->now()};
  if (!identify(c, out) || !check_tier_cap(c, out) || !check_ledger(c, out)) return out;
  plan_buckets(c);
  if (!check_request_fits(c, out) || !take_rate_limits(c, out) || !reserve_quotas(c, out))
    return out;
  Admission a;
  a.key = std::move(c.key);
  a.model = std::string(req.model);
  a.tier = req.tier;
  a.admitted_at = c.now;
  a.log_bodies = log_bodies_for(*c.cfg, a.key.tenant, a.key.app);
  a.reserved_tokens = c.reserve;
  for (size_t i = 0; i < c.taken.size(); ++i)
    if (c.labels[i].tokens) a.token_buckets.push_back(c.taken[i]);
  a.quotas = std::move(c.holds);
  a.unheld_quotas = std::move(c.unheld);
  a.headers = c.headers;
  out.headers = std::move(c.headers);
  out.admission = std::move(a);
  ++num_admitted_;
  if (c.limits_down) ++num_fail_open_;
  return out;
}

// 1. Who is calling, and may they use this model and tier?
bool Governor::identify(AdmitContext& c, AdmitResult& out) {
  if (!options_.trust_gateway_secret.empty()) {  // --trust-gateway: the gateway authenticated
    auto id = verify_gateway_authorization(options_.trust_gateway_secret, c.req.authorization, to_unix_ms(c.now));
    if (!id.ok()) {
      out.status = id.status();
      out.error_code = "invalid_gateway_signature";
      ++num_refused_auth_;
      return false;
    }
    // The same signed header set once only, inside its validity window: this process's
    // seen-set (trust.h ReplayGuard) always, and with a shared limit store (Redis) also a
    // SET NX across every replica sharing it. When that store fails, the local guard alone
    // decides (counted as a limit store error, logged at most every 10 s).
    const int64_t now_ms = to_unix_ms(c.now);
    const int64_t expires_ms = id->signed_at_ms + kGatewayMaxSkewMs;
    bool first = replay_guard_.first_use(id->signature, expires_ms, now_ms);
    if (first && parts_.limits && parts_.limits->shared()) {
      auto claimed = parts_.limits->claim_once("gwn:" + id->signature, Millis(std::max<int64_t>(1, expires_ms - now_ms)));
      if (claimed.ok()) {
        first = *claimed;
      } else {
        ++num_limit_errors_;
        ++num_nonce_store_errors_;
        int64_t last = last_nonce_log_ms_.load();
        if (now_ms - last >= 10'000 && last_nonce_log_ms_.compare_exchange_strong(last, now_ms))
          log::warn("gateway nonce check in the shared limit store failed (" + claimed.status().message() +
                    "): replays are checked by this replica only until it answers");
      }
    }
    if (!first) {
      out.status = Status(StatusCode::kUnauthenticated, "gateway identity refused (--trust-gateway): request " +
                                                           id->request_id + " replays a signature already used");
      out.error_code = "replayed_gateway_signature";
      ++num_refused_auth_;
      ++num_refused_replay_;
      return false;
    }
    if (id->tier != engine::tier_name(c.req.tier)) {
      out.status = Status(StatusCode::kPermissionDenied, "the gateway signed tier '" + id->tier +
                                                             "' but the request asks for '" +
                                                             engine::tier_name(c.req.tier) + "'");
      out.error_code = "tier_not_allowed";
      ++num_refused_auth_;
      return false;
    }
    c.key.id = "gateway";
    c.key.tenant = id->tenant;
    c.key.app = id->app;
    return true;
  }
  if (options_.no_auth) {
    c.key.tenant = kAnonymousTenant;
    c.key.app = "default";
    return true;
  }
  auto auth = parts_.keys->authenticate(c.req.authorization);
  if (!auth.ok()) {
    out.status = auth.status();
    out.error_code = out.status.code() == StatusCode::kUnavailable ? "service_unavailable"
                                                                  : "invalid_api_key";
    ++num_refused_auth_;
    return false;
  }
  c.key = std::move(auth).value();
  Status allowed = KeyStore::authorize(c.key, c.req.model, c.req.tier);
  if (allowed.ok()) return true;
  const auto& models = c.key.models;
  bool model_ok = models.empty() || std::find(models.begin(), models.end(), c.req.model) != models.end();
  out.status = allowed;
  out.error_code = model_ok ? "tier_not_allowed" : "model_not_allowed";
  ++num_refused_auth_;
  return false;
}

// 2. What to reserve, and the tier's cap on max_tokens. A request without max_tokens reserves a
// bounded estimate of its completion (settled on actual usage) and is not held to the cap: its
// default length was already clamped to it.
bool Governor::check_tier_cap(AdmitContext& c, AdmitResult& out) {
  const TierConfig& tier_cfg = c.cfg->tiers[size_t(c.req.tier)];
  const AdmitRequest& req = c.req;
  const bool estimated = req.completion_estimate > 0;
  const int64_t completion_reserve =
      estimated ? std::min(req.completion_estimate, std::max<int64_t>(0, req.max_tokens))
                : std::max<int64_t>(0, req.max_tokens);
  c.reserve = std::max<int64_t>(0, req.prompt_tokens) + completion_reserve;
  c.reserve_parts =
      "prompt " + std::to_string(req.prompt_tokens) +
      (estimated ? " + an estimated " + std::to_string(completion_reserve) + " completion tokens, no max_tokens given"
                 : " + max_tokens " + std::to_string(req.max_tokens));
  if (estimated || tier_cfg.max_tokens <= 0 || c.req.max_tokens <= tier_cfg.max_tokens) return true;
  out.status = invalid_argument("max_tokens " + std::to_string(c.req.max_tokens) + " exceeds the " +
                                engine::tier_name(c.req.tier) + " tier's limit of " +
                                std::to_string(tier_cfg.max_tokens));
  out.error_code = "max_tokens_too_large";
  return false;
}

// 3. Ledger back-pressure: no admission while the usage spool is full.
bool Governor::check_ledger(AdmitContext& c, AdmitResult& out) {
  (void)c;
  if (!parts_.writer || !parts_.writer->full()) return true;
  ++num_refused_backpressure_;
  int64_t now_ms = to_unix_ms(parts_.clock->now());
  int64_t last = last_backpressure_log_ms_.load();
  if (now_ms - last >= 1000 && last_backpressure_log_ms_.compare_exchange_strong(last, now_ms))
    log::warn("ledger spool full (" + std::to_string(parts_.writer->stats().spool_depth) +
              " usage rows waiting; last error: " + parts_.writer->stats().last_error +
              "): refusing new requests with 503 until it drains");
  out.status = unavailable("The usage ledger is temporarily unavailable and its buffer is full; "
                           "please retry shortly.");
  out.error_code = "ledger_unavailable";
  out.headers.emplace_back("retry-after", "5");
  return false;
}

// 4. Every applicable RPM and TPM bucket: key, app, tenant, tenant x tier.
void Governor::plan_buckets(AdmitContext& c) {
  auto add_pair = [&](const std::string& id, const std::string& owner, int64_t rpm, int64_t tpm) {
    if (rpm > 0) {
      c.buckets.push_back({.key = "rl:" + id + ":req", .capacity = rpm, .cost = 1});
      c.labels.push_back({owner, false});
    }
    if (tpm > 0) {
      c.buckets.push_back({.key = "rl:" + id + ":tok", .capacity = tpm, .cost = c.reserve});
      c.labels.push_back({owner, true});
    }
  };
  const GovConfig& cfg = *c.cfg;
  const KeyInfo& key = c.key;
  if (!options_.no_auth)
    add_pair("key:" + key.id, "key " + key.id, key.rpm > 0 ? key.rpm : cfg.key_default_rpm,
             key.tpm > 0 ? key.tpm : cfg.key_default_tpm);
  auto tenant = cfg.tenants.find(key.tenant);
  if (tenant != cfg.tenants.end()) {
    auto app = tenant->second.apps.find(key.app);
    if (app != tenant->second.apps.end())
      add_pair("app:" + key.tenant + "/" + key.app, "app " + key.tenant + "/" + key.app,
               app->second.rpm, app->second.tpm);
    add_pair("tenant:" + key.tenant, "tenant " + key.tenant, tenant->second.rpm, tenant->second.tpm);
  }
  const TierConfig& tier_cfg = cfg.tiers[size_t(c.req.tier)];
  const char* tier = engine::tier_name(c.req.tier);
  add_pair(std::string("tier:") + tier + ":" + key.tenant,
           "tenant " + key.tenant + " (" + tier + " tier)", tier_cfg.rpm, tier_cfg.tpm);
}

// 5. A request larger than a whole TPM bucket can never be admitted: say so, not "retry".
bool Governor::check_request_fits(AdmitContext& c, AdmitResult& out) {
  for (size_t i = 0; i < c.buckets.size(); ++i) {
    if (!c.labels[i].tokens || c.buckets[i].cost <= c.buckets[i].capacity) continue;
    out.status = refusal(StatusCode::kResourceExhausted,
                         "Request too large: the tokens per minute (tpm) limit of " +
                             c.labels[i].owner + " is " + std::to_string(c.buckets[i].capacity) +
                             ", and this request reserves " + std::to_string(c.reserve) + " (" +
                             c.reserve_parts + "). Lower max_tokens or the prompt.");
    out.error_code = "rate_limit_exceeded";
    ++num_refused_rate_;
    return false;
  }
  return true;
}

bool Governor::outage_allows(AdmitContext& c, AdmitResult& out, const Status& why) {
  ++num_limit_errors_;
  c.limits_down = true;
  const OutageMode mode = outage_mode_for(*c.cfg, c.key.tenant);
  int64_t now_ms = to_unix_ms(parts_.clock->now());
  int64_t last = last_outage_log_ms_.load();
  if (now_ms - last >= 10'000 && last_outage_log_ms_.compare_exchange_strong(last, now_ms)) {
    std::string closed;
    for (const auto& [name, t] : c.cfg->tenants)
      if (outage_mode_for(*c.cfg, name) == OutageMode::kClosed) closed += (closed.empty() ? "" : ", ") + name;
    log::warn("limit store unavailable (" + why.message() + "): default mode fail-" +
              outage_mode_name(c.cfg->limits_on_outage) + "; tenants failing closed: " +
              (closed.empty() ? std::string("none") : closed) +
              "; fail-open charges are journaled and replayed when it returns");
  }
  if (mode == OutageMode::kOpen) return true;
  give_back(c);
  out.status = unavailable("Rate limits and quotas cannot be checked right now (" + why.message() +
                           ") and tenant " + c.key.tenant + " is configured to fail closed; "
                           "please retry shortly.");
  out.error_code = "limits_unavailable";
  out.headers.emplace_back("retry-after", "1");
  ++num_refused_outage_;
  return false;
}

void Governor::give_back(AdmitContext& c) {
  for (const BucketSpec& b : c.taken) (void)parts_.limits->give(b, c.now);
  c.taken.clear();
}

// 6. Rate limits: all buckets or none; headers report the tightest bucket of each kind.
bool Governor::take_rate_limits(AdmitContext& c, AdmitResult& out) {
  if (c.buckets.empty()) return true;
  auto take = parts_.limits->take(c.buckets, c.now);
  if (!take.ok()) return outage_allows(c, out, take.status());
  int tight[2] = {-1, -1};
  for (size_t i = 0; i < c.buckets.size(); ++i) {
    int kind = c.labels[i].tokens ? 1 : 0;
    if (tight[kind] < 0 || take->states[i].remaining < take->states[size_t(tight[kind])].remaining)
      tight[kind] = int(i);
  }
  const char* names[2] = {"requests", "tokens"};
  for (int kind = 0; kind < 2; ++kind) {
    if (tight[kind] < 0) continue;
    const BucketState& s = take->states[size_t(tight[kind])];
    c.headers.emplace_back(std::string("x-ratelimit-limit-") + names[kind], std::to_string(s.limit));
    c.headers.emplace_back(std::string("x-ratelimit-remaining-") + names[kind], std::to_string(s.remaining));
    c.headers.emplace_back(std::string("x-ratelimit-reset-") + names[kind], format_reset(s.reset));
  }
  if (take->admitted) {
    c.taken = c.buckets;
    return true;
  }
  const BucketLabel& l = c.labels[size_t(take->refused)];
  const BucketState& s = take->states[size_t(take->refused)];
  c.headers.emplace_back("retry-after", seconds_ceil(take->retry_after));
  out.headers = std::move(c.headers);
  out.status = refusal(
      StatusCode::kResourceExhausted,
      std::string("Rate limit reached for ") +
          (l.tokens ? "tokens per minute (tpm)" : "requests per minute (rpm)") + " on " + l.owner +
          ": limit " + std::to_string(s.limit) + ", remaining " + std::to_string(s.remaining) +
          (l.tokens ? ", requested " + std::to_string(c.reserve) : "") + ". Please try again in " +
          format_reset(take->retry_after) + ".");
  out.error_code = "rate_limit_exceeded";
  ++num_refused_rate_;
  return false;
}

// 7. Quotas: reserve on every applicable counter, all or nothing (seeding missing counters
// from the ledger). With the store down, the counters are charged at settle instead.
bool Governor::reserve_quotas(AdmitContext& c, AdmitResult& out) {
  std::vector<QuotaSpec> quotas;
  std::vector<QuotaView> views;
  add_quota_specs(*c.cfg, c.key, c.now, c.reserve, &quotas, &views);
  if (quotas.empty()) return true;
  auto unheld = [&] {
    for (const QuotaSpec& q : quotas) c.unheld.push_back({q.key, q.ttl});
    return true;
  };
  if (c.limits_down) return unheld();
  Result<QuotaTake> q = QuotaTake{};
  for (int attempt = 0; attempt < 3; ++attempt) {
    q = parts_.limits->quota_reserve(quotas);
    if (!q.ok() || q->uninitialized < 0) break;
    const QuotaView& v = views[size_t(q->uninitialized)];
    std::string app = v.scope == std::string("app") ? c.key.app : "";
    auto seeded = seed_quota(c.key.tenant, app, c.now, v.period, quotas[size_t(q->uninitialized)].key,
                             quotas[size_t(q->uninitialized)].ttl);
    if (!seeded.ok()) {
      q = seeded.status();
      break;
    }
  }
  if (!q.ok() || q->uninitialized >= 0) {
    // Not logged per request: the breaker logs the outage once when it opens.
    Status why = q.ok() ? unavailable("quota counter could not be initialized") : q.status();
    if (!outage_allows(c, out, why)) return false;
    return unheld();
  }
  if (!q->admitted) {
    give_back(c);
    const QuotaView& v = views[size_t(q->refused)];
    int64_t used = q->used[size_t(q->refused)];
    c.headers.emplace_back("retry-after",
                           seconds_ceil(std::chrono::duration_cast<Millis>(v.resets_at - c.now)));
    out.headers = std::move(c.headers);
    out.status = refusal(
        StatusCode::kResourceExhausted,
        "You exceeded your token quota: " + v.scope + " " + v.name + " has used " +
            std::to_string(used) + " of " + std::to_string(v.limit) + " tokens this " +
            period_name(v.period) + " (including requests in flight); this request needs " +
            std::to_string(c.reserve) + ". The quota resets at " + format_rfc3339(v.resets_at) + ".");
    out.error_code = "insufficient_quota";
    ++num_refused_quota_;
    return false;
  }
  size_t tight = 0;
  for (size_t i = 0; i < quotas.size(); ++i) {
    c.holds.push_back({quotas[i].key, quotas[i].ttl});
    if (views[i].limit - q->used[i] < views[tight].limit - q->used[tight]) tight = i;
  }
  c.headers.emplace_back("x-quota-limit-tokens", std::to_string(views[tight].limit));
  c.headers.emplace_back("x-quota-remaining-tokens",
                         std::to_string(std::max<int64_t>(0, views[tight].limit - q->used[tight])));
  c.headers.emplace_back("x-quota-reset", format_rfc3339(views[tight].resets_at));
  return true;
}

// Only an existing counter is charged: one that is missing (Redis restarted empty) is seeded
// from the ledger at its next use, which then includes this request's row; creating it here
// with just this delta would hide everything before it (and a refund would even make it
// negative).
void Governor::charge_quota(const QuotaHold& q, int64_t delta, std::vector<QuotaCharge>* journal) {
  if (delta == 0) return;
  if (parts_.limits->quota_add_existing(q.key, delta, q.ttl).ok()) return;
  ++num_limit_errors_;
  journal->push_back({q.key, delta, q.ttl, ""});
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
  if (!a.log_bodies) r.request_body.clear(), r.output_text.clear();  // never stored without opt-in
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
  std::shared_lock lock(seed_mu_);  // charge + ledger append as one step for seed_quota()
  std::vector<QuotaCharge> journal;
  for (const QuotaHold& q : a.quotas) charge_quota(q, actual - a.reserved_tokens, &journal);
  for (const QuotaHold& q : a.unheld_quotas) charge_quota(q, actual, &journal);
  if (!journal.empty()) journal_.add(std::move(journal));
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

namespace {
bool key_matches(std::string_view authorization, const std::string& want_sha256) {
  if (want_sha256.size() != 64) return false;
  std::string h = sha256_hex(strip_bearer(authorization));
  unsigned diff = 0;  // constant time in the hash
  for (size_t i = 0; i < h.size(); ++i) diff |= unsigned(h[i] ^ want_sha256[i]);
  return diff == 0;
}
}  // namespace

bool Governor::is_admin(std::string_view authorization) const {
  return key_matches(authorization, parts_.config->get()->admin_key_sha256);
}

bool Governor::may_read_metrics(std::string_view authorization) const {
  auto cfg = parts_.config->get();
  return key_matches(authorization, cfg->admin_key_sha256) ||
         key_matches(authorization, cfg->metrics_key_sha256);
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
  s.num_admitted_fail_open = num_fail_open_.load();
  s.num_refused_outage = num_refused_outage_.load();
  s.num_refused_backpressure = num_refused_backpressure_.load();
  s.num_refused_replay = num_refused_replay_.load();
  s.num_nonce_store_errors = num_nonce_store_errors_.load();
  s.journal_pending_tokens = journal_.tokens_pending();
  s.journal_replayed = journal_.num_replayed();
  if (parts_.limits) s.limits = parts_.limits->health();
  if (parts_.writer) s.ledger = parts_.writer->stats();
  return s;
}

}  // namespace ts::gateway
