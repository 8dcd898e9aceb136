// The route_decisions audit table on SQLite and (with TOKENSERVE_TEST_PG) PostgreSQL: rows are
// kept once per request id and join the ledger by request id.
#include "gateway/route_decisions.h"

#include <chrono>
#include <thread>
#include <filesystem>
#include <unistd.h>

#include <gtest/gtest.h>

#include "gateway/gateway_test_util.h"
#include "test_util.h"
#include "gateway/ledger.h"
#include "gateway/sql_db.h"
#include "gateway/ledger_writer.h"

namespace ts::gateway {
namespace {

RouteDecisionRow row(const std::string& id, const std::string& target) {
  RouteDecisionRow r;
  r.request_id = id;
  r.time = from_unix_ms(1'767'225'600'000);
  r.rule_id = "long-prompt";
  r.ruleset_version = "abc123";
  r.target = target;
  r.reason = "prompt_tokens 812 > 500";
  r.fallback = target == "local:r1" ? "remote:big -> local (remote:big connect_error)" : "";
  r.inputs_json = R"({"prompt_tokens":812})";
  r.alternatives_json = R"({"route":{"plan":["remote:big","local"]}})";
  r.outcome = "ok";
  r.http_status = 200;
  r.usage_source = "reported";
  return r;
}

void exercise(std::shared_ptr<SqlDb> db) {
  RouteDecisionWriter w(db);
  w.append(row("req-a", "remote:big"));
  w.append(row("req-b", "local:r1"));
  w.append(row("req-a", "local:r9"));  // a repeat of a request id is stored once
  ASSERT_TRUE(w.flush(Millis(5000)).ok());
  EXPECT_EQ(w.num_written(), 3);
  auto ledger = make_sql_ledger(db);
  UsageRecord u;
  u.request_id = "req-b";
  u.tenant = "acme";
  u.app = "chat";
  u.model = "m";
  u.prompt_tokens = 812;
  u.completion_tokens = 5;
  ASSERT_TRUE(ledger->append(std::span<const UsageRecord>(&u, 1)).ok());

  RouteDecisionStore store(db);
  auto rows = store.rows();
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].request_id, "req-a");
  EXPECT_EQ((*rows)[0].target, "remote:big");
  EXPECT_EQ((*rows)[1].fallback, "remote:big -> local (remote:big connect_error)");
  EXPECT_EQ((*rows)[1].usage_source, "reported");
  EXPECT_EQ(to_unix_ms((*rows)[1].time), 1'767'225'600'000);
  auto joined = db->query(
      "SELECT d.rule_id, d.target, u.tenant, u.prompt_tokens FROM ts_route_decisions d JOIN ts_usage u "
      "ON u.request_id = d.request_id");
  ASSERT_TRUE(joined.ok()) << joined.status().message();
  ASSERT_EQ(joined->size(), 1u);
  EXPECT_EQ((*joined)[0][1], "local:r1");
  EXPECT_EQ((*joined)[0][2], "acme");
  EXPECT_EQ((*joined)[0][3], "812");
}

// Under steady load the writer commits at most about once per 100 ms (observed from a second
// connection: SQLite's data_version changes at each commit of another connection), every row
// lands, and flush() does not wait out the hold.
TEST(RouteDecisions, SteadyLoadCommitsRarelyAndFlushIsPrompt) {
  std::string path = ::ts::testing::temp_dir() + "/audit.db";
  std::shared_ptr<SqlDb> db(std::move(open_sql_db(path)).value());
  std::shared_ptr<SqlDb> watcher(std::move(open_sql_db(path)).value());
  RouteDecisionWriter w(db);
  w.append(row("warm", "local:r1"));
  ASSERT_TRUE(w.flush(Millis(5000)).ok());  // the table exists before the watch starts
  auto version = [&] {
    auto v = watcher->query("PRAGMA data_version");
    return v.ok() && !v->empty() ? (*v)[0][0] : std::string();
  };
  std::string last = version();
  int commits = 0, n = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(400)) {
    w.append(row("req-" + std::to_string(n++), "local:r1"));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::string v = version();
    if (v != last) ++commits, last = v;
  }
  EXPECT_GE(commits, 1);
  EXPECT_LE(commits, 6) << "commits seen in 400 ms of steady load (one per 10 ms gather would be ~40)";
  auto f0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(w.flush(Millis(5000)).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - f0, std::chrono::milliseconds(80)) << "flush waited out the hold";
  EXPECT_EQ(w.num_written(), n + 1);
  RouteDecisionStore store(watcher);
  EXPECT_EQ(store.rows()->size(), size_t(n + 1));
}

