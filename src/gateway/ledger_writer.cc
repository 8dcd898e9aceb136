#include "gateway/ledger_writer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/log.h"

namespace ts::gateway {

std::string usage_record_to_json(const UsageRecord& r) {
  nlohmann::ordered_json j;
  j["request_id"] = r.request_id;
  j["time_ms"] = to_unix_ms(r.time);
  j["tenant"] = r.tenant;
  j["app"] = r.app;
  j["key_id"] = r.key_id;
  j["model"] = r.model;
  j["tier"] = engine::tier_name(r.tier);
  j["prompt_tokens"] = r.prompt_tokens;
  j["cached_tokens"] = r.cached_tokens;
  j["completion_tokens"] = r.completion_tokens;
  j["ttft_ms"] = r.ttft_ms;
  j["duration_ms"] = r.duration_ms;
  j["finish_reason"] = r.finish_reason;
  j["http_status"] = r.http_status;
  if (!r.prompt_id.empty()) {
    j["prompt_id"] = r.prompt_id;
    j["prompt_version"] = r.prompt_version;
  }
  return j.dump();
}

Result<UsageRecord> usage_record_from_json(std::string_view line) {
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return data_loss("malformed usage record line");
  UsageRecord r;
  try {
    r.request_id = j.at("request_id").get<std::string>();
    r.time = from_unix_ms(j.at("time_ms").get<int64_t>());
    r.tenant = j.at("tenant").get<std::string>();
    r.app = j.at("app").get<std::string>();
    r.key_id = j.at("key_id").get<std::string>();
    r.model = j.at("model").get<std::string>();
    auto tier = engine::parse_tier(j.at("tier").get<std::string>());
    if (!tier.ok()) return data_loss("bad tier in usage record line");
    r.tier = *tier;
    r.prompt_tokens = j.at("prompt_tokens").get<int64_t>();
    r.cached_tokens = j.at("cached_tokens").get<int64_t>();
    r.completion_tokens = j.at("completion_tokens").get<int64_t>();
    r.ttft_ms = j.at("ttft_ms").get<int64_t>();
    r.duration_ms = j.at("duration_ms").get<int64_t>();
    r.finish_reason = j.at("finish_reason").get<std::string>();
    r.http_status = j.at("http_status").get<int32_t>();
    r.prompt_id = j.value("prompt_id", "");
    r.prompt_version = j.value("prompt_version", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return data_loss(std::string("bad usage record line: ") + e.what());
  }
  return r;
}

LedgerWriter::LedgerWriter(LedgerStore& store, LedgerWriterOptions options)
    : store_(store), options_(options) {
  load_spill();
  thread_ = std::thread([this] { run(); });
}

void LedgerWriter::load_spill() {
  if (options_.spill_path.empty()) return;
  std::ifstream in(options_.spill_path, std::ios::binary);
  if (!in) return;
  std::string line;
  int64_t bad = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto r = usage_record_from_json(line);
    if (!r.ok()) {
      ++bad;
      continue;
    }
    spool_.push_back(std::move(r).value());
    ++num_enqueued_;
    ++stats_.num_unspilled;
  }
  in.close();
  std::remove(options_.spill_path.c_str());
  log::info("ledger: loaded " + std::to_string(stats_.num_unspilled) + " spilled usage records from " +
            options_.spill_path + (bad ? " (" + std::to_string(bad) + " malformed lines skipped)" : ""));
}

Status LedgerWriter::spill(std::deque<UsageRecord>& records) {
  std::ofstream out(options_.spill_path, std::ios::binary | std::ios::app);
  for (const UsageRecord& r : records) out << usage_record_to_json(r) << "\n";
  out.flush();
  if (!out) return internal_error("cannot write spill file " + options_.spill_path);
  return ok_status();
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
  if (!options_.spill_path.empty()) {
    Status st = spill(spool_);
    if (st.ok()) {
      int64_t n = int64_t(spool_.size());
      stats_.num_spilled += n;
      num_retired_ += n;
      spool_.clear();
      log::warn("ledger " + store_.describe() + " unreachable at shutdown (" + stats_.last_error +
                "): " + std::to_string(n) + " usage records saved to " + options_.spill_path +
                "; they are written at the next start");
      done_cv_.notify_all();
      return ok_status();
    }
    log::error(st.message());
  }
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
