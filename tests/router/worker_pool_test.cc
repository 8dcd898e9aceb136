#include "router/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

namespace ts::router {
namespace {

using namespace std::chrono_literals;

TEST(WorkerPool, RunsEveryTaskAndReusesItsThreads) {
  WorkerPool pool(WorkerPool::Options{.max_threads = 16});
  std::atomic<int> ran{0};
  std::mutex mu;
  std::set<std::thread::id> ids;
  for (int i = 0; i < 200; ++i) {  // one at a time: an idle worker takes each next task
    ASSERT_TRUE(pool.post([&] {
      ++ran;
      std::lock_guard lock(mu);
      ids.insert(std::this_thread::get_id());
    }));
    ASSERT_TRUE(pool.wait_idle(5s));
  }
  EXPECT_EQ(ran.load(), 200);
  EXPECT_LE(pool.num_threads(), 2u);  // not a thread per task
  EXPECT_EQ(ids.size(), pool.num_threads());
  EXPECT_EQ(pool.num_busy(), 0u);
}

TEST(WorkerPool, GrowsToTheConcurrencyAndRefusesBeyondMaxThreads) {
  WorkerPool pool(WorkerPool::Options{.max_threads = 4});
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> started{0};
  auto blocker = [&] {
    ++started;
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return release; });
  };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.post(blocker));
  EXPECT_FALSE(pool.post([] {}));  // 4 running: the caller answers 503
  for (int i = 0; i < 200 && started.load() < 4; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(started.load(), 4);  // all four ran at once, each on its own worker
  EXPECT_EQ(pool.num_threads(), 4u);
  EXPECT_FALSE(pool.wait_idle(20ms));
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(pool.wait_idle(5s));
  EXPECT_TRUE(pool.post([] {}));  // room again
  EXPECT_TRUE(pool.wait_idle(5s));
  EXPECT_EQ(pool.num_threads(), 4u);
}

TEST(WorkerPool, DestructorRunsQueuedTasksAndJoins) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(WorkerPool::Options{.max_threads = 2});
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(pool.post([&] {
        std::this_thread::sleep_for(20ms);
        ++ran;
      }));
  }
  EXPECT_EQ(ran.load(), 2);
}

}  // namespace
}  // namespace ts::router
