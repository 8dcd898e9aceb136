#include "gateway/trust.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>

#include "gateway/sha256.h"

namespace ts::gateway {
namespace {

constexpr std::string_view kScheme = "TokenserveGateway v1;";

std::string canonical(const TrustedIdentity& id, std::string_view ts) {
  return "v1\n" + id.tenant + "\n" + id.app + "\n" + id.tier + "\n" + id.request_id + "\n" + std::string(ts);
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

std::string pct_encode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (c <= 0x20 || c >= 0x7f || c == '%' || c == ';' || c == '=' || c == ',') {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

bool pct_decode(std::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      *out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return false;  // needs two hex digits
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    *out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
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

std::string gateway_authorization(std::string_view secret, const TrustedIdentity& id, int64_t now_unix_ms) {
  std::string ts = std::to_string(now_unix_ms);
  return std::string(kScheme) + "t=" + pct_encode(id.tenant) + ";a=" + pct_encode(id.app) + ";tier=" +
         pct_encode(id.tier) + ";rid=" + pct_encode(id.request_id) + ";ts=" + ts +
         ";sig=" + hmac_sha256_hex(secret, canonical(id, ts));
}

Result<TrustedIdentity> verify_gateway_authorization(std::string_view secret, std::string_view authorization,
                                                     int64_t now_unix_ms, std::chrono::milliseconds max_skew) {
  auto refuse = [](std::string why) {
    return Status(StatusCode::kUnauthenticated, "gateway identity refused (--trust-gateway): " + why);
  };
  if (!authorization.starts_with(kScheme))
    return refuse("this replica accepts only requests signed by its gateway (Authorization: TokenserveGateway v1;...)");
  std::string_view rest = authorization.substr(kScheme.size());
  std::map<std::string, std::string> f;
  while (!rest.empty()) {
    size_t semi = rest.find(';');
    std::string_view item = rest.substr(0, semi);
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) return refuse("malformed field '" + std::string(item.substr(0, 32)) + "'");
    std::string value;
    if (!pct_decode(item.substr(eq + 1), &value)) return refuse("malformed percent-encoding");
    f[std::string(item.substr(0, eq))] = std::move(value);
  }
  for (const char* k : {"t", "a", "tier", "rid", "ts", "sig"})
    if (f[k].empty()) return refuse(std::string("field '") + k + "' is missing");
  TrustedIdentity id{.tenant = f["t"], .app = f["a"], .tier = f["tier"], .request_id = f["rid"]};
  if (id.tier != "interactive" && id.tier != "batch") return refuse("tier must be interactive or batch");
  char* end = nullptr;
  long long t = std::strtoll(f["ts"].c_str(), &end, 10);
  if (*end != '\0' || t <= 0) return refuse("ts is not a unix time in ms");
  if (std::llabs(now_unix_ms - t) > max_skew.count()) return refuse("ts is outside the allowed clock skew");
  const std::string want = hmac_sha256_hex(secret, canonical(id, f["ts"]));
  const std::string& got = f["sig"];
  unsigned diff = static_cast<unsigned>(want.size() ^ got.size());
  for (size_t i = 0; i < want.size(); ++i)  // constant time in the signature's length
    diff |= static_cast<unsigned char>(want[i]) ^ static_cast<unsigned char>(i < got.size() ? got[i] : 0);
  if (diff != 0) return refuse("the signature does not match");
  id.signed_at_ms = t;
  id.signature = want;
  return id;
}

ReplayGuard::ReplayGuard(size_t max_entries) : max_entries_(std::max<size_t>(1, max_entries)) {}

bool ReplayGuard::first_use(const std::string& nonce, int64_t expires_unix_ms, int64_t now_unix_ms) {
  std::lock_guard lock(mu_);
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now_unix_ms) {  // out of the window
    seen_.erase(by_expiry_.begin()->second);
    by_expiry_.erase(by_expiry_.begin());
  }
  if (seen_.count(nonce)) return false;
  while (seen_.size() >= max_entries_) {  // full: forget the entries closest to expiry first
    seen_.erase(by_expiry_.begin()->second);
    by_expiry_.erase(by_expiry_.begin());
    ++num_forgotten_;
  }
  seen_.insert(nonce);
  by_expiry_.emplace(expires_unix_ms, nonce);
  return true;
}

size_t ReplayGuard::size() const {
  std::lock_guard lock(mu_);
  return seen_.size();
}

int64_t ReplayGuard::num_forgotten() const {
  std::lock_guard lock(mu_);
  return num_forgotten_;
}

}  // namespace ts::gateway
