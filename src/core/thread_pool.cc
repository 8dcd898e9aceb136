#include "core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ts {

namespace {
// How long a worker spins on the job word before sleeping, and how long the caller spins on
// the completion count before yielding. Spinning keeps back-to-back jobs (one per op in a
// forward pass) at sub-microsecond latency; sleeping keeps an idle server off the CPU.
constexpr auto kSpinTime = std::chrono::microseconds(100);
constexpr int kSpinCheckEvery = 64;
}  // namespace

struct ThreadPool::Impl {
  // A published job. Two slots, indexed by generation parity: a worker that woke for an older
  // (already closed) job may still look at the state word while the next job is written.
  struct Job {
    RawFn fn = nullptr;
    void* ctx = nullptr;
    bool all_threads = true;
  };
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  static constexpr uint64_t kCountMask = kClosed - 1;

  // Publication: the caller writes jobs[g & 1], stores join = g << 32, then generation = g
  // (release). Workers wait on generation, then join by CAS-incrementing the count in `join`
  // while its generation is still g and it is not closed; only then do they read the job.
  alignas(64) std::atomic<uint32_t> generation{0};
  alignas(64) std::atomic<uint64_t> join{0};  // [generation:32][closed:1][active:31]
  alignas(64) std::atomic<int> done{0};       // workers finished with an all-threads job
  Job jobs[2];
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;

  void worker_loop(int index, int num_threads) {
    uint32_t seen = 0;
    for (;;) {
      const uint32_t g = wait_for_change(seen);
      if (stop.load(std::memory_order_acquire)) return;
      seen = g;
      uint64_t s = join.load(std::memory_order_acquire);
      for (;;) {
        if (static_cast<uint32_t>(s >> 32) != g || (s & kClosed) != 0) break;  // missed it
        if (join.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
          const Job job = jobs[g & 1];  // stable: the caller waits for us before the next job
          job.fn(job.ctx, index, num_threads);
          join.fetch_sub(1, std::memory_order_release);
          if (job.all_threads) done.fetch_add(1, std::memory_order_release);
          break;
        }
      }
    }
  }

  uint32_t wait_for_change(uint32_t seen) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 1;; ++i) {
      uint32_t g = generation.load(std::memory_order_acquire);
      if (g != seen) return g;
      cpu_relax();
      if (i % kSpinCheckEvery == 0 && std::chrono::steady_clock::now() - start > kSpinTime) break;
    }
    for (;;) {
      generation.wait(seen, std::memory_order_acquire);  // futex on Linux
      uint32_t g = generation.load(std::memory_order_acquire);
      if (g != seen) return g;
    }
  }
};

namespace {
// Spin briefly (workers normally finish together), then yield so a descheduled worker on an
// oversubscribed machine can run.
template <typename Pred>
void wait_until(Pred done) {
  for (int i = 0; !done(); ++i) {
    if (i < 4000) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}
}  // namespace

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

void ThreadPool::run_raw(RawFn fn, void* ctx, bool all_threads) {
  if (num_threads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  Impl& im = *impl_;
  const uint32_t g = im.generation.load(std::memory_order_relaxed) + 1;
  im.jobs[g & 1] = Impl::Job{fn, ctx, all_threads};
  im.done.store(0, std::memory_order_relaxed);
  im.join.store(static_cast<uint64_t>(g) << 32, std::memory_order_release);
  im.generation.store(g, std::memory_order_release);
  im.generation.notify_all();
  fn(ctx, 0, num_threads_);
  if (all_threads) {
    const int workers = num_threads_ - 1;
    wait_until([&] { return im.done.load(std::memory_order_acquire) == workers; });
  } else {
    // Close the job to late workers, then wait only for those that joined.
    im.join.fetch_or(Impl::kClosed, std::memory_order_acq_rel);
    wait_until([&] { return (im.join.load(std::memory_order_acquire) & Impl::kCountMask) == 0; });
  }
}

}  // namespace ts
