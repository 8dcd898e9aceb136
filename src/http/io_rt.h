// Real-time scheduling for the HTTP io threads (`--io-rt-priority N`: serve's default is 1, the
// gateway's 0; ServerOptions::io_rt_priority, 0 in the library): each io thread asks for
// SCHED_RR at priority N, so a scrape or a new request is served the moment it arrives even
// while every core computes (SCALEOUT.md §8.1's scrape p99: on the fair scheduler its tail is a
// replica io thread waiting for a CPU, up to a scheduler tick). A guard thread samples each io
// thread every `window`:
//  - CPU: a real-time thread that loops would starve the machine, so one that used more than
//    `budget` of CPU in a window is demoted;
//  - wake-ups: every wake-up of a real-time io thread preempts a compute thread (and the other
//    compute threads then wait for it at the next pool barrier): ~15-20 us of lost compute per
//    wake-up on the 2-core Zen 5 host, measured as an 11-15 % decode loss with the 2-layer synth
//    model, whose ~0.3 ms steps make every SSE token a wake-up. One that woke more than
//    `max_wakeups` times in a window (voluntary context switches) is demoted too, so a
//    streaming-heavy replica keeps its decode throughput. With real model sizes (3-15 ms steps)
//    the io threads wake a few hundred times a second and stay real-time: SmolLM2/Qwen2.5-shaped
//    replicas decoded as fast with it as without (bench/scaleout_scrape.mjs MODEL=...).
// A demoted thread returns to normal scheduling (its fair-scheduler slice hint kept) and is
// counted; after kQuietWindows windows under half of both limits it is promoted again.
//
// Without the right to real-time scheduling (no CAP_SYS_NICE and RLIMIT_RTPRIO below N, or a
// container that forbids it) the threads run normally and it is logged once per process (a
// warning when N was asked for explicitly, info for serve's default): never fatal.
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
  int64_t max_wakeups = 0;                      // wake-ups one io thread may have per window (0 = any)
  bool explicit_request = true;                 // asked for by the user: a refusal is a warning
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
  uint64_t demotions() const { return demotions_.load(); }     // demoted for CPU or wake-ups over the limits
  uint64_t promotions() const { return promotions_.load(); }   // promoted again after quiet windows
  bool denied() const { return denied_.load(); }               // some thread was refused SCHED_RR

 private:
  struct Watched {
    int tid = 0;
    clockid_t clock{};
    int64_t last_ns = -1;
    int64_t last_wakes = -1;  // voluntary context switches at the last sample (-1: unknown)
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
