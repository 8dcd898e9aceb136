#include "router/rules.h"

#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "router/cooldown.h"

namespace ts::router {
namespace {

constexpr const char* kRules = R"toml(
[remotes.big]
base_url = "http://127.0.0.1:9/v1/"
models = { small = "large-70b" }
cooldown_after_failures = 2
cooldown_s = 1.5

[[rules]]
id = "batch-local"
description = "batch never leaves the building"
match = { tier = "batch" }
action = "local"

[[rules]]
id = "long-prompt"
match = { prompt_tokens_over = 500 }
action = "remote:big"
fallback = ["local"]

[[rules]]
id = "busy"
when = { waiting_per_replica_over = 4 }
action = "remote:big"
fallback = ["local"]

[[rules]]
id = "vip-header"
match = { headers = { "X-Route" = "reject" }, tenant = ["acme", "beta"] }
action = "reject:429"
)toml";

RuleSet rules() {
  auto r = parse_rules(kRules, "rules.toml");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

TEST(Rules, ParsesRemotesAndRulesInOrder) {
  RuleSet rs = rules();
  ASSERT_EQ(rs.rules.size(), 4u);
  EXPECT_EQ(rs.rules[0].id, "batch-local");
  EXPECT_EQ(rs.rules[1].action.to_string(), "remote:big");
  ASSERT_EQ(rs.rules[1].fallback.size(), 1u);
  EXPECT_EQ(rs.rules[1].fallback[0].kind, TargetKind::kLocal);
  const RemoteConfig& big = rs.remotes.at("big");
  EXPECT_EQ(big.host, "127.0.0.1");
  EXPECT_EQ(big.port, 9);
  EXPECT_EQ(big.base_path, "/v1");
  EXPECT_EQ(big.remote_model("small"), "large-70b");
  EXPECT_EQ(big.remote_model("other"), "other");
  EXPECT_EQ(big.cooldown.count(), 1500);
  EXPECT_EQ(rs.rules[3].match.headers.at("x-route"), "reject");  // names lower-cased
  EXPECT_EQ(rs.version.size(), 16u);
  EXPECT_NE(parse_rules(std::string(kRules) + "\n# edit\n", "r")->version, rs.version);
}

TEST(Rules, FirstMatchWinsWithReasonAndFallbackPlan) {
  RuleSet rs = rules();
  RouteInputs in;
  in.model = "small";
  in.healthy_local = 3;
  in.prompt_tokens = 812;
  in.tier = engine::Tier::kBatch;
  RouteDecision d = evaluate(rs, in);  // batch first, although the prompt is long too
  EXPECT_EQ(d.rule_id, "batch-local");
  ASSERT_EQ(d.plan.size(), 1u);
  EXPECT_EQ(d.plan[0].to_string(), "local");
  EXPECT_EQ(d.reason, "tier batch");

  in.tier = engine::Tier::kInteractive;
  d = evaluate(rs, in);
  EXPECT_EQ(d.rule_id, "long-prompt");
  EXPECT_EQ(d.reason, "prompt_tokens 812 > 500");
  ASSERT_EQ(d.plan.size(), 2u);
  EXPECT_EQ(d.plan[0].to_string(), "remote:big");
  EXPECT_EQ(d.plan[1].to_string(), "local");
  ASSERT_EQ(d.evaluated.size(), 2u);
  EXPECT_FALSE(d.evaluated[0]["matched"].get<bool>());
  EXPECT_EQ(d.evaluated[0]["why"], "not tier batch");

  in.prompt_tokens = 10;
  in.waiting_per_replica = 4;  // not > 4
  d = evaluate(rs, in);
  EXPECT_EQ(d.rule_id, "default");
  EXPECT_EQ(d.plan.at(0).to_string(), "local");
  in.waiting_per_replica = 4.5;
  d = evaluate(rs, in);
  EXPECT_EQ(d.rule_id, "busy");
  EXPECT_EQ(d.reason, "waiting_per_replica 4.5 > 4");
}

TEST(Rules, CoolingRemoteIsSkippedAndRecorded) {
  RuleSet rs = rules();
  RouteInputs in;
  in.prompt_tokens = 9999;
  in.remotes_cooling = {"big"};
  RouteDecision d = evaluate(rs, in);
  EXPECT_EQ(d.rule_id, "long-prompt");
  ASSERT_EQ(d.plan.size(), 1u);
  EXPECT_EQ(d.plan[0].to_string(), "local");
  ASSERT_EQ(d.skipped.size(), 1u);
  EXPECT_EQ(d.skipped[0], "remote:big (cooling down)");
}

TEST(Rules, RemoteWithoutBudgetLeftIsSkipped) {
  auto rs = parse_rules("[remotes.big]\nbase_url = \"http://h:1\"\nbudget_tokens_per_day = 1000\n"
                        "[[rules]]\nid = \"all\"\naction = \"remote:big\"\nfallback = [\"local\"]\n", "r.toml");
  ASSERT_TRUE(rs.ok()) << rs.status().message();
  EXPECT_EQ(rs->remotes.at("big").budget_tokens_per_day, 1000);
  RouteInputs in;
  in.remote_budget_left["big"] = 1;
  EXPECT_EQ(evaluate(*rs, in).plan.at(0).to_string(), "remote:big");
  in.remote_budget_left["big"] = 0;
  RouteDecision d = evaluate(*rs, in);
  ASSERT_EQ(d.plan.size(), 1u);
  EXPECT_EQ(d.plan[0].to_string(), "local");
  EXPECT_EQ(d.skipped.at(0), "remote:big (budget exhausted)");
  EXPECT_FALSE(parse_rules("[remotes.big]\nbase_url = \"http://h:1\"\nbudget_tokens_per_day = 0\n", "r.toml").ok());
}

TEST(Rules, HeaderAndTenantConditionsAllMustHold) {
  RuleSet rs = rules();
  RouteInputs in;
  in.headers["x-route"] = "reject";
  in.tenant = "other";
  EXPECT_EQ(evaluate(rs, in).rule_id, "default");
  in.tenant = "beta";
  RouteDecision d = evaluate(rs, in);
  EXPECT_EQ(d.rule_id, "vip-header");
  EXPECT_EQ(d.plan.at(0).kind, TargetKind::kReject);
  EXPECT_EQ(d.plan.at(0).reject_status, 429);
}

TEST(Rules, InputsRoundTripThroughJsonSoExplainReproducesADecision) {
  RuleSet rs = rules();
  RouteInputs in;
  in.model = "small";
  in.prompt_tokens = 30;
  in.waiting_per_replica = 7;
  in.healthy_local = 2;
  in.remotes_cooling = {"big"};
  in.remote_budget_left["big"] = 0;
  auto back = RouteInputs::from_json(nlohmann::json::parse(in.to_json().dump()));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(evaluate(rs, *back).to_json(), evaluate(rs, in).to_json());
  EXPECT_FALSE(RouteInputs::from_json(nlohmann::json{{"tier", "gold"}}).ok());
  EXPECT_FALSE(RouteInputs::from_json(nlohmann::json{{"prompt_tokens", "many"}}).ok());
}

TEST(Rules, RequestFactsFromAnOpenAIBody) {
  auto body = nlohmann::json::parse(R"({"model":"m","max_tokens":64,"tier":"batch",
      "tools":[{"type":"function","function":{"name":"f"}}],"response_format":{"type":"json_object"},
      "messages":[{"role":"user","content":"hello there, this is forty chars long.."}]})");
  RouteInputs in;
  std::string text = routing_prompt_text(body, true);
  fill_request_facts(body, text, &in);
  EXPECT_EQ(in.model, "m");
  EXPECT_EQ(in.max_tokens, 64);
  EXPECT_TRUE(in.tools);
  EXPECT_TRUE(in.json_mode);
  EXPECT_EQ(in.tier, engine::Tier::kBatch);
  EXPECT_EQ(in.prompt_tokens, static_cast<int64_t>(text.size() / 4));
  EXPECT_GT(in.prompt_tokens, 9);
}

TEST(Rules, BadFilesAreRefusedWithFileAndLine) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto r = parse_rules(text, "r.toml");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("r.toml:", 0), 0u) << r.status().message();
  };
  expect_error("[[rules]]\nid = \"a\"\naction = \"remote:nope\"\n", "no [remotes.nope] defines");
  expect_error("[[rules]]\nid = \"a\"\naction = \"sideways\"\n", "must be local, remote:<name> or reject");
  expect_error("[[rules]]\nid = \"a\"\naction = \"local\"\n[[rules]]\nid = \"a\"\naction = \"local\"\n", "duplicate rule id");
  expect_error("[[rules]]\nid = \"a\"\naction = \"local\"\nmatch = { colour = \"red\" }\n", "unknown key 'colour'");
  expect_error("[[rules]]\nid = \"a\"\naction = \"reject:200\"\n", "reject:<400..599>");
  expect_error("[remotes.x]\nbase_url = \"ftp://api.example.com/v1\"\n", "must start with http:// or https://");
  expect_error("[remotes.x]\nbase_url = \"http://h:1/v1\"\nca_file = \"/x.pem\"\n", "only for https://");
  expect_error("[remotes.x]\nbase_url = \"https://h/v1\"\nca_file = \"/nonexistent/ca.pem\"\n", "cannot read /nonexistent/ca.pem");
  expect_error("[remotes.x]\nbase_url = \"http://h:1/v1\"\napi_key_env = \"TS_RULES_TEST_UNSET\"\n", "TS_RULES_TEST_UNSET is not set");
  expect_error("[[rules]]\nid = \"a\"\n", "action is required");
  expect_error("[[rules]]\nid = \"has space\"\naction = \"local\"\n", "without spaces");
  expect_error("rules = [", "");
}

