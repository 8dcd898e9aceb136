// The SQL ledger on SQLite and a real PostgreSQL, and the background writer's spool through
// database outages.
#include "gateway/ledger.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "gateway/ledger_writer.h"
#include "gateway_test_util.h"
#include "test_util.h"

namespace ts::gateway {
namespace {

WallTime t0() { return *parse_rfc3339("2026-06-01T12:00:00Z"); }

UsageRecord record(int i) {
  UsageRecord r;
  r.request_id = "req-" + std::to_string(i);
  r.time = t0() + Millis(int64_t(i) * 1000);
  r.tenant = i % 2 ? "acme" : "beta";
  r.app = "app" + std::to_string(i % 3);
  r.key_id = "key_" + std::to_string(i % 4);
  r.model = i % 5 ? "llama" : "qwen";
  r.tier = i % 7 ? engine::Tier::kInteractive : engine::Tier::kBatch;
  r.prompt_tokens = 100 + i;
  r.cached_tokens = i % 50;
  r.completion_tokens = 10 + 3 * i;
  r.reasoning_tokens = i % 4 ? 0 : i;
  r.ttft_ms = i % 11 ? 20 + i : -1;
  r.duration_ms = 500 + i;
  r.finish_reason = i % 9 ? "stop" : "cancelled";
  r.http_status = i % 13 ? 200 : 499;
  if (i % 3 == 0) {  // a tenant with body logging: stored in ts_usage_bodies
    r.request_body = R"({"messages":[{"role":"user","content":"q)" + std::to_string(i) + R"( \"x\" é"}]})";
    r.output_text = i % 6 ? "answer " + std::to_string(i) : "";
  }
  return r;
}

void expect_same(const UsageRecord& a, const UsageRecord& b) {
  EXPECT_EQ(a.request_id, b.request_id);
  EXPECT_EQ(a.time, b.time);
  EXPECT_EQ(a.tenant, b.tenant);
  EXPECT_EQ(a.app, b.app);
  EXPECT_EQ(a.key_id, b.key_id);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.tier, b.tier);
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.cached_tokens, b.cached_tokens);
  EXPECT_EQ(a.completion_tokens, b.completion_tokens);
  EXPECT_EQ(a.reasoning_tokens, b.reasoning_tokens);
  EXPECT_EQ(a.ttft_ms, b.ttft_ms);
  EXPECT_EQ(a.duration_ms, b.duration_ms);
  EXPECT_EQ(a.finish_reason, b.finish_reason);
  EXPECT_EQ(a.http_status, b.http_status);
  EXPECT_EQ(a.request_body, b.request_body);
  EXPECT_EQ(a.output_text, b.output_text);
}

std::unique_ptr<LedgerStore> open_ledger(const std::string& url) {
  return make_sql_ledger(std::shared_ptr<SqlDb>(std::move(open_sql_db(url)).value()));
}

// Rows survive closing and reopening the database; re-sent records are stored once.
void check_persistence(const std::string& url) {
  std::vector<UsageRecord> recs;
  for (int i = 0; i < 40; ++i) recs.push_back(record(i));
  {
    auto ledger = open_ledger(url);
    ASSERT_TRUE(ledger->append(recs).ok());
    ASSERT_TRUE(ledger->append({recs.data(), 10}).ok());  // a retried batch: no duplicates
  }
  auto ledger = open_ledger(url);
  EXPECT_EQ(*ledger->count(), 40);
  auto rows = ledger->rows({});
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  ASSERT_EQ(rows->size(), 40u);
  for (size_t i = 0; i < rows->size(); ++i) expect_same((*rows)[i], recs[i]);
  // Filters and sums.
  LedgerFilter f{.from = t0() + Millis(10'000), .to = t0() + Millis(20'000), .tenant = "acme"};
  auto some = ledger->rows(f);
  int64_t expect_sum = 0;
  size_t n = 0;
  for (const auto& r : recs)
    if (r.tenant == "acme" && r.time >= *f.from && r.time < *f.to) {
      ++n;
      expect_sum += billable_tokens(r);
    }
  EXPECT_EQ(some->size(), n);
  EXPECT_EQ(*ledger->sum_tokens("acme", "", *f.from, *f.to), expect_sum);
  int64_t app_sum = 0;
  for (const auto& r : recs)
    if (r.tenant == "acme" && r.app == "app1") app_sum += billable_tokens(r);
  EXPECT_EQ(*ledger->sum_tokens("acme", "app1", t0(), t0() + Millis(3'600'000)), app_sum);
}

