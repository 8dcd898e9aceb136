#include "gateway/trust.h"

#include <array>
#include <cstdlib>

#include "gateway/sha256.h"

namespace ts::gateway {
namespace {

std::string canonical(std::string_view tenant, std::string_view app, std::string_view tier, std::string_view request_id,
                      std::string_view ts) {
  std::string c = "v1\n";
  for (std::string_view part : {tenant, app, tier, request_id}) {
    c += part;
    c += '\n';
  }
  c += ts;
  return c;
}

std::string to_hex(const std::array<uint8_t, 32>& d) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : d) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
  std::string k(key);
  if (k.size() > 64) {
    auto d = sha256(k);
    k.assign(reinterpret_cast<const char*>(d.data()), d.size());
  }
  k.resize(64, '\0');
  std::string inner(64, '\0'), outer(64, '\0');
  for (size_t i = 0; i < 64; ++i) {
    inner[i] = static_cast<char>(k[i] ^ 0x36);
    outer[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  inner += message;
  auto ih = sha256(inner);
  outer.append(reinterpret_cast<const char*>(ih.data()), ih.size());
  return to_hex(sha256(outer));
}

std::vector<std::pair<std::string, std::string>> sign_gateway_headers(std::string_view secret, const TrustedIdentity& id,
                                                                     std::string_view request_id, int64_t now_unix_ms) {
  std::string ts = std::to_string(now_unix_ms);
  std::string sig = "v1=" + hmac_sha256_hex(secret, canonical(id.tenant, id.app, id.tier, request_id, ts));
  return {{"x-tokenserve-tenant", id.tenant},
          {"x-tokenserve-app", id.app},
          {"x-tokenserve-tier", id.tier},
          {"x-tokenserve-gateway-ts", ts},
          {"x-tokenserve-gateway-signature", sig}};
}

Result<TrustedIdentity> verify_gateway_values(std::string_view secret, std::string_view tenant, std::string_view app,
                                              std::string_view tier, std::string_view request_id,
                                              std::string_view ts, std::string_view signature, int64_t now_unix_ms,
                                              std::chrono::milliseconds max_skew) {
  auto refuse = [](std::string why) {
    return Status(StatusCode::kUnauthenticated, "gateway identity refused (--trust-gateway): " + why);
  };
  if (signature.empty()) return refuse("x-tokenserve-gateway-signature is missing");
  if (tenant.empty() || app.empty() || tier.empty() || ts.empty())
    return refuse("x-tokenserve-tenant, -app, -tier and -gateway-ts are all required");
  if (request_id.empty()) return refuse("x-request-id is required (it is signed)");
  if (tier != "interactive" && tier != "batch") return refuse("x-tokenserve-tier must be interactive or batch");
  std::string tss(ts);
  char* end = nullptr;
  long long t = std::strtoll(tss.c_str(), &end, 10);
  if (*end != '\0' || t <= 0) return refuse("x-tokenserve-gateway-ts is not a unix time in ms");
  if (std::llabs(now_unix_ms - t) > max_skew.count()) return refuse("x-tokenserve-gateway-ts is outside the allowed skew");
  std::string want = "v1=" + hmac_sha256_hex(secret, canonical(tenant, app, tier, request_id, ts));
  // Constant time in the signature's length.
  unsigned diff = want.size() ^ signature.size();
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(want[i]) ^
                                                   static_cast<unsigned char>(i < signature.size() ? signature[i] : 0);
  if (diff != 0) return refuse("the signature does not match");
  return TrustedIdentity{.tenant = std::string(tenant), .app = std::string(app), .tier = std::string(tier)};
}

}  // namespace ts::gateway
