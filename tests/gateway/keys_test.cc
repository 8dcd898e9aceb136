#include "gateway/keys.h"

#include <gtest/gtest.h>

#include "gateway/sha256.h"
#include "gateway_test_util.h"
#include "test_util.h"

namespace ts::gateway {
namespace {

WallTime t0() { return *parse_rfc3339("2026-06-01T12:00:00Z"); }

class KeysTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      url_ = ::ts::testing::temp_dir() + "/keys.db";
    } else {
      std::string pg = testing::env_or_empty("TOKENSERVE_TEST_PG");
      if (pg.empty()) GTEST_SKIP() << "TOKENSERVE_TEST_PG not set; run eval \"$(scripts/start_test_services.sh)\"";
      pgdb_ = std::make_unique<testing::PgDatabase>(pg);
      url_ = pgdb_->url();
    }
    keys_ = open_store();
  }
  std::unique_ptr<KeyStore> open_store() {
    return std::make_unique<KeyStore>(std::shared_ptr<SqlDb>(std::move(open_sql_db(url_)).value()),
                                      clock_, KeyStoreOptions{.cache_ttl = Millis(5000)});
  }
  FakeClock clock_{t0()};
  std::string url_;
  std::unique_ptr<testing::PgDatabase> pgdb_;
  std::unique_ptr<KeyStore> keys_;
};

