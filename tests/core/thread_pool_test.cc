#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ts {
namespace {

TEST(ThreadPoolTest, RunCallsEveryIndexOnceWithThreadCount) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    ASSERT_EQ(pool.num_threads(), n);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> bad_count{0};
    pool.run([&](int i, int nt) {
      if (nt != n) bad_count.fetch_add(1);
      hits[static_cast<size_t>(i)].fetch_add(1);
    });
    EXPECT_EQ(bad_count.load(), 0);
    for (int i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
  }
}

TEST(ThreadPoolTest, CallerIsThreadZero) {
  ThreadPool pool(3);
  const auto caller = std::this_thread::get_id();
  std::thread::id seen[3];
  pool.run([&](int i, int) { seen[i] = std::this_thread::get_id(); });
  EXPECT_EQ(seen[0], caller);
  EXPECT_NE(seen[1], caller);
  EXPECT_NE(seen[2], caller);
  EXPECT_NE(seen[1], seen[2]);
}

TEST(ThreadPoolTest, ManyBackToBackJobsAllComplete) {
  ThreadPool pool(2);
  std::vector<int64_t> partial(2, 0);
  int64_t expected = 0;
  for (int job = 0; job < 5000; ++job) {
    // Each run must see the previous run's writes (the run is a full fence both ways).
    pool.run([&](int i, int) { partial[static_cast<size_t>(i)] += job + i; });
    expected += 2 * job + 1;
  }
  int64_t total = 0;
  for (int64_t p : partial) total += p;
  EXPECT_EQ(total, expected);
}

TEST(ThreadPoolTest, WakesWorkersAfterTheySleep) {
  ThreadPool pool(3);
  std::atomic<int> count{0};
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin window
    pool.run([&](int, int) { count.fetch_add(1); });
    EXPECT_EQ(count.load(), 3 * (round + 1));
  }
}

TEST(ThreadPoolTest, ParallelForCoversRangeOnceInGrainMultiples) {
  ThreadPool pool(3);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}, int64_t{1001}}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> misaligned{0};
    pool.parallel_for(n, 16, [&](int64_t b, int64_t e) {
      if (b % 16 != 0 || (e != n && e % 16 != 0)) misaligned.fetch_add(1);
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    });
    EXPECT_EQ(misaligned.load(), 0);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, NonPositiveMeansHardwareThreads) {
  ThreadPool pool(0);
  const unsigned hw = std::thread::hardware_concurrency();
  EXPECT_EQ(pool.num_threads(), hw == 0 ? 1 : static_cast<int>(hw));
}

TEST(ThreadPoolTest, DestroysCleanlyWhileIdleOrAfterSleep) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(2);
    std::atomic<int> c{0};
    pool.run([&](int, int) { c.fetch_add(1); });
    EXPECT_EQ(c.load(), 2);
  }
  ThreadPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace
}  // namespace ts

namespace ts {
namespace {

TEST(ThreadPoolTest, ParallelChunksCoversRangeOnceInOrderedChunks) {
  ThreadPool pool(3);
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{64}, int64_t{1000}, int64_t{1001}}) {
    for (int64_t grain : {int64_t{1}, int64_t{16}, int64_t{100}}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bad{0};
      pool.parallel_chunks(n, grain, [&](int64_t b, int64_t e) {
        if (b % grain != 0 || (e - b != grain && e != n) || e > n) bad.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      EXPECT_EQ(bad.load(), 0) << "n=" << n << " grain=" << grain;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPoolTest, ParallelChunksCompletesWhileWorkersSleep) {
  ThreadPool pool(3);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // workers go to sleep
    std::atomic<int64_t> sum{0};
    pool.parallel_chunks(100, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    });
    EXPECT_EQ(sum.load(), 99 * 100 / 2);
  }
}

TEST(ThreadPoolTest, ChunkedAndAllThreadJobsInterleave) {
  // Late workers of a chunked job must neither run a later job twice nor miss an all-threads
  // job.
  ThreadPool pool(3);
  std::vector<int64_t> per_thread(3, 0);
  int64_t chunk_total = 0;
  for (int job = 0; job < 3000; ++job) {
    if (job % 2 == 0) {
      pool.run([&](int i, int) { per_thread[static_cast<size_t>(i)] += 1; });
    } else {
      std::atomic<int64_t> s{0};
      pool.parallel_chunks(7, 1, [&](int64_t b, int64_t e) { s.fetch_add(e - b); });
      chunk_total += s.load();
    }
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(per_thread[static_cast<size_t>(i)], 1500) << "thread " << i;
  EXPECT_EQ(chunk_total, 1500 * 7);
}

}  // namespace
}  // namespace ts
