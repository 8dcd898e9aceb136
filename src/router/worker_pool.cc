#include "router/worker_pool.h"

#include "core/log.h"
#include "core/thread_sched.h"

namespace ts::router {

WorkerPool::WorkerPool(Options options) : opts_(options) {}

WorkerPool::~WorkerPool() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  work_cv_.notify_all();
  for (auto& t : threads) t.join();
}

bool WorkerPool::post(std::function<void()> task) {
  std::unique_lock lock(mu_);
  if (stop_ || num_busy_ >= opts_.max_threads) return false;
  ++num_busy_;
  queue_.push_back(std::move(task));
  if (num_idle_ >= queue_.size()) {
    lock.unlock();
    work_cv_.notify_one();
    return true;
  }
  ++num_threads_;
  threads_.emplace_back([this] { worker(); });
  return true;
}

void WorkerPool::worker() {
  set_current_thread_name("ts-gw-worker");
  if (opts_.slice.count() > 0) (void)set_current_thread_slice(opts_.slice);
  std::unique_lock lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) break;
      ++num_idle_;
      work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      --num_idle_;
      continue;
    }
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // captured state (an Exchange) released before the worker is counted idle
    lock.lock();
    if (--num_busy_ == 0) idle_cv_.notify_all();
  }
  --num_threads_;
}

bool WorkerPool::wait_idle(std::chrono::milliseconds deadline) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_for(lock, deadline, [this] { return num_busy_ == 0; });
}

size_t WorkerPool::num_threads() const {
  std::lock_guard lock(mu_);
  return num_threads_;
}

size_t WorkerPool::num_busy() const {
  std::lock_guard lock(mu_);
  return num_busy_;
}

}  // namespace ts::router
