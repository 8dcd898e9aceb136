// The usage ledger: one UsageRecord per request, stored behind one LedgerStore interface.
// The SQL implementation runs on SQLite (embedded default, WAL file) and PostgreSQL (libpq)
// through SqlDb; the schema and queries are shared, only the connection differs.
// Records are appended off the request path by LedgerWriter (ledger_writer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "gateway/clock.h"
#include "gateway/sql_db.h"

namespace ts::gateway {

// One finished (or refused-after-admission, or cancelled) request.
struct UsageRecord {
  std::string request_id;         // unique per request: a record re-sent after a retry is stored once
  WallTime time{};                // admission time (UTC); decides the quota period and report day
  std::string tenant;             // team that owns the key
  std::string app;                // application within the tenant
  std::string key_id;             // public key id ("key_..."); "" with --no-auth
  std::string model;              // model name as requested
  engine::Tier tier = engine::Tier::kInteractive;  // serving tier
  int64_t prompt_tokens = 0;      // prompt length (cached ones included)
  int64_t cached_tokens = 0;      // prompt tokens served from the prefix cache
  int64_t completion_tokens = 0;  // generated tokens over all choices
  int64_t reasoning_tokens = 0;   // of completion_tokens, those spent reasoning (thinking models)
  int64_t ttft_ms = -1;           // time to first token; -1 when none was produced
  int64_t duration_ms = 0;        // admission to last byte
  std::string finish_reason;      // "stop" | "length" | "cancelled" | "error" | ""
  int32_t http_status = 200;      // status sent to the client
  std::string prompt_id;          // registry prompt the request used ("" = none; prompt_registry.h)
  int64_t prompt_version = 0;     // its version (0 = none)
  // Scale-out (tokenserve gateway): where the request was served and how many upstream attempts
  // it took ("local:r2" | "remote:big"; "" and 0 for requests served by `serve` itself or refused
  // before any attempt).
  std::string served_by;
  int64_t attempts = 0;
  // Body logging (only for tenants/apps with log_bodies = true in the config; "" otherwise).
  // Stored in ts_usage_bodies keyed by request_id, and in the ledger journal.
  std::string request_body;       // the request's JSON body as the engine saw it (a registry
                                  // prompt already rendered into "messages")
  std::string output_text;        // the first choice's output text (may be partial on errors)
};

// Tokens a record charges against quotas and TPM: prompt + completion.
inline int64_t billable_tokens(const UsageRecord& r) { return r.prompt_tokens + r.completion_tokens; }

// Which rows a query sees. Empty strings and unset times mean "any".
struct LedgerFilter {
  std::optional<WallTime> from;   // inclusive
  std::optional<WallTime> to;     // exclusive
  std::string tenant;
  std::string app;
};

enum class GroupBy { kTenant, kApp, kModel, kKey, kDay, kPrompt };
const char* group_by_name(GroupBy g);                   // "tenant" | "app" | "model" | "key" | "day" | "prompt"
Result<GroupBy> parse_group_by(std::string_view name);  // kInvalidArgument on others

// Sums over the rows of one group and one model (cost needs the model's prices).
struct UsageGroupRow {
  std::string group;              // tenant, "tenant/app", model, key id, "YYYY-MM-DD", or
                                  // "prompt@version" ("(none)" for requests without a prompt)
  std::string model;
  int64_t num_requests = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
};

// Durable storage of usage rows. Implementations are thread-safe. Every call creates the
// schema first if this process has not yet done so. Failures: kUnavailable when the database
// cannot be reached (nothing was written; retry), kInternal for SQL errors.
class LedgerStore {
 public:
  virtual ~LedgerStore() = default;
  virtual std::string describe() const = 0;
  // Appends all records in one transaction (all or none). A record whose request_id is already
  // stored is skipped, so re-sending a batch after an unclear failure never double counts.
  virtual Status append(std::span<const UsageRecord> records) = 0;
  // Matching rows ordered by time, then request id, with their logged bodies (if any).
  virtual Result<std::vector<UsageRecord>> rows(const LedgerFilter& filter) = 0;
  // Matching rows summed per (group, model), ordered by group then model.
  virtual Result<std::vector<UsageGroupRow>> aggregate(GroupBy by, const LedgerFilter& filter) = 0;
  // Sum of billable tokens in [from, to) for a tenant (all apps when app is empty).
  virtual Result<int64_t> sum_tokens(const std::string& tenant, const std::string& app,
                                     WallTime from, WallTime to) = 0;
  // Number of rows (tests and health checks).
  virtual Result<int64_t> count() = 0;
};

// The SQL ledger over an open database (shared with KeyStore).
std::unique_ptr<LedgerStore> make_sql_ledger(std::shared_ptr<SqlDb> db);

}  // namespace ts::gateway
