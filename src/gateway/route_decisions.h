// The hybrid router's audit trail (SCALEOUT.md §6.2): one `ts_route_decisions` row per routed
// request, joined to the ledger (`ts_usage`) by request_id. Same SqlDb as the ledger (SQLite
// or PostgreSQL); the schema is created on first use. Idempotent by request_id
// (ON CONFLICT DO NOTHING), like the ledger.
//
// Written by RouteDecisionWriter from a background thread, off the request path; when the
// database is unreachable rows stay queued (up to max_queue, then the oldest are dropped and
// counted: the audit trail must never hold requests back) and are retried with back-off.
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "gateway/clock.h"
#include "gateway/sql_db.h"

namespace ts::gateway {

struct RouteDecisionRow {
  std::string request_id;       // the ledger row's request_id
  WallTime time{};
  std::string rule_id;          // matched rule or "default"
  std::string ruleset_version;  // RuleSet::version (hash of the rules file)
  std::string target;           // what served it: "local:r2" | "remote:big" | "reject:429" | "none"
  std::string reason;           // matched conditions
  std::string fallback;         // "" = the rule's action served; else "remote:big -> local: connect_error"
  std::string inputs_json;      // RouteInputs::to_json()
  std::string alternatives_json;  // {"route":RouteDecision, "picker":Decision, "attempts":[...]}
  std::string outcome;          // "ok" | "error" | "rejected" | "partial"
  int32_t http_status = 0;
  std::string usage_source;     // "reported" (from the upstream's usage) | "estimated" | "none"
};

class RouteDecisionStore {
 public:
  explicit RouteDecisionStore(std::shared_ptr<SqlDb> db) : db_(std::move(db)) {}
  Status append(const std::vector<RouteDecisionRow>& rows);
  Result<std::vector<RouteDecisionRow>> rows();  // ordered by time, request_id
 private:
  Status ensure_schema();
  std::shared_ptr<SqlDb> db_;
  bool schema_ready_ = false;
  std::mutex mu_;
};

// Appends rows from a background thread: it gathers rows for 10 ms after the first one (or
// until 256 wait) and writes them in one transaction, and while rows keep coming it commits at
// most once per 100 ms, so the audit costs one wake-up and one commit per interval rather than
// per request. Rows are in memory until committed: a crash (SIGKILL) of the process loses at
// most the last interval's rows (up to 100 ms under load). flush() and close() write at once.
class RouteDecisionWriter {
 public:
  explicit RouteDecisionWriter(std::shared_ptr<SqlDb> db, size_t max_queue = 100'000);
  ~RouteDecisionWriter();  // close(5 s)
  void append(RouteDecisionRow row);
  // Waits until rows appended before the call are written (or the timeout passes).
  Status flush(Millis timeout);
  Status close(Millis timeout);
  int64_t num_written() const;
  int64_t num_dropped() const;

 private:
  void run();
  RouteDecisionStore store_;
  const size_t max_queue_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<RouteDecisionRow> queue_;
  int64_t enqueued_ = 0, retired_ = 0, written_ = 0, dropped_ = 0;
  bool stop_ = false;
  int flush_waiters_ = 0;  // flush() calls waiting: write without gathering
  std::chrono::steady_clock::time_point last_commit_{};
  std::string last_error_;
  std::thread thread_;
};

}  // namespace ts::gateway
