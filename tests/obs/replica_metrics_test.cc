#include "obs/replica_metrics.h"

#include <gtest/gtest.h>

namespace ts::obs {
namespace {

TEST(ReplicaMetrics, CacheConfigInfo) {
  std::string t = cache_config_info_text(16, 1234);
  EXPECT_NE(t.find("# TYPE tokenserve:cache_config_info gauge\n"), std::string::npos);
  EXPECT_NE(t.find("tokenserve:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1234\"} 1\n"), std::string::npos);
}

TEST(ReplicaMetrics, VllmTwinDuplicatesOnlyOurFamilies) {
  std::string in =
      "# HELP tokenserve:num_requests_waiting Requests waiting.\n"
      "# TYPE tokenserve:num_requests_waiting gauge\n"
      "tokenserve:num_requests_waiting{model=\"m\",tier=\"batch\"} 3\n"
      "# TYPE tokenserve_http_requests_total counter\n"
      "tokenserve_http_requests_total 9";
  std::string out = with_vllm_twin(in);
  EXPECT_TRUE(out.starts_with(in + "\n"));
  EXPECT_NE(out.find("# HELP vllm:num_requests_waiting Requests waiting.\n"), std::string::npos);
  EXPECT_NE(out.find("# TYPE vllm:num_requests_waiting gauge\n"), std::string::npos);
  EXPECT_NE(out.find("vllm:num_requests_waiting{model=\"m\",tier=\"batch\"} 3\n"), std::string::npos);
  EXPECT_EQ(out.find("vllm:http_requests_total"), std::string::npos);
  EXPECT_EQ(out.find("vllm_"), std::string::npos);
}

}  // namespace
}  // namespace ts::obs
