#include "gateway/trust.h"

#include <map>

#include <gtest/gtest.h>

namespace ts::gateway {
namespace {

TEST(Trust, HmacSha256MatchesRfc4231) {
  // RFC 4231 test case 2.
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block is hashed first.
  EXPECT_EQ(hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

struct Headers {
  std::map<std::string, std::string> h;
  std::string_view operator()(std::string_view name) const {
    auto it = h.find(std::string(name));
    return it == h.end() ? std::string_view() : std::string_view(it->second);
  }
};

Headers signed_headers(const std::string& secret, int64_t now) {
  Headers out;
  for (auto& [k, v] : sign_gateway_headers(secret, {.tenant = "acme", .app = "chat", .tier = "batch"}, "req-1", now))
    out.h[k] = v;
  out.h["x-request-id"] = "req-1";
  return out;
}

TEST(Trust, SignedHeadersVerifyAndForgeriesAreRefused) {
  const int64_t now = 1'767'225'600'000;
  Headers h = signed_headers("s3cret", now);
  auto ok = verify_gateway_headers("s3cret", h, now + 1000);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->tenant, "acme");
  EXPECT_EQ(ok->app, "chat");
  EXPECT_EQ(ok->tier, "batch");

  auto refused = [&](Headers x, const char* needle, int64_t at) {
    auto r = verify_gateway_headers("s3cret", x, at);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  refused(signed_headers("other-secret", now), "does not match", now);
  Headers tenant = h;
  tenant.h["x-tokenserve-tenant"] = "evil";
  refused(tenant, "does not match", now);
  Headers id = h;
  id.h["x-request-id"] = "req-2";
  refused(id, "does not match", now);
  Headers tier = h;
  tier.h["x-tokenserve-tier"] = "gold";
  refused(tier, "interactive or batch", now);
  Headers unsigned_ = h;
  unsigned_.h.erase("x-tokenserve-gateway-signature");
  refused(unsigned_, "signature is missing", now);
  refused(h, "skew", now + 301'000);
  refused(Headers{}, "missing", now);
}

}  // namespace
}  // namespace ts::gateway
