#include "gateway/ledger_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/log.h"
#include "gateway/json_text.h"

namespace ts::gateway {

std::string usage_record_to_json_reference(const UsageRecord& r) {
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
  if (r.reasoning_tokens) j["reasoning_tokens"] = r.reasoning_tokens;
  j["ttft_ms"] = r.ttft_ms;
  j["duration_ms"] = r.duration_ms;
  j["finish_reason"] = r.finish_reason;
  j["http_status"] = r.http_status;
  if (!r.prompt_id.empty()) {
    j["prompt_id"] = r.prompt_id;
    j["prompt_version"] = r.prompt_version;
  }
  if (!r.served_by.empty()) j["served_by"] = r.served_by;
  if (r.attempts) j["attempts"] = r.attempts;
  if (!r.request_body.empty()) j["request_body"] = r.request_body;
  if (!r.output_text.empty()) j["output_text"] = r.output_text;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {
void append_field(std::string& out, const char* key, std::string_view v) {
  append_json_key(out, key);
  append_json_string(out, v);
}
void append_field(std::string& out, const char* key, int64_t v) {
  append_json_key(out, key);
  append_json_int(out, v);
}
}  // namespace

// The journal line of every usage record, on the request path (settle): written directly
// rather than through a JSON tree (the tree's allocations were ~3 % of the gateway's CPU per
// request, SCALEOUT.md §8.14). usage_record_to_json_reference is the same line the old way; the
// tests hold the two equal.
std::string usage_record_to_json(const UsageRecord& r) {
  std::string out;
  out.reserve(320 + r.request_body.size() + r.output_text.size());
  out += "{\"request_id\":";
  append_json_string(out, r.request_id);
  append_field(out, "time_ms", to_unix_ms(r.time));
  append_field(out, "tenant", r.tenant);
  append_field(out, "app", r.app);
  append_field(out, "key_id", r.key_id);
  append_field(out, "model", r.model);
  append_field(out, "tier", engine::tier_name(r.tier));
  append_field(out, "prompt_tokens", r.prompt_tokens);
  append_field(out, "cached_tokens", r.cached_tokens);
  append_field(out, "completion_tokens", r.completion_tokens);
  if (r.reasoning_tokens) append_field(out, "reasoning_tokens", r.reasoning_tokens);
  append_field(out, "ttft_ms", r.ttft_ms);
  append_field(out, "duration_ms", r.duration_ms);
  append_field(out, "finish_reason", r.finish_reason);
  append_field(out, "http_status", int64_t{r.http_status});
  if (!r.prompt_id.empty()) {
    append_field(out, "prompt_id", r.prompt_id);
    append_field(out, "prompt_version", r.prompt_version);
  }
  if (!r.served_by.empty()) append_field(out, "served_by", r.served_by);
  if (r.attempts) append_field(out, "attempts", r.attempts);
  if (!r.request_body.empty()) append_field(out, "request_body", r.request_body);
  if (!r.output_text.empty()) append_field(out, "output_text", r.output_text);
  out += '}';
  return out;
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
    r.reasoning_tokens = j.value("reasoning_tokens", int64_t{0});
    r.ttft_ms = j.at("ttft_ms").get<int64_t>();
    r.duration_ms = j.at("duration_ms").get<int64_t>();
    r.finish_reason = j.at("finish_reason").get<std::string>();
    r.http_status = j.at("http_status").get<int32_t>();
    r.prompt_id = j.value("prompt_id", "");
    r.prompt_version = j.value("prompt_version", int64_t{0});
    r.served_by = j.value("served_by", "");
    r.attempts = j.value("attempts", int64_t{0});
    r.request_body = j.value("request_body", "");
    r.output_text = j.value("output_text", "");
  } catch (const nlohmann::json::exception& e) {
    return data_loss(std::string("bad usage record line: ") + e.what());
  }
  return r;
}

// One journal file. The fd stays open while records in it are outstanding; the file is
// removed when the last of them is committed and the segment is no longer the active one.
struct LedgerWriter::Segment {
  std::string path;
  int fd = -1;
  int64_t num_lines = 0;      // records written to it (or loaded from it)
  int64_t outstanding = 0;    // of those, not yet committed
  bool sealed = false;        // no more appends (rotated, or loaded at start-up)
  ~Segment() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// Segment files of `base`: the legacy spill file itself (number 0) and `base.<n>`.
std::vector<std::pair<uint64_t, std::string>> journal_files(const std::string& base) {
  std::vector<std::pair<uint64_t, std::string>> out;
  namespace fs = std::filesystem;
  fs::path b(base);
  fs::path dir = b.has_parent_path() ? b.parent_path() : fs::path(".");
  std::string stem = b.filename().string();
  std::error_code ec;
  if (fs::is_regular_file(b, ec)) out.emplace_back(0, base);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() <= stem.size() + 1 || !name.starts_with(stem + ".")) continue;
    std::string num = name.substr(stem.size() + 1);
    if (num.empty() || num.size() > 18 ||
        num.find_first_not_of("0123456789") != std::string::npos)
      continue;
    out.emplace_back(std::stoull(num), it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool write_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

}  // namespace

LedgerWriter::LedgerWriter(LedgerStore& store, LedgerWriterOptions options)
    : store_(store), options_(options) {
  load_journal();
  thread_ = std::thread([this] { run(); });
}

void LedgerWriter::load_journal() {
  if (options_.spill_path.empty()) return;
  int64_t loaded = 0;
  for (const auto& [num, path] : journal_files(options_.spill_path)) {
    next_segment_ = std::max(next_segment_, num + 1);
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;
    auto seg = std::make_shared<Segment>();
    seg->path = path;
    seg->sealed = true;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto r = usage_record_from_json(line);
      if (!r.ok()) {
        ++stats_.num_torn;
        continue;
      }
      spool_.push_back(Entry{std::move(r).value(), seg});
      ++seg->num_lines;
      ++seg->outstanding;
      ++num_enqueued_;
      ++loaded;
    }
    if (seg->outstanding == 0) {
      std::remove(path.c_str());
    } else {
      ++stats_.journal_segments;
    }
  }
  stats_.num_unspilled = loaded;
  if (loaded > 0 || stats_.num_torn > 0)
    log::info("ledger: replaying " + std::to_string(loaded) + " journaled usage records from " +
              options_.spill_path + ".*" +
              (stats_.num_torn ? " (" + std::to_string(stats_.num_torn) + " torn lines skipped)" : "") +
              "; rows already stored are skipped by request id");
}

std::shared_ptr<LedgerWriter::Segment> LedgerWriter::journal_line(const std::string& line) {
  if (active_ && active_->num_lines >= int64_t(options_.segment_records)) {
    // Rotate: make the old segment durable now, so a sync only ever needs the active one.
    if (options_.sync && ::fdatasync(active_->fd) != 0) ++stats_.num_journal_failures;
    active_->sealed = true;
    if (active_->outstanding == 0) {
      std::remove(active_->path.c_str());
      --stats_.journal_segments;
    }
    active_.reset();
  }
  if (!active_) {
    auto seg = std::make_shared<Segment>();
    seg->path = options_.spill_path + "." + std::to_string(next_segment_++);
    seg->fd = ::open(seg->path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (seg->fd < 0) {
      ++stats_.num_journal_failures;
      log::error("ledger journal: cannot open " + seg->path + ": " + std::strerror(errno) +
                 " (the record is kept in memory only)");
      return nullptr;
    }
    ++stats_.journal_segments;
    active_ = std::move(seg);
  }
  if (!write_all(active_->fd, line)) {
    ++stats_.num_journal_failures;
    log::error("ledger journal: write to " + active_->path + " failed: " + std::strerror(errno) +
               " (the record is kept in memory only)");
    return nullptr;
  }
  ++active_->num_lines;
  ++active_->outstanding;
  ++written_seq_;
  return active_;
}

void LedgerWriter::sync_journal(uint64_t seq) {
  std::lock_guard sync_lock(sync_mu_);
  if (synced_seq_ >= seq) return;  // another append's sync covered this line (group commit)
  std::shared_ptr<Segment> seg;
  uint64_t target;
  {
    std::lock_guard lock(mu_);
    target = written_seq_;
    seg = active_;
  }
  // Lines up to `target` are in `seg` or in an older segment synced when it was rotated.
  if (seg && ::fdatasync(seg->fd) != 0) {
    std::lock_guard lock(mu_);
    ++stats_.num_journal_failures;
    log::error("ledger journal: fdatasync " + seg->path + " failed: " + std::strerror(errno));
    return;
  }
  synced_seq_ = target;
}

LedgerWriter::~LedgerWriter() { (void)close(Millis(5000)); }

bool LedgerWriter::append(UsageRecord record) {
  uint64_t seq = 0;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    std::shared_ptr<Segment> seg;
    if (!options_.spill_path.empty()) {
      seg = journal_line(usage_record_to_json(record) + "\n");
      if (seg) seq = written_seq_;
    }
    spool_.push_back(Entry{std::move(record), std::move(seg)});
    ++num_enqueued_;
    // Batched sync: the writer gathers for sync_interval after the first record, so it needs a
    // wake-up only for the first one and for a full batch.
    if (options_.sync_interval.count() <= 0 || spool_.size() == 1 || spool_.size() >= options_.batch_size)
      work_cv_.notify_one();
  }
  if (seq > 0 && options_.sync && options_.sync_interval.count() <= 0) sync_journal(seq);
  return true;
}

bool LedgerWriter::full() const {
  std::lock_guard lock(mu_);
  return spool_.size() >= options_.max_spool;
}

Status LedgerWriter::flush(Millis timeout) {
  std::unique_lock lock(mu_);
  int64_t target = num_enqueued_;
  ++flush_waiters_;  // cuts a commit_interval hold short
  work_cv_.notify_all();
  bool done = done_cv_.wait_for(lock, timeout, [&] { return num_retired_ >= target; });
  --flush_waiters_;
  if (done) return ok_status();
  return Status(StatusCode::kDeadlineExceeded,
                "ledger flush timed out with " + std::to_string(spool_.size()) +
                    " records spooled; last error: " + stats_.last_error);
}

void LedgerWriter::retire(std::deque<Entry>::iterator begin, std::deque<Entry>::iterator end) {
  for (auto it = begin; it != end; ++it) {
    Segment* seg = it->segment.get();
    if (!seg || --seg->outstanding > 0) continue;
    if (seg->sealed) {
      std::remove(seg->path.c_str());
      --stats_.journal_segments;
    }
  }
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
  if (active_ && active_->outstanding == 0) {  // everything committed: nothing to keep
    std::remove(active_->path.c_str());
    --stats_.journal_segments;
  }
  active_.reset();
  if (spool_.empty()) return ok_status();
  int64_t n = int64_t(spool_.size()), kept = 0;
  for (const Entry& e : spool_) kept += e.segment ? 1 : 0;
  stats_.num_spilled += kept;
  num_retired_ += n;
  int64_t lost = n - kept;
  spool_.clear();
  done_cv_.notify_all();
  if (kept > 0)
    log::warn("ledger " + store_.describe() + " unreachable at shutdown (" + stats_.last_error +
              "): " + std::to_string(kept) + " usage records stay journaled in " +
              options_.spill_path + ".*; they are written at the next start");
  if (lost == 0) return ok_status();
  stats_.num_dropped += lost;
  std::string msg = "ledger " + store_.describe() + ": " + std::to_string(lost) +
                    " usage records lost at shutdown (no journal); last error: " + stats_.last_error;
  log::error(msg);
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
    if (options_.sync && options_.sync_interval.count() > 0 && !options_.spill_path.empty()) {
      // Gather (a stop or a full batch ends it early), then one fdatasync covers every line.
      auto urgent = [&] { return stopping_ || flush_waiters_ > 0 || spool_.size() >= options_.batch_size; };
      work_cv_.wait_for(lock, options_.sync_interval, urgent);
      uint64_t seq = written_seq_;
      lock.unlock();
      sync_journal(seq);
      lock.lock();
      // commit_interval: hold the commit while records keep coming, syncing the journal every
      // sync_interval meanwhile (each line durable as soon as without the hold).
      const auto commit_at = last_commit_ + options_.commit_interval;
      while (options_.commit_interval > options_.sync_interval && !urgent() &&
             std::chrono::steady_clock::now() < commit_at) {
        auto until = std::min(commit_at, std::chrono::steady_clock::now() + options_.sync_interval);
        work_cv_.wait_until(lock, until, urgent);
        if (written_seq_ == seq) continue;
        seq = written_seq_;
        lock.unlock();
        sync_journal(seq);
        lock.lock();
      }
      last_commit_ = std::chrono::steady_clock::now();
    }
    size_t n = std::min(options_.batch_size, spool_.size());
    batch.clear();
    for (size_t i = 0; i < n; ++i) batch.push_back(spool_[i].record);
    lock.unlock();
    Status st = store_.append(batch);
    lock.lock();
    if (st.ok()) {
      // Only this thread pops, so the front n records are still the batch. Their journal
      // lines may go only now that the rows are committed.
      retire(spool_.begin(), spool_.begin() + long(n));
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
