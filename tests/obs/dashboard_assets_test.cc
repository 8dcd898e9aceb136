#include "obs/dashboard_assets.h"

#include <gtest/gtest.h>

#include <string>

#include "obs/server_metrics.h"
#include "test_util.h"

namespace ts::obs {
namespace {

TEST(DashboardAssets, EmbeddedPageMatchesItsSource) {
  std::string src = ::ts::testing::read_file(std::string(TS_SOURCE_DIR) + "/web/dashboard/index.html");
  EXPECT_TRUE(dashboard_html() == src)
      << "the embedded page differs from web/dashboard/index.html: re-run cmake";
}

TEST(DashboardAssets, PageIsSelfContained) {
  std::string_view html = dashboard_html();
  EXPECT_EQ(html.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(html.find("</html>"), std::string_view::npos);
  // No external assets: everything is inlined.
  EXPECT_EQ(html.find("<script src"), std::string_view::npos);
  EXPECT_EQ(html.find("<link "), std::string_view::npos);
  EXPECT_EQ(html.find("http://"), std::string_view::npos);
  EXPECT_EQ(html.find("https://"), std::string_view::npos);
  EXPECT_NE(html.find("/dashboard/data"), std::string_view::npos);
}

TEST(DashboardAssets, PageReadsTheFieldsDashboardJsonProvides) {
  // Every payload path the page renders must exist in dashboard_json().
  nlohmann::json d = ServerMetrics(ServerMetricsOptions{.model = "m"}).dashboard_json();
  std::string_view html = dashboard_html();
  for (const char* key : {"ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "output_tokens_per_s",
                          "running", "waiting", "kv_cache_usage", "prefix_hit_rate", "errors",
                          "rate_limited", "quota_rejected"}) {
    EXPECT_NE(html.find(std::string("\"") + key + "\""), std::string_view::npos) << key;
    EXPECT_TRUE(d["current"].contains(key)) << key;
  }
  for (const char* key : {"requests", "prompt_tokens", "generation_tokens", "errors",
                          "rate_limited", "quota_rejected", "preemptions", "prefix_cache_hits",
                          "ledger_spool_depth"}) {
    EXPECT_NE(html.find(std::string("[\"totals\", \"") + key + "\"]"), std::string_view::npos) << key;
    EXPECT_TRUE(d["totals"].contains(key)) << key;
  }
  for (const char* key : {"prompt_tokens_per_s", "tokens_by_tenant", "kv_cache_usage", "t"}) {
    EXPECT_TRUE(d["series"].contains(key)) << key;
  }
}

}  // namespace
}  // namespace ts::obs
