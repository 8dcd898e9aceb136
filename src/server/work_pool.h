// A small pool of threads for handler work that may block on I/O (API-key lookups and ledger
// reports in SQL, admission against Redis), so the HTTP io threads never wait on a database:
// a slow or hung store then slows only the requests that need it, while /health, /metrics and
// streaming of running requests carry on.
//
// post() never blocks: it returns false when `max_queued` tasks already wait (the caller
// answers 503). Tasks must not throw (an escaping exception is caught and logged). shutdown()
// (and the destructor) runs the queued tasks, then joins. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ts::server {

class WorkPool {
 public:
  WorkPool(int num_threads, size_t max_queued);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  bool post(std::function<void()> task);
  // Refuses new tasks (post() returns false), runs the queued ones, joins. Idempotent.
  void shutdown();
  size_t num_queued() const;

 private:
  void run();
  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ts::server
