// Token buckets and quota counters, run against both stores: in-process and a real Redis.
#include "gateway/limit_store.h"

#include <gtest/gtest.h>

#include <thread>

#include <atomic>
#include <chrono>

#include "gateway/circuit_breaker.h"
#include "gateway_test_util.h"

namespace ts::gateway {
namespace {

using testing::env_or_empty;

WallTime t0() { return *parse_rfc3339("2026-06-01T12:00:00Z"); }

class LimitStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "memory") {
      store_ = make_memory_limit_store();
      return;
    }
    std::string url = env_or_empty("TOKENSERVE_TEST_REDIS");
    if (url.empty())
      GTEST_SKIP() << "TOKENSERVE_TEST_REDIS not set; run eval \"$(scripts/start_test_services.sh)\"";
    prefix_ = testing::redis_prefix();
    auto s = make_redis_limit_store(RedisOptions{.url = url, .prefix = prefix_});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    store_ = std::move(s).value();
  }
  // Another store on the same backend (a second server process).
  std::unique_ptr<LimitStore> second() {
    if (GetParam() == "memory") return nullptr;
    return std::move(make_redis_limit_store(
                         RedisOptions{.url = env_or_empty("TOKENSERVE_TEST_REDIS"), .prefix = prefix_}))
        .value();
  }
  std::unique_ptr<LimitStore> store_;
  std::string prefix_;
};