TEST(SqliteLedger, RowsPersistAcrossReopen) {
  check_persistence(::ts::testing::temp_dir() + "/ledger.db");
}

// A ledger created before the reasoning_tokens column existed gets it; old rows read 0.
TEST(SqliteLedger, AddsTheReasoningTokensColumnToAnOlderLedger) {
  std::string path = ::ts::testing::temp_dir() + "/old.db";
  {
    auto db = std::move(open_sql_db(path)).value();
    ASSERT_TRUE(db->exec_script(
                      "CREATE TABLE ts_usage (request_id TEXT PRIMARY KEY, time_ms BIGINT NOT NULL, tenant TEXT NOT NULL,"
                      " app TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL, tier TEXT NOT NULL,"
                      " prompt_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL,"
                      " ttft_ms BIGINT NOT NULL, duration_ms BIGINT NOT NULL, finish_reason TEXT NOT NULL,"
                      " http_status INTEGER NOT NULL);"
                      "INSERT INTO ts_usage VALUES ('old', 0, 't', 'a', 'k', 'm', 'interactive', 1, 0, 2, 5, 9, 'stop', 200);")
                    .ok());
  }
  auto ledger = open_ledger(path);
  UsageRecord r = record(1);
  r.reasoning_tokens = 7;
  ASSERT_TRUE(ledger->append({&r, 1}).ok());
  auto rows = ledger->rows({});
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  ASSERT_EQ(rows->size(), 2u);
  for (const UsageRecord& row : *rows) EXPECT_EQ(row.reasoning_tokens, row.request_id == "old" ? 0 : 7);
  auto line = usage_record_to_json(r);
  auto back = usage_record_from_json(line);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->reasoning_tokens, 7);
  // The same older ledger gets the bodies table too: a logged body is stored and read back.
  UsageRecord b = record(3);
  ASSERT_FALSE(b.request_body.empty());
  ASSERT_TRUE(ledger->append({&b, 1}).ok());
  rows = ledger->rows({.tenant = b.tenant});
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  bool found = false;
  for (const UsageRecord& row : *rows)
    if (row.request_id == b.request_id) found = true, expect_same(row, b);
  EXPECT_TRUE(found);
  // The journal line carries the body and output.
  auto bl = usage_record_from_json(usage_record_to_json(b));
  ASSERT_TRUE(bl.ok());
  EXPECT_EQ(bl->request_body, b.request_body);
  EXPECT_EQ(bl->output_text, b.output_text);
}

// The journal line written directly equals the JSON-tree reference byte for byte: plain and
// escaped strings (quotes, backslashes, control bytes, UTF-8, invalid UTF-8), optional fields
// present and absent, negative and large numbers; and it reads back.
TEST(LedgerJournalLine, DirectWriterMatchesTheReference) {
  std::vector<UsageRecord> recs;
  recs.push_back(record(1));
  UsageRecord b = record(2);
  b.reasoning_tokens = 3;
  b.prompt_id = "p\"q";
  b.prompt_version = 4;
  b.served_by = "local:r1";
  b.attempts = 2;
  b.request_body = "{\"prompt\":\"a\\nb\"}\n\t\x01";
  b.output_text = "caf\xc3\xa9 \xe2\x80\x94 \xff\xfe bad utf8 \x7f";
  b.ttft_ms = -1;
  b.duration_ms = int64_t{1} << 50;
  b.http_status = 502;
  b.tier = engine::Tier::kBatch;
  recs.push_back(b);
  UsageRecord c;  // all defaults, empty strings
  recs.push_back(c);
  UsageRecord d = record(3);
  d.tenant = std::string("t\0x", 3);
  d.model = "m\\odel";
  d.finish_reason = "";
  recs.push_back(d);
  for (const UsageRecord& r : recs) {
    EXPECT_EQ(usage_record_to_json(r), usage_record_to_json_reference(r));
    auto back = usage_record_from_json(usage_record_to_json(r));
    ASSERT_TRUE(back.ok()) << usage_record_to_json(r);
    EXPECT_EQ(back->request_id, r.request_id);
    EXPECT_EQ(back->served_by, r.served_by);
    EXPECT_EQ(back->duration_ms, r.duration_ms);
  }
}

