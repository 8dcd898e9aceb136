// Quota charges that could not reach the limit store (Redis unreachable, circuit open), kept
// by this process and replayed when the store answers again, so that requests admitted
// fail-open during an outage are still charged and quotas are not undercounted.
//
// Durability. With a file (open()), add() appends each charge as one JSON line to an
// append-only file and fdatasync()s it before returning (one sync per add() batch); open()
// replays the file, so charges journaled before a crash or restart are still pending. A charge
// leaves the file only after the store applied it: replay() then appends a `{"done": id}` line
// (synced once per replay), and the file is truncated once nothing is pending. A torn last line
// (crash in mid-write; its add() never returned) is skipped and counted. Without a file the
// journal is memory only and a crash loses it.
//
// Exactly once. Every charge has an id unique across processes and restarts; replay() applies
// it with LimitStore::quota_add_existing_once, which the store remembers, so a charge applied
// just before a crash (its done line not yet written) is not applied again by the next start.
// A counter the store no longer has (Redis restarted empty) is left to be seeded from the
// ledger, which already holds those requests' rows; the charge is then dropped as done, and
// drop_key() drops the pending charges of a counter that the caller has just seeded.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "gateway/limit_store.h"

namespace ts::gateway {

struct QuotaCharge {
  std::string key;
  int64_t delta = 0;
  Millis ttl{0};
  std::string id;  // assigned by add()
};

class QuotaJournal {
 public:
  QuotaJournal();
  ~QuotaJournal();
  QuotaJournal(const QuotaJournal&) = delete;
  QuotaJournal& operator=(const QuotaJournal&) = delete;

  // Opens (creating) the journal file and loads its pending charges. kUnavailable when the file
  // cannot be opened or read; the journal then stays memory only. Call before any add().
  Status open(const std::string& path, bool sync = true);
  // Journals charges (durable on return when a file is open; a failed write is logged and the
  // charges are kept in memory). Zero deltas are ignored.
  void add(std::vector<QuotaCharge> charges);
  void add(const std::string& key, int64_t delta, Millis ttl) { add({{key, delta, ttl, ""}}); }
  // Applies pending charges until one fails with kUnavailable (returned; the rest stay).
  // Other errors drop that charge (logged). Returns the number of charges applied or dropped.
  Result<int64_t> replay(LimitStore& store);
  // Drops the pending charges to `key` (its counter was just seeded from the ledger, which
  // includes them). Returns how many.
  int64_t drop_key(const std::string& key);
  int64_t num_pending() const;       // charges pending
  int64_t tokens_pending() const;    // sum of pending deltas
  int64_t num_journaled() const;     // charges ever journaled by this object
  int64_t num_replayed() const;      // charges ever applied by replay
  int64_t num_loaded() const;        // charges loaded by open()
  int64_t num_torn() const;          // malformed lines skipped by open()

 private:
  void write_locked(const std::string& text);   // holds mu_
  void mark_done_locked(const std::vector<std::string>& ids);  // holds mu_

  mutable std::mutex mu_;
  std::mutex replay_mu_;             // one replay at a time
  std::vector<QuotaCharge> pending_;
  std::string path_;
  int fd_ = -1;
  bool sync_ = true;
  std::string id_prefix_;
  uint64_t next_id_ = 0;
  int64_t num_journaled_ = 0, num_replayed_ = 0, num_loaded_ = 0, num_torn_ = 0;
};

}  // namespace ts::gateway
