// Speculative-decoding metrics: the engine's cumulative spec counters mirrored to /metrics and
// the dashboard totals.
#include <gtest/gtest.h>

#include "obs/prom_parse.h"
#include "obs/server_metrics.h"

namespace ts::obs {
namespace {

TEST(SpecMetrics, EngineCountersReachPrometheusAndDashboard) {
  ServerMetrics m(ServerMetricsOptions{.model = "stories"});
  nlohmann::json d0 = m.dashboard_json();
  EXPECT_EQ(d0["totals"]["spec_acceptance_rate"].get<double>(), 0.0);
  engine::EngineStats s;
  s.spec_num_drafts = 10;
  s.spec_num_draft_tokens = 40;
  s.spec_num_accepted_tokens = 30;
  s.spec_accepted_by_pos[0] = 10;
  s.spec_accepted_by_pos[1] = 9;
  s.spec_accepted_by_pos[2] = 7;
  s.spec_accepted_by_pos[3] = 4;
  m.sample_engine(s);
  s.spec_num_draft_tokens = 50;  // cumulative: later samples advance the counters
  m.sample_engine(s);
  auto e = testing::parse_prometheus(m.prometheus_text());
  ASSERT_EQ(e.error, "");
  EXPECT_EQ(e.sum("tokenserve:spec_decode_num_drafts_total", {{"model", "stories"}}), 10);
  EXPECT_EQ(e.sum("tokenserve:spec_decode_num_draft_tokens_total"), 50);
  EXPECT_EQ(e.sum("tokenserve:spec_decode_num_accepted_tokens_total"), 30);
  EXPECT_EQ(e.sum("tokenserve:spec_decode_num_accepted_tokens_per_pos_total", {{"position", "0"}}), 10);
  EXPECT_EQ(e.sum("tokenserve:spec_decode_num_accepted_tokens_per_pos_total", {{"position", "3"}}), 4);
  EXPECT_EQ(e.sum("tokenserve:spec_decode_num_accepted_tokens_per_pos_total"), 30);
  nlohmann::json d = m.dashboard_json();
  EXPECT_EQ(d["totals"]["spec_draft_tokens"].get<int64_t>(), 50);
  EXPECT_EQ(d["totals"]["spec_accepted_tokens"].get<int64_t>(), 30);
  EXPECT_DOUBLE_EQ(d["totals"]["spec_acceptance_rate"].get<double>(), 0.6);
}

}  // namespace
}  // namespace ts::obs
