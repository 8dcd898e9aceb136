// --trust-gateway (SCALEOUT.md §4, §6.1): a replica behind `tokenserve gateway` takes the
// tenant, app and tier the gateway already authenticated from request headers, but only when
// they carry an HMAC-SHA256 signature made with the secret both share:
//
//   x-tokenserve-tenant, x-tokenserve-app, x-tokenserve-tier   the identity
//   x-tokenserve-gateway-ts                                    unix time in ms at signing
//   x-tokenserve-gateway-signature: v1=<hex>                   HMAC-SHA256(secret, canonical)
//   canonical = "v1\n" tenant "\n" app "\n" tier "\n" x-request-id "\n" ts
//
// The request id is signed too, so a captured signature cannot be replayed with another id, and
// the timestamp must be within max_skew of the replica's clock. (A replay of the same request
// within the skew is not detected: the replica keeps no nonce store; the network between
// gateway and replicas is assumed private, the signature keeps other clients of that network
// from claiming a tenant.)
//
// Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ts::gateway {

struct TrustedIdentity {
  std::string tenant;
  std::string app;
  std::string tier;        // "interactive" | "batch"
};

// HMAC-SHA256 of `message` under `key`, lower-case hex.
std::string hmac_sha256_hex(std::string_view key, std::string_view message);

// The five headers to add to an upstream request.
std::vector<std::pair<std::string, std::string>> sign_gateway_headers(std::string_view secret, const TrustedIdentity& id,
                                                                     std::string_view request_id, int64_t now_unix_ms);

// Checks the headers (looked up through `header`, which returns "" when absent). Errors, all
// kUnauthenticated with the reason: a header missing, a bad or expired timestamp, a tier that
// is neither interactive nor batch, a signature that does not match.
template <typename HeaderFn>
Result<TrustedIdentity> verify_gateway_headers(std::string_view secret, HeaderFn header, int64_t now_unix_ms,
                                               std::chrono::milliseconds max_skew = std::chrono::seconds(300));

Result<TrustedIdentity> verify_gateway_values(std::string_view secret, std::string_view tenant, std::string_view app,
                                              std::string_view tier, std::string_view request_id,
                                              std::string_view ts, std::string_view signature, int64_t now_unix_ms,
                                              std::chrono::milliseconds max_skew);

template <typename HeaderFn>
Result<TrustedIdentity> verify_gateway_headers(std::string_view secret, HeaderFn header, int64_t now_unix_ms,
                                               std::chrono::milliseconds max_skew) {
  return verify_gateway_values(secret, header("x-tokenserve-tenant"), header("x-tokenserve-app"),
                               header("x-tokenserve-tier"), header("x-request-id"), header("x-tokenserve-gateway-ts"),
                               header("x-tokenserve-gateway-signature"), now_unix_ms, max_skew);
}

}  // namespace ts::gateway