TEST_P(KeysTest, CreateAuthenticateAndAuthorize) {
  auto k = keys_->create({.tenant = "acme", .app = "bot", .models = {"llama"},
                          .tiers = {engine::Tier::kInteractive}, .rpm = 10, .tpm = 1000});
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_EQ(k->secret.rfind("ts-", 0), 0u);
  EXPECT_EQ(k->secret.size(), 43u);
  EXPECT_EQ(k->info.id.rfind("key_", 0), 0u);
  EXPECT_EQ(k->info.prefix, k->secret.substr(0, 7));

  auto who = keys_->authenticate("Bearer " + k->secret);
  ASSERT_TRUE(who.ok()) << who.status().to_string();
  EXPECT_EQ(who->id, k->info.id);
  EXPECT_EQ(who->tenant, "acme");
  EXPECT_EQ(who->app, "bot");
  EXPECT_EQ(who->rpm, 10);
  EXPECT_EQ(who->tpm, 1000);
  EXPECT_TRUE(keys_->authenticate(k->secret).ok());  // bare key works too

  EXPECT_TRUE(KeyStore::authorize(*who, "llama", engine::Tier::kInteractive).ok());
  EXPECT_EQ(KeyStore::authorize(*who, "qwen", engine::Tier::kInteractive).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(KeyStore::authorize(*who, "llama", engine::Tier::kBatch).code(),
            StatusCode::kPermissionDenied);

  for (std::string bad : {std::string(""), std::string("Bearer "), std::string("Bearer ts-nope"),
                          k->secret + "x"}) {
    auto r = keys_->authenticate(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated) << bad;
    EXPECT_EQ(r.status().message().find(k->secret), std::string::npos);
  }
}

TEST_P(KeysTest, OnlyTheHashIsStored) {
  auto k = keys_->create({.tenant = "acme", .app = "bot"});
  ASSERT_TRUE(k.ok());
  auto db = std::move(open_sql_db(url_)).value();
  auto rows = db->query("SELECT * FROM ts_keys");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  bool has_hash = false;
  for (const auto& col : (*rows)[0]) {
    EXPECT_EQ(col.find(k->secret.substr(3)), std::string::npos) << "plaintext stored: " << col;
    has_hash |= col == sha256_hex(k->secret);
  }
  EXPECT_TRUE(has_hash);
}

TEST_P(KeysTest, DisableRotateListAndGet) {
  auto a = keys_->create({.tenant = "acme", .app = "bot", .models = {"m1", "m2"}, .rpm = 5});
  clock_.advance(Millis(1000));
  auto b = keys_->create({.tenant = "beta", .app = "etl"});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(keys_->authenticate(a->secret).ok());  // now cached

  ASSERT_TRUE(keys_->disable(a->info.id).ok());
  auto r = keys_->authenticate(a->secret);  // this store invalidates its cache at once
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(r.status().message().find("disabled"), std::string::npos);
  EXPECT_EQ(keys_->disable("key_nope").code(), StatusCode::kNotFound);
  EXPECT_EQ(keys_->rotate(a->info.id).status().code(), StatusCode::kInvalidArgument);

  auto rotated = keys_->rotate(b->info.id);
  ASSERT_TRUE(rotated.ok()) << rotated.status().to_string();
  EXPECT_NE(rotated->secret, b->secret);
  EXPECT_EQ(rotated->info.tenant, "beta");
  EXPECT_EQ(keys_->authenticate(b->secret).status().code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(keys_->authenticate(rotated->secret).ok());
  EXPECT_EQ(keys_->get(b->info.id)->replaced_by, rotated->info.id);

  auto all = keys_->list();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  auto acme = keys_->list("acme");
  ASSERT_EQ(acme->size(), 1u);
  EXPECT_EQ((*acme)[0].models, (std::vector<std::string>{"m1", "m2"}));
  EXPECT_EQ((*acme)[0].rpm, 5);
  EXPECT_FALSE((*acme)[0].enabled);
}

TEST_P(KeysTest, ExpiryFollowsTheClock) {
  auto k = keys_->create({.tenant = "acme", .app = "bot", .expires = t0() + Millis(60'000)});
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(keys_->authenticate(k->secret).ok());
  clock_.advance(Millis(59'999));
  EXPECT_TRUE(keys_->authenticate(k->secret).ok());
  clock_.advance(Millis(1));
  auto r = keys_->authenticate(k->secret);
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(r.status().message().find("expired"), std::string::npos);
  // The expiry survives the round trip through the database.
  EXPECT_EQ(*open_store()->get(k->info.id)->expires, t0() + Millis(60'000));
}

TEST_P(KeysTest, AnotherProcessSeesADisabledKeyWithinTheCacheTtl) {
  auto k = keys_->create({.tenant = "acme", .app = "bot"});
  ASSERT_TRUE(keys_->authenticate(k->secret).ok());
  auto other = open_store();  // e.g. `tokenserve keys disable` in another process
  ASSERT_TRUE(other->disable(k->info.id).ok());
  EXPECT_TRUE(keys_->authenticate(k->secret).ok());  // still cached
  clock_.advance(Millis(5000));
  EXPECT_EQ(keys_->authenticate(k->secret).status().code(), StatusCode::kUnauthenticated);
}

TEST_P(KeysTest, RejectsBadSpecs) {
  EXPECT_EQ(keys_->create({.tenant = "", .app = "bot"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(keys_->create({.tenant = "a b", .app = "bot"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(keys_->create({.tenant = "a", .app = "bot", .rpm = -1}).status().code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Databases, KeysTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

TEST(Keys, UnreachableDatabaseIsUnavailable) {
  FakeClock clock(t0());
  std::string dir = ::ts::testing::temp_dir();
  auto db = std::shared_ptr<SqlDb>(std::move(open_sql_db(dir + "/k.db")).value());
  KeyStore keys(db, clock, {.cache_ttl = Millis(1000)});
  auto k = keys.create({.tenant = "acme", .app = "bot"});
  ASSERT_TRUE(keys.authenticate(k->secret).ok());
  // A store whose database is unreachable.
  KeyStore down(std::shared_ptr<SqlDb>(std::move(open_sql_db(dir + "/no/such/dir.db")).value()), clock);
  EXPECT_EQ(down.authenticate(k->secret).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(strip_bearer("  bearer   abc  "), "abc");
  EXPECT_EQ(strip_bearer("BEARER x"), "x");
}

}  // namespace
}  // namespace ts::gateway
