#include "api/json_prefix.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ts::api {
namespace {

using ojson = nlohmann::ordered_json;

// Every prefix of a valid object gives a prefix of its compact dump; the whole gives all of it.
TEST(JsonPrefix, EveryPrefixIsAPrefixOfTheCompactDump) {
  for (std::string text : {
           std::string(R"({})"),
           std::string(R"( {"b": 1, "a": [true, false, null, -0.25e-3, 12], "c": {"d": ""}} )"),
           std::string(R"({"s": "tab\there \"q\" \\ \/ \u00e9 \ud83d\ude00 \u0001 caf\u00e9 日本"})"),
           std::string("{\"k\": \"\xC3\xA9\xE6\x97\xA5\", \"n\": [[], {}, [1e2, 1.50]]}"),
       }) {
    SCOPED_TRACE(text);
    size_t b = text.find('{');
    std::string_view obj = std::string_view(text).substr(b);
    std::string want = ojson::parse(obj).dump(-1, ' ', false, ojson::error_handler_t::replace);
    size_t last = 0;
    for (size_t n = 0; n <= obj.size(); ++n) {
      JsonPrefix p = canonical_json_object_prefix(obj.substr(0, n));
      ASSERT_FALSE(p.error) << n;
      ASSERT_EQ(want.compare(0, p.out.size(), p.out), 0) << n << ": " << p.out;
      ASSERT_GE(p.out.size(), last) << "monotone";
      last = p.out.size();
      if (p.complete) {
        EXPECT_EQ(p.out, want);
      }
    }
    size_t close = obj.rfind('}');
    EXPECT_TRUE(canonical_json_object_prefix(obj.substr(0, close + 1)).complete);
  }
}

TEST(JsonPrefix, HoldsBackWhatMayStillChange) {
  EXPECT_EQ(canonical_json_object_prefix(R"({"a": 12)").out, R"({"a":)");   // 12 may go on
  EXPECT_EQ(canonical_json_object_prefix(R"({"a": tr)").out, R"({"a":)");
  EXPECT_EQ(canonical_json_object_prefix(R"({"a": "x\u00)").out, R"({"a":"x)");
  EXPECT_EQ(canonical_json_object_prefix("{\"a\": \"x\xE6\x97").out, R"({"a":"x)");  // cut UTF-8
  EXPECT_EQ(canonical_json_object_prefix(R"({"a": "\ud83d)").out, R"({"a":")");     // half a pair
}

TEST(JsonPrefix, NotJsonIsAnError) {
  for (std::string bad : {R"({"a": })", R"({"a" 1})", R"({"a": [1,,2]})", R"({"a": tru })", R"({1: 2})",
                          R"({"a": "\q"})", "{\"a\": \"\x01\"}", R"({"a": 1]})", R"({"a": 01x})", "[1]"}) {
    SCOPED_TRACE(bad);
    JsonPrefix p = canonical_json_object_prefix(bad);
    EXPECT_TRUE(p.error);
    EXPECT_FALSE(p.complete);
  }
}

}  // namespace
}  // namespace ts::api
