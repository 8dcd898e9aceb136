// Appends usage records to a LedgerStore from a background thread, off the request path.
//
// append() only queues the record in a bounded in-memory spool. The writer thread takes
// batches from the front of the spool and appends them in one transaction; a record leaves the
// spool only after its batch is committed. When the database is unreachable the batch stays,
// the failure is counted, and the thread retries with exponential back-off — so a short
// outage loses nothing. Because LedgerStore::append skips request ids already stored, a batch
// re-sent after an unclear failure is never double counted.
//
// close() (and the destructor) drains the spool before returning, retrying until its timeout;
// call it on SIGTERM after the HTTP server has drained. Records still unwritten then go to the
// spill file (options.spill_path, JSON lines) when one is set — the next LedgerWriter on the
// same path loads them back into its spool at start-up — and are otherwise counted in
// num_dropped and logged. (A hard crash loses what was only in memory.)
//
// Thread-safe: append/flush/stats may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "gateway/ledger.h"

namespace ts::gateway {

struct LedgerWriterOptions {
  size_t max_spool = 100'000;            // records held at most; append() refuses beyond
  size_t batch_size = 256;               // records per transaction at most
  Millis retry_initial{50};              // first back-off after a failed write
  Millis retry_max{2000};                // back-off ceiling
  std::string spill_path;                // "" = none; see the header comment
};

// One record as a JSON line (spill files) and back; kDataLoss for a malformed line.
std::string usage_record_to_json(const UsageRecord& r);
Result<UsageRecord> usage_record_from_json(std::string_view line);

// Counters for metrics (obs/).
struct LedgerStats {
  int64_t spool_depth = 0;               // records waiting to be written
  int64_t num_written = 0;               // records committed
  int64_t num_write_failures = 0;        // failed write attempts (each retried)
  int64_t num_dropped = 0;               // records lost: spool full, or unwritten at close
  int64_t num_spilled = 0;               // records saved to the spill file at close
  int64_t num_unspilled = 0;             // records loaded back from the spill file at start
  std::string last_error;                // message of the latest failure ("" if none)
};

class LedgerWriter {
 public:
  LedgerWriter(LedgerStore& store, LedgerWriterOptions options = {});
  ~LedgerWriter();  // close(5 s)
  LedgerWriter(const LedgerWriter&) = delete;
  LedgerWriter& operator=(const LedgerWriter&) = delete;

  // Queues a record. False when the spool is full (the record is dropped and counted) or the
  // writer is closed.
  bool append(UsageRecord record);
  // Waits until every record appended before this call is committed. kDeadlineExceeded (with
  // the last database error) when `timeout` passes first; the records stay spooled.
  Status flush(Millis timeout);
  // Drains, then stops the thread. Idempotent. If the spool could not be drained within
  // `timeout`, the rest is spilled (ok) or, without a spill file, lost (kDataLoss saying how
  // many).
  Status close(Millis timeout);
  LedgerStats stats() const;

 private:
  void run();
  void load_spill();
  Status spill(std::deque<UsageRecord>& records);

  LedgerStore& store_;
  const LedgerWriterOptions options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // writer waits for records / stop
  std::condition_variable done_cv_;   // flushers wait for progress
  std::deque<UsageRecord> spool_;
  int64_t num_enqueued_ = 0;          // records ever accepted
  int64_t num_retired_ = 0;           // records written or dropped after acceptance
  LedgerStats stats_;
  bool stopping_ = false;
  bool closed_ = false;
  std::chrono::steady_clock::time_point close_deadline_{};
  std::thread thread_;
};

}  // namespace ts::gateway