TEST(Rules, ApiKeyComesFromTheEnvironment) {
  ::setenv("TS_RULES_TEST_KEY", "sk-remote-123", 1);
  auto r = parse_rules("[remotes.x]\nbase_url = \"http://h:81\"\napi_key_env = \"TS_RULES_TEST_KEY\"\n", "r.toml");
  ::unsetenv("TS_RULES_TEST_KEY");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->remotes.at("x").api_key, "sk-remote-123");
  EXPECT_EQ(r->remotes.at("x").port, 81);
  EXPECT_EQ(r->remotes.at("x").base_path, "");
}

TEST(Rules, HttpsRemoteWithItsCa) {
  const std::string ca = ::testing::TempDir() + "/rules_test_ca.pem";
  std::ofstream(ca) << "-----BEGIN CERTIFICATE-----\n";  // read at load; parsed by the TLS client
  auto r = parse_rules("[remotes.x]\nbase_url = \"https://api.example.com/v1/\"\nca_file = \"" + ca + "\"\n", "r.toml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const RemoteConfig& x = r->remotes.at("x");
  EXPECT_TRUE(x.url.tls);
  EXPECT_EQ(x.port, 443);
  EXPECT_EQ(x.host, "api.example.com");
  EXPECT_EQ(x.base_path, "/v1");
  EXPECT_EQ(x.ca_file, ca);
}

TEST(Cooldown, LocalTrackerTripsOnceAndExpires) {
  auto t = CooldownTracker::open("");
  ASSERT_TRUE(t.ok());
  CooldownTracker& c = **t;
  EXPECT_FALSE(c.shared());
  EXPECT_EQ(c.remaining("big").count(), 0);
  EXPECT_EQ(c.record_failure("big", std::chrono::seconds(60)), 1);
  EXPECT_EQ(c.record_failure("big", std::chrono::seconds(60)), 2);
  c.record_success("big");
  EXPECT_EQ(c.record_failure("big", std::chrono::seconds(60)), 1);
  EXPECT_TRUE(c.trip("big", std::chrono::milliseconds(150)));
  EXPECT_FALSE(c.trip("big", std::chrono::milliseconds(10'000)));  // running: not extended
  auto left = c.remaining("big");
  EXPECT_GT(left.count(), 0);
  EXPECT_LE(left.count(), 150);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(c.remaining("big").count(), 0);
  EXPECT_FALSE(CooldownTracker::open("redis://").ok());
  EXPECT_FALSE(CooldownTracker::open("http://x").ok());
}

// Two trackers on one real Redis (scripts/start_test_services.sh) see each other's cooldowns.
TEST(Cooldown, SharedThroughRedisWithTtlSetOnceAtCreation) {
  const char* url = std::getenv("TOKENSERVE_TEST_REDIS");
  if (!url || !*url) GTEST_SKIP() << "TOKENSERVE_TEST_REDIS not set; run eval \"$(scripts/start_test_services.sh)\"";
  std::string prefix = "ts-cd-test-" + std::to_string(::getpid()) + "-" +
                       std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ":";
  auto a = CooldownTracker::open(url, prefix);
  auto b = CooldownTracker::open(url, prefix);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->shared());
  EXPECT_EQ((*a)->record_failure("big", std::chrono::seconds(60)), 1);
  EXPECT_EQ((*b)->record_failure("big", std::chrono::seconds(60)), 2);  // one shared count
  EXPECT_EQ((*b)->remaining("big").count(), 0);
  EXPECT_TRUE((*a)->trip("big", std::chrono::milliseconds(800)));
  EXPECT_GT((*b)->remaining("big").count(), 0);
  EXPECT_FALSE((*b)->trip("big", std::chrono::seconds(60)));  // SET NX: the first TTL stands
  EXPECT_LE((*b)->remaining("big").count(), 800);
  EXPECT_EQ((*a)->record_failure("big", std::chrono::seconds(60)), 1);  // counter reset by the trip
  (*a)->add_usage("big", 20000, 700);
  (*b)->add_usage("big", 20000, 50);
  EXPECT_EQ((*a)->usage("big", 20000), 750);  // one budget for both
  EXPECT_EQ((*b)->usage("big", 20001), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  EXPECT_EQ((*a)->remaining("big").count(), 0);
  EXPECT_EQ((*b)->remaining("big").count(), 0);
  EXPECT_EQ((*a)->num_store_errors(), 0);
  // Redis away: the tracker falls back to its own view and counts the error.
  auto down = CooldownTracker::open("redis://127.0.0.1:1", prefix);
  ASSERT_TRUE(down.ok());
  EXPECT_TRUE((*down)->trip("big", std::chrono::seconds(5)));
  EXPECT_GT((*down)->remaining("big").count(), 0);
  EXPECT_GT((*down)->num_store_errors(), 0);
}

}  // namespace
}  // namespace ts::router
