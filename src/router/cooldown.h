// Remote cooldowns (SCALEOUT.md §6.2, §8 item 9): after N consecutive failures of a remote, or
// a 429 with Retry-After, the remote is not tried for T seconds. With Redis (`--limits
// redis://...`) the state is shared by every gateway instance:
//   <prefix>cd:<remote>     "1", created with SET NX PX <T>: the TTL is set once at creation,
//                           so later failures never extend a running cooldown
//   <prefix>cdf:<remote>    consecutive-failure counter (INCR; PEXPIRE at creation, so stale
//                           failures age out), deleted on a success
//   <prefix>rb:<remote>:<day>  tokens the remote served on that UTC day (its daily budget),
//                           INCRBY; expires two days after creation
// A second gateway sees a cooldown on its next routing decision (one PTTL per remote named by
// the rules, on loopback well under 1 ms).
//
// Redis unreachable: every call falls back to this process's own view (the same keys in
// memory), logs once per outage and counts num_store_errors; a reconnect is tried at most once
// a second, so routing is not slowed by a dead Redis.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"

namespace ts::router {

using Millis = std::chrono::milliseconds;

class CooldownTracker {
 public:
  // redis_url "" = this process only. kInvalidArgument for a malformed URL.
  static Result<std::unique_ptr<CooldownTracker>> open(const std::string& redis_url, std::string prefix = "ts:");
  ~CooldownTracker();

  // Time left in the remote's cooldown; 0 when it is not cooling down.
  Millis remaining(const std::string& remote);
  // Starts a cooldown of `ttl` unless one is running (then it is left as it is). True when this
  // call started it.
  bool trip(const std::string& remote, Millis ttl);
  // One more consecutive failure; returns the count (shared across gateways with Redis).
  int64_t record_failure(const std::string& remote, Millis window);
  void record_success(const std::string& remote);
  // Daily budget use: tokens charged to `remote` on UTC day `day` (days since the epoch).
  void add_usage(const std::string& remote, int64_t day, int64_t tokens);
  int64_t usage(const std::string& remote, int64_t day);

  bool shared() const;            // backed by Redis
  int64_t num_store_errors() const { return num_store_errors_.load(); }
  int64_t num_trips() const { return num_trips_.load(); }

 private:
  struct Redis;
  CooldownTracker() = default;
  void store_error(const Status& st);

  std::unique_ptr<Redis> redis_;
  std::mutex mu_;  // local view
  std::map<std::string, std::chrono::steady_clock::time_point> until_;
  std::map<std::string, int64_t> failures_;
  std::map<std::pair<std::string, int64_t>, int64_t> usage_;  // (remote, day) -> tokens
  std::atomic<int64_t> num_store_errors_{0}, num_trips_{0};
  std::atomic<bool> outage_logged_{false};
};

}  // namespace ts::router
