// Limit-store outages: the circuit breaker, fail-open admissions whose charges are journaled
// and replayed into a real Redis when it returns, fail-closed tenants, fast admission while a
// hanging Redis is cut off, and ledger back-pressure.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "gateway/circuit_breaker.h"
#include "gateway/governor.h"
#include "gateway_test_util.h"
#include "test_util.h"

namespace ts::gateway {
namespace {

WallTime at(const char* s) { return *parse_rfc3339(s); }

struct Stack {
  Stack(const std::string& ledger_url, const Clock& clock, const std::string& toml,
        std::unique_ptr<LimitStore> limit_store, LedgerWriterOptions wo = {.retry_initial = Millis(10)})
      : db(std::move(open_sql_db(ledger_url)).value()),
        ledger(make_sql_ledger(db)),
        keys(db, clock),
        limits(std::move(limit_store)),
        config(std::move(parse_config(toml, "test.toml")).value()),
        writer(*ledger, wo),
        gov(GovernorParts{.keys = &keys, .limits = limits.get(), .ledger = ledger.get(),
                          .writer = &writer, .config = &config, .clock = &clock},
            GovernorOptions{.replay_interval = Millis(50)}) {}
  std::string bearer(const std::string& tenant) {
    auto k = keys.create({.tenant = tenant, .app = "bot"});
    EXPECT_TRUE(k.ok());
    return "Bearer " + k->secret;
  }
  std::shared_ptr<SqlDb> db;
  std::unique_ptr<LedgerStore> ledger;
  KeyStore keys;
  std::unique_ptr<LimitStore> limits;
  ConfigHolder config;
  LedgerWriter writer;
  Governor gov;
};

TEST(CircuitBreaker, OpensAfterFailuresFailsFastThenProbesAndCloses) {
  CircuitBreaker b({.failures_to_open = 3, .open_for = Millis(100), .name = "test store"});
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(b.allow());
    b.on_failure("timeout");
  }
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  ASSERT_TRUE(b.allow());
  b.on_failure("timeout");
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  EXPECT_FALSE(b.allow());
  EXPECT_EQ(b.num_rejected(), 1);
  std::this_thread::sleep_for(Millis(120));
  EXPECT_TRUE(b.allow());   // the probe
  EXPECT_FALSE(b.allow());  // one probe at a time
  EXPECT_EQ(b.state(), BreakerState::kHalfOpen);
  b.on_failure("still down");
  EXPECT_EQ(b.state(), BreakerState::kOpen);
  std::this_thread::sleep_for(Millis(120));
  EXPECT_TRUE(b.allow());
  b.on_success();
  EXPECT_EQ(b.state(), BreakerState::kClosed);
  EXPECT_TRUE(b.allow());
  EXPECT_EQ(b.num_opened(), 1);
}

std::unique_ptr<LimitStore> redis_store(int port, const std::string& prefix, Millis timeout,
                                        Millis open_for) {
  auto inner = make_redis_limit_store(
      {.url = "redis://127.0.0.1:" + std::to_string(port), .prefix = prefix, .timeout = timeout});
  EXPECT_TRUE(inner.ok());
  return make_breaker_limit_store(std::move(inner).value(),
                                  {.failures_to_open = 3, .open_for = open_for});
}

int64_t quota_used(Governor& gov, const std::string& bearer) {
  auto me = gov.usage_me(bearer);
  EXPECT_TRUE(me.ok()) << me.status().to_string();
  return me.ok() && !me->quotas.empty() ? me->quotas[0].used : -1;
}

TEST(LimitOutage, RedisDownThenUpChargesQuotasExactly) {
  TS_REQUIRE_REDIS(redis);
  int redis_port = std::stoi(redis.substr(redis.rfind(':') + 1));
  int port = testing::free_port();
  testing::TcpForwarder proxy(redis_port);
  ASSERT_TRUE(proxy.start(port));
  FakeClock clock(at("2026-05-05T10:00:00Z"));
  std::string prefix = testing::redis_prefix();
  Stack s(::ts::testing::temp_dir() + "/ledger.db", clock,
          "[tenants.acme]\nrpm = 1000\nquota = { tokens = 1000000, period = \"day\" }\n",
          redis_store(port, prefix, Millis(200), Millis(100)));
  std::string bearer = s.bearer("acme");
  int64_t expected = 0;
  int n = 0;
  auto request = [&](int completion) {
    AdmitResult r = s.gov.admit({.authorization = bearer, .model = "m", .prompt_tokens = 10,
                                 .max_tokens = 100});
    ASSERT_TRUE(r.ok()) << r.status.to_string();
    s.gov.settle(*r.admission, {.request_id = "req-" + std::to_string(++n), .prompt_tokens = 10,
                                .completion_tokens = completion, .finish_reason = "stop"});
    expected += 10 + completion;
  };
  for (int i = 0; i < 5; ++i) request(20 + i);
  EXPECT_EQ(quota_used(s.gov, bearer), expected);

  proxy.stop();  // Redis goes away
  int64_t before_outage = expected;
  for (int i = 0; i < 6; ++i) request(30 + i);
  GovernorStats st = s.gov.stats();
  EXPECT_EQ(st.num_admitted_fail_open, 6);
  EXPECT_EQ(st.journal_pending_tokens, expected - before_outage);
  EXPECT_EQ(st.limits.breaker, BreakerState::kOpen);

  ASSERT_TRUE(proxy.start(port));  // back: the journal is replayed in the background
  // Replayed once the breaker's probe finds Redis again (pending drained and the circuit closed).
  for (int i = 0; i < 100 && (s.gov.stats().journal_pending_tokens != 0 ||
                              s.gov.stats().limits.breaker != BreakerState::kClosed);
       ++i)
    std::this_thread::sleep_for(Millis(50));
  EXPECT_EQ(s.gov.stats().journal_pending_tokens, 0);
  EXPECT_EQ(quota_used(s.gov, bearer), expected);  // not undercounted, not doubled
  ASSERT_TRUE(s.writer.flush(Millis(5000)).ok());
  EXPECT_EQ(*s.ledger->sum_tokens("acme", "", at("2026-05-05T00:00:00Z"), at("2026-05-06T00:00:00Z")),
            expected);

  // Redis restarted empty while a request admitted fail-open was running: its settle must not
  // create the counter with just its own tokens; the next use seeds it from the ledger.
  proxy.stop();
  AdmitResult r = s.gov.admit({.authorization = bearer, .model = "m", .prompt_tokens = 10, .max_tokens = 100});
  ASSERT_TRUE(r.ok());
  std::string counter = prefix + "q:tenant:acme:day:" + std::to_string(to_unix_ms(at("2026-05-05T00:00:00Z")));
  ASSERT_EQ(std::system(("redis-cli -p " + std::to_string(redis_port) + " DEL " + counter + " >/dev/null").c_str()), 0);
  ASSERT_TRUE(proxy.start(port));
  std::this_thread::sleep_for(Millis(150));  // past the breaker's open time
  s.gov.settle(*r.admission, {.request_id = "req-after-wipe", .prompt_tokens = 10, .completion_tokens = 7});
  expected += 17;
  ASSERT_TRUE(s.writer.flush(Millis(5000)).ok());
  for (int i = 0; i < 100 && s.gov.stats().journal_pending_tokens != 0; ++i) std::this_thread::sleep_for(Millis(50));
  EXPECT_EQ(quota_used(s.gov, bearer), expected);
  proxy.stop();
}

TEST(LimitOutage, HangingRedisIsCutOffAndAdmissionStaysFast) {
  testing::BlackHole hole;
  FakeClock clock(at("2026-05-05T10:00:00Z"));
  Stack s(::ts::testing::temp_dir() + "/ledger.db", clock,
          "[tenants.acme]\nrpm = 100000\nquota = { tokens = 1000000, period = \"day\" }\n"
          "[tenants.strict]\non_limit_outage = \"closed\"\nrpm = 100\n",
          redis_store(hole.port(), "p:", Millis(100), Millis(60'000)));
  std::string acme = s.bearer("acme"), strict = s.bearer("strict");
  AdmitRequest req{.authorization = acme, .model = "m", .prompt_tokens = 5, .max_tokens = 5};
  // The first admissions pay the timeouts that open the circuit.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.gov.admit(req).ok());
  ASSERT_EQ(s.gov.stats().limits.breaker, BreakerState::kOpen);
  // p99 over 300 admissions must stay under 5 ms (25 ms in sanitizer builds). A loaded test
  // machine can preempt a thread for milliseconds, which is not what is measured here, so the
  // best of three rounds counts; a store that is still waited on fails every round (>= 100 ms).
  const double bound_ms = std::getenv("TS_SANITIZER_BUILD") ? 25.0 : 5.0;
  double best_p99 = 1e9;
  int n = 0;
  for (int round = 0; round < 3 && best_p99 >= bound_ms; ++round) {
    std::vector<double> ms;
    for (int i = 0; i < 300; ++i, ++n) {
      auto t0 = std::chrono::steady_clock::now();
      AdmitResult r = s.gov.admit(req);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      ASSERT_TRUE(r.ok());
      s.gov.settle(*r.admission, {.request_id = "r" + std::to_string(n), .prompt_tokens = 5,
                                  .completion_tokens = 5});
    }
    std::sort(ms.begin(), ms.end());
    best_p99 = std::min(best_p99, ms[size_t(ms.size() * 0.99)]);
  }
  EXPECT_LT(best_p99, bound_ms) << "p99 admission latency with the circuit open";
  EXPECT_EQ(s.gov.stats().journal_pending_tokens, int64_t(n) * 10);

  AdmitResult refused = s.gov.admit({.authorization = strict, .model = "m", .prompt_tokens = 5,
                                     .max_tokens = 5});
  EXPECT_EQ(refused.status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(refused.error_code, "limits_unavailable");
  bool retry_after = false;
  for (const auto& [k, v] : refused.headers) retry_after |= k == "retry-after";
  EXPECT_TRUE(retry_after);
  EXPECT_EQ(s.gov.stats().num_refused_outage, 1);
}

TEST(LedgerBackPressure, FullSpoolRefusesNewRequestsWith503) {
  FakeClock clock(at("2026-05-05T10:00:00Z"));
  // The ledger database's directory does not exist: nothing can be committed.
  Stack s(::ts::testing::temp_dir() + "/missing/ledger.db", clock, "", make_memory_limit_store(),
          {.max_spool = 3, .retry_initial = Millis(10)});
  // Keys live in the same (unreachable) database, so run without auth here.
  Governor gov(GovernorParts{.keys = nullptr, .limits = s.limits.get(), .ledger = s.ledger.get(),
                             .writer = &s.writer, .config = &s.config, .clock = &clock},
               GovernorOptions{.no_auth = true});
  for (int i = 0; i < 3; ++i) {
    AdmitResult r = gov.admit({.model = "m", .prompt_tokens = 1, .max_tokens = 1});
    ASSERT_TRUE(r.ok()) << r.status.to_string();
    gov.settle(*r.admission, {.request_id = "q" + std::to_string(i), .prompt_tokens = 1});
  }
  AdmitResult r = gov.admit({.model = "m", .prompt_tokens = 1, .max_tokens = 1});
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.error_code, "ledger_unavailable");
  EXPECT_EQ(gov.stats().num_refused_backpressure, 1);
  EXPECT_EQ(s.writer.stats().spool_depth, 3);
  EXPECT_EQ(s.writer.stats().num_dropped, 0);
  (void)s.writer.close(Millis(50));  // still unreachable; do not wait out the default 5 s
}

}  // namespace
}  // namespace ts::gateway
