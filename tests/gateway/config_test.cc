#include "gateway/config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

namespace ts::gateway {
namespace {

constexpr const char* kGood = R"toml(
log_level = "warn"

[keys]
default_rpm = 60
default_tpm = 100000

[tiers.batch]
rpm = 30
tpm = 500000
max_tokens = 4096
max_running = 12
max_queued = 300
priority = 0
latency_target_ms = 0
kv_share = 0.6

[tiers.interactive]
priority = 2
latency_target_ms = 750

[tenants.acme]
rpm = 600
tpm = 200000
quota = { tokens = 5000000, period = "day" }

[tenants.acme.apps.chatbot]
rpm = 100
quota = { tokens = 100000, period = "month" }

[tenants.beta]

[prices."llama-3-8b"]
input = 0.05
cached = 0.025
output = 0.20

[prices.tiny]
input = 1
output = 2
)toml";

TEST(Config, ParsesEverySection) {
  auto c = parse_config(kGood, "config.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->log_level, log::Level::kWarn);
  EXPECT_EQ(c->key_default_rpm, 60);
  EXPECT_EQ(c->key_default_tpm, 100000);
  const TierConfig& batch = c->tiers[size_t(engine::Tier::kBatch)];
  EXPECT_EQ(batch.rpm, 30);
  EXPECT_EQ(batch.tpm, 500000);
  EXPECT_EQ(batch.max_tokens, 4096);
  EXPECT_EQ(batch.max_running, 12);
  EXPECT_EQ(batch.max_queued, 300);
  EXPECT_EQ(batch.priority, 0);
  EXPECT_DOUBLE_EQ(batch.kv_share, 0.6);
  EXPECT_EQ(c->tiers[size_t(engine::Tier::kInteractive)].rpm, 0);
  EXPECT_EQ(c->tiers[size_t(engine::Tier::kInteractive)].priority, 2);
  EXPECT_EQ(c->tiers[size_t(engine::Tier::kInteractive)].latency_target_ms, 750);
  EXPECT_DOUBLE_EQ(c->tiers[size_t(engine::Tier::kInteractive)].kv_share, -1);  // unset: engine default
  auto bad = parse_config("[tiers.batch]\nkv_share = 1.5\n", "c.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "c.toml:2: tiers.batch.kv_share must be a number in (0, 1]");
  ASSERT_EQ(c->tenants.count("acme"), 1u);
  const TenantConfig& acme = c->tenants.at("acme");
  EXPECT_EQ(acme.rpm, 600);
  ASSERT_TRUE(acme.quota.has_value());
  EXPECT_EQ(acme.quota->tokens, 5000000);
  EXPECT_EQ(acme.quota->period, Period::kDay);
  const AppConfig& bot = acme.apps.at("chatbot");
  EXPECT_EQ(bot.rpm, 100);
  EXPECT_EQ(bot.quota->period, Period::kMonth);
  EXPECT_FALSE(c->tenants.at("beta").quota.has_value());
  const Price& p = c->prices.at("llama-3-8b");
  EXPECT_EQ(p.input, 50'000);   // 0.05 per million = 50'000 pico per token
  EXPECT_EQ(p.cached, 25'000);
  EXPECT_EQ(p.output, 200'000);
  EXPECT_EQ(c->prices.at("tiny").cached, c->prices.at("tiny").input);  // no discount given
}

struct BadCase {
  const char* toml;
  const char* error;  // expected message, "config.toml:LINE: ..."
};

TEST(Config, ErrorsNameTheFileAndLine) {
  const BadCase cases[] = {
      {"[tenants.acme]\nrpm = 5\nquota = { tokens = 10, period = \"week\" }\n",
       "config.toml:3: tenants.acme.quota.period must be day or month"},
      {"[tenants.acme]\n\n[tenants.acme.quota]\ntokens = 10\nperiod = \"year\"\n",
       "config.toml:5: tenants.acme.quota.period must be day or month"},
      {"log_level = \"loud\"\n", "config.toml:1: log_level must be debug, info, warn, error or off"},
      {"[tenants.acme]\nrpm = -1\n", "config.toml:2: tenants.acme.rpm must be a non-negative integer"},
      {"[tenants.acme]\nrmp = 5\n", "config.toml:2: unknown key 'rmp' in [tenants.acme]"},
      {"\n\n[tiers.realtime]\nrpm = 1\n",
       "config.toml:3: unknown tier 'realtime': expected interactive or batch"},
      {"[tenants.acme.apps.bot]\nquota = { period = \"day\" }\n",
       "config.toml:2: tenants.acme.apps.bot.quota.tokens is required"},
      {"[prices.m]\ninput = -0.5\n",
       "config.toml:2: prices.\"m\".input must be a number in [0, 1e6] (money per million tokens)"},
      {"[tenants.\"bad name\"]\n", "config.toml:1: tenant name 'bad name' must match [A-Za-z0-9._-]{1,64}"},
      {"[admin]\nkey_sha256 = \"xyz\"\n", "config.toml:2: admin.key_sha256 must be 64 lower-case hex digits"},
  };
  for (const BadCase& c : cases) {
    auto r = parse_config(c.toml, "config.toml");
    ASSERT_FALSE(r.ok()) << c.toml;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.error);
  }
}

// log_bodies: opt-in per tenant, overridable per app (either way); unknown tenants never log.
TEST(Config, LogBodiesIsPerTenantWithAppOverrides) {
  auto c = parse_config(
      "[tenants.acme]\nlog_bodies = true\n[tenants.acme.apps.quiet]\nlog_bodies = false\n"
      "[tenants.acme.apps.bot]\nrpm = 1\n[tenants.beta]\n[tenants.beta.apps.debug]\nlog_bodies = true\n",
      "config.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(log_bodies_for(*c, "acme", "bot"));
  EXPECT_TRUE(log_bodies_for(*c, "acme", "unlisted"));
  EXPECT_FALSE(log_bodies_for(*c, "acme", "quiet"));
  EXPECT_FALSE(log_bodies_for(*c, "beta", "other"));
  EXPECT_TRUE(log_bodies_for(*c, "beta", "debug"));
  EXPECT_FALSE(log_bodies_for(*c, "nobody", "x"));
  auto bad = parse_config("[tenants.acme]\nlog_bodies = \"yes\"\n", "config.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "config.toml:2: log_bodies must be true or false");
}

TEST(Config, SyntaxErrorsCarryTheLine) {
  auto r = parse_config("log_level = \"info\"\n\n[tenants.acme\nrpm = 1\n", "gov.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("gov.toml:3: ", 0), 0u) << r.status().message();
}

TEST(Config, MoneyIsExactAndPrintedWithoutRounding) {
  Price p{.input = 50'000, .cached = 25'000, .output = 200'000};
  // 1000 prompt (400 cached) + 500 completion = 600*0.05e-6 + 400*0.025e-6 + 500*0.2e-6
  EXPECT_EQ(cost_pico(p, 1000, 400, 500), 600 * 50'000 + 400 * 25'000 + 500 * 200'000);
  EXPECT_EQ(format_money(140'000'000), "0.00014");
  EXPECT_EQ(format_money(12'500'000'000'000), "12.50");
  EXPECT_EQ(format_money(1), "0.000000000001");
  EXPECT_EQ(format_money(0), "0.00");
}

TEST(ConfigHolder, ReloadSwapsAtomicallyAndKeepsTheOldConfigOnError) {
  std::string path = ::ts::testing::temp_dir() + "/gov.toml";
  std::ofstream(path) << "[tenants.acme]\nrpm = 5\n";
  auto first = load_config(path);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ConfigHolder holder(std::move(first).value());
  auto snapshot = holder.get();  // a request in flight keeps its snapshot
  std::ofstream(path) << "[tenants.acme]\nrpm = 7\n";
  ASSERT_TRUE(holder.reload().ok());
  EXPECT_EQ(holder.get()->tenants.at("acme").rpm, 7);
  EXPECT_EQ(snapshot->tenants.at("acme").rpm, 5);
  std::ofstream(path) << "[tenants.acme]\nrpm = \"lots\"\n";
  Status st = holder.reload();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message(), path + ":2: tenants.acme.rpm must be a non-negative integer");
  EXPECT_EQ(holder.get()->tenants.at("acme").rpm, 7);
  EXPECT_EQ(load_config(path + ".missing").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ts::gateway