TEST(SqliteLedger, UsesWalJournal) {
  std::string path = ::ts::testing::temp_dir() + "/wal.db";
  auto db = std::shared_ptr<SqlDb>(std::move(open_sql_db(path)).value());
  auto ledger = make_sql_ledger(db);
  ASSERT_TRUE(ledger->append({}).ok());
  auto mode = db->query("PRAGMA journal_mode");
  ASSERT_TRUE(mode.ok());
  EXPECT_EQ((*mode)[0][0], "wal");
}

TEST(PostgresLedger, RowsPersistAcrossReopen) {
  TS_REQUIRE_PG(pg);
  testing::PgDatabase db(pg);
  check_persistence(db.url());
}

TEST(PostgresLedger, UnreachableServerIsUnavailable) {
  auto ledger = open_ledger("postgresql://postgres@127.0.0.1:" + std::to_string(testing::free_port()) + "/x");
  UsageRecord r = record(1);
  Status st = ledger->append({&r, 1});
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
}

TEST(LedgerWriter, FlushesEverythingOnClose) {
  auto ledger = open_ledger(::ts::testing::temp_dir() + "/writer.db");
  {
    LedgerWriter writer(*ledger, {.batch_size = 64});
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(writer.append(record(i)));
    ASSERT_TRUE(writer.close(Millis(10'000)).ok());
    EXPECT_EQ(writer.stats().num_written, 1000);
    EXPECT_EQ(writer.stats().spool_depth, 0);
    EXPECT_FALSE(writer.append(record(5000)));  // closed
  }
  EXPECT_EQ(*ledger->count(), 1000);
}

TEST(LedgerWriter, SqliteOutageKeepsRecordsSpooledUntilTheDatabaseIsBack) {
  // The database's directory does not exist yet: every write fails until it is created.
  std::string dir = ::ts::testing::temp_dir() + "/later";
  auto ledger = open_ledger(dir + "/ledger.db");
  LedgerWriter writer(*ledger, {.max_spool = 100, .retry_initial = Millis(10), .retry_max = Millis(20)});
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(writer.append(record(i)));
  EXPECT_FALSE(writer.flush(Millis(200)).ok());
  LedgerStats s = writer.stats();
  EXPECT_EQ(s.spool_depth, 30);
  EXPECT_GT(s.num_write_failures, 0);
  EXPECT_EQ(s.num_written, 0);
  EXPECT_NE(s.last_error.find("cannot open"), std::string::npos) << s.last_error;
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(writer.flush(Millis(5000)).ok());
  EXPECT_EQ(writer.stats().num_written, 30);
  EXPECT_EQ(*ledger->count(), 30);
}

TEST(LedgerWriter, FullSpoolSignalsBackPressureAndNeverDrops) {
  auto ledger = open_ledger(::ts::testing::temp_dir() + "/missing/dir/ledger.db");
  LedgerWriter writer(*ledger, {.max_spool = 10, .retry_initial = Millis(10)});
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(writer.append(record(i)));
  EXPECT_FALSE(writer.full());
  EXPECT_TRUE(writer.append(record(9)));
  EXPECT_TRUE(writer.full());
  EXPECT_TRUE(writer.append(record(10)));  // a served request's row is kept, never dropped
  EXPECT_EQ(writer.stats().spool_depth, 11);
  EXPECT_EQ(writer.stats().num_dropped, 0);
  Status st = writer.close(Millis(50));  // still unreachable and no journal: reported lost
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(writer.stats().num_dropped, 11);
}

size_t journal_file_count(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().starts_with("ledger.spool.jsonl")) ++n;
  return n;
}

TEST(LedgerWriter, JournalIsKeptUntilCommittedAndReplayedAtTheNextStart) {
  std::string dir = ::ts::testing::temp_dir();
  std::string spill = dir + "/ledger.spool.jsonl";
  std::vector<UsageRecord> recs;
  for (int i = 0; i < 25; ++i) recs.push_back(record(i));
  {
    auto down = open_ledger(dir + "/not/yet/ledger.db");
    LedgerWriter writer(*down, {.retry_initial = Millis(10), .spill_path = spill,
                                .segment_records = 10});
    for (const auto& r : recs) ASSERT_TRUE(writer.append(r));
    EXPECT_EQ(writer.stats().journal_segments, 3);
    ASSERT_TRUE(writer.close(Millis(100)).ok());  // journaled, not lost
    EXPECT_EQ(writer.stats().num_spilled, 25);
    EXPECT_EQ(writer.stats().num_dropped, 0);
  }
  EXPECT_EQ(journal_file_count(dir), 3u);
  {
    // Loaded again but the database is still down: the journal must survive the load.
    auto down = open_ledger(dir + "/not/yet/ledger.db");
    LedgerWriter writer(*down, {.retry_initial = Millis(10), .spill_path = spill});
    EXPECT_EQ(writer.stats().num_unspilled, 25);
    ASSERT_TRUE(writer.close(Millis(50)).ok());
  }
  EXPECT_EQ(journal_file_count(dir), 3u);
  // A torn last line, as a crash in the middle of a write leaves it.
  {
    std::ofstream torn(spill + ".3", std::ios::app);
    torn << "{\"request_id\":\"req-torn\",\"time_m";
  }
  auto up = open_ledger(dir + "/ledger.db");
  LedgerWriter writer(*up, {.spill_path = spill});
  EXPECT_EQ(writer.stats().num_unspilled, 25);
  EXPECT_EQ(writer.stats().num_torn, 1);
  ASSERT_TRUE(writer.flush(Millis(5000)).ok());
  EXPECT_EQ(journal_file_count(dir), 0u);  // removed once committed
  auto rows = up->rows({});
  ASSERT_EQ(rows->size(), 25u);
  for (size_t i = 0; i < recs.size(); ++i) expect_same((*rows)[i], recs[i]);
  EXPECT_EQ(usage_record_from_json("{\"request_id\": 1}").status().code(), StatusCode::kDataLoss);
}

// A child process appends rows from 4 threads and reports each id on a pipe once append()
// returned (the moment a response may be sent). It is SIGKILLed mid-load. A new writer on the
// same journal must then store every reported row exactly once.
// sync_interval > 0: the batched journal sync (the gateway's default): append() returns before
// any fdatasync, and a SIGKILL must still lose nothing (the lines are in the page cache).
void sigkill_under_load(const std::string& ledger_url, const std::string& spill, Millis sync_interval = Millis(0),
                        Millis commit_interval = Millis(0)) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto ledger = open_ledger(ledger_url);
    LedgerWriter writer(*ledger, {.batch_size = 16, .spill_path = spill, .segment_records = 64,
                                  .sync_interval = sync_interval, .commit_interval = commit_interval});
    std::mutex pipe_mu;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0;; ++i) {
          int id = t * 1'000'000 + i;
          if (!writer.append(record(id))) break;
          std::lock_guard lock(pipe_mu);
          if (::write(fds[1], &id, sizeof(id)) != sizeof(id)) ::_exit(3);
        }
      });
    for (auto& th : threads) th.join();
    ::_exit(0);
  }
  ::close(fds[1]);
  std::set<int> acked;
  int id;
  while (acked.size() < 600 && ::read(fds[0], &id, sizeof(id)) == sizeof(id)) acked.insert(id);
  ::kill(pid, SIGKILL);
  while (::read(fds[0], &id, sizeof(id)) == sizeof(id)) acked.insert(id);  // acked before death
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  ASSERT_TRUE(WIFSIGNALED(wstatus));
  ASSERT_GE(acked.size(), 600u);

  auto ledger = open_ledger(ledger_url);
  LedgerWriter writer(*ledger, {.spill_path = spill});
  ASSERT_TRUE(writer.flush(Millis(20'000)).ok()) << writer.stats().last_error;
  auto rows = ledger->rows({});
  ASSERT_TRUE(rows.ok());
  std::set<std::string> stored;
  for (const auto& r : *rows) EXPECT_TRUE(stored.insert(r.request_id).second) << r.request_id;
  size_t missing = 0;
  for (int a : acked) missing += stored.count(record(a).request_id) ? 0 : 1;
  EXPECT_EQ(missing, 0u) << "of " << acked.size() << " acknowledged rows";
  EXPECT_GE(stored.size(), acked.size());
}

TEST(LedgerWriter, SigkillUnderConcurrentLoadLosesNoAcknowledgedRowSqlite) {
  std::string dir = ::ts::testing::temp_dir();
  sigkill_under_load(dir + "/ledger.db", dir + "/ledger.spool.jsonl");
}

TEST(LedgerWriter, BatchedJournalSyncSigkillUnderConcurrentLoadLosesNoAcknowledgedRow) {
  std::string dir = ::ts::testing::temp_dir();
  sigkill_under_load(dir + "/ledger.db", dir + "/ledger.spool.jsonl", Millis(20));
}

// commit_interval: the database commit is held (rows only in the journal) while records keep
// coming; a SIGKILL in that window must lose no acknowledged row either.
TEST(LedgerWriter, HeldCommitSigkillUnderConcurrentLoadLosesNoAcknowledgedRow) {
  std::string dir = ::ts::testing::temp_dir();
  sigkill_under_load(dir + "/ledger.db", dir + "/ledger.spool.jsonl", Millis(10), Millis(300));
}

// Counts the transactions a writer makes (a real SQLite ledger underneath).
class CountingStore final : public LedgerStore {
 public:
  explicit CountingStore(LedgerStore& inner) : inner_(inner) {}
  std::string describe() const override { return inner_.describe(); }
  Status append(std::span<const UsageRecord> records) override {
    num_appends.fetch_add(1);
    return inner_.append(records);
  }
  Result<std::vector<UsageRecord>> rows(const LedgerFilter& f) override { return inner_.rows(f); }
  Result<std::vector<UsageGroupRow>> aggregate(GroupBy by, const LedgerFilter& f) override { return inner_.aggregate(by, f); }
  Result<int64_t> sum_tokens(const std::string& t, const std::string& a, WallTime from, WallTime to) override {
    return inner_.sum_tokens(t, a, from, to);
  }
  Result<int64_t> count() override { return inner_.count(); }
  std::atomic<int> num_appends{0};

 private:
  LedgerStore& inner_;
};

// Steady load for ~400 ms (a record every 2 ms): commit_interval 200 ms must make a handful of
// transactions (the first after its 10 ms gather, then one per 200 ms), far fewer than one per
// 10 ms sync; the journal is still synced per sync_interval; flush() commits at once; every row
// lands once.
TEST(LedgerWriter, CommitIntervalBatchesTransactionsAndFlushCommitsAtOnce) {
  std::string dir = ::ts::testing::temp_dir();
  auto ledger = open_ledger(dir + "/ledger.db");
  CountingStore counting(*ledger);
  {
    LedgerWriter writer(counting, {.batch_size = 256, .spill_path = dir + "/ledger.spool.jsonl",
                                   .sync_interval = Millis(10), .commit_interval = Millis(200)});
    auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(400)) {
      ASSERT_TRUE(writer.append(record(n++)));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const int during = counting.num_appends.load();
    EXPECT_GE(during, 1);
    EXPECT_LE(during, 4) << "transactions during 400 ms of steady load with a 200 ms commit interval";
    auto f0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(writer.flush(Millis(5000)).ok()) << writer.stats().last_error;
    EXPECT_LT(std::chrono::steady_clock::now() - f0, std::chrono::milliseconds(150)) << "flush waited out the hold";
    EXPECT_EQ(writer.stats().num_written, n);
    EXPECT_EQ(writer.stats().num_journal_failures, 0);
  }
  EXPECT_EQ(ledger->rows({})->size(), size_t(ledger->count().value()));
  EXPECT_EQ(journal_file_count(dir), 0u);
  // The same load without the hold commits after every 10 ms gather: many more transactions.
  std::string dir2 = ::ts::testing::temp_dir();
  auto ledger2 = open_ledger(dir2 + "/ledger.db");
  CountingStore counting2(*ledger2);
  {
    LedgerWriter writer(counting2, {.batch_size = 256, .spill_path = dir2 + "/ledger.spool.jsonl",
                                    .sync_interval = Millis(10)});
    auto t0 = std::chrono::steady_clock::now();
    for (int n = 0; std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(400); ++n) {
      ASSERT_TRUE(writer.append(record(n)));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_TRUE(writer.flush(Millis(5000)).ok());
  }
  EXPECT_GE(counting2.num_appends.load(), 10);
}

TEST(LedgerWriter, BatchedJournalSyncCommitsEveryRowAndRemovesTheJournal) {
  std::string dir = ::ts::testing::temp_dir();
  auto ledger = open_ledger(dir + "/ledger.db");
  {
    LedgerWriter writer(*ledger, {.batch_size = 8, .spill_path = dir + "/ledger.spool.jsonl", .sync_interval = Millis(15)});
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) ASSERT_TRUE(writer.append(record(t * 1000 + i)));
      });
    for (auto& th : threads) th.join();
    ASSERT_TRUE(writer.flush(Millis(5000)).ok()) << writer.stats().last_error;
    EXPECT_EQ(writer.stats().num_written, 200);
    EXPECT_EQ(writer.stats().num_journal_failures, 0);
  }
  EXPECT_EQ(journal_file_count(dir), 0u);
  EXPECT_EQ(ledger->rows({})->size(), 200u);
}

