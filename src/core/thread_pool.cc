#include "core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TS_CPU_RELAX() _mm_pause()
#else
#define TS_CPU_RELAX() std::this_thread::yield()
#endif

namespace ts {

namespace {
// How long a worker spins on the job word before sleeping, and how long the caller spins on
// the completion count before yielding. Spinning keeps back-to-back jobs (one per op in a
// forward pass) at sub-microsecond latency; sleeping keeps an idle server off the CPU.
constexpr auto kSpinTime = std::chrono::microseconds(100);
constexpr int kSpinCheckEvery = 64;
}  // namespace

struct ThreadPool::Impl {
  // Job publication: fn/ctx are written, then `generation` is bumped with release order.
  // Workers read generation with acquire order and then fn/ctx.
  alignas(64) std::atomic<uint32_t> generation{0};
  alignas(64) std::atomic<int> pending{0};  // workers still running the current job
  RawFn fn = nullptr;
  void* ctx = nullptr;
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;

  void worker_loop(int index, int num_threads) {
    uint32_t seen = 0;
    for (;;) {
      uint32_t g = wait_for_change(seen);
      if (stop.load(std::memory_order_acquire)) return;
      seen = g;
      fn(ctx, index, num_threads);
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  uint32_t wait_for_change(uint32_t seen) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 1;; ++i) {
      uint32_t g = generation.load(std::memory_order_acquire);
      if (g != seen) return g;
      TS_CPU_RELAX();
      if (i % kSpinCheckEvery == 0 && std::chrono::steady_clock::now() - start > kSpinTime) break;
    }
    for (;;) {
      generation.wait(seen, std::memory_order_acquire);  // futex on Linux
      uint32_t g = generation.load(std::memory_order_acquire);
      if (g != seen) return g;
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : impl_(std::make_unique<Impl>()) {
  if (num_threads <= 0) {
    unsigned hw = std::thread::hardware_concurrency();
    num_threads = hw == 0 ? 1 : static_cast<int>(hw);
  }
  num_threads_ = num_threads;
  impl_->workers.reserve(static_cast<size_t>(num_threads_ - 1));
  for (int i = 1; i < num_threads_; ++i) {
    impl_->workers.emplace_back([this, i] { impl_->worker_loop(i, num_threads_); });
  }
}

ThreadPool::~ThreadPool() {
  impl_->stop.store(true, std::memory_order_release);
  impl_->generation.fetch_add(1, std::memory_order_acq_rel);
  impl_->generation.notify_all();
  for (auto& t : impl_->workers) t.join();
}

void ThreadPool::run_raw(RawFn fn, void* ctx) {
  if (num_threads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  Impl& im = *impl_;
  im.fn = fn;
  im.ctx = ctx;
  im.pending.store(num_threads_ - 1, std::memory_order_relaxed);
  im.generation.fetch_add(1, std::memory_order_release);
  im.generation.notify_all();
  fn(ctx, 0, num_threads_);
  // Wait for the workers: spin first (they normally finish at the same time), then yield so a
  // descheduled worker on an oversubscribed machine can run.
  for (int i = 0; im.pending.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 4000) {
      TS_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace ts