TEST_P(LimitStoreTest, BucketStartsFullAndRefillsOverAMinute) {
  BucketSpec rpm{.key = "rl:k:req", .capacity = 60, .cost = 1};
  WallTime now = t0();
  for (int i = 0; i < 60; ++i) {
    auto r = store_->take({&rpm, 1}, now);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->admitted) << i;
    EXPECT_EQ(r->states[0].remaining, 59 - i);
    EXPECT_EQ(r->states[0].limit, 60);
  }
  auto refused = store_->take({&rpm, 1}, now);
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->admitted);
  EXPECT_EQ(refused->refused, 0);
  EXPECT_EQ(refused->retry_after, Millis(1000));  // one request refills every second
  EXPECT_EQ(refused->states[0].reset, Millis(60'000));
  // 999 ms later: still nothing; at 1000 ms one more request fits.
  EXPECT_FALSE(store_->take({&rpm, 1}, now + Millis(999))->admitted);
  auto later = store_->take({&rpm, 1}, now + Millis(1000));
  EXPECT_TRUE(later->admitted);
  EXPECT_EQ(later->states[0].remaining, 0);
  // After a full minute the bucket is full again, never more.
  auto full = store_->take({&rpm, 1}, now + Millis(10 * 60'000));
  EXPECT_TRUE(full->admitted);
  EXPECT_EQ(full->states[0].remaining, 59);
}

TEST_P(LimitStoreTest, TakeIsAllOrNothingAcrossBuckets) {
  BucketSpec b[2] = {{.key = "rl:a:req", .capacity = 100, .cost = 1},
                     {.key = "rl:a:tok", .capacity = 1000, .cost = 600}};
  WallTime now = t0();
  ASSERT_TRUE(store_->take(b, now)->admitted);
  auto r = store_->take(b, now);  // tokens: 400 left < 600
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->admitted);
  EXPECT_EQ(r->refused, 1);
  EXPECT_EQ(r->states[0].remaining, 99);  // the request bucket was not charged
  EXPECT_EQ(r->states[1].remaining, 400);
  EXPECT_EQ(r->retry_after, Millis(12'000));  // 200 tokens at 1000/min
  // Refund 500 unused tokens (settle): now it fits.
  BucketSpec refund = b[1];
  refund.cost = 500;
  ASSERT_TRUE(store_->give(refund, now).ok());
  auto ok = store_->take(b, now);
  EXPECT_TRUE(ok->admitted);
  EXPECT_EQ(ok->states[1].remaining, 300);
  // A refund never fills beyond capacity.
  refund.cost = 100'000;
  ASSERT_TRUE(store_->give(refund, now).ok());
  BucketSpec probe = b[1];
  probe.cost = 0;
  EXPECT_EQ(store_->take({&probe, 1}, now)->states[0].remaining, 1000);
}

TEST_P(LimitStoreTest, QuotaCountersNeedSeedingThenReserveAllOrNothing) {
  QuotaSpec q[2] = {{.key = "q:tenant:t", .limit = 1000, .amount = 300, .ttl = Millis(60'000)},
                    {.key = "q:app:t/a", .limit = 500, .amount = 300, .ttl = Millis(60'000)}};
  auto r = store_->quota_reserve(q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->uninitialized, 0);
  ASSERT_TRUE(store_->quota_init(q[0].key, 100, q[0].ttl).ok());
  ASSERT_TRUE(store_->quota_init(q[0].key, 999, q[0].ttl).ok());  // set-if-absent: ignored
  EXPECT_EQ(store_->quota_reserve(q)->uninitialized, 1);
  ASSERT_TRUE(store_->quota_init(q[1].key, 0, q[1].ttl).ok());
  r = store_->quota_reserve(q);
  ASSERT_TRUE(r->admitted);
  EXPECT_EQ(r->used, (std::vector<int64_t>{400, 300}));
  r = store_->quota_reserve(q);  // app would reach 600 > 500
  EXPECT_FALSE(r->admitted);
  EXPECT_EQ(r->refused, 1);
  EXPECT_EQ(**store_->quota_used(q[0].key), 400);  // tenant untouched by the refusal
  ASSERT_TRUE(store_->quota_add(q[1].key, -250, q[1].ttl).ok());  // settle: used 50 of 300
  EXPECT_EQ(**store_->quota_used(q[1].key), 50);
  EXPECT_FALSE(store_->quota_used("q:none")->has_value());
}

TEST_P(LimitStoreTest, ConcurrentTakersNeverExceedTheBucket) {
  // Two stores (for Redis: two connections, as two server processes would have) and 8 threads
  // race for a 50-request bucket at a frozen time: exactly 50 get through.
  std::unique_ptr<LimitStore> other = second();
  LimitStore* stores[2] = {store_.get(), other ? other.get() : store_.get()};
  BucketSpec rpm{.key = "rl:shared:req", .capacity = 50, .cost = 1};
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto r = stores[t % 2]->take({&rpm, 1}, t0());
        if (r.ok() && r->admitted) ++admitted;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(admitted.load(), 50);
}

TEST_P(LimitStoreTest, ClaimOnceIsSharedAcrossProcessesAndExpires) {
  if (GetParam() == "memory") {
    // A store local to the process is not shared: the caller keeps its own seen-set.
    EXPECT_FALSE(store_->shared());
    EXPECT_EQ(store_->claim_once("gwn:x", Millis(1000)).status().code(), StatusCode::kUnimplemented);
    return;
  }
  EXPECT_TRUE(store_->shared());
  std::unique_ptr<LimitStore> other = second();  // a second replica on the same Redis
  auto first = store_->claim_once("gwn:sig-a", Millis(300));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_TRUE(*first);
  EXPECT_FALSE(*other->claim_once("gwn:sig-a", Millis(300)));  // the other replica sees it
  EXPECT_FALSE(*store_->claim_once("gwn:sig-a", Millis(300)));
  EXPECT_TRUE(*other->claim_once("gwn:sig-b", Millis(300)));  // a different nonce is free
  // Concurrent claims of one nonce from both: exactly one wins.
  std::atomic<int> won{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      LimitStore* s = t % 2 ? other.get() : store_.get();
      if (auto r = s->claim_once("gwn:sig-race", Millis(5000)); r.ok() && *r) ++won;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(won.load(), 1);
  // The claim lives for its TTL only.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_TRUE(*other->claim_once("gwn:sig-a", Millis(300)));
  // Through the circuit breaker the store stays shared and claims still reach it.
  auto wrapped = make_breaker_limit_store(std::move(other), BreakerOptions{});
  EXPECT_TRUE(wrapped->shared());
  EXPECT_FALSE(*wrapped->claim_once("gwn:sig-race", Millis(5000)));
}

INSTANTIATE_TEST_SUITE_P(Backends, LimitStoreTest, ::testing::Values("memory", "redis"),
                         [](const auto& info) { return info.param; });

TEST(RedisLimitStore, RejectsMalformedUrlsAndReportsUnreachableServer) {
  EXPECT_FALSE(make_redis_limit_store({.url = "http://x"}).ok());
  EXPECT_FALSE(make_redis_limit_store({.url = "redis://host:notaport"}).ok());
  auto s = make_redis_limit_store({.url = "redis://127.0.0.1:" + std::to_string(testing::free_port()),
                                   .timeout = Millis(500)});
  ASSERT_TRUE(s.ok());
  BucketSpec b{.key = "k", .capacity = 1, .cost = 1};
  auto r = (*s)->take({&b, 1}, t0());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ts::gateway