TEST(RouteDecisions, SqliteRowsOncePerRequestJoinedToTheLedger) {
  std::string path = ::testing::TempDir() + "/route_decisions_" + std::to_string(::getpid()) + ".db";
  std::filesystem::remove(path);
  exercise(std::shared_ptr<SqlDb>(make_sqlite_db(path)));
  std::filesystem::remove(path);
}

TEST(RouteDecisions, PostgresRowsOncePerRequestJoinedToTheLedger) {
  TS_REQUIRE_PG(pg);
  testing::PgDatabase db(pg);
  exercise(std::shared_ptr<SqlDb>(make_postgres_db(db.url())));
}

TEST(RouteDecisions, UnreachableDatabaseKeepsRowsAndCloseGivesUp) {
  RouteDecisionWriter w(std::shared_ptr<SqlDb>(make_postgres_db("postgresql://postgres@127.0.0.1:1/none")));
  w.append(row("req-x", "local:r1"));
  EXPECT_FALSE(w.flush(Millis(200)).ok());
  EXPECT_EQ(w.num_written(), 0);
  (void)w.close(Millis(100));
  EXPECT_EQ(w.num_dropped(), 1);
}

// Ledger rows written by the gateway say where they were served and after how many attempts;
// a ledger from before these columns gets them on first use (old rows: "" and 0).
TEST(RouteDecisions, LedgerServedByAndAttemptsAlsoOnAnOlderLedger) {
  std::string path = ::testing::TempDir() + "/served_by_" + std::to_string(::getpid()) + ".db";
  std::filesystem::remove(path);
  std::shared_ptr<SqlDb> db(make_sqlite_db(path));
  ASSERT_TRUE(db->exec_script(
                    "CREATE TABLE ts_usage (request_id TEXT PRIMARY KEY, time_ms BIGINT NOT NULL, tenant TEXT NOT NULL,"
                    " app TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL, tier TEXT NOT NULL,"
                    " prompt_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL,"
                    " ttft_ms BIGINT NOT NULL, duration_ms BIGINT NOT NULL, finish_reason TEXT NOT NULL,"
                    " http_status INTEGER NOT NULL);"
                    "INSERT INTO ts_usage VALUES ('old', 1, 't', 'a', '', 'm', 'interactive', 1, 0, 1, 5, 9, 'stop', 200);")
                  .ok());
  auto ledger = make_sql_ledger(db);
  UsageRecord u;
  u.request_id = "new";
  u.time = from_unix_ms(2);
  u.tenant = "t";
  u.app = "a";
  u.model = "m";
  u.served_by = "remote:big";
  u.attempts = 2;
  ASSERT_TRUE(ledger->append(std::span<const UsageRecord>(&u, 1)).ok());
  auto rows = ledger->rows({});
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].served_by, "");
  EXPECT_EQ((*rows)[0].attempts, 0);
  EXPECT_EQ((*rows)[1].served_by, "remote:big");
  EXPECT_EQ((*rows)[1].attempts, 2);
  // The journal line format carries them too.
  auto back = usage_record_from_json(usage_record_to_json(u));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->served_by, "remote:big");
  EXPECT_EQ(back->attempts, 2);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ts::gateway
