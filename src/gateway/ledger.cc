#include "gateway/ledger.h"

#include <atomic>
#include <cstdlib>

namespace ts::gateway {

const char* group_by_name(GroupBy g) {
  switch (g) {
    case GroupBy::kTenant: return "tenant";
    case GroupBy::kApp: return "app";
    case GroupBy::kModel: return "model";
    case GroupBy::kKey: return "key";
    case GroupBy::kDay: return "day";
    case GroupBy::kPrompt: return "prompt";
  }
  return "?";
}

Result<GroupBy> parse_group_by(std::string_view name) {
  for (GroupBy g : {GroupBy::kTenant, GroupBy::kApp, GroupBy::kModel, GroupBy::kKey, GroupBy::kDay,
                    GroupBy::kPrompt})
    if (name == group_by_name(g)) return g;
  return invalid_argument("unknown grouping '" + std::string(name) +
                          "': expected tenant, app, model, key, day or prompt");
}

namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS ts_usage (
  request_id TEXT PRIMARY KEY,
  time_ms BIGINT NOT NULL,
  tenant TEXT NOT NULL,
  app TEXT NOT NULL,
  key_id TEXT NOT NULL,
  model TEXT NOT NULL,
  tier TEXT NOT NULL,
  prompt_tokens BIGINT NOT NULL,
  cached_tokens BIGINT NOT NULL,
  completion_tokens BIGINT NOT NULL,
  ttft_ms BIGINT NOT NULL,
  duration_ms BIGINT NOT NULL,
  finish_reason TEXT NOT NULL,
  http_status INTEGER NOT NULL,
  reasoning_tokens BIGINT NOT NULL DEFAULT 0,
  prompt_id TEXT NOT NULL DEFAULT '',
  prompt_version BIGINT NOT NULL DEFAULT 0,
  served_by TEXT NOT NULL DEFAULT '',
  attempts BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS ts_usage_bodies (
  request_id TEXT PRIMARY KEY,
  request_body TEXT NOT NULL,
  output_text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ts_usage_time ON ts_usage (time_ms);
CREATE INDEX IF NOT EXISTS ts_usage_tenant_time ON ts_usage (tenant, time_ms);
)sql";

constexpr const char* kColumns =
    "request_id, time_ms, tenant, app, key_id, model, tier, prompt_tokens, cached_tokens, "
    "completion_tokens, ttft_ms, duration_ms, finish_reason, http_status, reasoning_tokens, prompt_id, prompt_version, "
    "served_by, attempts";

// Ledgers created before the column existed get it (old rows: 0).
constexpr const char* kReasoningColumn = "ALTER TABLE ts_usage ADD COLUMN reasoning_tokens BIGINT NOT NULL DEFAULT 0";

int64_t to_i64(const std::string& s) { return s.empty() ? 0 : std::strtoll(s.c_str(), nullptr, 10); }

// Appends " AND ..." clauses for `f` with parameters numbered after those already in `params`.
std::string where_clause(const LedgerFilter& f, std::vector<SqlParam>& params) {
  std::string w = " WHERE 1=1";
  auto add = [&](const char* cond, SqlParam p) {
    params.push_back(std::move(p));
    w += std::string(" AND ") + cond + " $" + std::to_string(params.size());
  };
  if (f.from) add("time_ms >=", to_unix_ms(*f.from));
  if (f.to) add("time_ms <", to_unix_ms(*f.to));
  if (!f.tenant.empty()) add("tenant =", f.tenant);
  if (!f.app.empty()) add("app =", f.app);
  return w;
}

class SqlLedger final : public LedgerStore {
 public:
  explicit SqlLedger(std::shared_ptr<SqlDb> db) : db_(std::move(db)) {}

  std::string describe() const override { return db_->describe(); }

  Status append(std::span<const UsageRecord> records) override {
    TS_RETURN_IF_ERROR(ensure_schema());
    if (records.empty()) return ok_status();
    std::string sql = std::string("INSERT INTO ts_usage (") + kColumns +
                      ") VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)"
                      " ON CONFLICT (request_id) DO NOTHING";
    return db_->transaction([&]() -> Status {
      for (const UsageRecord& r : records) {
        SqlParam p[] = {r.request_id,  to_unix_ms(r.time), r.tenant,
                        r.app,         r.key_id,           r.model,
                        std::string(engine::tier_name(r.tier)), r.prompt_tokens,
                        r.cached_tokens, r.completion_tokens, r.ttft_ms,
                        r.duration_ms, r.finish_reason,    int64_t(r.http_status),
                        r.reasoning_tokens, r.prompt_id,   r.prompt_version,
                        r.served_by,   r.attempts};
        TS_RETURN_IF_ERROR(db_->exec(sql, p));
        if (r.request_body.empty() && r.output_text.empty()) continue;  // body logging off
        SqlParam b[] = {r.request_id, r.request_body, r.output_text};
        TS_RETURN_IF_ERROR(db_->exec("INSERT INTO ts_usage_bodies (request_id, request_body, output_text) "
                                     "VALUES ($1,$2,$3) ON CONFLICT (request_id) DO NOTHING", b));
      }
      return ok_status();
    });
  }

  Result<std::vector<UsageRecord>> rows(const LedgerFilter& filter) override {
    TS_RETURN_IF_ERROR(ensure_schema());
    std::vector<SqlParam> params;
    std::string sql = std::string("SELECT ") + kColumns +
                      ", COALESCE((SELECT b.request_body FROM ts_usage_bodies b WHERE b.request_id = "
                      "ts_usage.request_id), ''), COALESCE((SELECT b.output_text FROM ts_usage_bodies b "
                      "WHERE b.request_id = ts_usage.request_id), '') FROM ts_usage" +
                      where_clause(filter, params) + " ORDER BY time_ms, request_id";
    TS_ASSIGN_OR_RETURN(auto raw, db_->query(sql, params));
    std::vector<UsageRecord> out;
    out.reserve(raw.size());
    for (const SqlRow& row : raw) {
      UsageRecord r;
      r.request_id = row[0];
      r.time = from_unix_ms(to_i64(row[1]));
      r.tenant = row[2];
      r.app = row[3];
      r.key_id = row[4];
      r.model = row[5];
      auto tier = engine::parse_tier(row[6]);
      r.tier = tier.ok() ? *tier : engine::Tier::kInteractive;
      r.prompt_tokens = to_i64(row[7]);
      r.cached_tokens = to_i64(row[8]);
      r.completion_tokens = to_i64(row[9]);
      r.ttft_ms = to_i64(row[10]);
      r.duration_ms = to_i64(row[11]);
      r.finish_reason = row[12];
      r.http_status = int32_t(to_i64(row[13]));
      r.reasoning_tokens = to_i64(row[14]);
      r.prompt_id = row[15];
      r.prompt_version = to_i64(row[16]);
      r.served_by = row[17];
      r.attempts = to_i64(row[18]);
      if (row.size() > 20) {
        r.request_body = row[19];
        r.output_text = row[20];
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  Result<std::vector<UsageGroupRow>> aggregate(GroupBy by, const LedgerFilter& filter) override {
    TS_RETURN_IF_ERROR(ensure_schema());
    const char* key = "tenant";
    switch (by) {
      case GroupBy::kTenant: key = "tenant"; break;
      case GroupBy::kApp: key = "tenant || '/' || app"; break;
      case GroupBy::kModel: key = "model"; break;
      case GroupBy::kKey: key = "key_id"; break;
      case GroupBy::kDay: key = "time_ms / 86400000"; break;
      case GroupBy::kPrompt:
        key = "CASE WHEN prompt_id = '' THEN '(none)' ELSE prompt_id || '@' || "
              "CAST(prompt_version AS TEXT) END";
        break;
    }
    std::vector<SqlParam> params;
    std::string sql = std::string("SELECT ") + key +
                      " AS g, model, COUNT(*), COALESCE(SUM(prompt_tokens),0), "
                      "COALESCE(SUM(cached_tokens),0), COALESCE(SUM(completion_tokens),0) "
                      "FROM ts_usage" + where_clause(filter, params) +
                      " GROUP BY g, model ORDER BY g, model";
    TS_ASSIGN_OR_RETURN(auto raw, db_->query(sql, params));
    std::vector<UsageGroupRow> out;
    for (const SqlRow& row : raw) {
      UsageGroupRow g;
      g.group = by == GroupBy::kDay ? format_date(from_unix_ms(to_i64(row[0]) * 86'400'000))
                                    : row[0];
      g.model = row[1];
      g.num_requests = to_i64(row[2]);
      g.prompt_tokens = to_i64(row[3]);
      g.cached_tokens = to_i64(row[4]);
      g.completion_tokens = to_i64(row[5]);
      out.push_back(std::move(g));
    }
    return out;
  }

  Result<int64_t> sum_tokens(const std::string& tenant, const std::string& app, WallTime from,
                             WallTime to) override {
    TS_RETURN_IF_ERROR(ensure_schema());
    LedgerFilter f{.from = from, .to = to, .tenant = tenant, .app = app};
    std::vector<SqlParam> params;
    std::string sql = "SELECT COALESCE(SUM(prompt_tokens + completion_tokens),0) FROM ts_usage" +
                      where_clause(f, params);
    TS_ASSIGN_OR_RETURN(auto raw, db_->query(sql, params));
    return raw.empty() ? int64_t{0} : to_i64(raw[0][0]);
  }

  Result<int64_t> count() override {
    TS_RETURN_IF_ERROR(ensure_schema());
    TS_ASSIGN_OR_RETURN(auto raw, db_->query("SELECT COUNT(*) FROM ts_usage"));
    return to_i64(raw[0][0]);
  }

 private:
  Status ensure_schema() {
    if (schema_ready_.load()) return ok_status();
    Status st = db_->exec_script(kSchema);
    // Two processes creating the schema at once can collide in PostgreSQL; once more settles it.
    if (!st.ok() && st.code() != StatusCode::kUnavailable) st = db_->exec_script(kSchema);
    if (st.ok() && !db_->query("SELECT reasoning_tokens FROM ts_usage LIMIT 0").ok()) {
      st = db_->exec(kReasoningColumn);
      if (!st.ok() && db_->query("SELECT reasoning_tokens FROM ts_usage LIMIT 0").ok()) st = ok_status();  // raced
    }
    if (st.ok()) st = migrate_prompt_columns();
    if (st.ok()) schema_ready_.store(true);
    return st;
  }

  // Ledgers created before the prompt registry lack prompt_id / prompt_version, and those before
  // the scale-out gateway served_by / attempts.
  Status migrate_prompt_columns() {
    if (db_->dialect() == SqlDialect::kPostgres)
      return db_->exec_script(
          "ALTER TABLE ts_usage ADD COLUMN IF NOT EXISTS prompt_id TEXT NOT NULL DEFAULT '';"
          "ALTER TABLE ts_usage ADD COLUMN IF NOT EXISTS prompt_version BIGINT NOT NULL DEFAULT 0;"
          "ALTER TABLE ts_usage ADD COLUMN IF NOT EXISTS served_by TEXT NOT NULL DEFAULT '';"
          "ALTER TABLE ts_usage ADD COLUMN IF NOT EXISTS attempts BIGINT NOT NULL DEFAULT 0;");
    TS_ASSIGN_OR_RETURN(auto cols, db_->query("PRAGMA table_info(ts_usage)"));
    bool has_id = false, has_version = false, has_served_by = false, has_attempts = false;
    for (const SqlRow& c : cols) {
      if (c.size() > 1 && c[1] == "prompt_id") has_id = true;
      if (c.size() > 1 && c[1] == "prompt_version") has_version = true;
      if (c.size() > 1 && c[1] == "served_by") has_served_by = true;
      if (c.size() > 1 && c[1] == "attempts") has_attempts = true;
    }
    if (!has_served_by) TS_RETURN_IF_ERROR(db_->exec("ALTER TABLE ts_usage ADD COLUMN served_by TEXT NOT NULL DEFAULT ''"));
    if (!has_attempts) TS_RETURN_IF_ERROR(db_->exec("ALTER TABLE ts_usage ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0"));
    if (!has_id) TS_RETURN_IF_ERROR(db_->exec("ALTER TABLE ts_usage ADD COLUMN prompt_id TEXT NOT NULL DEFAULT ''"));
    if (!has_version)
      TS_RETURN_IF_ERROR(db_->exec("ALTER TABLE ts_usage ADD COLUMN prompt_version BIGINT NOT NULL DEFAULT 0"));
    return ok_status();
  }

  std::shared_ptr<SqlDb> db_;
  std::atomic<bool> schema_ready_{false};
};

}  // namespace

std::unique_ptr<LedgerStore> make_sql_ledger(std::shared_ptr<SqlDb> db) {
  return std::make_unique<SqlLedger>(std::move(db));
}

}  // namespace ts::gateway
