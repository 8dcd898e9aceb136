// Reports (totals equal the ledger rows' sums exactly, costs exact), replay export, and the
// CLI logic of `tokenserve keys` / `tokenserve usage`.
#include "gateway/report.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "gateway/admin.h"
#include "gateway/keys.h"
#include "gateway_test_util.h"
#include "test_util.h"

namespace ts::gateway {
namespace {

WallTime at(const char* s) { return *parse_rfc3339(s); }

std::vector<UsageRecord> random_records(int n) {
  std::mt19937 rng(42);
  const char* tenants[] = {"acme", "beta", "gamma"};
  const char* models[] = {"llama", "qwen", "unpriced"};
  std::vector<UsageRecord> out;
  for (int i = 0; i < n; ++i) {
    UsageRecord r;
    r.request_id = "r" + std::to_string(i);
    r.time = at("2026-02-26T00:00:00Z") + Millis(int64_t(rng() % (5ull * 86'400'000)));
    r.tenant = tenants[rng() % 3];
    r.app = "app" + std::to_string(rng() % 2);
    r.key_id = "key_" + std::to_string(rng() % 4);
    r.model = models[rng() % 3];
    r.tier = rng() % 4 ? engine::Tier::kInteractive : engine::Tier::kBatch;
    r.prompt_tokens = 1 + rng() % 5000;
    r.cached_tokens = rng() % (r.prompt_tokens + 1);
    r.completion_tokens = rng() % 2000;
    out.push_back(r);
  }
  return out;
}

std::string group_of(const UsageRecord& r, GroupBy by) {
  switch (by) {
    case GroupBy::kTenant: return r.tenant;
    case GroupBy::kApp: return r.tenant + "/" + r.app;
    case GroupBy::kModel: return r.model;
    case GroupBy::kKey: return r.key_id;
    case GroupBy::kDay: return format_date(r.time);
    case GroupBy::kPrompt: return r.prompt_id.empty() ? "(none)" : r.prompt_id + "@" + std::to_string(r.prompt_version);
  }
  return "";
}

const std::map<std::string, Price> kPrices = {
    {"llama", {.input = 50'000, .cached = 25'000, .output = 200'000}},
    {"qwen", {.input = 1'000'000, .cached = 1'000'000, .output = 3'000'000}}};

void check_reports(LedgerStore& ledger, const std::vector<UsageRecord>& recs) {
  LedgerFilter f{.from = at("2026-02-27"), .to = at("2026-03-02T12:00:00Z")};
  for (GroupBy by : {GroupBy::kTenant, GroupBy::kApp, GroupBy::kModel, GroupBy::kKey, GroupBy::kDay}) {
    auto rep = build_report(ledger, by, f, kPrices);
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    // Expected sums straight from the records.
    std::map<std::string, ReportRow> want;
    ReportRow total;
    for (const UsageRecord& r : recs) {
      if (r.time < *f.from || r.time >= *f.to) continue;
      ReportRow& w = want[group_of(r, by)];
      int64_t cost = kPrices.count(r.model)
                         ? cost_pico(kPrices.at(r.model), r.prompt_tokens, r.cached_tokens, r.completion_tokens)
                         : 0;
      for (ReportRow* x : {&w, &total}) {
        x->num_requests += 1;
        x->prompt_tokens += r.prompt_tokens;
        x->cached_tokens += r.cached_tokens;
        x->completion_tokens += r.completion_tokens;
        x->total_tokens += r.prompt_tokens + r.completion_tokens;
        x->cost_pico += cost;
      }
    }
    ASSERT_EQ(rep->rows.size(), want.size()) << group_by_name(by);
    for (const ReportRow& row : rep->rows) {
      const ReportRow& w = want.at(row.group);
      EXPECT_EQ(row.num_requests, w.num_requests);
      EXPECT_EQ(row.prompt_tokens, w.prompt_tokens);
      EXPECT_EQ(row.cached_tokens, w.cached_tokens);
      EXPECT_EQ(row.completion_tokens, w.completion_tokens);
      EXPECT_EQ(row.cost_pico, w.cost_pico);
    }
    EXPECT_EQ(rep->totals.num_requests, total.num_requests);
    EXPECT_EQ(rep->totals.total_tokens, total.total_tokens);
    EXPECT_EQ(rep->totals.cost_pico, total.cost_pico);
    EXPECT_EQ(rep->unpriced_models, std::vector<std::string>{"unpriced"});
  }
}

std::unique_ptr<LedgerStore> open_ledger(const std::string& url) {
  return make_sql_ledger(std::shared_ptr<SqlDb>(std::move(open_sql_db(url)).value()));
}

TEST(Report, TotalsEqualRowSumsOnSqlite) {
  auto recs = random_records(400);
  auto ledger = open_ledger(::ts::testing::temp_dir() + "/r.db");
  ASSERT_TRUE(ledger->append(recs).ok());
  check_reports(*ledger, recs);
}

TEST(Report, TotalsEqualRowSumsOnPostgres) {
  TS_REQUIRE_PG(pg);
  testing::PgDatabase db(pg);
  auto recs = random_records(400);
  auto ledger = open_ledger(db.url());
  ASSERT_TRUE(ledger->append(recs).ok());
  check_reports(*ledger, recs);
}

TEST(Report, FormatsAgreeWithEachOther) {
  auto recs = random_records(50);
  auto ledger = open_ledger(::ts::testing::temp_dir() + "/f.db");
  ASSERT_TRUE(ledger->append(recs).ok());
  auto rep = build_report(*ledger, GroupBy::kModel, {}, kPrices);
  ASSERT_TRUE(rep.ok());
  auto j = nlohmann::json::parse(format_report(*rep, ReportFormat::kJson));
  EXPECT_EQ(j["by"], "model");
  ASSERT_EQ(j["rows"].size(), 3u);
  int64_t sum = 0;
  for (const auto& row : j["rows"]) sum += row["total_tokens"].get<int64_t>();
  EXPECT_EQ(j["totals"]["total_tokens"].get<int64_t>(), sum);
  EXPECT_EQ(j["totals"]["cost"], format_money(rep->totals.cost_pico));

  std::string csv = format_report(*rep, ReportFormat::kCsv);
  std::istringstream in(csv);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u);  // header, 3 models, total
  EXPECT_EQ(lines[0], "model,requests,prompt_tokens,cached_tokens,completion_tokens,total_tokens,cost");
  EXPECT_EQ(lines[4].rfind("total," + std::to_string(rep->totals.num_requests) + ",", 0), 0u);

  std::string table = format_report(*rep, ReportFormat::kTable);
  EXPECT_NE(table.find("total"), std::string::npos);
  EXPECT_NE(table.find(std::to_string(rep->totals.total_tokens)), std::string::npos);
  EXPECT_NE(table.find("no price configured for: unpriced"), std::string::npos);
  EXPECT_FALSE(parse_report_format("xml").ok());
}

TEST(Report, ReplayExportHasOneLinePerRowWithOffsets) {
  auto ledger = open_ledger(::ts::testing::temp_dir() + "/replay.db");
  std::vector<UsageRecord> recs(3);
  for (int i = 0; i < 3; ++i) {
    recs[size_t(i)].request_id = "q" + std::to_string(i);
    recs[size_t(i)].time = at("2026-01-01T00:00:00Z") + Millis(i * 1250);
    recs[size_t(i)].tenant = "t";
    recs[size_t(i)].prompt_tokens = 10 * (i + 1);
    recs[size_t(i)].completion_tokens = i;
  }
  recs[2].tier = engine::Tier::kBatch;
  ASSERT_TRUE(ledger->append(recs).ok());
  std::ostringstream out;
  ASSERT_EQ(*export_replay(*ledger, {}, out), 3);
  std::istringstream in(out.str());
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_DOUBLE_EQ(rows[0]["arrival_s"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(rows[2]["arrival_s"].get<double>(), 2.5);
  EXPECT_EQ(rows[1]["input_tokens"], 20);
  EXPECT_EQ(rows[1]["output_tokens"], 1);
  EXPECT_EQ(rows[2]["tier"], "batch");
}

TEST(AdminCli, KeysCreatePrintsTheKeyAloneOnTheLastLine) {
  std::string ledger = ::ts::testing::temp_dir() + "/cli.db";
  FakeClock clock(at("2026-01-01T00:00:00Z"));
  std::ostringstream out;
  Status st = keys_create({.ledger = ledger, .tenant = "acme", .app = "bot", .rpm = 9,
                           .models = "a, b", .tiers = "batch", .expires = "30d"},
                          clock, out);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::string text = out.str();
  ASSERT_EQ(text.back(), '\n');
  std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
  last.pop_back();
  ASSERT_EQ(last.rfind("ts-", 0), 0u);
  KeyStore keys(std::shared_ptr<SqlDb>(std::move(open_sql_db(ledger)).value()), clock);
  auto k = keys.authenticate(last);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_EQ(k->models, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(k->tiers, std::vector<engine::Tier>{engine::Tier::kBatch});
  EXPECT_EQ(k->rpm, 9);
  EXPECT_EQ(*k->expires, at("2026-01-31T00:00:00Z"));

  std::ostringstream list;
  ASSERT_TRUE(keys_list(ledger, "", true, clock, list).ok());
  auto j = nlohmann::json::parse(list.str());
  EXPECT_EQ(j["id"], k->id);
  EXPECT_EQ(j["state"], "active");
  EXPECT_EQ(list.str().find(last), std::string::npos);  // never the secret

  std::ostringstream rot;
  ASSERT_TRUE(keys_rotate(ledger, k->id, clock, rot).ok());
  std::ostringstream dis, table;
  EXPECT_EQ(keys_disable(ledger, "key_missing", dis).code(), StatusCode::kNotFound);
  ASSERT_TRUE(keys_list(ledger, "acme", false, clock, table).ok());
  EXPECT_NE(table.str().find("rotated"), std::string::npos);
  EXPECT_NE(table.str().find("active"), std::string::npos);

  EXPECT_EQ(keys_create({.ledger = ledger, .tenant = "a", .app = "b", .tiers = "gold"}, clock, out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(keys_create({.ledger = ledger, .tenant = "a", .app = "b", .expires = "2020-01-01"}, clock, out).code(),
            StatusCode::kInvalidArgument);
}

TEST(AdminCli, UsageReportAndExport) {
  std::string dir = ::ts::testing::temp_dir();
  auto ledger = open_ledger(dir + "/u.db");
  auto recs = random_records(30);
  ASSERT_TRUE(ledger->append(recs).ok());
  std::ofstream(dir + "/prices.toml") << "[prices.llama]\ninput = 0.05\ncached = 0.025\noutput = 0.2\n";
  std::ostringstream out;
  Status st = usage_report({.ledger = dir + "/u.db", .by = "day", .from = "2026-02-27",
                            .to = "2026-02-28", .format = "json", .config_path = dir + "/prices.toml"},
                           out);
  ASSERT_TRUE(st.ok()) << st.to_string();
  auto j = nlohmann::json::parse(out.str());
  ASSERT_EQ(j["rows"].size(), 2u);  // --to as a date includes that day
  EXPECT_EQ(j["rows"][0]["day"], "2026-02-27");
  EXPECT_EQ(j["rows"][1]["day"], "2026-02-28");
  int64_t n = 0;
  for (const auto& r : recs) n += r.time >= at("2026-02-27") && r.time < at("2026-03-01");
  EXPECT_EQ(j["totals"]["requests"].get<int64_t>(), n);

  EXPECT_EQ(usage_report({.ledger = dir + "/u.db", .by = "week"}, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(usage_report({.ledger = dir + "/u.db", .from = "2026-03-01", .to = "2026-02-01"}, out).code(),
            StatusCode::kInvalidArgument);
  std::ostringstream msg;
  ASSERT_TRUE(usage_report({.ledger = dir + "/u.db", .export_replay = dir + "/replay.jsonl"}, msg).ok());
  EXPECT_EQ(msg.str(), "wrote 30 requests to " + dir + "/replay.jsonl\n");
}

}  // namespace
}  // namespace ts::gateway
