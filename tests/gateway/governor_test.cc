// The facade the server calls: admission (auth, rate limits, quotas, headers), settlement and
// the ledger rows, with a fake clock; quota races between threads and between two limiters
// sharing one Redis.
#include "gateway/governor.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "gateway/sha256.h"
#include "gateway_test_util.h"
#include "test_util.h"

namespace ts::gateway {
namespace {

WallTime at(const char* s) { return *parse_rfc3339(s); }

std::string header(const Headers& h, const std::string& name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "<none>";
}

// One "server process": its own limit store, key cache, writer and governor.
struct Stack {
  Stack(const std::string& ledger_url, const Clock& clock, const std::string& toml,
        std::unique_ptr<LimitStore> limit_store, bool no_auth = false)
      : db(std::move(open_sql_db(ledger_url)).value()),
        ledger(make_sql_ledger(db)),
        keys(db, clock),
        limits(std::move(limit_store)),
        config(std::move(parse_config(toml, "test.toml")).value()),
        writer(*ledger, {.retry_initial = Millis(10)}),
        gov(GovernorParts{.keys = &keys, .limits = limits.get(), .ledger = ledger.get(),
                          .writer = &writer, .config = &config, .clock = &clock},
            GovernorOptions{.no_auth = no_auth}) {}
  std::shared_ptr<SqlDb> db;
  std::unique_ptr<LedgerStore> ledger;
  KeyStore keys;
  std::unique_ptr<LimitStore> limits;
  ConfigHolder config;
  LedgerWriter writer;
  Governor gov;
};

class GovernorTest : public ::testing::Test {
 protected:
  void start(const std::string& toml, bool no_auth = false) {
    stack_ = std::make_unique<Stack>(ledger_url_, clock_, toml, make_memory_limit_store(), no_auth);
  }
  std::string new_key(KeySpec spec) {
    auto k = stack_->keys.create(spec);
    EXPECT_TRUE(k.ok()) << k.status().to_string();
    return "Bearer " + k->secret;
  }
  AdmitResult admit(const std::string& bearer, int64_t prompt, int64_t max_tokens,
                    engine::Tier tier = engine::Tier::kInteractive, const char* model = "llama") {
    return stack_->gov.admit({.authorization = bearer, .model = model, .tier = tier,
                              .prompt_tokens = prompt, .max_tokens = max_tokens});
  }
  void settle(AdmitResult& r, int64_t prompt, int64_t completion, const std::string& finish = "stop") {
    ASSERT_TRUE(r.ok());
    UsageRecord rec{.request_id = "req-" + std::to_string(++num_requests_), .prompt_tokens = prompt,
                    .completion_tokens = completion, .finish_reason = finish};
    stack_->gov.settle(*r.admission, rec);
  }

  FakeClock clock_{at("2026-03-31T23:00:00Z")};
  std::string ledger_url_ = ::ts::testing::temp_dir() + "/ledger.db";
  std::unique_ptr<Stack> stack_;
  int num_requests_ = 0;
};

TEST_F(GovernorTest, HeadersFollowTheTightestBucketAndRefundsReturnUnusedTokens) {
  start("");
  std::string key = new_key({.tenant = "acme", .app = "bot", .rpm = 3, .tpm = 1000});
  auto r = admit(key, 100, 50);
  ASSERT_TRUE(r.ok()) << r.status.to_string();
  EXPECT_EQ(r.admission->key.tenant, "acme");
  EXPECT_EQ(r.admission->reserved_tokens, 150);
  EXPECT_EQ(header(r.headers, "x-ratelimit-limit-requests"), "3");
  EXPECT_EQ(header(r.headers, "x-ratelimit-remaining-requests"), "2");
  EXPECT_EQ(header(r.headers, "x-ratelimit-reset-requests"), "20s");
  EXPECT_EQ(header(r.headers, "x-ratelimit-limit-tokens"), "1000");
  EXPECT_EQ(header(r.headers, "x-ratelimit-remaining-tokens"), "850");
  EXPECT_EQ(header(r.headers, "x-ratelimit-reset-tokens"), "9s");
  settle(r, 100, 20);  // 30 of the 150 reserved tokens come back
  auto r2 = admit(key, 100, 50);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(header(r2.headers, "x-ratelimit-remaining-tokens"), "730");
  settle(r2, 100, 50);
  settle(r2, 100, 50);  // settling twice is a no-op
  ASSERT_TRUE(stack_->gov.shutdown(Millis(5000)).ok());
  auto rows = stack_->ledger->rows({});
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].tenant, "acme");
  EXPECT_EQ((*rows)[0].app, "bot");
  EXPECT_EQ((*rows)[0].key_id, r.admission->key.id);
  EXPECT_EQ((*rows)[0].model, "llama");
  EXPECT_EQ((*rows)[0].time, clock_.now());
  EXPECT_EQ((*rows)[0].completion_tokens, 20);
}

