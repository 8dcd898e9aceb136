#include "router/replica_scrape.h"

#include <gtest/gtest.h>

namespace ts::router {
namespace {

TEST(ReplicaScrape, SumsTierSeriesAndReadsKv) {
  auto r = parse_replica_metrics(
      "# TYPE tokenserve:num_requests_waiting gauge\n"
      "tokenserve:num_requests_waiting{model=\"m\",tier=\"interactive\"} 3\n"
      "tokenserve:num_requests_waiting{model=\"m\",tier=\"batch\"} 2\n"
      "tokenserve:num_requests_running{model=\"m\",tier=\"interactive\"} 4\n"
      "tokenserve:kv_cache_usage_perc{model=\"m}\"} 0.25\n"
      "tokenserve:prefix_cache_queries_total{model=\"m\"} 100\n"
      "tokenserve:prefix_cache_hits_total{model=\"m\"} 40\n"
      "vllm:num_requests_waiting{model=\"m\"} 99\n"
      "other_metric 5\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->waiting, 5);
  EXPECT_EQ(r->running, 4);
  EXPECT_DOUBLE_EQ(r->kv_usage, 0.25);
  EXPECT_EQ(r->prefix_queries, 100);
  EXPECT_EQ(r->prefix_hits, 40);
}

TEST(ReplicaScrape, FallsBackToVllmNamesAndRejectsOtherText) {
  auto r = parse_replica_metrics("vllm:num_requests_waiting{model_name=\"x\"} 7\nvllm:gpu_cache_usage_perc 0.5\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->waiting, 7);
  EXPECT_DOUBLE_EQ(r->kv_usage, 0.5);
  EXPECT_FALSE(parse_replica_metrics("<html>not metrics</html>").ok());
  EXPECT_FALSE(parse_replica_metrics("").ok());
}

}  // namespace
}  // namespace ts::router
