#include "obs/server_metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include "obs/prom_parse.h"

namespace ts::obs {
namespace {

using namespace std::chrono_literals;
using engine::FinishReason;
using engine::Tier;
using testing::parse_prometheus;

// A wall clock the test moves by hand; starts on a bucket boundary.
struct FakeWall {
  std::atomic<int64_t> ms{1'700'000'000'000};
  WallTime now() const { return WallTime(std::chrono::milliseconds(ms.load())); }
  void advance(std::chrono::milliseconds d) { ms += d.count(); }
};

ServerMetricsOptions options_with(FakeWall* wall) {
  ServerMetricsOptions o;
  o.model = "stories";
  o.wall_clock = [wall] { return wall->now(); };
  return o;
}

// Request i of the known workload: tier batch when i % 4 == 0, TTFT (i+1)*10 ms, queue 2 ms,
// 20 ms between tokens, prompt 10+i, completion 5+i, cached i%5.
RequestObservation make_request(int i) {
  RequestObservation o;
  o.model = "stories";
  o.tier = i % 4 == 0 ? Tier::kBatch : Tier::kInteractive;
  o.tenant = "t" + std::to_string(i % 3);
  o.app = "app" + std::to_string(i % 2);
  o.prompt_tokens = 10 + i;
  o.completion_tokens = 5 + i;
  o.cached_tokens = i % 5;
  o.arrival = engine::TimePoint(std::chrono::seconds(1000 + i));
  o.scheduled = o.arrival + 2ms;
  o.first_token = o.arrival + std::chrono::milliseconds((i + 1) * 10);
  o.finished = o.first_token + std::chrono::milliseconds(20 * (o.completion_tokens - 1));
  o.inter_token_gaps.assign(static_cast<size_t>(o.completion_tokens - 1), 0.020s);
  o.finish_reason = i % 2 ? FinishReason::kLength : FinishReason::kStop;
  return o;
}

constexpr int kN = 20;

class KnownWorkload : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kN; ++i) {
      auto r = make_request(i);
      prompt_sum_ += r.prompt_tokens;
      completion_sum_ += r.completion_tokens;
      cached_sum_ += r.cached_tokens;
      itl_count_ += r.completion_tokens - 1;
      ttft_sum_ += (i + 1) * 0.010;
      (r.tier == Tier::kBatch ? batch_ : interactive_)++;
      metrics_.on_request_finished(r);
      if (i == 9) wall_.advance(6s);  // spread over two buckets
    }
  }
  FakeWall wall_;
  ServerMetrics metrics_{options_with(&wall_)};
  int64_t prompt_sum_ = 0, completion_sum_ = 0, cached_sum_ = 0, itl_count_ = 0;
  int interactive_ = 0, batch_ = 0;
  double ttft_sum_ = 0;
};

TEST_F(KnownWorkload, CountersAndHistogramsMatchTheWorkload) {
  auto e = parse_prometheus(metrics_.prometheus_text());
  ASSERT_EQ(e.error, "");
  const std::string p = "tokenserve:";
  EXPECT_EQ(e.sum(p + "request_success_total"), kN);
  EXPECT_EQ(e.sum(p + "request_success_total", {{"finished_reason", "stop"}}), kN / 2);
  EXPECT_EQ(e.sum(p + "request_success_total", {{"finished_reason", "length"}}), kN / 2);
  EXPECT_EQ(e.sum(p + "prompt_tokens_total"), prompt_sum_);
  EXPECT_EQ(e.sum(p + "generation_tokens_total"), completion_sum_);
  EXPECT_EQ(e.sum(p + "cached_prompt_tokens_total"), cached_sum_);
  // Tenant label: t0 has i = 0, 3, 6, ..., 18.
  int64_t t0_prompt = 0;
  for (int i = 0; i < kN; i += 3) t0_prompt += 10 + i;
  EXPECT_EQ(e.sum(p + "prompt_tokens_total", {{"tenant", "t0"}}), t0_prompt);

  for (const char* h : {"time_to_first_token_seconds", "e2e_request_latency_seconds",
                        "request_queue_time_seconds", "request_prefill_time_seconds",
                        "request_decode_time_seconds", "request_prompt_tokens",
                        "request_generation_tokens", "time_per_output_token_seconds"}) {
    EXPECT_EQ(e.sum(p + h + "_count"), kN) << h;
    EXPECT_EQ(e.sum(p + h + "_bucket", {{"le", "+Inf"}}), kN) << h;
    EXPECT_EQ(e.types[p + h], "histogram") << h;
  }
  EXPECT_EQ(e.sum(p + "time_to_first_token_seconds_count", {{"tier", "interactive"}}), interactive_);
  EXPECT_EQ(e.sum(p + "time_to_first_token_seconds_count", {{"tier", "batch"}}), batch_);
  EXPECT_NEAR(e.sum(p + "time_to_first_token_seconds_sum"), ttft_sum_, 1e-9);
  EXPECT_NEAR(e.sum(p + "request_queue_time_seconds_sum"), kN * 0.002, 1e-9);
  EXPECT_EQ(e.sum(p + "request_prompt_tokens_sum"), prompt_sum_);
  EXPECT_EQ(e.sum(p + "request_generation_tokens_sum"), completion_sum_);
  // One inter-token observation per gap, each 20 ms.
  EXPECT_EQ(e.sum(p + "inter_token_latency_seconds_count"), itl_count_);
  EXPECT_NEAR(e.sum(p + "inter_token_latency_seconds_sum"), itl_count_ * 0.020, 1e-9);
  EXPECT_EQ(e.sum(p + "inter_token_latency_seconds_bucket", {{"le", "0.015"}}), 0);
  EXPECT_EQ(e.sum(p + "inter_token_latency_seconds_bucket", {{"le", "0.025"}}), itl_count_);
  // TTFT buckets are cumulative.
  EXPECT_EQ(e.sum(p + "time_to_first_token_seconds_bucket", {{"le", "0.04"}}), 4);  // 10,20,30,40 ms
  EXPECT_EQ(e.sum(p + "time_to_first_token_seconds_bucket", {{"le", "0.1"}}), 10);
  EXPECT_EQ(e.sum(p + "request_errors_total"), 0);
}

