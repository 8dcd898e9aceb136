#include "obs/request_log.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <chrono>

namespace ts::obs {
namespace {

using namespace std::chrono_literals;

TEST(RequestId, ValidIdsAreEchoed) {
  EXPECT_EQ(resolve_request_id("abc-123"), "abc-123");
  EXPECT_EQ(resolve_request_id("0af7651916cd43dd8448eb211c80319c"), "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(resolve_request_id("trace:span/1+x=@y_z."), "trace:span/1+x=@y_z.");
  std::string max(kMaxRequestIdLength, 'a');
  EXPECT_EQ(resolve_request_id(max), max);
}

TEST(RequestId, InvalidIdsAreReplaced) {
  for (std::string bad : {std::string(), std::string(kMaxRequestIdLength + 1, 'a'),
                          std::string("has space"), std::string("new\nline"),
                          std::string("quote\""), std::string("caf\xc3\xa9")}) {
    std::string id = resolve_request_id(bad);
    EXPECT_NE(id, bad);
    EXPECT_TRUE(is_valid_request_id(id)) << id;
    EXPECT_EQ(id.rfind("req-", 0), 0u) << id;
    EXPECT_EQ(id.size(), 36u) << id;
  }
}

TEST(RequestId, GeneratedIdsAreUnique) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(generate_request_id());
  EXPECT_EQ(ids.size(), 1000u);
}

// Ids lead with the time in ms (hex), so a later id sorts after an earlier one (B-tree locality
// in the ledger), and the rest is random.
TEST(RequestId, GeneratedIdsLeadWithTheTime) {
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  const int64_t before = now_ms();
  std::string a = generate_request_id();
  const int64_t after = now_ms();
  ASSERT_EQ(a.size(), 36u);
  EXPECT_EQ(a.rfind("req-", 0), 0u);
  for (char c : a.substr(4)) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << a;
  const int64_t t = std::stoll(a.substr(4, 12), nullptr, 16);
  EXPECT_GE(t, before);
  EXPECT_LE(t, after);
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  std::string b = generate_request_id();
  EXPECT_LT(a, b);
  EXPECT_NE(a.substr(16), b.substr(16));  // the random part differs
}

TEST(RequestLog, OneObjectWithEveryField) {
  RequestObservation o;
  o.model = "stories";
  o.tier = engine::Tier::kBatch;
  o.tenant = "acme";
  o.app = "chat\"bot";
  o.prompt_tokens = 12;
  o.cached_tokens = 8;
  o.completion_tokens = 11;
  o.arrival = engine::TimePoint(10s);
  o.scheduled = o.arrival + 5ms;
  o.first_token = o.arrival + 40ms;
  o.finished = o.first_token + 200ms;
  o.finish_reason = engine::FinishReason::kLength;
  o.http_status = 200;
  o.num_preemptions = 1;

  nlohmann::json j = request_log_json("req-1", o);
  EXPECT_EQ(j["event"], "request");
  EXPECT_EQ(j["request_id"], "req-1");
  EXPECT_EQ(j["tenant"], "acme");
  EXPECT_EQ(j["app"], "chat\"bot");
  EXPECT_EQ(j["model"], "stories");
  EXPECT_EQ(j["tier"], "batch");
  EXPECT_EQ(j["prompt_tokens"], 12);
  EXPECT_EQ(j["cached_tokens"], 8);
  EXPECT_EQ(j["completion_tokens"], 11);
  EXPECT_EQ(j["total_tokens"], 23);
  EXPECT_DOUBLE_EQ(j["ttft_ms"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(j["queue_ms"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(j["duration_ms"].get<double>(), 240.0);
  EXPECT_DOUBLE_EQ(j["tpot_ms"].get<double>(), 20.0);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["preemptions"], 1);
  std::string ts = j["ts"];
  EXPECT_EQ(ts.size(), 24u);  // 2026-01-01T00:00:00.000Z
  EXPECT_EQ(ts.back(), 'Z');
  // One line: the serialized object has no raw newline.
  EXPECT_EQ(j.dump().find('\n'), std::string::npos);
}

TEST(RequestLog, MissingTimingsAreNull) {
  RequestObservation o;
  o.http_status = 499;
  o.finish_reason = engine::FinishReason::kCancelled;
  nlohmann::json j = request_log_json("x", o);
  EXPECT_TRUE(j["ttft_ms"].is_null());
  EXPECT_TRUE(j["duration_ms"].is_null());
  EXPECT_TRUE(j["tpot_ms"].is_null());
  EXPECT_EQ(j["finish_reason"], "cancelled");
  EXPECT_EQ(j["status"], 499);
}

TEST(RequestLog, LogRequestWritesOneJsonLine) {
  RequestObservation o;
  o.tenant = "bad\xff";  // invalid UTF-8 must not throw
  ::testing::internal::CaptureStderr();
  log_request("req-9", o);
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(err.empty());
  EXPECT_EQ(err.back(), '\n');
  EXPECT_EQ(err.find('\n'), err.size() - 1);
  auto j = nlohmann::json::parse(err);
  EXPECT_EQ(j["request_id"], "req-9");
}

}  // namespace
}  // namespace ts::obs
