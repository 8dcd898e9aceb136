// API keys: who is calling (tenant, app) and what they may use (models, tiers, limits).
//
// A key is "ts-" + 40 base62 characters from /dev/urandom. Only its SHA-256 is stored (table
// ts_keys in the ledger database); the plaintext is returned once, by create() and rotate().
// Each key also has a public id ("key_...") used in the ledger, reports and admin commands.
//
// authenticate() answers from an in-memory cache (TTL options.cache_ttl) so that a request
// does not reach the database; disable()/rotate() through this store take effect at once,
// through another process within the TTL. If the database is unreachable, an entry past its
// TTL is still used (stale) rather than refusing every request.
//
// Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "gateway/clock.h"
#include "gateway/sql_db.h"

namespace ts::gateway {

struct KeyInfo {
  std::string id;                     // public id, "key_" + 16 base62
  std::string prefix;                 // first 7 characters of the secret ("ts-AbCd"), for display
  std::string tenant;                 // team
  std::string app;                    // application within the tenant
  std::vector<std::string> models;    // models it may use; empty = all
  std::vector<engine::Tier> tiers;    // tiers it may use; empty = all
  int64_t rpm = 0;                    // requests per minute for this key; 0 = config default
  int64_t tpm = 0;                    // tokens per minute for this key; 0 = config default
  WallTime created{};
  std::optional<WallTime> expires;    // refused from this instant on
  bool enabled = true;
  std::string replaced_by;            // id of the key that rotate() made from this one
};

// What create() needs.
struct KeySpec {
  std::string tenant;                 // required, [A-Za-z0-9._-]{1,64}
  std::string app;                    // required, same alphabet
  std::vector<std::string> models;
  std::vector<engine::Tier> tiers;
  int64_t rpm = 0;                    // >= 0
  int64_t tpm = 0;                    // >= 0
  std::optional<WallTime> expires;
};

struct CreatedKey {
  KeyInfo info;
  std::string secret;                 // the plaintext key; not recoverable later
};

struct KeyStoreOptions {
  Millis cache_ttl{5000};             // how long a looked-up key is trusted without the DB
  Millis negative_ttl{1000};          // how long an unknown key is remembered as unknown
  size_t max_cache_entries = 100'000; // the cache is cleared when it grows past this
};

// "Bearer xyz" or "xyz" -> "xyz" (trimmed).
std::string_view strip_bearer(std::string_view header_value);

class KeyStore {
 public:
  KeyStore(std::shared_ptr<SqlDb> db, const Clock& clock, KeyStoreOptions options = {});

  // kInvalidArgument for a bad spec; kUnavailable/kInternal from the database.
  Result<CreatedKey> create(const KeySpec& spec);
  // All keys (of one tenant when given), newest first.
  Result<std::vector<KeyInfo>> list(const std::string& tenant = "");
  // kNotFound for an unknown id.
  Result<KeyInfo> get(const std::string& id);
  // Disables a key (idempotent). kNotFound for an unknown id.
  Status disable(const std::string& id);
  // A new key with the same tenant/app/models/tiers/limits/expiry; the old one is disabled in
  // the same transaction. kNotFound for an unknown id; kInvalidArgument if already disabled.
  Result<CreatedKey> rotate(const std::string& id);

  // The key behind a bearer token. kUnauthenticated: missing, unknown, disabled or expired key
  // (the message says which, never echoing the secret). kUnavailable: the database is
  // unreachable and the key is not cached.
  Result<KeyInfo> authenticate(std::string_view bearer);
  // kPermissionDenied when the key may not use this model or tier.
  static Status authorize(const KeyInfo& key, std::string_view model, engine::Tier tier);

  void invalidate_cache();

 private:
  struct CacheEntry {
    std::optional<KeyInfo> key;       // nullopt: known to be unknown
    WallTime fetched{};
  };
  Status ensure_schema();
  Result<CreatedKey> insert_new(const KeySpec& spec, const std::string& replaces);

  std::shared_ptr<SqlDb> db_;
  const Clock& clock_;
  const KeyStoreOptions options_;
  std::mutex mu_;
  bool schema_ready_ = false;
  std::unordered_map<std::string, CacheEntry> cache_;  // sha256 hex -> entry
};

}  // namespace ts::gateway
