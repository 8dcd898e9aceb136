#include "gateway/circuit_breaker.h"

#include "core/log.h"

namespace ts::gateway {

const char* breaker_state_name(BreakerState s) {
  switch (s) {
    case BreakerState::kClosed: return "closed";
    case BreakerState::kOpen: return "open";
    case BreakerState::kHalfOpen: return "half_open";
  }
  return "?";
}

bool CircuitBreaker::allow() {
  std::lock_guard lock(mu_);
  switch (state_) {
    case BreakerState::kClosed: return true;
    case BreakerState::kOpen:
      if (std::chrono::steady_clock::now() < open_until_) break;
      state_ = BreakerState::kHalfOpen;
      probe_in_flight_ = true;
      return true;
    case BreakerState::kHalfOpen:
      if (probe_in_flight_) break;
      probe_in_flight_ = true;
      return true;
  }
  ++num_rejected_;
  return false;
}

void CircuitBreaker::on_success() {
  std::lock_guard lock(mu_);
  consecutive_failures_ = 0;
  probe_in_flight_ = false;
  if (state_ != BreakerState::kClosed) {
    state_ = BreakerState::kClosed;
    log::info(options_.name + " reachable again: circuit closed");
  }
}

void CircuitBreaker::on_failure(const std::string& why) {
  std::lock_guard lock(mu_);
  probe_in_flight_ = false;
  ++consecutive_failures_;
  bool open = state_ == BreakerState::kHalfOpen ||
              (state_ == BreakerState::kClosed && consecutive_failures_ >= options_.failures_to_open);
  if (!open) return;
  if (state_ == BreakerState::kClosed) {
    ++num_opened_;
    log::warn(options_.name + " unreachable (" + why + "): circuit open after " +
              std::to_string(consecutive_failures_) + " failures; calls fail fast, probing every " +
              std::to_string(options_.open_for.count()) + " ms");
  }
  state_ = BreakerState::kOpen;
  open_until_ = std::chrono::steady_clock::now() + options_.open_for;
}

BreakerState CircuitBreaker::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

namespace {

class BreakerLimitStore final : public LimitStore {
 public:
  BreakerLimitStore(std::unique_ptr<LimitStore> inner, BreakerOptions options)
      : inner_(std::move(inner)), breaker_(std::move(options)) {}

  std::string describe() const override { return inner_->describe(); }
  LimitStoreHealth health() const override {
    return {.breaker = breaker_.state(), .num_opened = breaker_.num_opened(),
            .num_fast_failures = breaker_.num_rejected()};
  }

  Result<TakeResult> take(std::span<const BucketSpec> buckets, WallTime now) override {
    return call([&] { return inner_->take(buckets, now); });
  }
  Status give(const BucketSpec& bucket, WallTime now) override {
    return call([&] { return inner_->give(bucket, now); });
  }
  Result<QuotaTake> quota_reserve(std::span<const QuotaSpec> quotas) override {
    return call([&] { return inner_->quota_reserve(quotas); });
  }
  Status quota_init(const std::string& key, int64_t used, Millis ttl) override {
    return call([&] { return inner_->quota_init(key, used, ttl); });
  }
  Status quota_add(const std::string& key, int64_t delta, Millis ttl) override {
    return call([&] { return inner_->quota_add(key, delta, ttl); });
  }
  Result<bool> quota_add_existing(const std::string& key, int64_t delta, Millis ttl) override {
    return call([&] { return inner_->quota_add_existing(key, delta, ttl); });
  }
  Result<bool> quota_add_existing_once(const std::string& key, int64_t delta, Millis ttl,
                                       const std::string& charge_id) override {
    return call([&] { return inner_->quota_add_existing_once(key, delta, ttl, charge_id); });
  }
  Result<std::optional<int64_t>> quota_used(const std::string& key) override {
    return call([&] { return inner_->quota_used(key); });
  }
  bool shared() const override { return inner_->shared(); }
  Result<bool> claim_once(const std::string& key, Millis ttl) override {
    return call([&] { return inner_->claim_once(key, ttl); });
  }

 private:
  static const Status& status_of(const Status& s) { return s; }
  template <typename T>
  static const Status& status_of(const Result<T>& r) { return r.status(); }

  template <typename F>
  auto call(F&& f) -> decltype(f()) {
    if (!breaker_.allow())
      return unavailable("limit store " + inner_->describe() +
                         ": circuit open (recent calls failed; retrying shortly)");
    auto r = f();
    const Status& st = status_of(r);
    if (st.code() == StatusCode::kUnavailable) breaker_.on_failure(st.message());
    else breaker_.on_success();
    return r;
  }

  std::unique_ptr<LimitStore> inner_;
  CircuitBreaker breaker_;
};

}  // namespace

std::unique_ptr<LimitStore> make_breaker_limit_store(std::unique_ptr<LimitStore> inner,
                                                     BreakerOptions options) {
  return std::make_unique<BreakerLimitStore>(std::move(inner), std::move(options));
}

}  // namespace ts::gateway