TEST_F(KnownWorkload, DashboardPercentilesAndTotals) {
  wall_.advance(1s);
  nlohmann::json d = metrics_.dashboard_json();
  // Interactive TTFTs: (i+1)*10 ms for i % 4 != 0 -> 20,30,40,60,...,200 (15 values).
  EXPECT_DOUBLE_EQ(d["current"]["ttft_p50_ms"]["interactive"].get<double>(), 110.0);
  EXPECT_NEAR(d["current"]["ttft_p95_ms"]["interactive"].get<double>(), 193.0, 1e-9);
  // Batch: 10, 50, 90, 130, 170.
  EXPECT_DOUBLE_EQ(d["current"]["ttft_p50_ms"]["batch"].get<double>(), 90.0);
  EXPECT_NEAR(d["current"]["ttft_p95_ms"]["batch"].get<double>(), 162.0, 1e-9);
  EXPECT_NEAR(d["current"]["tpot_p50_ms"]["interactive"].get<double>(), 20.0, 1e-9);
  EXPECT_EQ(d["current"]["requests"]["interactive"].get<int>(), interactive_);

  EXPECT_EQ(d["totals"]["requests"].get<int64_t>(), kN);
  EXPECT_EQ(d["totals"]["prompt_tokens"].get<int64_t>(), prompt_sum_);
  EXPECT_EQ(d["totals"]["generation_tokens"].get<int64_t>(), completion_sum_);
  EXPECT_EQ(d["totals"]["errors"].get<int64_t>(), 0);
  // 7 s since start: the rate divides by the time covered, not the whole window.
  EXPECT_NEAR(d["current"]["output_tokens_per_s"].get<double>(), completion_sum_ / 7.0, 1e-9);

  // Two buckets: the first 10 requests at t=0, the rest 6 s later.
  const auto& s = d["series"];
  ASSERT_EQ(s["t"].size(), 2u);
  EXPECT_EQ(s["t"][1].get<int64_t>() - s["t"][0].get<int64_t>(), 5000);
  EXPECT_EQ(s["requests"][0].get<int>(), 10);
  EXPECT_EQ(s["requests"][1].get<int>(), 10);
  int64_t first_out = 0;
  for (int i = 0; i < 10; ++i) first_out += 5 + i;
  EXPECT_DOUBLE_EQ(s["output_tokens_per_s"][0].get<double>(), first_out / 5.0);
  // Batch requests of the first bucket: i = 0, 4, 8 -> TTFT 10, 50, 90 ms.
  EXPECT_DOUBLE_EQ(s["ttft_p50_ms"]["batch"][0].get<double>(), 50.0);
  EXPECT_TRUE(s["running"]["interactive"][0].is_null());  // no engine sample yet

  // Usage by tenant and app adds up to the token totals.
  int64_t prompt = 0, completion = 0, requests = 0;
  std::map<std::string, int64_t> by_tenant;
  for (const auto& u : d["usage"]) {
    prompt += u["prompt_tokens"].get<int64_t>();
    completion += u["completion_tokens"].get<int64_t>();
    requests += u["requests"].get<int64_t>();
    by_tenant[u["tenant"]] += u["total_tokens"].get<int64_t>();
  }
  EXPECT_EQ(d["usage"].size(), 6u);  // 3 tenants x 2 apps
  EXPECT_EQ(prompt, prompt_sum_);
  EXPECT_EQ(completion, completion_sum_);
  EXPECT_EQ(requests, kN);
  int64_t series_t0 = 0;
  for (const auto& v : s["tokens_by_tenant"]["t0"]) series_t0 += v.get<int64_t>();
  EXPECT_EQ(series_t0, by_tenant["t0"]);
  // Largest user first.
  EXPECT_GE(d["usage"][0]["total_tokens"].get<int64_t>(), d["usage"][1]["total_tokens"].get<int64_t>());
}

