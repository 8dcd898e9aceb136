// Quota charges that could not reach the limit store (Redis unreachable, circuit open), kept
// in this process and replayed when the store answers again, so that requests admitted
// fail-open during an outage are still charged and quotas are not undercounted.
//
// Charges to one counter are summed. replay() applies each with LimitStore::quota_add_existing:
// a counter the store still has gets the sum; one it lost (Redis restarted empty) is left to be
// seeded from the ledger at its next use, which already holds those requests' rows — adding
// them too would count them twice. Limitation: the journal lives in memory, so a crash during
// an outage loses the pending charges (the ledger rows themselves are durable; a re-seed from
// the ledger after a Redis restart recovers them).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "gateway/limit_store.h"

namespace ts::gateway {

class QuotaJournal {
 public:
  void add(const std::string& key, int64_t delta, Millis ttl);
  // Applies pending charges until one fails with kUnavailable (returned; the rest stay).
  // Other errors drop that charge (logged). Returns the number of charges applied.
  Result<int64_t> replay(LimitStore& store);
  int64_t num_pending() const;       // counters with a pending charge
  int64_t tokens_pending() const;    // sum of pending deltas
  int64_t num_journaled() const;     // charges ever journaled
  int64_t num_replayed() const;      // charges ever applied by replay

 private:
  struct Charge {
    int64_t delta = 0;
    Millis ttl{0};
  };
  mutable std::mutex mu_;
  std::map<std::string, Charge> pending_;
  int64_t num_journaled_ = 0, num_replayed_ = 0;
};

}  // namespace ts::gateway
