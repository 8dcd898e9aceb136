// The audit row's and decision record's JSON written straight to text (gateway/json_text.h,
// Decision/RouteInputs/RouteDecision::append_json, append_attempts_json) equals, byte for byte,
// the dump of the JSON-tree form it replaced (to_json()), for plain, escaped and invalid-UTF-8
// strings, empty and full collections, and doubles across nlohmann's fixed/exponent layouts.
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "gateway/json_text.h"
#include "router/attempt_record.h"
#include "router/picker.h"
#include "router/rules.h"

namespace ts::router {
namespace {

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

const std::string kOdd = std::string("q\"uo\\te \n\t\x01 caf\xc3\xa9 \xff bad \x7f", 25) + std::string("\0z", 2);

TEST(JsonText, DoublesAsNlohmannWritesThem) {
  std::vector<double> xs = {0.0, -0.0, 1.0, -1.0, 0.5, 1.0 / 3, 2.0 / 3, 1e-4, 1e-5, 1.5e-7, 123456.789, 1e15, 1e16,
                            1e17, 1e21, 1e300, 5e-324, std::numeric_limits<double>::max(), 0.1 + 0.2, 100.0, 8.25};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  std::uniform_int_distribution<int> e(-30, 30);
  for (int i = 0; i < 2000; ++i) xs.push_back(u(rng) * std::pow(10.0, e(rng)));
  for (double x : xs) {
    std::string s;
    gateway::append_json_double(s, x);
    EXPECT_EQ(s, dump(nlohmann::json(x))) << x;
    EXPECT_EQ(nlohmann::json::parse(s).get<double>(), x);  // round-trips exactly
  }
  for (double x : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    std::string s;
    gateway::append_json_double(s, x);
    EXPECT_EQ(s, "null");
    EXPECT_EQ(s, dump(nlohmann::json(x)));
  }
}

TEST(JsonText, StringsAndIntegersAsNlohmannWritesThem) {
  for (const std::string& v : {std::string(), std::string("plain id-1"), kOdd, std::string("\xe2\x80\x94"),
                               std::string("\xc3"), std::string(300, 'x')}) {
    std::string s;
    gateway::append_json_string(s, v);
    EXPECT_EQ(s, dump(nlohmann::json(v)));
  }
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{42}, std::numeric_limits<int64_t>::min(),
                    std::numeric_limits<int64_t>::max()}) {
    std::string s;
    gateway::append_json_int(s, v);
    EXPECT_EQ(s, dump(nlohmann::json(v)));
  }
}

TEST(AuditJson, DecisionMatchesItsTree) {
  Decision d;
  EXPECT_EQ([&] { std::string s; d.append_json(s); return s; }(), dump(d.to_json()));  // empty
  d.ranked = {Candidate{.name = "r1", .prefix = 1.0, .queue = 1.0 / 3, .kv = 0.0, .load = 2, .score = 0.7333333333333334,
                        .prefix_blocks = 12},
              Candidate{.name = kOdd, .stale = true, .prefix = 1e-7, .queue = 0.5, .kv = 0.99, .load = 17.5, .score = 0},
              Candidate{.name = "r3", .score = std::nan("")}};
  d.filtered_out = {"r4: not ready", kOdd};
  d.guard_applied = true;
  d.shed = true;
  d.prompt_blocks = 33;
  d.took = std::chrono::nanoseconds(12'345'678);
  std::string s;
  d.append_json(s);
  EXPECT_EQ(s, dump(d.to_json()));
}

TEST(AuditJson, RouteInputsMatchTheirTree) {
  RouteInputs in;
  EXPECT_EQ([&] { std::string s; in.append_json(s); return s; }(), dump(in.to_json()));  // defaults
  in.model = "smol";
  in.tenant = kOdd;
  in.app = "app\"1";
  in.tier = engine::Tier::kBatch;
  in.headers = {{"x-b", "2"}, {"x-a", kOdd}, {"x-empty", ""}};
  in.prompt_tokens = 812;
  in.max_tokens = -1;
  in.tools = true;
  in.json_mode = true;
  in.healthy_local = 3;
  in.waiting_per_replica = 4.0 / 3;
  in.p95_ttft_ms = 250;
  in.remotes_cooling = {"big", "a\\b"};
  in.remote_budget_left = {{"big", -5}, {"z", int64_t{1} << 40}};
  std::string s;
  in.append_json(s);
  EXPECT_EQ(s, dump(in.to_json()));
  auto back = RouteInputs::from_json(nlohmann::json::parse(s));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->headers.size(), 3u);  // (invalid UTF-8 reads back as U+FFFD, as before)
  EXPECT_EQ(back->headers.at("x-b"), "2");
  EXPECT_EQ(back->waiting_per_replica, in.waiting_per_replica);
}

TEST(AuditJson, RouteDecisionMatchesItsTree) {
  RouteDecision d;
  EXPECT_EQ([&] { std::string s; d.append_json(s); return s; }(), dump(d.to_json()));
  d.rule_id = "long-prompt";
  d.reason = "prompt_tokens 812 > 500";
  d.plan = {Target{.kind = TargetKind::kRemote, .remote = "big"}, Target{}, Target{.kind = TargetKind::kReject, .reject_status = 429}};
  d.skipped = {"remote:small (cooling down)", kOdd};
  d.evaluated.push_back({{"id", "batch-local"}, {"matched", false}, {"why", kOdd}});
  d.evaluated.push_back({{"id", "long-prompt"}, {"matched", true}, {"why", "prompt_tokens 812 > 500"}});
  std::string s;
  d.append_json(s);
  EXPECT_EQ(s, dump(d.to_json()));
}

TEST(AuditJson, AttemptsMatchTheirTree) {
  std::vector<AttemptRecord> a;
  EXPECT_EQ([&] { std::string s; append_attempts_json(s, a); return s; }(), dump(attempts_to_json(a)));
  a.push_back({.target = "local:r1", .endpoint = "r1", .result = "connect_error", .detail = kOdd});
  a.push_back({.target = "remote:big", .result = "429"});
  a.push_back({.target = "local:r2", .endpoint = "r2", .result = "ok"});
  a.push_back({.target = "local:gie", .result = "cancelled", .detail = ""});
  std::string s;
  append_attempts_json(s, a);
  EXPECT_EQ(s, dump(attempts_to_json(a)));
}

}  // namespace
}  // namespace ts::router