TEST_F(KnownWorkload, OldBucketsLeaveTheWindowButCountersStay) {
  wall_.advance(2h);
  nlohmann::json d = metrics_.dashboard_json();
  EXPECT_EQ(d["series"]["t"].size(), 720u);
  int64_t requests = 0;
  for (const auto& v : d["series"]["requests"]) requests += v.get<int64_t>();
  EXPECT_EQ(requests, 0);
  EXPECT_TRUE(d["usage"].empty());
  EXPECT_TRUE(d["current"]["ttft_p50_ms"]["interactive"].is_null());
  EXPECT_EQ(d["totals"]["requests"].get<int64_t>(), kN);  // Prometheus counters never reset
  // A request now lands in the newest bucket only.
  metrics_.on_request_finished(make_request(1));
  d = metrics_.dashboard_json();
  EXPECT_EQ(d["series"]["requests"].back().get<int64_t>(), 1);
  EXPECT_EQ(d["usage"].size(), 1u);
}

TEST(ServerMetrics, DashboardJsonShape) {
  FakeWall wall;
  ServerMetrics m(options_with(&wall));
  nlohmann::json d = m.dashboard_json();
  for (const char* k : {"model", "generated_at_ms", "tiers", "bucket_seconds", "window_seconds",
                        "series", "current", "totals", "usage"}) {
    EXPECT_TRUE(d.contains(k)) << k;
  }
  EXPECT_EQ(d["model"], "stories");
  EXPECT_EQ(d["generated_at_ms"].get<int64_t>(), wall.ms.load());
  EXPECT_EQ(d["tiers"], nlohmann::json({"interactive", "batch"}));
  EXPECT_EQ(d["bucket_seconds"].get<double>(), 5.0);
  EXPECT_EQ(d["window_seconds"].get<double>(), 3600.0);
  const auto& s = d["series"];
  for (const char* k : {"ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "running", "waiting"}) {
    ASSERT_TRUE(s[k].contains("interactive")) << k;
    ASSERT_TRUE(s[k].contains("batch")) << k;
    EXPECT_EQ(s[k]["batch"].size(), s["t"].size()) << k;
  }
  for (const char* k : {"output_tokens_per_s", "prompt_tokens_per_s", "requests", "kv_cache_usage",
                        "prefix_hit_rate", "errors", "rate_limited", "quota_rejected"}) {
    EXPECT_EQ(s[k].size(), s["t"].size()) << k;
  }
  EXPECT_TRUE(s["tokens_by_tenant"].is_object());
  EXPECT_TRUE(d["current"]["ttft_p50_ms"]["interactive"].is_null());  // no data: null, not 0
  EXPECT_TRUE(d["current"]["prefix_hit_rate"].is_null());
  EXPECT_EQ(d["current"]["running"]["total"].get<double>(), 0.0);
  EXPECT_TRUE(d["usage"].is_array());
  EXPECT_EQ(m.dashboard_json_text(), d.dump());

  // After an hour and more the series stays one window long.
  wall.advance(2h);
  d = m.dashboard_json();
  EXPECT_EQ(d["series"]["t"].size(), 720u);
}

TEST(ServerMetrics, EngineSampleSetsGaugesAndHitRate) {
  FakeWall wall;
  ServerMetrics m(options_with(&wall));
  engine::EngineStats s;
  s.num_running_tier[0] = 3;
  s.num_running_tier[1] = 1;
  s.num_running = 4;
  s.num_waiting[0] = 2;
  s.num_waiting[1] = 5;
  s.kv_blocks_total = 120;
  s.kv_blocks_used = 30;
  s.num_preemptions = 7;
  s.prefix_queries = 100;
  s.prefix_hits = 40;
  m.sample_engine(s);
  wall.advance(1s);
  s.prefix_queries = 300;
  s.prefix_hits = 140;
  m.sample_engine(s);
  m.set_ledger_spool_depth(12);

  auto e = parse_prometheus(m.prometheus_text());
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.sum("tokenserve:num_requests_running", {{"tier", "interactive"}}), 3);
  EXPECT_EQ(e.sum("tokenserve:num_requests_waiting", {{"tier", "batch"}}), 5);
  EXPECT_EQ(e.sum("tokenserve:num_requests_waiting", {{"model", "stories"}}), 7);
  EXPECT_DOUBLE_EQ(e.sum("tokenserve:kv_cache_usage_perc"), 0.25);
  EXPECT_EQ(e.sum("tokenserve:num_preemptions_total"), 7);
  EXPECT_EQ(e.sum("tokenserve:prefix_cache_queries_total"), 300);
  EXPECT_EQ(e.sum("tokenserve:prefix_cache_hits_total"), 140);
  EXPECT_EQ(e.sum("tokenserve:ledger_spool_depth"), 12);

  nlohmann::json d = m.dashboard_json();
  // The first sample is the baseline; the window saw 200 queries and 100 hits.
  EXPECT_DOUBLE_EQ(d["current"]["prefix_hit_rate"].get<double>(), 0.5);
  EXPECT_EQ(d["current"]["running"]["interactive"].get<double>(), 3);
  EXPECT_EQ(d["current"]["waiting"]["total"].get<double>(), 7);
  EXPECT_DOUBLE_EQ(d["current"]["kv_cache_usage"].get<double>(), 0.25);
  EXPECT_EQ(d["totals"]["prefix_cache_hits"].get<int64_t>(), 140);
  EXPECT_EQ(d["totals"]["ledger_spool_depth"].get<double>(), 12);
  EXPECT_EQ(d["series"]["waiting"]["batch"].back().get<int>(), 5);
  EXPECT_DOUBLE_EQ(d["series"]["kv_cache_usage"].back().get<double>(), 0.25);
}

