// Appends usage records to a LedgerStore from a background thread, off the request path.
//
// Durability. With a journal (options.spill_path set; the name is kept from the older spill
// file), append() first writes the record as one JSON line to an append-only journal segment
// and fdatasync()s it (group commit: concurrent appends share one sync) before returning, so a
// record whose append() returned survives a SIGKILL or power loss. Segments are files
// `<spill_path>.<n>`; a segment is deleted only after every record in it is committed to the
// store. At start-up every segment (and a legacy `<spill_path>` spill file) is replayed into the
// spool; because LedgerStore::append skips request ids already stored, a record that was
// committed just before a crash is stored once (exactly-once by request id). A torn last line
// (a crash in the middle of a write, whose append() never returned) is skipped and counted.
// Without a journal the spool is memory only and a crash loses it.
//
// The writer thread takes batches from the front of the spool and appends them in one
// transaction; a record leaves the spool only after its batch is committed. When the database
// is unreachable the batch stays, the failure is counted, and the thread retries with
// exponential back-off.
//
// Back-pressure, not loss: append() accepts every record (they belong to requests already
// served); full() turns true once max_spool records wait, and the Governor then refuses new
// admissions with 503 + Retry-After until the spool drains. Memory is therefore bounded by
// max_spool plus the requests in flight.
//
// close() (and the destructor) drains the spool before returning, retrying until its timeout.
// Records still unwritten stay in the journal (counted in num_spilled) for the next start; with
// no journal they are counted in num_dropped and logged (kDataLoss).
//
// Thread-safe: append/flush/stats/full may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "gateway/ledger.h"

namespace ts::gateway {

struct LedgerWriterOptions {
  size_t max_spool = 100'000;            // records waiting before full() (back-pressure)
  size_t batch_size = 256;               // records per transaction at most
  Millis retry_initial{50};              // first back-off after a failed write
  Millis retry_max{2000};                // back-off ceiling
  std::string spill_path;                // journal base path; "" = none (see the header)
  size_t segment_records = 4096;         // records per journal segment before a new one
  bool sync = true;                      // fdatasync each append (tests of bulk paths may skip)
  // > 0 (with sync): group commit off the request path. append() writes the journal line and
  // returns at once (the line is in the kernel's page cache: a SIGKILL of the process loses
  // nothing); the writer thread gathers records for up to this long (or batch_size of them),
  // fdatasyncs the journal once for all of them, then commits the batch. A power loss may lose
  // the journal lines of the last interval that the database had not yet committed. 0 = each
  // append() syncs before it returns (group commit among concurrent appends only).
  Millis sync_interval{0};
  // > sync_interval (group commit only): the batch is committed to the database at most once
  // per commit_interval while records keep coming (the journal is still synced every
  // sync_interval, so durability is unchanged; only the rows' visibility in the database lags,
  // by up to this long). Under load this makes each transaction carry more rows: every
  // transaction rewrites the same table and index pages into the WAL (and a WAL checkpoint
  // copies them again), so fewer, larger ones cost less per row. A record after an idle
  // interval is committed right after its gather; flush() and close() commit at once.
  // 0 = commit after every gather.
  Millis commit_interval{0};
};

// One record as a JSON line (spill files) and back; kDataLoss for a malformed line.
std::string usage_record_to_json(const UsageRecord& r);
// The same line built through a JSON tree (the reference the tests compare against).
std::string usage_record_to_json_reference(const UsageRecord& r);
Result<UsageRecord> usage_record_from_json(std::string_view line);

// Counters for metrics (obs/).
struct LedgerStats {
  int64_t spool_depth = 0;               // records waiting to be written
  int64_t num_written = 0;               // records committed
  int64_t num_write_failures = 0;        // failed write attempts (each retried)
  int64_t num_dropped = 0;               // records lost: unwritten at close without a journal
  int64_t num_spilled = 0;               // records left in the journal at close
  int64_t num_unspilled = 0;             // records replayed from the journal at start
  int64_t num_torn = 0;                  // malformed journal lines skipped at start
  int64_t num_journal_failures = 0;      // journal writes/syncs that failed (record kept in memory)
  int64_t journal_segments = 0;          // segment files on disk
  std::string last_error;                // message of the latest failure ("" if none)
};

class LedgerWriter {
 public:
  LedgerWriter(LedgerStore& store, LedgerWriterOptions options = {});
  ~LedgerWriter();  // close(5 s)
  LedgerWriter(const LedgerWriter&) = delete;
  LedgerWriter& operator=(const LedgerWriter&) = delete;

  // Journals (when configured; durable on return) and queues a record. False only when the
  // writer is closed (the record is then not stored). Never drops for a full spool.
  bool append(UsageRecord record);
  // True while max_spool or more records wait: callers should stop admitting new work.
  bool full() const;
  // Waits until every record appended before this call is committed. kDeadlineExceeded (with
  // the last database error) when `timeout` passes first; the records stay spooled.
  Status flush(Millis timeout);
  // Drains, then stops the thread. Idempotent. If the spool could not be drained within
  // `timeout`, the rest stays in the journal (ok) or, without one, is lost (kDataLoss saying how
  // many).
  Status close(Millis timeout);
  LedgerStats stats() const;

 private:
  struct Segment;
  struct Entry {
    UsageRecord record;
    std::shared_ptr<Segment> segment;  // journal segment holding it (null without a journal)
  };
  void run();
  void load_journal();
  // Writes one line to the active segment (rotating when full); returns the segment or null
  // when the journal write failed. Caller holds mu_.
  std::shared_ptr<Segment> journal_line(const std::string& line);
  void sync_journal(uint64_t seq);
  void retire(std::deque<Entry>::iterator begin, std::deque<Entry>::iterator end);  // holds mu_

  LedgerStore& store_;
  const LedgerWriterOptions options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // writer waits for records / stop
  std::condition_variable done_cv_;   // flushers wait for progress
  std::deque<Entry> spool_;
  int64_t num_enqueued_ = 0;          // records ever accepted
  int64_t num_retired_ = 0;           // records written or dropped after acceptance
  LedgerStats stats_;
  bool stopping_ = false;
  bool closed_ = false;
  int flush_waiters_ = 0;             // flush() calls waiting: the writer commits at once
  std::chrono::steady_clock::time_point last_commit_{};  // the writer's last commit (commit_interval)
  std::chrono::steady_clock::time_point close_deadline_{};
  // Journal state (mu_): the segment appended to, the next segment number, lines written.
  std::shared_ptr<Segment> active_;
  uint64_t next_segment_ = 1;
  uint64_t written_seq_ = 0;
  std::mutex sync_mu_;                // one fdatasync at a time; synced_seq_ under it
  uint64_t synced_seq_ = 0;
  std::thread thread_;
};

}  // namespace ts::gateway
