// EndpointPool: the gateway's live view of its replicas. One poller thread scrapes each
// endpoint's /ready and /metrics every `poll_interval` (endpoints in parallel, one keep-alive
// net::HttpSession each), and the proxy reports each attempt's outcome for passive ejection.
//
// Health, per endpoint:
//   ready      the last /ready answered 200 (a 503 while loading or draining, or no answer,
//              makes it not ready at once; the picker filters it out)
//   ejected    after `eject_after` consecutive failed attempts by the proxy; cleared after
//              `readmit_after` consecutive successful /ready polls
// Metrics older than the picker's stale_after are flagged by the picker, not here.
//
// set_endpoints() replaces the list (discovery file changed): endpoints that stay keep their
// state; new ones start not ready until their first poll.
//
// Thread-safe: every method may be called from any thread. Each poll call is bounded by
// poll_timeout (connect included), so an address that black-holes SYNs delays a round by at most
// that.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/http_client.h"
#include "router/endpoints.h"
#include "router/picker.h"

namespace ts::router {

struct PoolOptions {
  std::chrono::milliseconds poll_interval{50};
  std::chrono::milliseconds poll_timeout{500};  // per /ready or /metrics call
  int eject_after = 3;    // consecutive failed proxy attempts
  int readmit_after = 2;  // consecutive successful /ready polls
};

struct EndpointCounters {
  int64_t attempts_ok = 0;
  int64_t attempts_failed = 0;
  int64_t ejections = 0;
};

class EndpointPool {
 public:
  explicit EndpointPool(PoolOptions opts = {});
  ~EndpointPool();  // stop()
  EndpointPool(const EndpointPool&) = delete;
  EndpointPool& operator=(const EndpointPool&) = delete;

  void set_endpoints(const std::vector<Endpoint>& endpoints);
  void start();  // the poller thread
  void stop();   // joins it; idempotent

  // The picker's input, now.
  std::vector<EndpointState> snapshot() const;
  // Ready, not-ejected endpoints and the sum of their waiting gauges, without copying the
  // states (the proxy's routing inputs, once per request).
  void ready_load(int64_t* healthy, double* waiting) const;
  // Address of an endpoint by name; false when it left the pool.
  bool lookup(const std::string& name, Endpoint* out) const;

  // Proxy bookkeeping.
  void begin_request(const std::string& name);
  void end_request(const std::string& name);
  void report_attempt(const std::string& name, bool ok);

  std::map<std::string, EndpointCounters> counters() const;
  bool any_ready() const;

 private:
  struct Entry {
    Endpoint ep;
    EndpointState state;
    int consecutive_failures = 0;
    int ready_streak = 0;
    EndpointCounters counters;
  };
  void poll_loop();
  // One endpoint's /ready + /metrics, and its state updated (one thread per endpoint a round).
  void poll_one(const Endpoint& ep, net::HttpSession& session);

  PoolOptions opts_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread poller_;
};

}  // namespace ts::router
