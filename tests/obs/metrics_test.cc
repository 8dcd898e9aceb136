#include "obs/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "obs/prom_parse.h"

namespace ts::obs {
namespace {

using testing::parse_prometheus;

TEST(Histogram, BucketsAreLessOrEqual) {
  const double bounds[] = {1.0, 2.0, 5.0};
  Histogram h(bounds);
  h.observe(0.5);
  h.observe(1.0);   // on the bound: belongs to le=1
  h.observe(1.5);
  h.observe(5.0);
  h.observe(7.0);   // +Inf
  h.observe(3.0, 4);  // weighted
  EXPECT_EQ(h.bucket_count(0), 2);
  EXPECT_EQ(h.bucket_count(1), 1);
  EXPECT_EQ(h.bucket_count(2), 5);
  EXPECT_EQ(h.bucket_count(3), 1);
  EXPECT_EQ(h.count(), 9);
  EXPECT_DOUBLE_EQ(h.sum(), 0.5 + 1.0 + 1.5 + 5.0 + 7.0 + 12.0);
}

TEST(Histogram, QuantileInterpolatesLikePrometheus) {
  const double bounds[] = {0.1, 0.2, 0.4, 0.8};
  Histogram h(bounds);
  EXPECT_TRUE(std::isnan(h.quantile(0.5)));
  for (int i = 0; i < 10; ++i) h.observe(0.05);  // bucket (0, 0.1]
  for (int i = 0; i < 10; ++i) h.observe(0.3);   // bucket (0.2, 0.4]
  // rank 10 of 20 is the end of the first bucket.
  EXPECT_DOUBLE_EQ(h.quantile(0.5), 0.1);
  // rank 15: halfway through (0.2, 0.4].
  EXPECT_NEAR(h.quantile(0.75), 0.3, 1e-12);
  h.observe(100.0);  // +Inf bucket reports the highest finite bound
  EXPECT_DOUBLE_EQ(h.quantile(1.0), 0.8);
}

TEST(Counter, AdvanceToNeverLowers) {
  Counter c;
  c.inc(3);
  c.advance_to(10);
  EXPECT_EQ(c.value(), 10);
  c.advance_to(4);
  EXPECT_EQ(c.value(), 10);
}

TEST(Registry, ExpositionFormat) {
  Registry r;
  auto& reqs = r.counter("tokenserve:requests_total", "Requests.\nSecond line", {"model", "code"});
  auto& g = r.gauge("tokenserve:depth", "Depth.");
  const double bounds[] = {0.5, 1.0};
  auto& h = r.histogram("tokenserve:lat_seconds", "Latency.", {bounds, bounds + 2}, {"tier"});
  reqs.with({"m\"1", "200"}).inc(2);
  reqs.with({"m\"1", "200"}).inc();
  g.with({}).set(2.5);
  h.with({"batch"}).observe(0.25);
  h.with({"batch"}).observe(0.75);
  h.with({"batch"}).observe(3.0);

  const std::string text = r.prometheus_text();
  EXPECT_NE(text.find("# HELP tokenserve:requests_total Requests.\\nSecond line\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE tokenserve:requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("tokenserve:requests_total{model=\"m\\\"1\",code=\"200\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("tokenserve:depth 2.5\n"), std::string::npos);
  EXPECT_NE(text.find("tokenserve:lat_seconds_bucket{tier=\"batch\",le=\"0.5\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tokenserve:lat_seconds_bucket{tier=\"batch\",le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("tokenserve:lat_seconds_bucket{tier=\"batch\",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("tokenserve:lat_seconds_sum{tier=\"batch\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("tokenserve:lat_seconds_count{tier=\"batch\"} 3\n"), std::string::npos);

  auto e = parse_prometheus(text);
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.types["tokenserve:requests_total"], "counter");
  EXPECT_EQ(e.types["tokenserve:depth"], "gauge");
  EXPECT_EQ(e.types["tokenserve:lat_seconds"], "histogram");
  EXPECT_EQ(e.sum("tokenserve:requests_total", {{"model", "m\"1"}}), 3);
  EXPECT_EQ(e.sum("tokenserve:lat_seconds_count"), 3);
  EXPECT_EQ(e.count("tokenserve:lat_seconds_bucket"), 3u);
}

TEST(Registry, UnlabelledFamiliesAlwaysExported) {
  Registry r;
  r.counter("a_total", "A.");
  const double bounds[] = {1.0};
  r.histogram("b_seconds", "B.", {bounds, bounds + 1});
  r.counter("c_total", "C.", {"x"});
  auto e = parse_prometheus(r.prometheus_text());
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.count("a_total"), 1u);
  EXPECT_EQ(e.count("b_seconds_count"), 1u);
  EXPECT_EQ(e.count("c_total"), 0u);  // labelled: no series until used
  EXPECT_EQ(e.types.count("c_total"), 1u);
  auto fams = r.families();
  ASSERT_EQ(fams.size(), 3u);
  EXPECT_EQ(fams[1].name, "b_seconds");
  EXPECT_EQ(fams[1].type, MetricType::kHistogram);
  EXPECT_EQ(fams[2].labels, std::vector<std::string>{"x"});
}

TEST(Registry, CardinalityIsBounded) {
  Registry r;
  auto& f = r.counter("t_total", "T.", {"tenant"}, /*max_series=*/3);
  for (int i = 0; i < 10; ++i) f.with({"tenant" + std::to_string(i)}).inc();
  auto e = parse_prometheus(r.prometheus_text());
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.count("t_total"), 4u);  // 3 own series + the overflow series
  EXPECT_EQ(e.sum("t_total", {{"tenant", std::string(kOverflowLabel)}}), 7);
  EXPECT_EQ(e.sum("t_total"), 10);
  EXPECT_EQ(&f.with({"tenant0"}), &f.with({"tenant0"}));  // stable series
}

TEST(Registry, ConcurrentUpdatesAreNotLost) {
  Registry r;
  auto& c = r.counter("c_total", "C.", {"k"});
  const double bounds[] = {0.5};
  auto& h = r.histogram("h", "H.", {bounds, bounds + 1}, {"k"});
  constexpr int kThreads = 4, kIters = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        c.with({i % 2 ? "a" : "b"}).inc();
        h.with({"x"}).observe(t % 2 ? 0.25 : 1.0);
      }
    });
  }
  std::string mid = r.prometheus_text();  // scraping while writers run is safe
  for (auto& th : threads) th.join();
  EXPECT_EQ(parse_prometheus(mid).error, "");
  EXPECT_EQ(c.with({"a"}).value() + c.with({"b"}).value(), kThreads * kIters);
  EXPECT_EQ(h.with({"x"}).count(), kThreads * kIters);
  EXPECT_DOUBLE_EQ(h.with({"x"}).sum(), kIters * 2 * 0.25 + kIters * 2 * 1.0);
}

TEST(Format, ValuesRoundTrip) {
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(60), "60");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace
}  // namespace ts::obs
