// The durable QuotaJournal (charges survive a restart, each is applied exactly once, a torn line
// is skipped) and the seeding race: a quota counter seeded from the ledger while a settled row
// is still in the ledger writer's spool must include that row.
#include "gateway/quota_journal.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

#include "gateway/circuit_breaker.h"
#include "gateway/governor.h"
#include "gateway_test_util.h"
#include "test_util.h"

namespace ts::gateway {
namespace {

WallTime at(const char* s) { return *parse_rfc3339(s); }

// Journal file semantics over any store: `key` must exist there with value `base`.
void check_journal_exactly_once(LimitStore& store, const std::string& key, int64_t base) {
  const std::string dir = ::ts::testing::temp_dir();
  const std::string path = dir + "/quota-journal.jsonl";
  QuotaJournal first;
  ASSERT_TRUE(first.open(path).ok());
  first.add({{key, 10, Millis(60'000), ""}, {key, 5, Millis(60'000), ""}});
  first.add(key, 0, Millis(60'000));  // ignored
  EXPECT_EQ(first.num_pending(), 2);

  // A second object over the same file while the first is still alive, as after a crash (the
  // first never cleaned up): the charges are there.
  QuotaJournal second;
  ASSERT_TRUE(second.open(path).ok());
  EXPECT_EQ(second.num_loaded(), 2);
  EXPECT_EQ(second.tokens_pending(), 15);
  std::filesystem::copy_file(path, dir + "/before-replay.jsonl");

  auto applied = second.replay(store);
  ASSERT_TRUE(applied.ok()) << applied.status().to_string();
  EXPECT_EQ(*applied, 2);
  EXPECT_EQ(second.num_pending(), 0);
  EXPECT_EQ(**store.quota_used(key), base + 15);

  QuotaJournal after;
  ASSERT_TRUE(after.open(path).ok());
  EXPECT_EQ(after.num_pending(), 0);  // applied charges left the file

  // A crash after the store applied them but before the journal recorded it: the next start
  // replays the same charge ids, and the store does not apply them again.
  QuotaJournal stale;
  ASSERT_TRUE(stale.open(dir + "/before-replay.jsonl").ok());
  EXPECT_EQ(stale.num_pending(), 2);
  ASSERT_TRUE(stale.replay(store).ok());
  EXPECT_EQ(stale.num_pending(), 0);
  EXPECT_EQ(**store.quota_used(key), base + 15);

  // A torn last line (a crash in mid-write) is skipped; complete lines still count.
  QuotaJournal writer;
  ASSERT_TRUE(writer.open(path).ok());
  writer.add(key, 7, Millis(60'000));
  {
    std::ofstream out(path, std::ios::app | std::ios::binary);
    out << "{\"id\":\"abc-1\",\"key\":\"" << key << "\",\"del";
  }
  QuotaJournal torn;
  ASSERT_TRUE(torn.open(path).ok());
  EXPECT_EQ(torn.num_torn(), 1);
  EXPECT_EQ(torn.tokens_pending(), 7);

  // Charges to a counter the store no longer has are dropped (the ledger seed covers them).
  QuotaJournal gone;
  ASSERT_TRUE(gone.open(dir + "/gone.jsonl").ok());
  gone.add(key + ":missing", 9, Millis(60'000));
  ASSERT_TRUE(gone.replay(store).ok());
  EXPECT_EQ(gone.num_pending(), 0);
  EXPECT_EQ(gone.num_replayed(), 0);
  EXPECT_FALSE(store.quota_used(key + ":missing")->has_value());
}

TEST(QuotaJournal, FileSurvivesRestartAndReplaysExactlyOnceMemoryStore) {
  auto store = make_memory_limit_store();
  ASSERT_TRUE(store->quota_init("q:tenant:acme:day:0", 100, Millis(60'000)).ok());
  check_journal_exactly_once(*store, "q:tenant:acme:day:0", 100);
}

TEST(QuotaJournal, FileSurvivesRestartAndReplaysExactlyOnceRedis) {
  TS_REQUIRE_REDIS(redis);
  auto store = make_redis_limit_store({.url = redis, .prefix = testing::redis_prefix()});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->quota_init("q:tenant:acme:day:0", 100, Millis(60'000)).ok());
  check_journal_exactly_once(**store, "q:tenant:acme:day:0", 100);
}

TEST(QuotaJournal, UnwritablePathIsAnErrorAndStaysInMemory) {
  QuotaJournal j;
  Status st = j.open(::ts::testing::temp_dir() + "/missing-dir/journal.jsonl");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  j.add("k", 3, Millis(1000));
  EXPECT_EQ(j.tokens_pending(), 3);
}

// One governor "process": ledger, writer journal and quota journal in `dir`, Redis through
// `redis_port` (a forwarder the test can stop), keys in the ledger database.
struct Node {
  Node(const std::string& dir, const Clock& clock, int redis_port, const std::string& prefix,
       LedgerStore* writer_ledger = nullptr)
      : db(std::move(open_sql_db(dir + "/ledger.db")).value()),
        ledger(make_sql_ledger(db)),
        keys(db, clock),
        limits(make_breaker_limit_store(
            std::move(make_redis_limit_store({.url = "redis://127.0.0.1:" + std::to_string(redis_port),
                                              .prefix = prefix, .timeout = Millis(200)}))
                .value(),
            {.failures_to_open = 3, .open_for = Millis(100)})),
        config(std::move(parse_config("[tenants.acme]\nrpm = 1000\n"
                                      "quota = { tokens = 1000000, period = \"day\" }\n",
                                      "test.toml"))
                   .value()),
        writer(writer_ledger ? *writer_ledger : *ledger,
               {.retry_initial = Millis(10), .spill_path = dir + "/ledger.spool.jsonl"}),
        gov(GovernorParts{.keys = &keys, .limits = limits.get(), .ledger = ledger.get(),
                          .writer = &writer, .config = &config, .clock = &clock},
            GovernorOptions{.replay_interval = Millis(50),
                            .quota_journal_path = dir + "/ledger.quota-journal.jsonl"}) {}
  std::shared_ptr<SqlDb> db;
  std::unique_ptr<LedgerStore> ledger;
  KeyStore keys;
  std::unique_ptr<LimitStore> limits;
  ConfigHolder config;
  LedgerWriter writer;
  Governor gov;
};

int64_t quota_used(Governor& gov, const std::string& bearer) {
  auto me = gov.usage_me(bearer);
  EXPECT_TRUE(me.ok()) << me.status().to_string();
  return me.ok() && !me->quotas.empty() ? me->quotas[0].used : -1;
}

void wait_journal_empty(Governor& gov) {
  for (int i = 0; i < 100 && gov.stats().journal_pending_tokens != 0; ++i)
    std::this_thread::sleep_for(Millis(50));
}

TEST(QuotaJournal, OutageChargesSurviveGovernorRestartAndApplyOnce) {
  TS_REQUIRE_REDIS(redis);
  int redis_port = std::stoi(redis.substr(redis.rfind(':') + 1));
  int port = testing::free_port();
  testing::TcpForwarder proxy(redis_port);
  ASSERT_TRUE(proxy.start(port));
  FakeClock clock(at("2026-05-05T10:00:00Z"));
  const std::string dir = ::ts::testing::temp_dir(), prefix = testing::redis_prefix();
  std::string bearer;
  int64_t expected = 0, outage_tokens = 0;
  {
    Node a(dir, clock, port, prefix);
    auto k = a.keys.create({.tenant = "acme", .app = "bot"});
    ASSERT_TRUE(k.ok());
    bearer = "Bearer " + k->secret;
    int n = 0;
    auto request = [&](int completion) {
      AdmitResult r = a.gov.admit({.authorization = bearer, .model = "m", .prompt_tokens = 10,
                                   .max_tokens = 100});
      ASSERT_TRUE(r.ok()) << r.status.to_string();
      a.gov.settle(*r.admission, {.request_id = "req-" + std::to_string(++n), .prompt_tokens = 10,
                                  .completion_tokens = completion, .finish_reason = "stop"});
      expected += 10 + completion;
    };
    for (int i = 0; i < 4; ++i) request(20 + i);
    EXPECT_EQ(quota_used(a.gov, bearer), expected);
    proxy.stop();  // Redis unreachable (it keeps its counters)
    int64_t before = expected;
    for (int i = 0; i < 5; ++i) request(30 + i);
    outage_tokens = expected - before;
    EXPECT_EQ(a.gov.stats().journal_pending_tokens, outage_tokens);
    EXPECT_EQ(a.gov.stats().num_admitted_fail_open, 5);
  }  // the governor goes away with the charges still pending
  ASSERT_TRUE(proxy.start(port));
  {
    Node b(dir, clock, port, prefix);  // a new process over the same files
    wait_journal_empty(b.gov);
    EXPECT_EQ(b.gov.stats().journal_pending_tokens, 0);
    EXPECT_EQ(b.gov.stats().journal_replayed, 5);
    EXPECT_EQ(quota_used(b.gov, bearer), expected);  // not undercounted, not doubled
  }
  {
    Node c(dir, clock, port, prefix);  // nothing left to replay
    std::this_thread::sleep_for(Millis(150));
    EXPECT_EQ(c.gov.stats().journal_replayed, 0);
    EXPECT_EQ(quota_used(c.gov, bearer), expected);
    EXPECT_EQ(*c.ledger->sum_tokens("acme", "", at("2026-05-05T00:00:00Z"), at("2026-05-06T00:00:00Z")),
              expected);
  }
  proxy.stop();
}

// A real ledger whose appends wait while the gate is closed (a slow database commit).
class GatedLedger final : public LedgerStore {
 public:
  explicit GatedLedger(LedgerStore& inner) : inner_(inner) {}
  void close_gate() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void open_gate() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  std::string describe() const override { return "gated " + inner_.describe(); }
  Status append(std::span<const UsageRecord> records) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    lock.unlock();
    return inner_.append(records);
  }
  Result<std::vector<UsageRecord>> rows(const LedgerFilter& f) override { return inner_.rows(f); }
  Result<std::vector<UsageGroupRow>> aggregate(GroupBy by, const LedgerFilter& f) override {
    return inner_.aggregate(by, f);
  }
  Result<int64_t> sum_tokens(const std::string& t, const std::string& a, WallTime from,
                             WallTime to) override {
    return inner_.sum_tokens(t, a, from, to);
  }
  Result<int64_t> count() override { return inner_.count(); }

 private:
  LedgerStore& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

// bench/chaos.sh's drift: Redis restarts empty; a request settles (its counter is gone, so its
// tokens are left to the ledger seed) but its row is not committed yet; the next admission
// seeds the counter from the ledger. The seed must include that row.
TEST(QuotaSeed, RowSettledButNotYetCommittedIsCountedWhenCounterIsReseeded) {
  TS_REQUIRE_REDIS(redis);
  int redis_port = std::stoi(redis.substr(redis.rfind(':') + 1));
  FakeClock clock(at("2026-05-05T10:00:00Z"));
  const std::string dir = ::ts::testing::temp_dir(), prefix = testing::redis_prefix();
  std::shared_ptr<SqlDb> ledger_db = std::move(open_sql_db(dir + "/ledger.db")).value();
  auto real_ledger = make_sql_ledger(ledger_db);
  GatedLedger gated(*real_ledger);
  Node s(dir, clock, redis_port, prefix, &gated);
  auto k = s.keys.create({.tenant = "acme", .app = "bot"});
  ASSERT_TRUE(k.ok());
  std::string bearer = "Bearer " + k->secret;
  AdmitRequest req{.authorization = bearer, .model = "m", .prompt_tokens = 10, .max_tokens = 100};

  AdmitResult first = s.gov.admit(req);
  ASSERT_TRUE(first.ok()) << first.status.to_string();
  s.gov.settle(*first.admission, {.request_id = "r1", .prompt_tokens = 10, .completion_tokens = 20});
  ASSERT_TRUE(s.writer.flush(Millis(5000)).ok());
  int64_t expected = 30;

  AdmitResult in_flight = s.gov.admit(req);
  ASSERT_TRUE(in_flight.ok());
  std::string counter = prefix + "q:tenant:acme:day:" + std::to_string(to_unix_ms(at("2026-05-05T00:00:00Z")));
  ASSERT_EQ(std::system(("redis-cli -p " + std::to_string(redis_port) + " DEL " + counter + " >/dev/null").c_str()), 0);
  gated.close_gate();  // the ledger commit of the next row is slow
  s.gov.settle(*in_flight.admission, {.request_id = "r2", .prompt_tokens = 10, .completion_tokens = 7});
  expected += 17;
  std::thread opener([&] {
    std::this_thread::sleep_for(Millis(300));
    gated.open_gate();
  });
  AdmitResult next = s.gov.admit(req);  // seeds the counter while r2 may still be uncommitted
  opener.join();
  ASSERT_TRUE(next.ok()) << next.status.to_string();
  EXPECT_EQ(s.gov.stats().num_admitted_fail_open, 0);  // seeded, not admitted blind
  s.gov.settle(*next.admission, {.request_id = "r3", .prompt_tokens = 10, .completion_tokens = 5});
  expected += 15;
  ASSERT_TRUE(s.writer.flush(Millis(5000)).ok());
  EXPECT_EQ(quota_used(s.gov, bearer), expected);  // drift 0 (was -17 before the fix)
  EXPECT_EQ(*real_ledger->sum_tokens("acme", "", at("2026-05-05T00:00:00Z"), at("2026-05-06T00:00:00Z")),
            expected);
}

}  // namespace
}  // namespace ts::gateway
