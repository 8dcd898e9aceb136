#include "gateway/keys.h"

#include <algorithm>
#include <cstdlib>

#include "gateway/sha256.h"

namespace ts::gateway {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS ts_keys (
  id TEXT PRIMARY KEY,
  hash TEXT NOT NULL UNIQUE,
  prefix TEXT NOT NULL,
  tenant TEXT NOT NULL,
  app TEXT NOT NULL,
  models TEXT NOT NULL,
  tiers TEXT NOT NULL,
  rpm BIGINT NOT NULL,
  tpm BIGINT NOT NULL,
  created_ms BIGINT NOT NULL,
  expires_ms BIGINT NOT NULL,
  enabled INTEGER NOT NULL,
  replaced_by TEXT NOT NULL
);
)sql";

constexpr const char* kColumns =
    "id, prefix, tenant, app, models, tiers, rpm, tpm, created_ms, expires_ms, enabled, replaced_by";

int64_t to_i64(const std::string& s) { return s.empty() ? 0 : std::strtoll(s.c_str(), nullptr, 10); }

std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string join_csv(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

KeyInfo from_row(const SqlRow& row) {
  KeyInfo k;
  k.id = row[0];
  k.prefix = row[1];
  k.tenant = row[2];
  k.app = row[3];
  k.models = split_csv(row[4]);
  for (const auto& t : split_csv(row[5])) {
    auto tier = engine::parse_tier(t);
    if (tier.ok()) k.tiers.push_back(*tier);
  }
  k.rpm = to_i64(row[6]);
  k.tpm = to_i64(row[7]);
  k.created = from_unix_ms(to_i64(row[8]));
  if (int64_t e = to_i64(row[9]); e != 0) k.expires = from_unix_ms(e);
  k.enabled = to_i64(row[10]) != 0;
  k.replaced_by = row[11];
  return k;
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

}  // namespace

std::string_view strip_bearer(std::string_view v) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
  };
  v = trim(v);
  if (v.size() >= 7) {
    std::string head(v.substr(0, 7));
    std::transform(head.begin(), head.end(), head.begin(), ::tolower);
    if (head == "bearer ") v = trim(v.substr(7));
  }
  return v;
}

KeyStore::KeyStore(std::shared_ptr<SqlDb> db, const Clock& clock, KeyStoreOptions options)
    : db_(std::move(db)), clock_(clock), options_(options) {}

Status KeyStore::ensure_schema() {
  {
    std::lock_guard lock(mu_);
    if (schema_ready_) return ok_status();
  }
  Status st = db_->exec_script(kSchema);
  if (!st.ok() && st.code() != StatusCode::kUnavailable) st = db_->exec_script(kSchema);
  if (st.ok()) {
    std::lock_guard lock(mu_);
    schema_ready_ = true;
  }
  return st;
}

Result<CreatedKey> KeyStore::insert_new(const KeySpec& spec, const std::string& replaces) {
  if (!valid_name(spec.tenant)) return invalid_argument("tenant must match [A-Za-z0-9._-]{1,64}");
  if (!valid_name(spec.app)) return invalid_argument("app must match [A-Za-z0-9._-]{1,64}");
  if (spec.rpm < 0 || spec.tpm < 0) return invalid_argument("rpm and tpm must be >= 0");
  for (const auto& m : spec.models)
    if (m.empty() || m.find(',') != std::string::npos)
      return invalid_argument("model names must be non-empty and contain no comma");
  TS_RETURN_IF_ERROR(ensure_schema());
  TS_ASSIGN_OR_RETURN(std::string secret_body, random_base62(40));
  TS_ASSIGN_OR_RETURN(std::string id_body, random_base62(16));
  CreatedKey out;
  out.secret = "ts-" + secret_body;
  KeyInfo& k = out.info;
  k.id = "key_" + id_body;
  k.prefix = out.secret.substr(0, 7);
  k.tenant = spec.tenant;
  k.app = spec.app;
  k.models = spec.models;
  k.tiers = spec.tiers;
  k.rpm = spec.rpm;
  k.tpm = spec.tpm;
  k.created = clock_.now();
  k.expires = spec.expires;
  std::vector<std::string> tier_names;
  for (auto t : k.tiers) tier_names.push_back(engine::tier_name(t));
  SqlParam p[] = {k.id, sha256_hex(out.secret), k.prefix, k.tenant, k.app, join_csv(k.models),
                  join_csv(tier_names), k.rpm, k.tpm, to_unix_ms(k.created),
                  k.expires ? to_unix_ms(*k.expires) : int64_t{0}, int64_t{1}, std::string()};
  Status st = db_->transaction([&]() -> Status {
    TS_RETURN_IF_ERROR(db_->exec(
        "INSERT INTO ts_keys (id, hash, prefix, tenant, app, models, tiers, rpm, tpm, created_ms, "
        "expires_ms, enabled, replaced_by) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)",
        p));
    if (!replaces.empty()) {
      SqlParam q[] = {k.id, replaces};
      TS_RETURN_IF_ERROR(
          db_->exec("UPDATE ts_keys SET enabled = 0, replaced_by = $1 WHERE id = $2", q));
    }
    return ok_status();
  });
  TS_RETURN_IF_ERROR(st);
  if (!replaces.empty()) invalidate_cache();
  return out;
}

