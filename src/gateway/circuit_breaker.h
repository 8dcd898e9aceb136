// A circuit breaker for a remote dependency (the limit store), and a LimitStore decorator that
// uses it so that an unreachable or hanging Redis costs at most a few timeouts, not one per
// request.
//
//   closed     every call goes through; `failures_to_open` consecutive kUnavailable results
//              (connection refused, timeouts) open the circuit
//   open       calls fail at once with kUnavailable ("circuit open"), no network I/O, for
//              `open_for`; then the next call is let through as a probe (half-open)
//   half-open  one probe at a time; others fail fast. The probe's success closes the circuit,
//              its failure opens it again for another `open_for`
//
// Transitions are logged (warn when opening, info when closing). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "gateway/limit_store.h"

namespace ts::gateway {

struct BreakerOptions {
  int failures_to_open = 3;           // consecutive unavailable results that open the circuit
  Millis open_for{1000};              // fail-fast time before a half-open probe
  std::string name = "limit store";   // for log lines
};

const char* breaker_state_name(BreakerState s);  // "closed" | "open" | "half_open"

class CircuitBreaker {
 public:
  explicit CircuitBreaker(BreakerOptions options) : options_(std::move(options)) {}
  // True when a call may go to the dependency now (in half-open: this caller is the probe and
  // must report its outcome).
  bool allow();
  void on_success();
  void on_failure(const std::string& why);
  BreakerState state() const;
  int64_t num_opened() const { return num_opened_.load(); }
  int64_t num_rejected() const { return num_rejected_.load(); }

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;
  const BreakerOptions options_;
  mutable std::mutex mu_;
  BreakerState state_ = BreakerState::kClosed;
  int consecutive_failures_ = 0;
  bool probe_in_flight_ = false;
  SteadyTime open_until_{};
  std::atomic<int64_t> num_opened_{0}, num_rejected_{0};
};

// Wraps `inner`: every call asks the breaker first; kUnavailable results count as failures,
// anything else (including script errors) as success. health() reports the breaker.
std::unique_ptr<LimitStore> make_breaker_limit_store(std::unique_ptr<LimitStore> inner,
                                                     BreakerOptions options);

}  // namespace ts::gateway
