// In-process LimitStore: maps under one mutex.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "gateway/limit_store.h"

namespace ts::gateway {

double bucket_refill(double level, int64_t last_ms, int64_t now_ms, int64_t capacity) {
  if (now_ms > last_ms)
    level += double(now_ms - last_ms) * double(capacity) / double(kRateWindow.count());
  return std::min(level, double(capacity));
}

BucketState bucket_state(double level, int64_t capacity) {
  BucketState s;
  s.limit = capacity;
  s.remaining = std::max<int64_t>(0, int64_t(std::floor(level + 1e-9)));
  double missing = double(capacity) - level;
  s.reset = missing <= 1e-9 ? Millis(0)
                            : Millis(int64_t(std::ceil(missing * double(kRateWindow.count()) /
                                                       double(capacity))));
  return s;
}

Millis bucket_wait(double level, int64_t cost, int64_t capacity) {
  double missing = double(cost) - level;
  if (missing <= 1e-9) return Millis(0);
  return Millis(int64_t(std::ceil(missing * double(kRateWindow.count()) / double(capacity))));
}

namespace {

class MemoryLimitStore final : public LimitStore {
 public:
  std::string describe() const override { return "memory"; }

  Result<TakeResult> take(std::span<const BucketSpec> buckets, WallTime now) override {
    int64_t now_ms = to_unix_ms(now);
    std::lock_guard lock(mu_);
    TakeResult r;
    std::vector<double> levels(buckets.size());
    for (size_t i = 0; i < buckets.size(); ++i) {
      const BucketSpec& b = buckets[i];
      auto it = buckets_.find(b.key);
      levels[i] = it == buckets_.end()
                      ? double(b.capacity)
                      : bucket_refill(it->second.level, it->second.last_ms, now_ms, b.capacity);
      if (r.refused < 0 && levels[i] + 1e-9 < double(b.cost)) {
        r.refused = int(i);
        r.retry_after = bucket_wait(levels[i], b.cost, b.capacity);
      }
    }
    r.admitted = r.refused < 0;
    for (size_t i = 0; i < buckets.size(); ++i) {
      if (r.admitted) {
        levels[i] -= double(buckets[i].cost);
        Bucket& st = buckets_[buckets[i].key];
        st.level = levels[i];
        st.last_ms = std::max(now_ms, st.last_ms);
      }
      r.states.push_back(bucket_state(levels[i], buckets[i].capacity));
    }
    return r;
  }

  Status give(const BucketSpec& b, WallTime now) override {
    int64_t now_ms = to_unix_ms(now);
    std::lock_guard lock(mu_);
    auto it = buckets_.find(b.key);
    if (it == buckets_.end()) return ok_status();
    Bucket& st = it->second;
    st.level = std::min(double(b.capacity),
                        bucket_refill(st.level, st.last_ms, now_ms, b.capacity) + double(b.cost));
    st.last_ms = std::max(now_ms, st.last_ms);
    return ok_status();
  }

  Result<QuotaTake> quota_reserve(std::span<const QuotaSpec> quotas) override {
    std::lock_guard lock(mu_);
    QuotaTake r;
    for (size_t i = 0; i < quotas.size(); ++i) {
      auto it = counters_.find(quotas[i].key);
      if (it == counters_.end()) {
        r.uninitialized = int(i);
        r.used.clear();
        return r;
      }
      r.used.push_back(it->second);
      if (r.refused < 0 && it->second + quotas[i].amount > quotas[i].limit) r.refused = int(i);
    }
    r.admitted = r.refused < 0;
    if (r.admitted)
      for (size_t i = 0; i < quotas.size(); ++i) r.used[i] = counters_[quotas[i].key] += quotas[i].amount;
    return r;
  }

  Status quota_init(const std::string& key, int64_t used, Millis) override {
    std::lock_guard lock(mu_);
    counters_.try_emplace(key, used);
    return ok_status();
  }

  Status quota_add(const std::string& key, int64_t delta, Millis) override {
    std::lock_guard lock(mu_);
    counters_[key] += delta;
    return ok_status();
  }

  Result<bool> quota_add_existing(const std::string& key, int64_t delta, Millis) override {
    std::lock_guard lock(mu_);
    auto it = counters_.find(key);
    if (it == counters_.end()) return false;
    it->second += delta;
    return true;
  }

  Result<bool> quota_add_existing_once(const std::string& key, int64_t delta, Millis,
                                       const std::string& charge_id) override {
    std::lock_guard lock(mu_);
    auto it = counters_.find(key);
    if (it == counters_.end()) return false;
    if (applied_charges_.insert(charge_id).second) it->second += delta;
    return true;
  }

  Result<std::optional<int64_t>> quota_used(const std::string& key) override {
    std::lock_guard lock(mu_);
    auto it = counters_.find(key);
    if (it == counters_.end()) return std::optional<int64_t>();
    return std::optional<int64_t>(it->second);
  }

 private:
  struct Bucket {
    double level = 0;
    int64_t last_ms = 0;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;
  // One counter per (scope, period); a few per tenant per month, so never pruned.
  std::unordered_map<std::string, int64_t> counters_;
  std::unordered_set<std::string> applied_charges_;  // quota_add_existing_once ids
};

}  // namespace

std::unique_ptr<LimitStore> make_memory_limit_store() { return std::make_unique<MemoryLimitStore>(); }

}  // namespace ts::gateway
