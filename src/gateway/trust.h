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
// be within max_skew of the replica's clock; the request id makes each signature unique.
// Replays inside the skew window: a ReplayGuard (below) remembers each accepted signature until
// its timestamp leaves the window, so the same signed header set is accepted once per replica
// (serve --trust-gateway refuses a second use with 401 "replayed_gateway_signature"). With a
// shared limit store (serve --limits redis://...) the Governor also claims each signature there
// (SET NX with the window's TTL), so a replay sent to a different replica is refused too; without
// one (or while Redis is down) each replica only knows its own set. The gateway signs every
// attempt afresh (a distinct timestamp per failover attempt), so failing over to another replica
// is not mistaken for a replay.
//
// Functions are pure and thread-safe; ReplayGuard is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_set>

#include "core/status.h"

namespace ts::gateway {

struct TrustedIdentity {
  std::string tenant;
  std::string app;
  std::string tier;        // "interactive" | "batch"
  std::string request_id;  // as signed
  int64_t signed_at_ms = 0;  // verify: the signed timestamp (unix ms)
  std::string signature;     // verify: the signature (hex), unique per signed header set
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

// Seen-set of nonces (signatures) with expiry, for replay protection inside the skew window.
// Memory: one entry per accepted request within the window, at most max_entries; when full, the
// entries closest to expiry are forgotten first (counted: num_forgotten), which weakens
// protection for those only.
class ReplayGuard {
 public:
  explicit ReplayGuard(size_t max_entries = size_t{1} << 20);
  // True the first time `nonce` is seen (it is then remembered until expires_unix_ms); false
  // for a replay. Entries whose expiry is <= now are dropped first.
  bool first_use(const std::string& nonce, int64_t expires_unix_ms, int64_t now_unix_ms);
  size_t size() const;
  int64_t num_forgotten() const;

 private:
  const size_t max_entries_;
  mutable std::mutex mu_;
  std::unordered_set<std::string> seen_;
  std::multimap<int64_t, std::string> by_expiry_;
  int64_t num_forgotten_ = 0;
};

}  // namespace ts::gateway