TEST(ServerMetrics, ErrorsAndRefusals) {
  FakeWall wall;
  ServerMetrics m(options_with(&wall));
  m.on_rate_limited("t0");
  m.on_rate_limited("t0");
  m.on_quota_rejected("t1");
  m.on_error(400);
  m.on_error(9999);  // out of range: counted as 500, not a new label value
  auto failed = make_request(1);
  failed.http_status = 503;
  failed.finish_reason = FinishReason::kError;
  m.on_request_finished(failed);

  auto e = parse_prometheus(m.prometheus_text());
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.sum("tokenserve:rate_limited_total", {{"tenant", "t0"}}), 2);
  EXPECT_EQ(e.sum("tokenserve:quota_rejected_total"), 1);
  EXPECT_EQ(e.sum("tokenserve:request_errors_total", {{"code", "429"}}), 3);
  EXPECT_EQ(e.sum("tokenserve:request_errors_total", {{"code", "400"}}), 1);
  EXPECT_EQ(e.sum("tokenserve:request_errors_total", {{"code", "500"}}), 1);
  EXPECT_EQ(e.sum("tokenserve:request_errors_total", {{"code", "503"}}), 1);
  EXPECT_EQ(e.sum("tokenserve:request_success_total", {{"finished_reason", "error"}}), 1);

  nlohmann::json d = m.dashboard_json();
  EXPECT_EQ(d["totals"]["errors"].get<int64_t>(), 6);
  EXPECT_EQ(d["totals"]["rate_limited"].get<int64_t>(), 2);
  EXPECT_EQ(d["totals"]["quota_rejected"].get<int64_t>(), 1);
  EXPECT_EQ(d["current"]["errors"].get<int64_t>(), 6);
  EXPECT_EQ(d["current"]["rate_limited"].get<int64_t>(), 2);
  EXPECT_EQ(d["series"]["rate_limited"].back().get<int64_t>(), 2);
}