TEST_F(GovernorTest, RefusalsCarryStatusCodeAndHeaders) {
  start("");
  std::string key = new_key({.tenant = "acme", .app = "bot", .models = {"llama"},
                             .tiers = {engine::Tier::kInteractive}, .rpm = 2, .tpm = 1000});
  auto unknown = admit("Bearer ts-unknown", 1, 1);
  EXPECT_EQ(unknown.status.code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(unknown.error_code, "invalid_api_key");
  auto model = admit(key, 1, 1, engine::Tier::kInteractive, "qwen");
  EXPECT_EQ(model.status.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(model.error_code, "model_not_allowed");
  auto tier = admit(key, 1, 1, engine::Tier::kBatch);
  EXPECT_EQ(tier.status.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(tier.error_code, "tier_not_allowed");

  auto big = admit(key, 900, 200);  // 1100 > tpm 1000: can never fit
  EXPECT_EQ(big.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(big.error_code, "rate_limit_exceeded");
  EXPECT_NE(big.status.message().find("Request too large"), std::string::npos);
  EXPECT_EQ(header(big.headers, "retry-after"), "<none>");

  ASSERT_TRUE(admit(key, 10, 10).ok());
  ASSERT_TRUE(admit(key, 10, 10).ok());
  auto third = admit(key, 10, 10);
  EXPECT_EQ(third.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(third.error_code, "rate_limit_exceeded");
  EXPECT_EQ(header(third.headers, "retry-after"), "30");  // 2 rpm: one request every 30 s
  EXPECT_EQ(header(third.headers, "x-ratelimit-remaining-requests"), "0");
  EXPECT_NE(third.status.message().find("requests per minute (rpm) on key"), std::string::npos)
      << third.status.message();
  clock_.advance(Millis(30'000));
  EXPECT_TRUE(admit(key, 10, 10).ok());
  GovernorStats s = stack_->gov.stats();
  EXPECT_EQ(s.num_admitted, 3);
  EXPECT_EQ(s.num_refused_auth, 3);
  EXPECT_EQ(s.num_refused_rate, 2);
}

TEST_F(GovernorTest, TenantAppAndTierBucketsAllApply) {
  start(R"(
[tenants.acme]
rpm = 4
[tenants.acme.apps.bot]
tpm = 500
[tiers.batch]
rpm = 1
max_tokens = 100
)");
  std::string k1 = new_key({.tenant = "acme", .app = "bot"});
  std::string k2 = new_key({.tenant = "acme", .app = "etl"});
  auto a = admit(k1, 200, 100);
  ASSERT_TRUE(a.ok());
  auto b = admit(k1, 200, 100);  // app tpm: 200 left < 300
  EXPECT_EQ(b.error_code, "rate_limit_exceeded");
  EXPECT_NE(b.status.message().find("app acme/bot"), std::string::npos) << b.status.message();
  ASSERT_TRUE(admit(k2, 200, 100).ok());  // another app of the tenant is not limited by bot's tpm
  auto batch = admit(k2, 10, 200, engine::Tier::kBatch);
  EXPECT_EQ(batch.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batch.error_code, "max_tokens_too_large");
  ASSERT_TRUE(admit(k2, 10, 10, engine::Tier::kBatch).ok());
  auto batch2 = admit(k2, 10, 10, engine::Tier::kBatch);  // batch tier: 1 rpm per tenant
  EXPECT_NE(batch2.status.message().find("batch tier"), std::string::npos) << batch2.status.message();
  ASSERT_TRUE(admit(k2, 1, 1).ok());  // the 4th request of the tenant this minute
  auto fourth = admit(k2, 1, 1);       // tenant rpm 4 is used up
  EXPECT_NE(fourth.status.message().find("tenant acme"), std::string::npos) << fourth.status.message();
}

TEST_F(GovernorTest, DailyQuotaRefusesWithInsufficientQuotaAndResetsAtUtcMidnight) {
  start("[tenants.acme]\nquota = { tokens = 1000, period = \"day\" }\n");
  std::string key = new_key({.tenant = "acme", .app = "bot"});
  std::vector<AdmitResult> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(admit(key, 200, 100));
    ASSERT_TRUE(held.back().ok());
  }
  EXPECT_EQ(header(held[2].headers, "x-quota-remaining-tokens"), "100");
  EXPECT_EQ(header(held[2].headers, "x-quota-reset"), "2026-04-01T00:00:00Z");
  auto refused = admit(key, 200, 100);
  EXPECT_EQ(refused.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.error_code, "insufficient_quota");
  EXPECT_EQ(header(refused.headers, "retry-after"), "3600");  // until 00:00 UTC
  settle(held[0], 200, 0);  // used 200 of 300: 100 back
  settle(held[1], 50, 0);   // used 50 of 300: 250 back -> 550 used
  auto me = stack_->gov.usage_me(key);
  ASSERT_TRUE(me.ok());
  ASSERT_EQ(me->quotas.size(), 1u);
  EXPECT_EQ(me->quotas[0].used, 550);
  EXPECT_EQ(me->quotas[0].remaining, 450);
  ASSERT_TRUE(admit(key, 200, 100).ok());  // 850
  EXPECT_FALSE(admit(key, 200, 100).ok());
  clock_.set(at("2026-04-01T00:00:00Z"));  // a new UTC day
  auto fresh = admit(key, 200, 100);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(header(fresh.headers, "x-quota-remaining-tokens"), "700");
}

TEST_F(GovernorTest, QuotaSurvivesARestartAndMonthsRollOver) {
  const char* toml = "[tenants.acme.apps.bot]\nquota = { tokens = 500, period = \"month\" }\n";
  start(toml);
  std::string key = new_key({.tenant = "acme", .app = "bot"});
  clock_.set(at("2026-03-10T08:00:00Z"));
  for (int i = 0; i < 2; ++i) {
    auto r = admit(key, 100, 100);
    ASSERT_TRUE(r.ok());
    settle(r, 100, 100);
  }
  ASSERT_TRUE(stack_->gov.shutdown(Millis(5000)).ok());
  stack_.reset();
  start(toml);  // a new process: empty limit store, counters seeded from the ledger
  auto me = stack_->gov.usage_me(key);
  ASSERT_TRUE(me.ok()) << me.status().to_string();
  EXPECT_EQ(me->quotas[0].scope, "app");
  EXPECT_EQ(me->quotas[0].name, "acme/bot");
  EXPECT_EQ(me->quotas[0].used, 400);
  EXPECT_EQ(me->quotas[0].resets_at, at("2026-04-01"));
  auto body = nlohmann::json::parse(usage_me_json(*me));
  EXPECT_EQ(body["tenant"], "acme");
  EXPECT_EQ(body["quotas"][0]["period"], "month");
  EXPECT_EQ(body["quotas"][0]["remaining"], 100);
  EXPECT_EQ(body["quotas"][0]["resets_at"], "2026-04-01T00:00:00Z");
  EXPECT_EQ(admit(key, 100, 100).error_code, "insufficient_quota");
  ASSERT_TRUE(admit(key, 50, 50).ok());
  clock_.set(at("2026-04-01T00:00:00Z"));
  EXPECT_TRUE(admit(key, 200, 200).ok());
}

TEST_F(GovernorTest, ThreadsRacingForTheLastTokensNeverOverspend) {
  start("[tenants.acme]\nquota = { tokens = 1000, period = \"day\" }\n");
  std::string key = new_key({.tenant = "acme", .app = "bot"});
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i)
        if (admit(key, 60, 40).ok()) ++admitted;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(admitted.load(), 10);  // exactly 1000 / 100
}

TEST_F(GovernorTest, ConcurrentAdmitAndSettleKeepUsageWithinTheQuota) {
  constexpr int64_t kQuota = 20'000;
  start("[tenants.acme]\nquota = { tokens = 20000, period = \"day\" }\n");
  std::string key = new_key({.tenant = "acme", .app = "bot"});
  std::atomic<int64_t> charged{0};
  std::atomic<int> num_settled{0};
  std::atomic<bool> over{false};
  std::string counter = "q:tenant:acme:day:" + std::to_string(to_unix_ms(at("2026-03-31")));
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 60; ++i) {
        auto r = stack_->gov.admit({.authorization = key, .model = "m", .prompt_tokens = 80, .max_tokens = 120});
        auto used = stack_->limits->quota_used(counter);
        if (used.ok() && used->has_value() && **used > kQuota) over = true;
        if (!r.ok()) continue;
        int64_t completion = std::uniform_int_distribution<int64_t>(0, 120)(rng);
        UsageRecord rec{.request_id = "t" + std::to_string(t) + "-" + std::to_string(i),
                        .prompt_tokens = 80, .completion_tokens = completion};
        stack_->gov.settle(*r.admission, rec);
        charged += 80 + completion;
        ++num_settled;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_FALSE(over.load()) << "the quota counter went past its limit";
  EXPECT_LE(charged.load(), kQuota);
  EXPECT_GT(charged.load(), kQuota - 200);  // refunds were re-used until nearly all was spent
  EXPECT_EQ(**stack_->limits->quota_used(counter), charged.load());
  ASSERT_TRUE(stack_->gov.shutdown(Millis(5000)).ok());
  EXPECT_EQ(*stack_->ledger->count(), num_settled.load());  // one row per request
  EXPECT_EQ(*stack_->ledger->sum_tokens("acme", "", at("2026-03-31"), at("2026-04-01")), charged.load());
}

TEST_F(GovernorTest, NoAuthAdmitsAnonymouslyAndStillRecords) {
  start("[tenants.anonymous]\nrpm = 1\n", /*no_auth=*/true);
  auto r = admit("", 5, 5);
  ASSERT_TRUE(r.ok()) << r.status.to_string();
  EXPECT_EQ(r.admission->key.tenant, "anonymous");
  settle(r, 5, 3, "cancelled");
  EXPECT_EQ(admit("", 5, 5).error_code, "rate_limit_exceeded");
  ASSERT_TRUE(stack_->gov.shutdown(Millis(5000)).ok());
  auto rows = stack_->ledger->rows({});
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].tenant, "anonymous");
  EXPECT_EQ((*rows)[0].finish_reason, "cancelled");
}

// Bodies reach the ledger only for tenants/apps that opted in (log_bodies); the others' are
// dropped at settle even when the caller passed them.
TEST_F(GovernorTest, BodiesAreStoredOnlyForOptedInTenantsAndApps) {
  start("[tenants.acme]\nlog_bodies = true\n[tenants.acme.apps.quiet]\nlog_bodies = false\n[tenants.beta]\n");
  const std::pair<std::string, std::string> callers[] = {{"acme", "bot"}, {"acme", "quiet"}, {"beta", "bot"}};
  for (const auto& [tenant, app] : callers) {
    auto r = admit(new_key({.tenant = tenant, .app = app}), 5, 5);
    ASSERT_TRUE(r.ok()) << r.status.to_string();
    EXPECT_EQ(r.admission->log_bodies, tenant == "acme" && app == "bot");
    stack_->gov.settle(*r.admission, UsageRecord{.request_id = tenant + "-" + app, .prompt_tokens = 5,
                                                 .completion_tokens = 1, .finish_reason = "length",
                                                 .request_body = R"({"prompt":"hi"})", .output_text = "yo"});
  }
  ASSERT_TRUE(stack_->gov.shutdown(Millis(5000)).ok());
  auto rows = stack_->ledger->rows({});
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 3u);
  for (const UsageRecord& row : *rows) {
    const bool logged = row.request_id == "acme-bot";
    EXPECT_EQ(row.request_body, logged ? R"({"prompt":"hi"})" : "") << row.request_id;
    EXPECT_EQ(row.output_text, logged ? "yo" : "") << row.request_id;
  }
}

TEST_F(GovernorTest, ReloadChangesLimitsForNewRequestsOnly) {
  std::string path = ::ts::testing::temp_dir() + "/gov.toml";
  std::ofstream(path) << "[tenants.acme]\nrpm = 1\n";
  stack_ = std::make_unique<Stack>(ledger_url_, clock_, "", make_memory_limit_store());
  stack_->config.set(*load_config(path));
  std::string key = new_key({.tenant = "acme", .app = "bot"});
  auto held = admit(key, 1, 1);
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(admit(key, 1, 1).ok());
  std::ofstream(path) << "[tenants.acme]\nrpm = 1\n[tenants.acme.apps.bot]\nrpm = 5\n"
                      << "[admin]\nkey_sha256 = \"" << sha256_hex("ts-admin") << "\"\n";
  ASSERT_TRUE(stack_->gov.reload_config().ok());
  settle(held, 1, 1);  // a request admitted before the reload settles normally
  EXPECT_TRUE(stack_->gov.is_admin("Bearer ts-admin"));
  EXPECT_FALSE(stack_->gov.is_admin("Bearer ts-other"));
  std::ofstream(path) << "[tenants.acme]\nrpm = oops\n";
  EXPECT_FALSE(stack_->gov.reload_config().ok());
  EXPECT_TRUE(stack_->gov.is_admin("Bearer ts-admin"));  // old config kept
}

TEST_F(GovernorTest, OpenBuildsEverythingFromOptions) {
  std::string dir = ::ts::testing::temp_dir();
  std::ofstream(dir + "/bad.toml") << "[tenants.acme]\nquota = { tokens = 5, period = \"year\" }\n";
  auto bad = Governor::open({.ledger = dir + "/l.db", .config_path = dir + "/bad.toml"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), dir + "/bad.toml:2: tenants.acme.quota.period must be day or month");
  EXPECT_FALSE(Governor::open({.ledger = dir + "/l.db", .limits = "memcache://x"}).ok());
  auto gov = Governor::open({.ledger = dir + "/l.db", .no_auth = true, .clock = &clock_});
  ASSERT_TRUE(gov.ok()) << gov.status().to_string();
  auto r = (*gov)->admit({.model = "m", .prompt_tokens = 3, .max_tokens = 4});
  ASSERT_TRUE(r.ok());
  (*gov)->settle(*r.admission, {.request_id = "x", .prompt_tokens = 3, .completion_tokens = 4});
  ASSERT_TRUE((*gov)->shutdown(Millis(5000)).ok());
  EXPECT_EQ(*(*gov)->ledger()->count(), 1);
}

// A request without max_tokens (max_tokens = what the context leaves, e.g. 32k) reserves a
// bounded estimate, is not refused by the TPM limit or the tier cap for the context size, and
// settles on the actual count, above the reservation too (issue 11).
TEST_F(GovernorTest, RequestsWithoutMaxTokensReserveAnEstimateAndSettleOnUsage) {
  start("[tenants.acme]\nquota = { tokens = 100000, period = \"day\" }\n"
        "[tiers.interactive]\nmax_tokens = 4096\n");
  std::string key = new_key({.tenant = "acme", .app = "bot", .tpm = 5000});
  auto explicit_big = admit(key, 20, 32748);  // as if the client asked for the whole context
  EXPECT_FALSE(explicit_big.ok());
  EXPECT_EQ(explicit_big.error_code, "max_tokens_too_large");
  auto r = stack_->gov.admit({.authorization = key, .model = "llama", .prompt_tokens = 20,
                              .max_tokens = 32748, .completion_estimate = kDefaultCompletionEstimate});
  ASSERT_TRUE(r.ok()) << r.status.to_string();
  EXPECT_EQ(r.admission->reserved_tokens, 20 + kDefaultCompletionEstimate);
  EXPECT_EQ(header(r.headers, "x-ratelimit-remaining-tokens"), std::to_string(5000 - 20 - kDefaultCompletionEstimate));
  EXPECT_EQ(header(r.headers, "x-quota-remaining-tokens"), std::to_string(100000 - 20 - kDefaultCompletionEstimate));
  settle(r, 20, 3000);  // used 3020, reserved 1044: the excess is charged
  auto me = stack_->gov.usage_me(key);
  ASSERT_TRUE(me.ok());
  EXPECT_EQ(me->quotas[0].used, 3020);
  auto next = admit(key, 10, 10);  // 5000 - 3020 = 1980 TPM left (no time passed)
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(header(next.headers, "x-ratelimit-remaining-tokens"), "1960");
  settle(next, 10, 10);
  // An estimate never exceeds max_tokens, and a smaller real use is refunded as usual.
  auto small = stack_->gov.admit({.authorization = key, .model = "llama", .prompt_tokens = 5,
                                  .max_tokens = 100, .completion_estimate = kDefaultCompletionEstimate});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small.admission->reserved_tokens, 105);
  settle(small, 5, 40);
  auto after = stack_->gov.usage_me(key);
  EXPECT_EQ(after->quotas[0].used, 3020 + 20 + 45);
}

// Two "server processes" (separate Redis connections, key caches and writers) share limits.
TEST(GovernorRedis, TwoProcessesEnforceOneLimitAndOneQuota) {
  TS_REQUIRE_REDIS(redis);
  FakeClock clock(at("2026-05-05T10:00:00Z"));
  std::string ledger = ::ts::testing::temp_dir() + "/shared.db";
  std::string prefix = testing::redis_prefix();
  const char* toml = "[tenants.acme]\nrpm = 40\nquota = { tokens = 2000, period = \"month\" }\n";
  auto store = [&] { return std::move(make_redis_limit_store({.url = redis, .prefix = prefix})).value(); };
  Stack a(ledger, clock, toml, store());
  Stack b(ledger, clock, toml, store());
  auto k = a.keys.create({.tenant = "acme", .app = "bot"});
  ASSERT_TRUE(k.ok());
  std::string bearer = "Bearer " + k->secret;
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      Governor& g = t % 2 ? b.gov : a.gov;
      for (int i = 0; i < 10; ++i)
        if (g.admit({.authorization = bearer, .model = "m", .prompt_tokens = 50, .max_tokens = 50}).ok())
          ++admitted;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(admitted.load(), 20);  // quota 2000 / 100 each (rpm 40 not reached)

  // Rate limit shared too: a second tenant without quota, rpm 40 across both processes.
  auto k2 = a.keys.create({.tenant = "beta", .app = "x", .rpm = 7});
  std::string b2 = "Bearer " + k2->secret;
  int ok = 0;
  for (int i = 0; i < 10; ++i) {
    ok += a.gov.admit({.authorization = b2, .model = "m", .prompt_tokens = 1, .max_tokens = 1}).ok();
    ok += b.gov.admit({.authorization = b2, .model = "m", .prompt_tokens = 1, .max_tokens = 1}).ok();
  }
  EXPECT_EQ(ok, 7);
}

}  // namespace
}  // namespace ts::gateway
