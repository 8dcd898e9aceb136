// Counters behind rate limits and quotas, kept either in this process (MemoryLimitStore) or in
// Redis (RedisLimitStore, Lua scripts) so that several server processes enforce one limit.
//
// Rate limits are token buckets over a one-minute window: a bucket holds up to `capacity`
// (the per-minute limit), refills continuously at capacity per minute, and starts full.
// take() debits several buckets all-or-nothing (a request costs 1 in its RPM buckets and its
// reservation in its TPM buckets); give() returns unused reservation (refund at settle).
// Time is passed in by the caller (its Clock), so a fake clock drives both stores.
//
// Quotas are plain counters per (scope, period): `used` includes the reservations of requests
// still in flight. quota_reserve() adds a reservation to several counters all-or-nothing, only
// if none would exceed its limit; quota_add() settles (adds actual - reserved). A counter that
// does not exist yet is reported as uninitialized so that the caller can seed it from the
// ledger (quota_init, set-if-absent) — that is how quota survives a restart.
//
// Implementations are thread-safe. Errors: kUnavailable when the backend cannot be reached.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "gateway/clock.h"

namespace ts::gateway {

inline constexpr Millis kRateWindow{60'000};  // RPM/TPM refill window

struct BucketSpec {
  std::string key;              // e.g. "rl:key:key_abc:tok"
  int64_t capacity = 0;         // per-minute limit (> 0)
  int64_t cost = 0;             // taken by take(), returned by give() (>= 0)
};

// A bucket as seen after a take (or as it stood, for a refused take).
struct BucketState {
  int64_t limit = 0;            // capacity
  int64_t remaining = 0;        // whole units left
  Millis reset{0};              // until the bucket is full again
};

struct TakeResult {
  bool admitted = false;
  int refused = -1;             // index of the first bucket that lacked units
  Millis retry_after{0};        // until that bucket holds enough (refusals only)
  std::vector<BucketState> states;  // one per bucket
};

struct QuotaSpec {
  std::string key;              // e.g. "q:tenant:acme:day:1767225600000"
  int64_t limit = 0;            // budget for the period
  int64_t amount = 0;           // reservation to add (>= 0)
  Millis ttl{0};                // how long the counter must live (past the period's end)
};

struct QuotaTake {
  bool admitted = false;
  int refused = -1;             // index of a counter that would exceed its limit
  int uninitialized = -1;       // index of a counter that does not exist (nothing was changed)
  std::vector<int64_t> used;    // per counter, after the reservation (or as it stood)
};

// Health of the store as the governor reports it (see circuit_breaker.h). Plain stores are
// always "closed".
enum class BreakerState { kClosed = 0, kOpen = 1, kHalfOpen = 2 };
struct LimitStoreHealth {
  BreakerState breaker = BreakerState::kClosed;  // unless a breaker wraps the store
  int64_t num_opened = 0;       // times the circuit opened
  int64_t num_fast_failures = 0;  // calls refused at once while open
};

class LimitStore {
 public:
  virtual ~LimitStore() = default;
  virtual std::string describe() const = 0;
  virtual Result<TakeResult> take(std::span<const BucketSpec> buckets, WallTime now) = 0;
  // Returns bucket.cost units (never above capacity). A missing bucket is already full.
  // A negative cost debits (settling usage above a reservation): the level may go below zero.
  virtual Status give(const BucketSpec& bucket, WallTime now) = 0;
  virtual Result<QuotaTake> quota_reserve(std::span<const QuotaSpec> quotas) = 0;
  // Creates the counter with `used` if it does not exist; otherwise leaves it alone.
  virtual Status quota_init(const std::string& key, int64_t used, Millis ttl) = 0;
  // Adds `delta` (may be negative) to an existing or new counter.
  virtual Status quota_add(const std::string& key, int64_t delta, Millis ttl) = 0;
  // Adds `delta` only when the counter exists (true); false when it does not, so that it is
  // seeded from the ledger instead (replay of charges journaled during an outage).
  virtual Result<bool> quota_add_existing(const std::string& key, int64_t delta, Millis ttl) = 0;
  // As quota_add_existing, but at most once per `charge_id` (remembered with the counter's ttl):
  // true when applied now or already applied before (a repeat adds nothing), false when the
  // counter does not exist (nothing is remembered then). Used to replay the durable
  // QuotaJournal, which may repeat a charge applied just before a crash.
  virtual Result<bool> quota_add_existing_once(const std::string& key, int64_t delta, Millis ttl,
                                               const std::string& charge_id) = 0;
  virtual LimitStoreHealth health() const { return {}; }
  // True when other processes see the same counters (Redis): then claim_once() is a
  // cross-process check. False for a store local to this process.
  virtual bool shared() const { return false; }
  // Creates `key` only if it does not exist (it then lives for ttl): true when this call
  // created it, false when it already existed (claimed by this or another process sharing the
  // store). Used for --trust-gateway nonces (a signature accepted once across every replica).
  // A store that is not shared() answers kUnimplemented (the caller keeps its own seen-set).
  virtual Result<bool> claim_once(const std::string& key, Millis ttl) {
    (void)key;
    (void)ttl;
    return Status(StatusCode::kUnimplemented, "claim_once: the limit store " + describe() + " is not shared");
  }
  // Current value, or nullopt when the counter does not exist.
  virtual Result<std::optional<int64_t>> quota_used(const std::string& key) = 0;
};

// Bucket arithmetic shared by both stores (the Lua script mirrors it).
// Level after refilling from (level, last) to now, capped at capacity.
double bucket_refill(double level, int64_t last_ms, int64_t now_ms, int64_t capacity);
// State reported for a bucket at `level` (after any take).
BucketState bucket_state(double level, int64_t capacity);
// Time until `level` reaches `cost` (0 if it already has).
Millis bucket_wait(double level, int64_t cost, int64_t capacity);

std::unique_ptr<LimitStore> make_memory_limit_store();

struct RedisOptions {
  std::string url;              // redis://[:password@]host:port[/db]
  std::string prefix = "ts:";   // prepended to every key (tests use a unique one)
  Millis timeout{250};          // connect and command timeout (a loopback/LAN Redis answers in
                                // well under 1 ms; a hung one is cut off by the breaker)
};
// Connects lazily; kInvalidArgument only for a malformed URL.
Result<std::unique_ptr<LimitStore>> make_redis_limit_store(const RedisOptions& options);

}  // namespace ts::gateway
