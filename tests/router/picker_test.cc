#include "router/picker.h"

#include <map>

#include <gtest/gtest.h>

namespace ts::router {
namespace {

using namespace std::chrono_literals;

std::vector<EndpointState> pool(int n, Clock::time_point now) {
  std::vector<EndpointState> v;
  for (int i = 0; i < n; ++i)
    v.push_back(EndpointState{.name = "r" + std::to_string(i + 1), .has_metrics = true, .scraped_at = now});
  return v;
}

std::string long_prefix(char c) { return std::string(640, c); }  // 10 blocks of 64 bytes

TEST(PrefixIndex, ChainedHashesAreNamespacedByModelAndTenant) {
  auto a = prefix_block_hashes("m", "t1", long_prefix('x'), 64);
  auto b = prefix_block_hashes("m", "t2", long_prefix('x'), 64);
  auto c = prefix_block_hashes("m2", "t1", long_prefix('x'), 64);
  ASSERT_EQ(a.size(), 10u);
  EXPECT_NE(a[0], b[0]);
  EXPECT_NE(a[0], c[0]);
  // Chained: equal block text at different positions hashes differently.
  EXPECT_NE(a[0], a[1]);
  // Only whole blocks.
  EXPECT_EQ(prefix_block_hashes("m", "t", std::string(63, 'a'), 64).size(), 0u);
  // A shared prefix gives equal leading hashes, then they diverge.
  auto d = prefix_block_hashes("m", "t1", long_prefix('x') + std::string(64, 'y'), 64);
  ASSERT_EQ(d.size(), 11u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(a[i], d[i]);
}

TEST(PrefixIndex, MatchCountsLeadingBlocksAndEvictsLru) {
  PrefixIndex idx({.block_chars = 4, .capacity_blocks = 3});
  auto h = prefix_block_hashes("m", "t", "aaaabbbbcccc", 4);
  idx.record("r1", h);
  EXPECT_EQ(idx.match("r1", h), 3u);
  EXPECT_EQ(idx.match("r2", h), 0u);
  auto other = prefix_block_hashes("m", "t", "zzzz", 4);
  idx.record("r1", other);  // evicts the least recent block
  EXPECT_EQ(idx.num_blocks("r1"), 3u);
  EXPECT_LT(idx.match("r1", h), 3u);
}

TEST(Picker, PrefixAffinitySendsRepeatsToTheSameEndpoint) {
  auto now = Clock::now();
  Picker p({.seed = 7});
  auto eps = pool(3, now);
  std::map<std::string, std::string> first;  // prefix -> endpoint
  for (int round = 0; round < 5; ++round) {
    for (char c : {'a', 'b', 'c', 'd'}) {
      PickRequest req{.model = "m", .tenant = "t", .prompt = long_prefix(c) + "suffix" + std::to_string(round)};
      Decision d = p.pick(req, eps, now);
      ASSERT_FALSE(d.ranked.empty());
      const std::string& chosen = d.ranked[0].name;
      p.record(chosen, d);
      if (round == 0) {
        first[std::string(1, c)] = chosen;
      } else {
        EXPECT_EQ(chosen, first[std::string(1, c)]) << "prefix " << c << " round " << round;
        EXPECT_DOUBLE_EQ(d.ranked[0].prefix, 1.0);
      }
    }
  }
  // The same prompt from another tenant has no affinity (separate cache namespace).
  Decision other = p.pick({.model = "m", .tenant = "t2", .prompt = long_prefix('a')}, eps, now);
  for (const Candidate& c : other.ranked) EXPECT_EQ(c.prefix_blocks, 0);
}

TEST(Picker, TiesAreBrokenRandomly) {
  auto now = Clock::now();
  Picker p({.seed = 11});
  auto eps = pool(3, now);
  std::map<std::string, int> hits;
  for (int i = 0; i < 300; ++i) hits[p.pick({.model = "m", .prompt = "short"}, eps, now).ranked[0].name]++;
  ASSERT_EQ(hits.size(), 3u);
  for (auto& [n, k] : hits) EXPECT_GT(k, 60) << n;
}

TEST(Picker, QueueAndKvScorersPreferTheIdleEndpoint) {
  auto now = Clock::now();
  Picker p({.seed = 3});
  auto eps = pool(3, now);
  eps[0].waiting = 8;
  eps[1].kv_usage = 0.9;
  Decision d = p.pick({.model = "m", .prompt = "x"}, eps, now);
  EXPECT_EQ(d.ranked[0].name, "r3");
  EXPECT_EQ(d.ranked[2].name, "r1");
  EXPECT_DOUBLE_EQ(d.ranked[2].queue, 0.0);
  // The gateway's own in-flight count counts as waiting before a scrape shows it.
  eps = pool(2, now);
  eps[0].in_flight = 5;
  EXPECT_EQ(p.pick({.model = "m", .prompt = "x"}, eps, now).ranked[0].name, "r2");
}

TEST(Picker, ImbalanceGuardOverridesPrefixAndCanBeTurnedOff) {
  auto now = Clock::now();
  for (bool guard : {true, false}) {
    Picker p({.imbalance_guard = guard, .seed = 5});
    auto eps = pool(2, now);
    PickRequest hot{.model = "m", .tenant = "t", .prompt = long_prefix('h')};
    Decision d0 = p.pick(hot, eps, now);
    p.record("r1", d0);  // r1 holds the hot prefix
    eps[0].running = 2;
    eps[0].waiting = 10;  // load 12 vs 0: > abs 8 and > 1.5x
    Decision d = p.pick(hot, eps, now);
    EXPECT_EQ(d.guard_applied, guard);
    EXPECT_EQ(d.ranked[0].name, guard ? "r2" : "r1") << "guard " << guard;
  }
  // Below the absolute threshold the guard stays off.
  Picker p({.seed = 5});
  auto eps = pool(2, now);
  eps[0].waiting = 8;  // max - min = 8, not > 8
  EXPECT_FALSE(p.pick({.model = "m", .prompt = "x"}, eps, now).guard_applied);
}

TEST(Picker, FiltersAndStaleMetrics) {
  auto now = Clock::now();
  Picker p({.seed = 1});
  auto eps = pool(5, now);
  eps[0].ready = false;
  eps[1].ejected = true;
  eps[2].labels["model"] = "other";
  eps[3].scraped_at = now - 1s;  // stale
  Decision d = p.pick({.model = "m", .prompt = "x"}, eps, now);
  ASSERT_EQ(d.ranked.size(), 2u);
  EXPECT_EQ(d.ranked[0].name, "r5");
  EXPECT_EQ(d.ranked[1].name, "r4");
  EXPECT_TRUE(d.ranked[1].stale);
  EXPECT_EQ(d.ranked[1].score, 0.0);
  EXPECT_EQ(d.filtered_out.size(), 3u);
  // Stale ones still serve when nothing fresh is left; nothing eligible -> empty.
  eps[4].has_metrics = false;
  EXPECT_EQ(p.pick({.model = "m", .prompt = "x"}, eps, now).ranked.size(), 2u);
  for (auto& e : eps) e.ready = false;
  EXPECT_TRUE(p.pick({.model = "m", .prompt = "x"}, eps, now).ranked.empty());
  // The record names every endpoint's scores.
  nlohmann::json j = d.to_json();
  EXPECT_EQ(j["ranked"].size(), 2u);
  EXPECT_EQ(j["ranked"][0]["name"], "r5");
  EXPECT_TRUE(j["ranked"][1]["stale"].get<bool>());
}

TEST(RenderChatPrompt, LaterTurnsExtendEarlierOnes) {
  auto t1 = nlohmann::json::parse(R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])");
  auto t2 = nlohmann::json::parse(
      R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"},
          {"role":"assistant","content":[{"type":"text","text":"hello"}]},{"role":"user","content":"more"}])");
  std::string a = render_chat_prompt(t1), b = render_chat_prompt(t2);
  EXPECT_EQ(a, "<|system|>\nbe brief\n<|user|>\nhi\n");
  EXPECT_TRUE(b.starts_with(a));
  EXPECT_NE(b.find("hello"), std::string::npos);
  EXPECT_EQ(render_chat_prompt(nlohmann::json("x")), "");
}

TEST(Picker, BatchIsShedOnlyWhenEveryFreshEndpointIsSaturated) {
  auto now = Clock::now();
  Picker p({.seed = 3, .shed_batch_waiting = 4});
  auto eps = pool(2, now);
  eps[0].waiting = 5;
  eps[1].waiting = 3;  // one endpoint still has room: nothing is shed
  PickRequest batch{.model = "m", .tenant = "t", .prompt = "x", .batch = true};
  PickRequest interactive{.model = "m", .tenant = "t", .prompt = "x"};
  Decision d = p.pick(batch, eps, now);
  EXPECT_FALSE(d.shed);
  ASSERT_EQ(d.ranked.size(), 2u);
  EXPECT_EQ(d.ranked[0].name, "r2");

  eps[1].in_flight = 4;  // the gateway's own view: 4 outstanding, none running yet -> waiting 4
  d = p.pick(batch, eps, now);
  EXPECT_TRUE(d.shed);
  EXPECT_TRUE(d.ranked.empty());
  EXPECT_NE(d.to_json().dump().find("batch shed"), std::string::npos);
  d = p.pick(interactive, eps, now);  // interactive is never shed
  EXPECT_FALSE(d.shed);
  EXPECT_EQ(d.ranked.size(), 2u);

  // Stale metrics say nothing about saturation: not shed.
  auto later = now + 10s;
  d = p.pick(batch, eps, later);
  EXPECT_FALSE(d.shed);
  // Off by default.
  Picker off({.seed = 3});
  EXPECT_FALSE(off.pick(batch, eps, now).shed);
}

}  // namespace
}  // namespace ts::router