TEST(ServerMetrics, TenantLabelsAreBounded) {
  FakeWall wall;
  auto opts = options_with(&wall);
  opts.max_tenants = 2;
  ServerMetrics m(opts);
  for (int i = 0; i < 5; ++i) {
    auto r = make_request(i);
    r.tenant = "tenant" + std::to_string(i);
    m.on_request_finished(r);
  }
  auto anon = make_request(0);
  anon.tenant = "";
  m.on_request_finished(anon);
  auto e = parse_prometheus(m.prometheus_text());
  ASSERT_EQ(e.error, "");
  std::set<std::string> tenants;
  for (const auto& s : e.samples) {
    if (s.name == "tokenserve:generation_tokens_total") tenants.insert(s.labels.at("tenant"));
  }
  EXPECT_EQ(tenants, (std::set<std::string>{"tenant0", "tenant1", "other", "anonymous"}));
  EXPECT_EQ(e.sum("tokenserve:generation_tokens_total", {{"tenant", "other"}}), 7 + 8 + 9);
}

TEST(ServerMetrics, MeasuredGapsFeedTheInterTokenHistogram) {
  FakeWall wall;
  ServerMetrics m(options_with(&wall));
  auto r = make_request(0);  // 5 tokens
  r.inter_token_gaps = {0.001s, 0.003s, 0.2s, 0.004s};
  m.on_request_finished(r);
  auto e = parse_prometheus(m.prometheus_text());
  EXPECT_EQ(e.sum("tokenserve:inter_token_latency_seconds_count"), 4);
  EXPECT_EQ(e.sum("tokenserve:inter_token_latency_seconds_bucket", {{"le", "0.001"}}), 1);
  EXPECT_EQ(e.sum("tokenserve:inter_token_latency_seconds_bucket", {{"le", "0.005"}}), 3);
  EXPECT_NEAR(e.sum("tokenserve:inter_token_latency_seconds_sum"), 0.208, 1e-12);
}

TEST(ServerMetrics, WithoutMeasuredGapsNoInterTokenObservationIsMadeUp) {
  FakeWall wall;
  ServerMetrics m(options_with(&wall));
  auto r = make_request(3);  // 8 tokens over 140 ms
  r.inter_token_gaps.clear();
  m.on_request_finished(r);
  auto e = parse_prometheus(m.prometheus_text());
  EXPECT_EQ(e.sum("tokenserve:inter_token_latency_seconds_count"), 0);
  EXPECT_EQ(e.sum("tokenserve:time_per_output_token_seconds_count"), 1);
  EXPECT_NEAR(e.sum("tokenserve:time_per_output_token_seconds_sum"), 0.020, 1e-9);
}

TEST(ServerMetrics, UnsetTimingsAreNotObserved) {
  FakeWall wall;
  ServerMetrics m(options_with(&wall));
  RequestObservation r;  // cancelled before scheduling: no timings, no tokens
  r.model = "stories";
  r.prompt_tokens = 12;
  r.finish_reason = FinishReason::kCancelled;
  m.on_request_finished(r);
  auto e = parse_prometheus(m.prometheus_text());
  EXPECT_EQ(e.sum("tokenserve:time_to_first_token_seconds_count"), 0);
  EXPECT_EQ(e.sum("tokenserve:e2e_request_latency_seconds_count"), 0);
  EXPECT_EQ(e.sum("tokenserve:request_success_total", {{"finished_reason", "cancelled"}}), 1);
  EXPECT_EQ(e.sum("tokenserve:prompt_tokens_total"), 12);
}

TEST(ServerMetrics, FillFromEngineEvent) {
  engine::Event done;
  done.request_done = true;
  done.finish = FinishReason::kLength;
  done.usage = {.prompt_tokens = 7, .completion_tokens = 9, .cached_tokens = 4};
  done.timings.arrival = engine::TimePoint(1s);
  done.timings.first_token = engine::TimePoint(2s);
  done.timings.num_preemptions = 2;
  RequestObservation o;
  fill_from_engine(done, FinishReason::kStop, &o);
  EXPECT_EQ(o.prompt_tokens, 7);
  EXPECT_EQ(o.completion_tokens, 9);
  EXPECT_EQ(o.cached_tokens, 4);
  EXPECT_EQ(o.first_token, engine::TimePoint(2s));
  EXPECT_EQ(o.num_preemptions, 2);
  EXPECT_EQ(o.finish_reason, FinishReason::kLength);  // worse of stop and length
}

TEST(ServerMetrics, ConcurrentObserversAndScrapes) {
  FakeWall wall;
  ServerMetrics m(options_with(&wall));
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop) {
      ASSERT_EQ(parse_prometheus(m.prometheus_text()).error, "");
      (void)m.dashboard_json();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < 300; ++i) m.on_request_finished(make_request(i % kN));
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  scraper.join();
  EXPECT_EQ(m.dashboard_json()["totals"]["requests"].get<int64_t>(), 900);
}

}  // namespace
}  // namespace ts::obs
