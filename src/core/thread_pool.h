// Persistent thread pool for compute kernels (PERFORMANCE.md "Threading").
//
// run(fn) executes fn(thread_index, num_threads) once on every thread of the pool, the calling
// thread being index 0, and returns when all have finished. parallel_chunks() instead hands
// out chunks dynamically and does not wait for workers that have not started (see there);
// prefer it for row-parallel work on machines that may be oversubscribed. Workers spin briefly
// (_mm_pause, ~100 us) waiting for the next job, then sleep on a futex, so back-to-back jobs
// cost well under a microsecond to publish. No allocation per run().
//
// Thread-safety: run()/parallel_chunks() must be called from one thread at a time (the engine
// thread) and not re-entered from fn; fn must be safe to run concurrently with itself for
// distinct thread indices / chunks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

namespace ts {

// One step of a spin wait: x86's pause (frees the core's resources for its sibling thread and
// saves power), elsewhere a yield.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

class ThreadPool {
 public:
  // num_threads <= 0 means all hardware threads. The pool owns num_threads - 1 workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  template <typename F>
  void run(F&& fn) {
    struct Thunk {
      static void call(void* ctx, int i, int n) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i, n); }
    };
    run_raw(&Thunk::call, static_cast<void*>(&fn));
  }

  // Splits [0, n) into contiguous ranges, one per thread, each a multiple of `grain`
  // (except the last), and calls fn(begin, end) for non-empty ranges.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    if (num_threads_ == 1 || n <= grain) {
      fn(int64_t{0}, n);
      return;
    }
    run([&](int i, int nt) {
      int64_t chunks = (n + grain - 1) / grain;
      int64_t per = chunks / nt, rem = chunks % nt;
      int64_t c0 = i * per + (i < rem ? i : rem);
      int64_t c1 = c0 + per + (i < rem ? 1 : 0);
      int64_t b = c0 * grain, e = c1 * grain < n ? c1 * grain : n;
      if (b < e) fn(b, e);
    });
  }

  // Runs fn(begin, end) over [0, n) in chunks of `grain` (the last may be shorter), claimed in
  // order by the calling thread and whichever workers are running. A worker that wakes only
  // after every chunk is claimed skips the job, so a descheduled worker (VM steal, an
  // oversubscribed machine) delays the caller by at most the chunk it is running, never by its
  // whole share. Chunks run exactly once, on any thread; fn must not assume which.
  template <typename F>
  void parallel_chunks(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (num_threads_ == 1 || n <= grain) {
      fn(int64_t{0}, n);
      return;
    }
    std::atomic<int64_t> next{0};
    auto body = [&](int, int) {
      for (;;) {
        const int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
        if (b >= n) return;
        fn(b, b + grain < n ? b + grain : n);
      }
    };
    struct Thunk {
      static void call(void* ctx, int i, int nt) { (*static_cast<decltype(body)*>(ctx))(i, nt); }
    };
    run_raw(&Thunk::call, static_cast<void*>(&body), /*all_threads=*/false);
  }

 private:
  using RawFn = void (*)(void* ctx, int thread_index, int num_threads);
  // all_threads: every worker runs fn (run()); otherwise only workers that join before the
  // caller's own fn returns (parallel_chunks()).
  void run_raw(RawFn fn, void* ctx, bool all_threads = true);

  struct Impl;
  int num_threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ts
