#include "gateway/quota_journal.h"

#include <algorithm>
#include <vector>

#include "core/log.h"

namespace ts::gateway {

void QuotaJournal::add(const std::string& key, int64_t delta, Millis ttl) {
  std::lock_guard lock(mu_);
  Charge& c = pending_[key];
  c.delta += delta;
  c.ttl = std::max(c.ttl, ttl);
  ++num_journaled_;
}

Result<int64_t> QuotaJournal::replay(LimitStore& store) {
  std::vector<std::pair<std::string, Charge>> todo;
  {
    std::lock_guard lock(mu_);
    todo.assign(pending_.begin(), pending_.end());
    pending_.clear();
  }
  int64_t applied = 0;
  Status failed;
  size_t i = 0;
  for (; i < todo.size(); ++i) {
    const auto& [key, c] = todo[i];
    auto r = c.delta == 0 ? Result<bool>(true) : store.quota_add_existing(key, c.delta, c.ttl);
    if (!r.ok() && r.status().code() == StatusCode::kUnavailable) {
      failed = r.status();
      break;
    }
    if (!r.ok()) log::error("quota journal: dropping a charge of " + std::to_string(c.delta) +
                            " tokens to " + key + ": " + r.status().message());
    ++applied;
  }
  std::lock_guard lock(mu_);
  for (; i < todo.size(); ++i) {  // put back what was not applied (merging new charges)
    Charge& c = pending_[todo[i].first];
    c.delta += todo[i].second.delta;
    c.ttl = std::max(c.ttl, todo[i].second.ttl);
  }
  num_replayed_ += applied;
  if (!failed.ok()) return failed;
  return applied;
}

int64_t QuotaJournal::num_pending() const {
  std::lock_guard lock(mu_);
  return int64_t(pending_.size());
}

int64_t QuotaJournal::tokens_pending() const {
  std::lock_guard lock(mu_);
  int64_t n = 0;
  for (const auto& [k, c] : pending_) n += c.delta;
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

}  // namespace ts::gateway
