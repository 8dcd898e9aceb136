#include "gateway/route_decisions.h"

#include <cstdlib>

#include "core/log.h"

namespace ts::gateway {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS ts_route_decisions (
  request_id TEXT PRIMARY KEY,
  time_ms BIGINT NOT NULL,
  rule_id TEXT NOT NULL,
  ruleset_version TEXT NOT NULL,
  target TEXT NOT NULL,
  reason TEXT NOT NULL,
  fallback TEXT NOT NULL,
  inputs_json TEXT NOT NULL,
  alternatives_json TEXT NOT NULL,
  outcome TEXT NOT NULL,
  http_status INTEGER NOT NULL,
  usage_source TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ts_route_decisions_time ON ts_route_decisions (time_ms);
)sql";

constexpr const char* kColumns =
    "request_id, time_ms, rule_id, ruleset_version, target, reason, fallback, inputs_json, alternatives_json, "
    "outcome, http_status, usage_source";

}  // namespace

Status RouteDecisionStore::ensure_schema() {
  std::lock_guard lock(mu_);
  if (schema_ready_) return ok_status();
  Status st = db_->exec_script(kSchema);
  if (!st.ok() && st.code() != StatusCode::kUnavailable) st = db_->exec_script(kSchema);  // concurrent create (PG)
  if (st.ok()) schema_ready_ = true;
  return st;
}

Status RouteDecisionStore::append(const std::vector<RouteDecisionRow>& rows) {
  TS_RETURN_IF_ERROR(ensure_schema());
  if (rows.empty()) return ok_status();
  const std::string sql = std::string("INSERT INTO ts_route_decisions (") + kColumns +
                          ") VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12) ON CONFLICT (request_id) DO NOTHING";
  return db_->transaction([&]() -> Status {
    for (const RouteDecisionRow& r : rows) {
      SqlParam p[] = {r.request_id, to_unix_ms(r.time), r.rule_id,         r.ruleset_version,
                      r.target,     r.reason,           r.fallback,        r.inputs_json,
                      r.alternatives_json, r.outcome,   int64_t(r.http_status), r.usage_source};
      TS_RETURN_IF_ERROR(db_->exec(sql, p));
    }
    return ok_status();
  });
}

Result<std::vector<RouteDecisionRow>> RouteDecisionStore::rows() {
  TS_RETURN_IF_ERROR(ensure_schema());
  TS_ASSIGN_OR_RETURN(auto raw, db_->query(std::string("SELECT ") + kColumns +
                                           " FROM ts_route_decisions ORDER BY time_ms, request_id"));
  std::vector<RouteDecisionRow> out;
  for (const SqlRow& row : raw) {
    RouteDecisionRow r;
    r.request_id = row[0];
    r.time = from_unix_ms(std::strtoll(row[1].c_str(), nullptr, 10));
    r.rule_id = row[2];
    r.ruleset_version = row[3];
    r.target = row[4];
    r.reason = row[5];
    r.fallback = row[6];
    r.inputs_json = row[7];
    r.alternatives_json = row[8];
    r.outcome = row[9];
    r.http_status = int32_t(std::strtol(row[10].c_str(), nullptr, 10));
    r.usage_source = row[11];
    out.push_back(std::move(r));
  }
  return out;
}

namespace {
constexpr size_t kBatch = 256;          // rows per transaction at most
constexpr Millis kGather{10};           // how long the writer gathers rows before a transaction
// While rows keep coming, at most one transaction per kCommitEvery: each transaction rewrites
// the table's and its indexes' pages into the WAL (and each WAL checkpoint copies them again),
// so larger, rarer ones cost far less per row (SCALEOUT.md §8.14: at ~1,700 requests/s the
// audit writer at one commit per 10 ms was ~12 % of the gateway's CPU). A row after an idle
// spell still waits only kGather; flush() and close() cut the wait short.
constexpr Millis kCommitEvery{100};
}  // namespace

RouteDecisionWriter::RouteDecisionWriter(std::shared_ptr<SqlDb> db, size_t max_queue)
    : store_(std::move(db)), max_queue_(max_queue), thread_([this] { run(); }) {}

RouteDecisionWriter::~RouteDecisionWriter() { (void)close(Millis(5000)); }

void RouteDecisionWriter::append(RouteDecisionRow row) {
  std::lock_guard lock(mu_);
  if (stop_) return;
  queue_.push_back(std::move(row));
  ++enqueued_;
  while (queue_.size() > max_queue_) {
    queue_.pop_front();
    ++dropped_;
    ++retired_;
  }
  // The writer gathers for kGather after the first row: it needs waking for that one only (and
  // for a full batch), not once per request.
  if (queue_.size() == 1 || queue_.size() >= kBatch) work_cv_.notify_one();
}

void RouteDecisionWriter::run() {
  Millis backoff(50);
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    // One transaction per kGather (or per full batch) instead of one per request, and at most
    // one per kCommitEvery under steady load.
    const auto now = std::chrono::steady_clock::now();
    work_cv_.wait_until(lock, std::max(now + kGather, last_commit_ + kCommitEvery),
                        [&] { return stop_ || flush_waiters_ > 0 || queue_.size() >= kBatch; });
    last_commit_ = std::chrono::steady_clock::now();
    std::vector<RouteDecisionRow> batch(queue_.begin(), queue_.begin() + std::min<size_t>(queue_.size(), kBatch));
    lock.unlock();
    Status st = store_.append(batch);
    lock.lock();
    if (st.ok()) {
      backoff = Millis(50);
      size_t n = std::min(batch.size(), queue_.size());  // drops may have shortened the queue
      queue_.erase(queue_.begin(), queue_.begin() + n);
      written_ += int64_t(n);
      retired_ += int64_t(n);
      done_cv_.notify_all();
      continue;
    }
    if (last_error_ != st.message()) log::warn("route_decisions: " + st.message() + " (rows kept, retrying)");
    last_error_ = st.message();
    if (stop_) {  // closing: close() already gave the database its flush timeout
      dropped_ += int64_t(queue_.size());
      retired_ += int64_t(queue_.size());
      log::error("route_decisions: " + std::to_string(queue_.size()) + " rows not written at close: " + st.message());
      queue_.clear();
      done_cv_.notify_all();
      return;
    }
    work_cv_.wait_for(lock, backoff);
    backoff = std::min(backoff * 2, Millis(2000));
  }
}

Status RouteDecisionWriter::flush(Millis timeout) {
  std::unique_lock lock(mu_);
  int64_t target = enqueued_;
  ++flush_waiters_;  // the writer stops gathering
  work_cv_.notify_all();
  bool done = done_cv_.wait_for(lock, timeout, [&] { return retired_ >= target; });
  --flush_waiters_;
  if (!done) return Status(StatusCode::kDeadlineExceeded, "route_decisions not written in time: " + last_error_);
  return ok_status();
}

Status RouteDecisionWriter::close(Millis timeout) {
  Status st = flush(timeout);
  {
    std::lock_guard lock(mu_);
    if (stop_ && !thread_.joinable()) return st;
    stop_ = true;
    work_cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  return st;
}

int64_t RouteDecisionWriter::num_written() const {
  std::lock_guard lock(mu_);
  return written_;
}

int64_t RouteDecisionWriter::num_dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

}  // namespace ts::gateway
