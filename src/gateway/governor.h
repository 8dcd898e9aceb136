// Governor: the one object the HTTP server calls to govern a request.
//
//   Governor::open(options)           at start-up (after flags/config), exceptions never escape
//   admit(AdmitRequest)               before submitting to the engine
//     -> AdmitResult: ok() with an Admission, or a refusal carrying the HTTP status (from the
//        Status code: 401 kUnauthenticated, 403 kPermissionDenied, 400 kInvalidArgument,
//        429 kResourceExhausted, 503 kUnavailable), the OpenAI error code, and the headers
//        (x-ratelimit-*, Retry-After) to send with either outcome
//   settle(admission, record)         exactly once when the request ends, however it ends
//                                     (finished, client disconnected, engine error): refunds
//                                     the unused reservation, charges the quota with the real
//                                     count, and appends the ledger row (asynchronously)
//   usage_me(bearer)                  for GET /v1/usage/me
//   reload_config()                   on SIGHUP
//   shutdown(timeout)                 on SIGTERM, after the HTTP server drained: flushes the
//                                     ledger spool
//
// Admission, step by step: authenticate the bearer key (KeyStore cache) -> authorize model and
// tier -> tier max_tokens cap -> reserve = prompt_tokens + max_tokens (or + completion_estimate
// when the client gave no max_tokens) -> take from the rate
// buckets (key, app, tenant, tenant×tier; RPM cost 1, TPM cost = reserve) all-or-nothing ->
// reserve `reserve` tokens on the quota counters (tenant, app) all-or-nothing; if the quota
// refuses, the rate-limit take is given back. A quota counter holds committed usage plus the
// reservations in flight, so usage can exceed a budget only if a request consumes more than
// it reserved: only a request admitted on an estimate can, and settle() then charges the
// excess to the quota and the TPM buckets (which may go below zero and refill from there).
//
// With no_auth, every request is admitted as tenant "anonymous", app "default" (tenant limits
// from the config still apply) and a warning is logged at open().
// With trust_gateway_secret (serve --trust-gateway), the Authorization header must carry the
// gateway's signed identity (trust.h) instead of an API key: tenant/app come from it, the
// request's tier must be the signed one (403 otherwise), anything else is 401
// "invalid_gateway_signature" (or "replayed_gateway_signature": a signed header set is accepted
// once inside its validity window: once per replica by its own ReplayGuard, and once across all
// replicas when the limit store is shared (Redis: SET NX of the signature with the window's
// TTL); if that store fails the local guard alone decides); limits and quotas of the config then
// apply per replica.
//
// Ledger back-pressure: while the ledger writer's spool is full (the database has been away
// for long), admit() refuses with 503 + Retry-After (code "ledger_unavailable"), counted and
// logged, rather than serve requests whose rows could not be kept.
//
// Limit-store outages (Redis unreachable or hanging; open() wraps the store in a circuit
// breaker, circuit_breaker.h, so once it is open a call fails in microseconds): each tenant's
// mode ([limits] on_outage, tenants.X.on_limit_outage) decides. "open" (default) admits without
// rate limits and without a quota hold, and settle() journals the request's charges
// (QuotaJournal) instead; a background thread replays the journal every 200 ms once the store
// answers, so quotas end up charged exactly. "closed" refuses with 503 + Retry-After
// ("limits_unavailable"). With options.quota_journal_path (open() puts it beside the ledger
// journal) the charges survive a crash or restart. The mode in force is logged at each breaker transition and exposed in
// stats (metrics).
//
// Thread-safe: admit/settle/usage_me may run concurrently from any number of HTTP workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "gateway/clock.h"
#include "gateway/config.h"
#include "gateway/keys.h"
#include "gateway/ledger.h"
#include "gateway/ledger_writer.h"
#include "gateway/limit_store.h"
#include "gateway/quota_journal.h"
#include "gateway/trust.h"

