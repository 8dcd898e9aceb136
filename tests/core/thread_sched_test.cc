#include "core/thread_sched.h"

#include <gtest/gtest.h>

#include <thread>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace ts {
namespace {

#if defined(__linux__)
TEST(ThreadSched, BatchPolicyAppliesToTheCallingThreadOnly) {
  int main_policy = sched_getscheduler(0);
  int policy = -1;
  std::thread t([&] {
    Status st = set_current_thread_batch();
    ASSERT_TRUE(st.ok()) << st.to_string();
    policy = sched_getscheduler(0);
  });
  t.join();
  EXPECT_EQ(policy, SCHED_BATCH);
  EXPECT_EQ(sched_getscheduler(0), main_policy);  // this thread is untouched
}

TEST(ThreadSched, SliceRequestIsAcceptedOrReportedAndNameIsSet) {
  std::thread t([] {
    set_current_thread_name("ts-test-thread-long-name");
    char name[32] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    EXPECT_STREQ(name, "ts-test-thread-");  // truncated to 15 bytes
    Status st = set_current_thread_slice(std::chrono::microseconds(100));
    // Kernels before 6.12 refuse a custom slice; the call then says so and changes nothing.
    if (!st.ok()) {
      EXPECT_NE(st.message().find("sched_setattr"), std::string::npos) << st.to_string();
    }
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);  // the policy stays
  });
  t.join();
}
#endif

}  // namespace
}  // namespace ts
