// Governance configuration: tenants, apps, rate limits, quotas, tier limits, prices, log level,
// from one TOML file. Validated completely at load; every error names the file and line:
//   "config.toml:12: quota.period must be day or month"
//
// Example:
//   log_level = "info"
//   [keys]                      # defaults for keys created without --rpm/--tpm
//   default_rpm = 60
//   default_tpm = 100000
//   cache_ttl_ms = 5000
//   [admin]
//   key_sha256 = "<sha256 hex of the admin key>"   # or, keeping the secret out of the file:
//   # key_file = "/run/secrets/ts-admin"          # the raw key, first line (hashed at load)
//   # key_env = "TOKENSERVE_ADMIN_KEY"            # the raw key from this environment variable
//   [metrics]
//   auth = "key"                # "key": /metrics and /dashboard* need the admin or metrics key
//                               # (when API keys are on); "none": open
//   labels = "plain"            # tenant/app labels in exposition: "plain", "hash" or "drop"
//   key_sha256 = "..."          # a metrics-only key (also key_file / key_env as for [admin])
//   [ledger]                    # instead of --ledger, keeping a database password out of argv:
//   url_file = "/run/secrets/ledger-url"   # or url_env = "TOKENSERVE_LEDGER_URL"
//   [limits]
//   url_file = "/run/secrets/redis-url"    # or url_env = ...; replaces --limits
//   on_outage = "open"          # limit store unreachable: "open" admits (charges journaled and
//                               # replayed later), "closed" refuses with 503
//   [tiers.batch]               # per tenant, for requests of this tier
//   rpm = 30
//   tpm = 500000
//   max_tokens = 4096           # largest max_tokens accepted in this tier (0 = no cap)
//   [tenants.acme]
//   on_limit_outage = "closed"  # overrides [limits] on_outage for this tenant
//   rpm = 600
//   tpm = 200000
//   quota = { tokens = 5000000, period = "day" }
//   context_overflow = "truncate_left"   # default for requests without the field (issue 15)
//   log_bodies = true           # store request bodies and outputs in the ledger (opt-in; also per app)
//   [tenants.acme.apps.chatbot]
//   rpm = 100
//   quota = { tokens = 100000, period = "month" }
//   [prices."llama-3-8b"]       # money per million tokens
//   input = 0.05
//   cached = 0.025
//   output = 0.20
//
// A limit of 0 (or absent) means no limit. ConfigHolder swaps a reloaded config atomically.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/log.h"
#include "core/status.h"
#include "engine/request.h"
#include "gateway/clock.h"

