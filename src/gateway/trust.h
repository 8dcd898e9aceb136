// --trust-gateway (SCALEOUT.md §4, §6.1): a replica behind `tokenserve gateway` takes the
// tenant, app and tier the gateway already authenticated, but only when they come signed with
// an HMAC-SHA256 under the secret both share. The gateway sends them in the Authorization
// header of the upstream request (so every place that admits a request sees them, and the
// client's own key never reaches the replica):
//
//   Authorization: TokenserveGateway v1;t=<tenant>;a=<app>;tier=<tier>;rid=<request id>;ts=<unix ms>;sig=<hex>
//   sig = HMAC-SHA256(secret, "v1\n" tenant "\n" app "\n" tier "\n" rid "\n" ts)
//
// Values are percent-encoded ('%', ';', '=', ',', space and control bytes). The timestamp must
// be within max_skew of the replica's clock; the request id makes each signature unique. (A
// replay of the same header within the skew is not detected: the replica keeps no nonce store.
// The network between gateway and replicas is assumed private; the signature keeps its other
// clients from claiming a tenant.)
//
// Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ts::gateway {

struct TrustedIdentity {
  std::string tenant;
  std::string app;
  std::string tier;        // "interactive" | "batch"
  std::string request_id;  // as signed
};

// HMAC-SHA256 of `message` under `key`, lower-case hex.
std::string hmac_sha256_hex(std::string_view key, std::string_view message);

// The Authorization value for an upstream request.
std::string gateway_authorization(std::string_view secret, const TrustedIdentity& id, int64_t now_unix_ms);

// Checks an Authorization value. Errors, all kUnauthenticated with the reason: not a
// TokenserveGateway value (an API key, or nothing), a field missing or malformed, a tier that is
// neither interactive nor batch, a timestamp outside the skew, a signature that does not match.
Result<TrustedIdentity> verify_gateway_authorization(std::string_view secret, std::string_view authorization,
                                                     int64_t now_unix_ms,
                                                     std::chrono::milliseconds max_skew = std::chrono::seconds(300));

}  // namespace ts::gateway
