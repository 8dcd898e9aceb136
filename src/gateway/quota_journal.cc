#include "gateway/quota_journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/log.h"

namespace ts::gateway {
namespace {

std::string random_prefix() {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string charge_line(const QuotaCharge& c) {
  nlohmann::json j = {{"id", c.id}, {"key", c.key}, {"delta", c.delta}, {"ttl", c.ttl.count()}};
  return j.dump() + "\n";
}

}  // namespace

QuotaJournal::QuotaJournal() : id_prefix_(random_prefix()) {}

QuotaJournal::~QuotaJournal() {
  if (fd_ >= 0) ::close(fd_);
}

Status QuotaJournal::open(const std::string& path, bool sync) {
  std::lock_guard lock(mu_);
  std::vector<QuotaCharge> loaded;
  {
    std::ifstream in(path, std::ios::binary);
    std::string line;
    std::set<std::string> done;
    while (in && std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("done") && j["done"].is_string()) {
        done.insert(j["done"].get<std::string>());
      } else if (j.is_object() && j.contains("id") && j["id"].is_string() && j.contains("key") &&
                 j["key"].is_string() && j.contains("delta") && j["delta"].is_number_integer() &&
                 j.contains("ttl") && j["ttl"].is_number_integer()) {
        loaded.push_back({j["key"].get<std::string>(), j["delta"].get<int64_t>(),
                          Millis(j["ttl"].get<int64_t>()), j["id"].get<std::string>()});
      } else {
        ++num_torn_;
      }
    }
    std::erase_if(loaded, [&](const QuotaCharge& c) { return done.count(c.id) > 0; });
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0)
    return unavailable("quota journal " + path + ": " + std::strerror(errno));
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  path_ = path;
  sync_ = sync;
  num_loaded_ = int64_t(loaded.size());
  for (QuotaCharge& c : loaded) pending_.push_back(std::move(c));
  if (pending_.empty() && ::ftruncate(fd_, 0) != 0)
    log::warn("quota journal " + path + ": truncate failed: " + std::strerror(errno));
  if (num_loaded_ > 0)
    log::info("quota journal " + path + ": " + std::to_string(num_loaded_) +
              " charges from an earlier run pending for the limit store");
  return ok_status();
}

void QuotaJournal::write_locked(const std::string& text) {
  if (fd_ < 0) return;
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      log::error("quota journal " + path_ + ": write failed (charges kept in memory only): " +
                 std::strerror(errno));
      return;
    }
    off += size_t(n);
  }
  if (sync_ && ::fdatasync(fd_) != 0)
    log::error("quota journal " + path_ + ": fdatasync failed: " + std::strerror(errno));
}

void QuotaJournal::add(std::vector<QuotaCharge> charges) {
  std::lock_guard lock(mu_);
  std::string text;
  for (QuotaCharge& c : charges) {
    if (c.delta == 0) continue;
    c.id = id_prefix_ + "-" + std::to_string(++next_id_);
    text += charge_line(c);
    pending_.push_back(std::move(c));
    ++num_journaled_;
  }
  if (!text.empty()) write_locked(text);
}

void QuotaJournal::mark_done_locked(const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  std::set<std::string> gone(ids.begin(), ids.end());
  std::erase_if(pending_, [&](const QuotaCharge& c) { return gone.count(c.id) > 0; });
  if (fd_ < 0) return;
  if (pending_.empty()) {  // nothing left: start the file afresh
    if (::ftruncate(fd_, 0) == 0) {
      if (sync_) (void)::fdatasync(fd_);
      return;
    }
    log::warn("quota journal " + path_ + ": truncate failed: " + std::strerror(errno));
  }
  std::string text;
  for (const std::string& id : ids) text += nlohmann::json({{"done", id}}).dump() + "\n";
  write_locked(text);
}

Result<int64_t> QuotaJournal::replay(LimitStore& store) {
  std::lock_guard replay_lock(replay_mu_);
  std::vector<QuotaCharge> todo;
  {
    std::lock_guard lock(mu_);
    todo = pending_;
  }
  std::vector<std::string> done;
  int64_t applied = 0;
  Status failed;
  for (const QuotaCharge& c : todo) {
    auto r = store.quota_add_existing_once(c.key, c.delta, c.ttl, c.id);
    if (!r.ok() && r.status().code() == StatusCode::kUnavailable) {
      failed = r.status();
      break;
    }
    if (!r.ok())
      log::error("quota journal: dropping a charge of " + std::to_string(c.delta) + " tokens to " +
                 c.key + ": " + r.status().message());
    if (r.ok() && *r) ++applied;
    done.push_back(c.id);
  }
  std::lock_guard lock(mu_);
  mark_done_locked(done);
  num_replayed_ += applied;
  if (!failed.ok()) return failed;
  return int64_t(done.size());
}

int64_t QuotaJournal::drop_key(const std::string& key) {
  std::lock_guard lock(mu_);
  std::vector<std::string> ids;
  for (const QuotaCharge& c : pending_)
    if (c.key == key) ids.push_back(c.id);
  mark_done_locked(ids);
  return int64_t(ids.size());
}

int64_t QuotaJournal::num_pending() const {
  std::lock_guard lock(mu_);
  return int64_t(pending_.size());
}

int64_t QuotaJournal::tokens_pending() const {
  std::lock_guard lock(mu_);
  int64_t n = 0;
  for (const QuotaCharge& c : pending_) n += c.delta;
  return n;
}

int64_t QuotaJournal::num_journaled() const {
  std::lock_guard lock(mu_);
  return num_journaled_;
}

int64_t QuotaJournal::num_replayed() const {
  std::lock_guard lock(mu_);
  return num_replayed_;
}

int64_t QuotaJournal::num_loaded() const {
  std::lock_guard lock(mu_);
  return num_loaded_;
}

int64_t QuotaJournal::num_torn() const {
  std::lock_guard lock(mu_);
  return num_torn_;
}

}  // namespace ts::gateway
