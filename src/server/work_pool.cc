#include "server/work_pool.h"

#include <algorithm>
#include <exception>

#include "core/log.h"

namespace ts::server {

WorkPool::WorkPool(int num_threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < std::max(1, num_threads); ++i) threads_.emplace_back([this] { run(); });
}

WorkPool::~WorkPool() { shutdown(); }

void WorkPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

bool WorkPool::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stop_ || tasks_.size() >= max_queued_) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

size_t WorkPool::num_queued() const {
  std::lock_guard lock(mu_);
  return tasks_.size();
}

void WorkPool::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      log::error(std::string("work pool task failed: ") + e.what());
    } catch (...) {
      log::error("work pool task failed with an unknown exception");
    }
    lock.lock();
  }
}

}  // namespace ts::server