namespace ts::gateway {

struct QuotaConfig {
  int64_t tokens = 0;                  // budget per period (> 0)
  Period period = Period::kDay;
};

struct AppConfig {
  int64_t rpm = 0;                     // requests per minute for the app (all its keys)
  int64_t tpm = 0;                     // tokens per minute for the app
  std::optional<QuotaConfig> quota;
  std::string context_overflow;        // "" = the tenant's; else error|truncate_left|truncate_middle
  std::optional<bool> log_bodies;      // unset = the tenant's
};

// What admission does while the limit store (Redis) is unreachable.
enum class OutageMode { kOpen = 0, kClosed = 1 };
const char* outage_mode_name(OutageMode m);  // "open" | "closed"

// How tenant/app names appear in metric labels and on the dashboard data.
enum class LabelMode { kPlain = 0, kHash = 1, kDrop = 2 };

struct TenantConfig {
  std::optional<OutageMode> on_limit_outage;  // unset: GovConfig::limits_on_outage
  int64_t rpm = 0;                     // requests per minute for the whole tenant
  int64_t tpm = 0;                     // tokens per minute for the whole tenant
  std::optional<QuotaConfig> quota;
  std::map<std::string, AppConfig> apps;
  std::string context_overflow;        // "" = "error"; else error|truncate_left|truncate_middle
  bool log_bodies = false;             // store request bodies + output text in the ledger
};

struct TierConfig {
  int64_t rpm = 0;                     // per tenant, requests of this tier
  int64_t tpm = 0;                     // per tenant, tokens of this tier
  int64_t max_tokens = 0;              // cap on a request's max_tokens (0 = none)
  // Engine scheduling limits of the tier (0 / negative = the engine's default).
  int64_t max_running = 0;             // running sequences of this tier at most
  int64_t max_queued = 0;              // queued requests of this tier at most (back-pressure)
  int64_t priority = -1;               // higher is scheduled first and preempted last
  int64_t latency_target_ms = 0;       // queue wait after which lower tiers stop being admitted
  double kv_share = -1;                // share of KV blocks the tier may hold (0, 1]
};

// Prices in pico-units (1e-12 of the money unit) per token, which is the same number as
// micro-units per million tokens: "input = 0.05" per million -> 50'000. Integers keep report
// totals exact.
struct Price {
  int64_t input = 0;                   // uncached prompt tokens
  int64_t cached = 0;                  // cached prompt tokens
  int64_t output = 0;                  // completion tokens
};

struct GovConfig {
  std::string source;                  // file it came from ("" = built-in defaults)
  log::Level log_level = log::Level::kInfo;
  int64_t key_default_rpm = 0;         // for keys whose own rpm is 0
  int64_t key_default_tpm = 0;
  Millis key_cache_ttl{5000};
  std::string admin_key_sha256;        // lower-case hex; "" = admin API disabled
  std::string metrics_key_sha256;      // lower-case hex of a metrics-only key; "" = none
  bool metrics_auth = true;            // [metrics] auth = "key" (true) | "none"
  LabelMode metrics_labels = LabelMode::kPlain;
  OutageMode limits_on_outage = OutageMode::kOpen;
  // Secrets read at load from [ledger]/[limits] url_file / url_env: they replace the --ledger /
  // --limits flags. Never logged (describe() of the stores redacts passwords).
  std::string ledger_url;
  std::string limits_url;
  std::array<TierConfig, engine::kNumTiers> tiers;  // indexed by engine::Tier
  std::map<std::string, TenantConfig> tenants;
  std::map<std::string, Price> prices; // by model name
};

// The outage mode in force for a tenant.
OutageMode outage_mode_for(const GovConfig& c, const std::string& tenant);
// The context_overflow default of a tenant's app: the app's, else the tenant's, else "".
std::string context_overflow_default(const GovConfig& c, const std::string& tenant, const std::string& app);
// Whether a tenant's app opted into body logging: the app's log_bodies, else the tenant's, else
// false (unknown tenants never log bodies).
bool log_bodies_for(const GovConfig& c, const std::string& tenant, const std::string& app);

// Parses and validates TOML text; `name` is used in error messages (usually the path).
// kInvalidArgument "name:line: message" on the first problem.
Result<GovConfig> parse_config(std::string_view toml_text, const std::string& name);
// Reads and parses a file. kNotFound if it cannot be read.
Result<GovConfig> load_config(const std::string& path);

// Cost of tokens at a price, in pico-units.
int64_t cost_pico(const Price& p, int64_t prompt_tokens, int64_t cached_tokens,
                  int64_t completion_tokens);
// Pico-units as a decimal string with 2 to 12 decimals ("0.000150", "12.50").
std::string format_money(int64_t pico);

// The live config, replaced atomically on reload. Readers take a snapshot (shared_ptr) per
// request, so a reload never changes the rules in the middle of a request and never blocks one.
// Thread-safe.
class ConfigHolder {
 public:
  explicit ConfigHolder(GovConfig initial)
      : current_(std::make_shared<const GovConfig>(std::move(initial))) {}
  std::shared_ptr<const GovConfig> get() const {
    std::lock_guard lock(mu_);
    return current_;
  }
  void set(GovConfig next) {
    auto p = std::make_shared<const GovConfig>(std::move(next));
    std::lock_guard lock(mu_);
    current_ = std::move(p);
  }
  // Re-reads the file the current config came from (for SIGHUP). On error the current config
  // stays and the error is returned.
  Status reload();

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const GovConfig> current_;
};

}  // namespace ts::gateway
