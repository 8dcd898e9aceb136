// Real-time scheduling for the HTTP io threads, opt-in (`--io-rt-priority N` of serve and
// gateway; ServerOptions::io_rt_priority): each io thread asks for SCHED_RR at priority N, so a
// scrape or an SSE write is served the moment it is ready even while every core computes
// (SCALEOUT.md §8.1's scrape p99: what is left of its tail is a replica io thread waiting for a
// CPU). A real-time thread that loops would starve the machine, so a guard thread samples each
// io thread's CPU time every `window`; one that used more than `budget` in a window is demoted
// to normal scheduling (its fair-scheduler slice hint kept) and counted; after kQuietWindows
// windows under half the budget it is promoted again. Off by default: a real-time io thread
// preempts the compute threads at every wake-up, which cost decode throughput (11-20 % on the
// 2-core host, session scale12).
//
// Without the right to real-time scheduling (no CAP_SYS_NICE and RLIMIT_RTPRIO below N, or a
// container that forbids it) each thread logs it once per process and runs normally: never fatal.
// Thread-safe: enter() from the io threads, the counters from any thread; stop() once, from the
// controlling thread, after the io threads ended.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace ts::http {

struct IoRtOptions {
  int priority = 0;                             // SCHED_RR priority (1..99); 0 = off
  std::chrono::microseconds budget{50'000};     // CPU one io thread may use per window
  std::chrono::milliseconds window{250};
  std::chrono::microseconds fair_slice{0};      // slice hint kept while demoted (0 = default)
};

class IoRtGuard {
 public:
  static constexpr int kQuietWindows = 8;  // windows under budget/2 before a demoted thread is promoted

  explicit IoRtGuard(IoRtOptions opts);
  ~IoRtGuard();  // stop()
  IoRtGuard(const IoRtGuard&) = delete;
  IoRtGuard& operator=(const IoRtGuard&) = delete;

  // From an io thread: switch the calling thread to SCHED_RR and watch it. false when denied
  // (logged, the thread keeps its scheduling).
  bool enter();
  // Stops the guard thread (idempotent).
  void stop();

  int rt_threads() const { return rt_threads_.load(); }        // io threads under SCHED_RR now
  uint64_t demotions() const { return demotions_.load(); }     // demoted for using over budget
  uint64_t promotions() const { return promotions_.load(); }   // promoted again after quiet windows
  bool denied() const { return denied_.load(); }               // some thread was refused SCHED_RR

 private:
  struct Watched {
    int tid = 0;
    clockid_t clock{};
    int64_t last_ns = -1;
    bool rt = true;
    int quiet = 0;
  };
  void run();
  bool set_rt(int tid, bool rt);

  IoRtOptions opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<Watched> threads_;
  std::thread guard_;
  std::atomic<int> rt_threads_{0};
  std::atomic<uint64_t> demotions_{0}, promotions_{0};
  std::atomic<bool> denied_{false};
};

}  // namespace ts::http
