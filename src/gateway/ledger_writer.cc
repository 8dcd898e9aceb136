#include "gateway/ledger_writer.h"

#include <algorithm>
#include <vector>

#include "core/log.h"

namespace ts::gateway {

LedgerWriter::LedgerWriter(LedgerStore& store, LedgerWriterOptions options)
    : store_(store), options_(options) {
  thread_ = std::thread([this] { run(); });
}

LedgerWriter::~LedgerWriter() { (void)close(Millis(5000)); }

bool LedgerWriter::append(UsageRecord record) {
  std::lock_guard lock(mu_);
  if (stopping_ || spool_.size() >= options_.max_spool) {
    ++stats_.num_dropped;
    return false;
  }
  spool_.push_back(std::move(record));
  ++num_enqueued_;
  work_cv_.notify_one();
  return true;
}

Status LedgerWriter::flush(Millis timeout) {
  std::unique_lock lock(mu_);
  int64_t target = num_enqueued_;
  bool done = done_cv_.wait_for(lock, timeout, [&] { return num_retired_ >= target; });
  if (done) return ok_status();
  return Status(StatusCode::kDeadlineExceeded,
                "ledger flush timed out with " + std::to_string(spool_.size()) +
                    " records spooled; last error: " + stats_.last_error);
}

Status LedgerWriter::close(Millis timeout) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return ok_status();
    closed_ = true;
    stopping_ = true;
    close_deadline_ = std::chrono::steady_clock::now() + timeout;
    work_cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  if (spool_.empty()) return ok_status();
  int64_t lost = int64_t(spool_.size());
  stats_.num_dropped += lost;
  num_retired_ += lost;
  spool_.clear();
  std::string msg = "ledger " + store_.describe() + ": " + std::to_string(lost) +
                    " usage records lost at shutdown; last error: " + stats_.last_error;
  log::error(msg);
  done_cv_.notify_all();
  return data_loss(msg);
}

LedgerStats LedgerWriter::stats() const {
  std::lock_guard lock(mu_);
  LedgerStats s = stats_;
  s.spool_depth = int64_t(spool_.size());
  return s;
}

void LedgerWriter::run() {
  Millis backoff = options_.retry_initial;
  std::vector<UsageRecord> batch;
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !spool_.empty(); });
    if (spool_.empty()) return;  // stopping and drained
    size_t n = std::min(options_.batch_size, spool_.size());
    batch.assign(spool_.begin(), spool_.begin() + long(n));
    lock.unlock();
    Status st = store_.append(batch);
    lock.lock();
    if (st.ok()) {
      // Only this thread pops, so the front n records are still the batch.
      spool_.erase(spool_.begin(), spool_.begin() + long(n));
      stats_.num_written += int64_t(n);
      num_retired_ += int64_t(n);
      backoff = options_.retry_initial;
      done_cv_.notify_all();
      continue;
    }
    ++stats_.num_write_failures;
    if (stats_.last_error != st.message() || stats_.num_write_failures == 1)
      log::warn("ledger write failed (" + std::to_string(spool_.size()) +
                " records spooled, retrying): " + st.message());
    stats_.last_error = st.message();
    if (stopping_ && std::chrono::steady_clock::now() >= close_deadline_) return;
    if (stopping_) {
      work_cv_.wait_until(lock, std::min(close_deadline_, std::chrono::steady_clock::now() + backoff));
    } else {
      // Sleep the back-off; a close() wakes us to retry at once.
      work_cv_.wait_for(lock, backoff, [&] { return stopping_; });
    }
    backoff = std::min(options_.retry_max, backoff * 2);
  }
}

}  // namespace ts::gateway