namespace ts::gateway {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct AdmitRequest {
  std::string_view authorization;      // the Authorization header value ("Bearer ts-...")
  std::string_view model;              // requested model
  engine::Tier tier = engine::Tier::kInteractive;
  int64_t prompt_tokens = 0;           // after tokenization
  int64_t max_tokens = 0;              // completion tokens the request may produce (all choices)
  // > 0: the client gave no max_tokens, so max_tokens is whatever the context leaves; reserve
  // this bounded estimate (all choices) instead, skip the tier max_tokens cap (the caller has
  // already clamped to it), and settle() charges the actual count, above the reservation too.
  int64_t completion_estimate = 0;
};

// Completion tokens per choice reserved for a request without max_tokens (at most what fits).
inline constexpr int64_t kDefaultCompletionEstimate = 1024;

// A quota counter touched by one admission.
struct QuotaHold {
  std::string key;                     // LimitStore counter
  Millis ttl{0};
};

// What an admitted request holds until settle().
struct Admission {
  KeyInfo key;                         // tenant/app/id of the caller (synthetic with --no-auth)
  std::string model;
  engine::Tier tier = engine::Tier::kInteractive;
  WallTime admitted_at{};              // becomes UsageRecord::time
  int64_t reserved_tokens = 0;         // prompt_tokens + max_tokens (or + completion_estimate)
  std::vector<BucketSpec> token_buckets;  // TPM buckets charged `reserved_tokens`
  std::vector<QuotaHold> quotas;       // counters holding the reservation
  std::vector<QuotaHold> unheld_quotas;  // counters to charge at settle without a reservation
                                         // (admitted fail-open while the store was down)
  Headers headers;                     // x-ratelimit-* and x-quota-* to send with the response
  bool settled = false;                // set by settle()
  bool log_bodies = false;             // the tenant/app opted into body logging (config.h)
};

struct AdmitResult {
  Status status;                       // ok, or the refusal (see the header comment)
  std::string error_code;              // OpenAI error.code: invalid_api_key, model_not_allowed,
                                       // rate_limit_exceeded, insufficient_quota, ...
  Headers headers;                     // to send in both cases (refusals: Retry-After when known)
  std::optional<Admission> admission;  // set iff ok()
  bool ok() const { return status.ok(); }
};

// One quota as the key holder sees it (GET /v1/usage/me).
struct QuotaView {
  std::string scope;                   // "tenant" or "app"
  std::string name;                    // "acme" or "acme/chatbot"
  Period period = Period::kDay;
  int64_t limit = 0;
  int64_t used = 0;                    // committed + in flight
  int64_t remaining = 0;               // max(0, limit - used)
  WallTime resets_at{};                // end of the period
};

struct UsageMe {
  KeyInfo key;
  int64_t rpm = 0;                     // effective per-key limits (0 = none)
  int64_t tpm = 0;
  std::vector<QuotaView> quotas;
};

// The body of GET /v1/usage/me:
// {"tenant","app","key_id","limits":{"rpm","tpm"},"quotas":[{"scope","name","period","limit",
//  "used","remaining","resets_at"}]}
std::string usage_me_json(const UsageMe& me);

// Counters for metrics.
struct GovernorStats {
  int64_t num_admitted = 0;
  int64_t num_refused_auth = 0;        // 401 + 403
  int64_t num_refused_rate = 0;        // 429 rate_limit_exceeded
  int64_t num_refused_quota = 0;       // 429 insufficient_quota
  int64_t num_limit_errors = 0;        // limit store calls that failed
  int64_t num_admitted_fail_open = 0;  // admitted without the limit store
  int64_t num_refused_outage = 0;      // 503: limit store down and the tenant fails closed
  int64_t num_refused_backpressure = 0;  // 503: ledger spool full
  int64_t num_refused_replay = 0;      // 401 replayed_gateway_signature (also in num_refused_auth)
  int64_t num_nonce_store_errors = 0;  // --trust-gateway nonce checks the shared store failed
                                       // (also in num_limit_errors; the local guard decided)
  int64_t journal_pending_tokens = 0;  // quota charges waiting for the store
  int64_t journal_replayed = 0;        // journaled charges applied after an outage
  LimitStoreHealth limits;             // breaker state
  LedgerStats ledger;
};

// Everything open() builds from flags.
struct GovernanceOptions {
  std::string ledger = "tokenserve.db";  // SQLite path or postgresql:// URL
  std::string limits;                  // "" = in this process; "redis://host:port" = shared
  std::string config_path;             // "" = no config file (no tenant limits, no prices)
  bool no_auth = false;
  const Clock* clock = nullptr;        // nullptr = system clock
  // --trust-gateway: identities come signed by the gateway (trust.h) instead of API keys; ""
  // = off. Requests without a valid signature are refused (401 invalid_gateway_signature).
  std::string trust_gateway_secret;
  LedgerWriterOptions writer;          // spill_path "" = "<ledger>.spool.jsonl" for SQLite,
                                       // "tokenserve-ledger.spool.jsonl" for PostgreSQL
};

struct GovernorOptions {
  bool no_auth = false;
  std::string trust_gateway_secret;    // see GovernanceOptions
  Millis replay_interval{200};         // journal replay period; 0 = no background thread
  std::string quota_journal_path;      // durable QuotaJournal file; "" = memory only
  Millis seed_flush_timeout{2000};     // seeding waits this long for the ledger writer
};

// Non-owning parts for tests and for open().
struct GovernorParts {
  KeyStore* keys = nullptr;            // may be null when no_auth
  LimitStore* limits = nullptr;
  LedgerStore* ledger = nullptr;       // for seeding quota counters
  LedgerWriter* writer = nullptr;
  ConfigHolder* config = nullptr;
  const Clock* clock = nullptr;
};

class Governor {
 public:
  Governor(GovernorParts parts, GovernorOptions options);
  ~Governor();