Result<CreatedKey> KeyStore::create(const KeySpec& spec) { return insert_new(spec, ""); }

Result<std::vector<KeyInfo>> KeyStore::list(const std::string& tenant) {
  TS_RETURN_IF_ERROR(ensure_schema());
  std::vector<SqlParam> params;
  std::string sql = std::string("SELECT ") + kColumns + " FROM ts_keys";
  if (!tenant.empty()) {
    sql += " WHERE tenant = $1";
    params.push_back(tenant);
  }
  sql += " ORDER BY created_ms DESC, id";
  TS_ASSIGN_OR_RETURN(auto rows, db_->query(sql, params));
  std::vector<KeyInfo> out;
  for (const auto& r : rows) out.push_back(from_row(r));
  return out;
}

Result<KeyInfo> KeyStore::get(const std::string& id) {
  TS_RETURN_IF_ERROR(ensure_schema());
  SqlParam p[] = {id};
  TS_ASSIGN_OR_RETURN(auto rows,
                      db_->query(std::string("SELECT ") + kColumns + " FROM ts_keys WHERE id = $1", p));
  if (rows.empty()) return not_found("no key with id '" + id + "'");
  return from_row(rows[0]);
}

Status KeyStore::disable(const std::string& id) {
  TS_ASSIGN_OR_RETURN(KeyInfo k, get(id));
  SqlParam p[] = {k.id};
  TS_RETURN_IF_ERROR(db_->exec("UPDATE ts_keys SET enabled = 0 WHERE id = $1", p));
  invalidate_cache();
  return ok_status();
}

Result<CreatedKey> KeyStore::rotate(const std::string& id) {
  TS_ASSIGN_OR_RETURN(KeyInfo old, get(id));
  if (!old.enabled) return invalid_argument("key '" + id + "' is disabled; create a new one");
  KeySpec spec{.tenant = old.tenant, .app = old.app, .models = old.models, .tiers = old.tiers,
               .rpm = old.rpm, .tpm = old.tpm, .expires = old.expires};
  return insert_new(spec, old.id);
}

Result<KeyInfo> KeyStore::authenticate(std::string_view bearer) {
  std::string_view secret = strip_bearer(bearer);
  if (secret.empty())
    return Status(StatusCode::kUnauthenticated,
                  "missing API key: send 'Authorization: Bearer <key>'");
  std::string hash = sha256_hex(secret);
  WallTime now = clock_.now();
  std::optional<CacheEntry> cached;
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(hash);
    if (it != cache_.end()) cached = it->second;
  }
  bool fresh = cached && now - cached->fetched <
                             (cached->key ? options_.cache_ttl : options_.negative_ttl);
  if (!fresh) {
    Status st = ensure_schema();
    SqlParam p[] = {hash};
    Result<std::vector<SqlRow>> rows =
        st.ok() ? db_->query(std::string("SELECT ") + kColumns + " FROM ts_keys WHERE hash = $1", p)
                : Result<std::vector<SqlRow>>(st);
    if (rows.ok()) {
      CacheEntry e{.key = std::nullopt, .fetched = now};
      if (!rows->empty()) e.key = from_row((*rows)[0]);
      std::lock_guard lock(mu_);
      if (cache_.size() >= options_.max_cache_entries) cache_.clear();
      cache_[hash] = e;
      cached = e;
    } else if (!cached) {
      return Status(StatusCode::kUnavailable,
                    "cannot check the API key: " + rows.status().message());
    }
    // else: database down, use the stale entry.
  }
  if (!cached->key)
    return Status(StatusCode::kUnauthenticated, "invalid API key (unknown key)");
  const KeyInfo& k = *cached->key;
  if (!k.enabled)
    return Status(StatusCode::kUnauthenticated, "invalid API key (key " + k.id + " is disabled)");
  if (k.expires && now >= *k.expires)
    return Status(StatusCode::kUnauthenticated,
                  "invalid API key (key " + k.id + " expired at " + format_rfc3339(*k.expires) + ")");
  return k;
}

Status KeyStore::authorize(const KeyInfo& key, std::string_view model, engine::Tier tier) {
  if (!key.models.empty() &&
      std::find(key.models.begin(), key.models.end(), model) == key.models.end())
    return Status(StatusCode::kPermissionDenied,
                  "key " + key.id + " may not use model '" + std::string(model) + "'");
  if (!key.tiers.empty() && std::find(key.tiers.begin(), key.tiers.end(), tier) == key.tiers.end())
    return Status(StatusCode::kPermissionDenied, "key " + key.id + " may not use the " +
                                                     engine::tier_name(tier) + " tier");
  return ok_status();
}

void KeyStore::invalidate_cache() {
  std::lock_guard lock(mu_);
  cache_.clear();
}

}  // namespace ts::gateway
