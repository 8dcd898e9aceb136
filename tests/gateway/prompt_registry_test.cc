// The prompt registry on SQLite (and PostgreSQL when TOKENSERVE_TEST_PG is set): versions,
// content hashes, labels, tenant scoping, bad input; the ledger's prompt columns, their
// migration for older ledgers, and `usage --by prompt` grouping.
#include "gateway/prompt_registry.h"

#include <gtest/gtest.h>

#include <sqlite3.h>

#include "gateway/ledger.h"
#include "gateway_test_util.h"
#include "test_util.h"

namespace ts::gateway {
namespace {

PromptSpec spec(const std::string& id, const std::string& tmpl, std::vector<std::string> labels = {},
                std::string tenant = "") {
  return PromptSpec{.id = id, .tenant = std::move(tenant), .kind = "template", .content = tmpl,
                    .variables = {"name"}, .labels = std::move(labels)};
}

void exercise(std::shared_ptr<SqlDb> db) {
  FakeClock clock(from_unix_ms(1'800'000'000'000));
  PromptRegistry reg(db, clock);
  auto v1 = reg.create(spec("greet", "Hello {{ name }}", {"production"}));
  ASSERT_TRUE(v1.ok()) << v1.status().to_string();
  EXPECT_TRUE(v1->created);
  EXPECT_EQ(v1->version.version, 1);
  EXPECT_EQ(v1->version.hash, PromptRegistry::content_hash("template", "Hello {{ name }}"));
  EXPECT_EQ(v1->version.hash.rfind("sha256:", 0), 0u);
  EXPECT_EQ(v1->version.labels, std::vector<std::string>{"production"});
  EXPECT_EQ(v1->version.variables, std::vector<std::string>{"name"});

  clock.set(from_unix_ms(1'800'000'060'000));
  auto v2 = reg.create(spec("greet", "Hi {{ name }}!", {"staging"}));
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->version.version, 2);
  EXPECT_NE(v2->version.hash, v1->version.hash);
  // Identical content to the latest: no new version.
  auto same = reg.create(spec("greet", "Hi {{ name }}!"));
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->created);
  EXPECT_EQ(same->version.version, 2);
  // Content equal to an older version is a new version (versions only go forward).
  auto back = reg.create(spec("greet", "Hello {{ name }}"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->version.version, 3);
  EXPECT_EQ(back->version.hash, v1->version.hash);

  // Get by version, label, latest; versions are immutable.
  auto by_label = reg.get({.id = "greet", .label = "production"}, std::nullopt);
  ASSERT_TRUE(by_label.ok());
  EXPECT_EQ(by_label->version, 1);
  EXPECT_EQ(by_label->content, "Hello {{ name }}");
  EXPECT_EQ(to_unix_ms(by_label->created), 1'800'000'000'000);
  EXPECT_EQ(reg.get({.id = "greet"}, std::nullopt)->version, 3);
  EXPECT_EQ(reg.get({.id = "greet", .version = 2}, std::nullopt)->content, "Hi {{ name }}!");

  // Move a label.
  ASSERT_TRUE(reg.set_label("greet", "production", 2).ok());
  EXPECT_EQ(reg.get({.id = "greet", .label = "production"}, std::nullopt)->version, 2);
  EXPECT_EQ(reg.get({.id = "greet", .version = 1}, std::nullopt)->labels.size(), 0u);
  EXPECT_EQ(reg.set_label("greet", "production", 9).code(), StatusCode::kNotFound);
  EXPECT_EQ(reg.set_label("nope", "production", 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(reg.set_label("greet", "123", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.get({.id = "greet", .label = "production"}, std::nullopt)->version, 2);  // unchanged

  // Unknown ids, versions, labels.
  EXPECT_EQ(reg.get({.id = "nope"}, std::nullopt).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reg.get({.id = "greet", .version = 7}, std::nullopt).status().code(), StatusCode::kNotFound);
  auto no_label = reg.get({.id = "greet", .label = "canary"}, std::nullopt);
  EXPECT_EQ(no_label.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_label.status().message().find("no label 'canary'"), std::string::npos);
  EXPECT_EQ(reg.get({.id = "bad id!"}, std::nullopt).status().code(), StatusCode::kInvalidArgument);

  // Tenant scoping: acme's prompt is invisible to globex; shared ones are visible to all.
  ASSERT_TRUE(reg.create(spec("acme-support", "Dear {{ name }}", {}, "acme")).ok());
  EXPECT_TRUE(reg.get({.id = "acme-support"}, std::string("acme")).ok());
  EXPECT_EQ(reg.get({.id = "acme-support"}, std::string("globex")).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(reg.get({.id = "greet"}, std::string("globex")).ok());
  auto other = reg.create(spec("acme-support", "Stolen {{ name }}", {}, "globex"));
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.get({.id = "acme-support"}, std::nullopt)->version, 1);  // nothing written
  auto all = reg.list(std::nullopt);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[1].id, "greet");
  EXPECT_EQ((*all)[1].latest_version, 3);
  EXPECT_EQ((*all)[1].num_versions, 3);
  EXPECT_EQ((*all)[1].labels.at("production"), 2);
  EXPECT_EQ((*all)[1].labels.at("staging"), 2);
  EXPECT_EQ(reg.list(std::string("globex"))->size(), 1u);
  EXPECT_EQ(reg.versions("greet", std::nullopt)->size(), 3u);

  // Bad specs change nothing.
  EXPECT_FALSE(reg.create(PromptSpec{.id = "x", .kind = "yaml", .content = "a"}).ok());
  EXPECT_FALSE(reg.create(spec("", "a")).ok());
  EXPECT_FALSE(reg.create(spec("y", "a", {"bad label"})).ok());
  EXPECT_EQ(reg.get({.id = "y"}, std::nullopt).status().code(), StatusCode::kNotFound);
}

TEST(PromptRegistry, SqliteCrudLabelsAndTenants) {
  const std::string path = ts::testing::temp_dir() + "/ledger.db";
  auto db = open_sql_db(path);
  ASSERT_TRUE(db.ok());
  exercise(std::shared_ptr<SqlDb>(std::move(*db)));
  // A second connection (another process) sees the same versions.
  auto db2 = open_sql_db(path);
  FakeClock clock(from_unix_ms(0));
  PromptRegistry again(std::shared_ptr<SqlDb>(std::move(*db2)), clock);
  EXPECT_EQ(again.get({.id = "greet"}, std::nullopt)->version, 3);
}

TEST(PromptRegistry, PostgresCrudLabelsAndTenants) {
  TS_REQUIRE_PG(pg);
  testing::PgDatabase pdb(pg);
  exercise(std::shared_ptr<SqlDb>(make_postgres_db(pdb.url())));
}

TEST(PromptLedger, RowsCarryPromptAndGroupByPromptVersion) {
  const std::string path = ts::testing::temp_dir() + "/ledger.db";
  // An older ledger without the prompt columns: the store adds them on first use.
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "CREATE TABLE ts_usage (request_id TEXT PRIMARY KEY, time_ms BIGINT NOT NULL, "
                           "tenant TEXT NOT NULL, app TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL, "
                           "tier TEXT NOT NULL, prompt_tokens BIGINT NOT NULL, cached_tokens BIGINT NOT NULL, "
                           "completion_tokens BIGINT NOT NULL, ttft_ms BIGINT NOT NULL, duration_ms BIGINT NOT "
                           "NULL, finish_reason TEXT NOT NULL, http_status INTEGER NOT NULL);"
                           "INSERT INTO ts_usage VALUES ('old',0,'t','a','','m','interactive',5,0,5,1,1,'stop',200);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  auto db = open_sql_db(path);
  ASSERT_TRUE(db.ok());
  auto ledger = make_sql_ledger(std::shared_ptr<SqlDb>(std::move(*db)));
  std::vector<UsageRecord> recs;
  for (int i = 0; i < 5; ++i) {
    UsageRecord r{.request_id = "r" + std::to_string(i), .time = from_unix_ms(1000 + i), .tenant = "t", .app = "a",
                  .model = "m", .prompt_tokens = 10, .completion_tokens = 2};
    if (i < 3) r.prompt_id = "greet", r.prompt_version = i < 2 ? 1 : 2;
    recs.push_back(r);
  }
  ASSERT_TRUE(ledger->append(recs).ok());
  auto rows = ledger->rows({});
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  ASSERT_EQ(rows->size(), 6u);
  EXPECT_EQ((*rows)[0].prompt_id, "");  // the pre-migration row
  EXPECT_EQ((*rows)[1].prompt_id, "greet");
  EXPECT_EQ((*rows)[1].prompt_version, 1);
  auto by = parse_group_by("prompt");
  ASSERT_TRUE(by.ok());
  auto groups = ledger->aggregate(*by, {});
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  ASSERT_EQ(groups->size(), 3u);
  EXPECT_EQ((*groups)[0].group, "(none)");
  EXPECT_EQ((*groups)[0].num_requests, 3);
  EXPECT_EQ((*groups)[1].group, "greet@1");
  EXPECT_EQ((*groups)[1].num_requests, 2);
  EXPECT_EQ((*groups)[1].prompt_tokens, 20);
  EXPECT_EQ((*groups)[2].group, "greet@2");
  EXPECT_EQ((*groups)[2].num_requests, 1);
}

}  // namespace
}  // namespace ts::gateway