  // Builds the ledger, key store, limit store, config and writer. kInvalidArgument for a bad
  // config file (with file:line) or URL. An unreachable database is not an error here.
  static Result<std::unique_ptr<Governor>> open(const GovernanceOptions& options);

  AdmitResult admit(const AdmitRequest& request);
  // Idempotent per admission. Fills the record's tenant/app/key_id/model/tier/time when empty.
  void settle(Admission& admission, UsageRecord record);
  // kUnauthenticated as for admit.
  Result<UsageMe> usage_me(std::string_view authorization);
  // True when `authorization` carries the admin key from [admin] key_sha256.
  bool is_admin(std::string_view authorization) const;
  // True for the admin key or the metrics key ([metrics] key_sha256).
  bool may_read_metrics(std::string_view authorization) const;
  // Applies journaled quota charges now (the background thread does this periodically).
  Result<int64_t> replay_limit_journal();

  Status reload_config();
  Status shutdown(Millis timeout);
  GovernorStats stats() const;

  std::shared_ptr<const GovConfig> config() const { return parts_.config->get(); }
  KeyStore* keys() { return parts_.keys; }
  LedgerStore* ledger() { return parts_.ledger; }
  LedgerWriter* writer() { return parts_.writer; }

 private:
  struct Owned;
  struct AdmitContext;
  // admit(), step by step (each returns false after filling `out` with a refusal).
  bool identify(AdmitContext& c, AdmitResult& out);
  bool check_tier_cap(AdmitContext& c, AdmitResult& out);
  bool check_ledger(AdmitContext& c, AdmitResult& out);
  void plan_buckets(AdmitContext& c);
  bool check_request_fits(AdmitContext& c, AdmitResult& out);
  bool take_rate_limits(AdmitContext& c, AdmitResult& out);
  bool reserve_quotas(AdmitContext& c, AdmitResult& out);
  // Limit store down: false (503 filled in) when the tenant fails closed.
  bool outage_allows(AdmitContext& c, AdmitResult& out, const Status& why);
  void give_back(AdmitContext& c);
  // Charges an existing counter; a failed charge is added to `journal` (journaled by settle).
  void charge_quota(const QuotaHold& q, int64_t delta, std::vector<QuotaCharge>* journal);
  void replay_loop();

  Result<int64_t> seed_quota(const std::string& tenant, const std::string& app, WallTime now,
                             Period period, const std::string& key, Millis ttl);
  void add_quota_specs(const GovConfig& cfg, const KeyInfo& key, WallTime now, int64_t amount,
                       std::vector<QuotaSpec>* specs, std::vector<QuotaView>* views) const;

  GovernorParts parts_;
  GovernorOptions options_;
  std::unique_ptr<Owned> owned_;       // set by open()
  std::atomic<int64_t> num_admitted_{0}, num_refused_auth_{0}, num_refused_rate_{0},
      num_refused_quota_{0}, num_limit_errors_{0}, num_fail_open_{0}, num_refused_outage_{0},
      num_refused_backpressure_{0}, num_refused_replay_{0}, num_nonce_store_errors_{0};
  std::atomic<int64_t> last_backpressure_log_ms_{0}, last_outage_log_ms_{-100'000}, last_nonce_log_ms_{-100'000};
  QuotaJournal journal_;
  // Seeding a counter from the ledger (exclusive) versus settling or replaying charges
  // (shared): a seed first flushes the ledger writer, so every settle is either wholly before
  // it (its row is in the ledger sum, its charge skipped or dropped) or wholly after it (its
  // charge reaches the seeded counter). See seed_quota().
  std::shared_mutex seed_mu_;
  // --trust-gateway: signatures already used inside their validity window (trust.h).
  static constexpr int64_t kGatewayMaxSkewMs = 300'000;  // verify_gateway_authorization's default
  ReplayGuard replay_guard_;
  std::mutex replay_mu_;
  std::condition_variable replay_cv_;
  bool replay_stop_ = false;
  std::thread replay_thread_;
};

}  // namespace ts::gateway
