// The gateway's worker threads: a proxied request blocks its worker for as long as its upstream
// call runs (a long SSE stream included), so the pool grows on demand up to max_threads, and
// idle workers are kept (for idle_timeout) instead of a thread being created and destroyed per
// request (clone + munmap + TLB shootdowns were a measurable share of the gateway's CPU per
// request, SCALEOUT.md §8.14). Workers are kept until the pool is destroyed (so at most the peak
// concurrency of threads stays, parked on a condition variable). Each worker asks the kernel for a short scheduler slice
// (core/thread_sched.h) when slice > 0, so it preempts compute and load-generator threads at once
// when its upstream answers.
//
// post() never blocks: false when max_threads tasks are already running or queued (the caller
// answers 503). Tasks must not throw. wait_idle() waits until no task runs or waits (bounded by a
// deadline); the destructor runs what is queued, then stops the workers and joins them. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ts::router {

class WorkerPool {
 public:
  struct Options {
    size_t max_threads = 512;
    std::chrono::microseconds slice{0};              // scheduler slice hint; 0 = kernel default
  };
  explicit WorkerPool(Options options);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  bool post(std::function<void()> task);
  // True when every task finished before the deadline.
  bool wait_idle(std::chrono::milliseconds deadline);
  size_t num_threads() const;  // workers alive (busy + idle)
  size_t num_busy() const;     // tasks running or queued

 private:
  void worker();
  const Options opts_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  size_t num_threads_ = 0, num_idle_ = 0, num_busy_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;  // joined by the destructor
};

}  // namespace ts::router
