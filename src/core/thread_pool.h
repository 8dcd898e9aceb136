// Persistent thread pool for compute kernels (PERFORMANCE.md "Threading").
//
// run(fn) executes fn(thread_index, num_threads) once on every thread of the pool, the calling
// thread being index 0, and returns when all have finished. Workers spin briefly
// (_mm_pause) waiting for the next job, then sleep on a futex/condition variable, so back-to-back
// jobs cost well under a microsecond to publish. No allocation per run().
//
// Thread-safety: run() must be called from one thread at a time (the engine thread); fn must be
// safe to run concurrently with itself for distinct thread indices.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

namespace ts {

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

 private:
  using RawFn = void (*)(void* ctx, int thread_index, int num_threads);
  void run_raw(RawFn fn, void* ctx);

  struct Impl;
  int num_threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ts
