#include "gateway/trust.h"

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

TEST(Trust, SignedIdentityVerifiesAndForgeriesAreRefused) {
  const int64_t now = 1'767'225'600'000;
  TrustedIdentity id{.tenant = "acme; corp=1", .app = "chat", .tier = "batch", .request_id = "req-1"};
  std::string h = gateway_authorization("s3cret", id, now);
  auto ok = verify_gateway_authorization("s3cret", h, now + 1000);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->tenant, "acme; corp=1");  // separators survive the encoding
  EXPECT_EQ(ok->app, "chat");
  EXPECT_EQ(ok->tier, "batch");
  EXPECT_EQ(ok->request_id, "req-1");

  auto refused = [&](const std::string& value, const char* needle, int64_t at = 1'767'225'600'000) {
    auto r = verify_gateway_authorization("s3cret", value, at);
    ASSERT_FALSE(r.ok()) << value;
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  refused(gateway_authorization("other-secret", id, now), "does not match");
  std::string forged = h;
  forged.replace(forged.find("t=acme"), 6, "t=evil");
  refused(forged, "does not match");
  std::string tier = h;
  tier.replace(tier.find("tier=batch"), 10, "tier=inter");
  refused(tier, "interactive or batch");
  refused(h.substr(0, h.find(";sig=")), "'sig' is missing");
  refused(h, "skew", now + 301'000);
  refused("Bearer ts-abc", "accepts only requests signed");
  refused("", "accepts only requests signed");
  refused("TokenserveGateway v1;t=%zz", "percent-encoding");
}

TEST(Trust, VerifyReportsTheSignatureAndTimestampForReplayChecks) {
  const int64_t now = 1'767'225'600'000;
  TrustedIdentity id{.tenant = "acme", .app = "chat", .tier = "interactive", .request_id = "req-9"};
  auto a = verify_gateway_authorization("k", gateway_authorization("k", id, now), now);
  auto b = verify_gateway_authorization("k", gateway_authorization("k", id, now + 1), now);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->signed_at_ms, now);
  EXPECT_EQ(a->signature.size(), 64u);
  EXPECT_NE(a->signature, b->signature);  // same request id, another timestamp: another nonce
}

TEST(ReplayGuard, SecondUseInsideTheWindowIsRefusedAndEntriesExpire) {
  ReplayGuard g;
  EXPECT_TRUE(g.first_use("sig-a", /*expires=*/1'000, /*now=*/0));
  EXPECT_FALSE(g.first_use("sig-a", 1'000, 10));
  EXPECT_FALSE(g.first_use("sig-a", 1'000, 999));
  EXPECT_TRUE(g.first_use("sig-b", 2'000, 999));
  EXPECT_EQ(g.size(), 2u);
  // Past its expiry the entry is gone (verify refuses such a timestamp by skew anyway).
  EXPECT_TRUE(g.first_use("sig-c", 3'000, 1'000));
  EXPECT_EQ(g.size(), 2u);  // sig-a dropped
  EXPECT_TRUE(g.first_use("sig-a", 4'000, 1'500));
}

TEST(ReplayGuard, BoundedMemoryForgetsTheEntriesClosestToExpiry) {
  ReplayGuard g(3);
  EXPECT_TRUE(g.first_use("a", 100, 0));
  EXPECT_TRUE(g.first_use("b", 300, 0));
  EXPECT_TRUE(g.first_use("c", 200, 0));
  EXPECT_TRUE(g.first_use("d", 400, 0));  // full: "a" (expiring first) is forgotten
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g.num_forgotten(), 1);
  EXPECT_FALSE(g.first_use("b", 300, 0));
  EXPECT_FALSE(g.first_use("c", 200, 0));
  EXPECT_FALSE(g.first_use("d", 400, 0));
}

}  // namespace
}  // namespace ts::gateway
