// The `speculative` extension field: opts one request out of speculative decoding.
#include <gtest/gtest.h>

#include "api/engine_mapping.h"
#include "api/request_parser.h"

namespace ts::api {
namespace {

TEST(SpecField, DefaultsOnFalseOptsOutWrongTypeRefused) {
  auto a = parse_completion_request(R"({"model":"m","prompt":"x"})");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a->sampling.speculative);
  EXPECT_TRUE(to_engine_request("id", {1}, a->sampling, 4, false, 0).speculative);

  auto b = parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"speculative":false})");
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_FALSE(b->sampling.speculative);
  EXPECT_FALSE(to_engine_request("id", {1}, b->sampling, 4, false, 0).speculative);

  auto c = parse_completion_request(R"({"model":"m","prompt":"x","speculative":"no"})");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().http_status, 400);
  EXPECT_EQ(c.error().param, "speculative");
}

}  // namespace
}  // namespace ts::api