TEST(LedgerWriter, SigkillUnderConcurrentLoadLosesNoAcknowledgedRowPostgres) {
  TS_REQUIRE_PG(pg);
  testing::PgDatabase db(pg);
  sigkill_under_load(db.url(), ::ts::testing::temp_dir() + "/ledger.spool.jsonl");
}

// PostgreSQL unreachable under concurrent load, the process restarted while it is down, then
// it comes back: every row is stored exactly once.
TEST(LedgerWriter, PostgresDownThenUpReplaysExactlyOnceAcrossARestart) {
  TS_REQUIRE_PG(pg);
  testing::PgDatabase db(pg);
  int pg_port = std::stoi(pg.substr(pg.rfind(':') + 1, pg.rfind('/') - pg.rfind(':') - 1));
  int port = testing::free_port();
  testing::TcpForwarder proxy(pg_port);
  ASSERT_TRUE(proxy.start(port));
  std::string url = testing::pg_url_with_port(db.url(), port);
  std::string spill = ::ts::testing::temp_dir() + "/ledger.spool.jsonl";
  {
    auto ledger = open_ledger(url);
    LedgerWriter writer(*ledger, {.batch_size = 32, .retry_initial = Millis(10),
                                  .retry_max = Millis(50), .spill_path = spill});
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 150; ++i) {
          ASSERT_TRUE(writer.append(record(t * 1000 + i)));
          if (t == 0 && i == 50) proxy.stop();  // the database goes away mid-load
        }
      });
    for (auto& th : threads) th.join();
    EXPECT_FALSE(writer.flush(Millis(200)).ok());
    EXPECT_GT(writer.stats().spool_depth, 0);
    ASSERT_TRUE(writer.close(Millis(100)).ok());  // what is unwritten stays journaled
  }
  ASSERT_TRUE(proxy.start(port));
  auto ledger = open_ledger(url);
  LedgerWriter writer(*ledger, {.spill_path = spill});
  ASSERT_TRUE(writer.flush(Millis(10'000)).ok()) << writer.stats().last_error;
  auto direct = open_ledger(db.url());
  EXPECT_EQ(*direct->count(), 600);  // nothing lost, nothing doubled
  proxy.stop();
}

TEST(LedgerWriter, PostgresOutageThroughACutConnection) {
  TS_REQUIRE_PG(pg);
  testing::PgDatabase db(pg);
  // The ledger talks to PostgreSQL through a forwarder on a port that is closed at first.
  int pg_port = std::stoi(pg.substr(pg.rfind(':') + 1, pg.rfind('/') - pg.rfind(':') - 1));
  int port = testing::free_port();
  testing::TcpForwarder proxy(pg_port);
  auto ledger = open_ledger(testing::pg_url_with_port(db.url(), port));
  LedgerWriter writer(*ledger, {.retry_initial = Millis(10), .retry_max = Millis(50)});
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(writer.append(record(i)));
  EXPECT_FALSE(writer.flush(Millis(200)).ok());
  EXPECT_EQ(writer.stats().spool_depth, 20);
  EXPECT_GT(writer.stats().num_write_failures, 0);

  ASSERT_TRUE(proxy.start(port));  // the database comes back
  ASSERT_TRUE(writer.flush(Millis(10'000)).ok()) << writer.stats().last_error;
  EXPECT_EQ(writer.stats().num_written, 20);

  proxy.stop();  // outage with an established connection: it breaks mid-session
  int64_t failures = writer.stats().num_write_failures;
  for (int i = 20; i < 50; ++i) ASSERT_TRUE(writer.append(record(i)));
  EXPECT_FALSE(writer.flush(Millis(300)).ok());
  EXPECT_GT(writer.stats().num_write_failures, failures);
  ASSERT_TRUE(proxy.start(port));
  ASSERT_TRUE(writer.close(Millis(10'000)).ok()) << writer.stats().last_error;
  proxy.stop();

  auto direct = open_ledger(db.url());
  EXPECT_EQ(*direct->count(), 50);  // nothing lost, nothing doubled
}

}  // namespace
}  // namespace ts::gateway
