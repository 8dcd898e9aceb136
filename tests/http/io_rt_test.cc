// ServerOptions::io_rt_priority (http/io_rt.h): io threads under SCHED_RR, demoted by the guard
// when they use more than their CPU budget, promoted again after quiet windows; without the
// right to real-time scheduling the server logs and serves normally.
#include <gtest/gtest.h>

#include <linux/capability.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "http/server.h"
#include "support/wire_client.h"

namespace ts::http {
namespace {

using namespace std::chrono_literals;

// The scheduling policy of each of this process's threads named `name`.
std::vector<int> policies_of(const std::string& name) {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(e.path() / "comm");
    std::string comm;
    std::getline(f, comm);
    if (comm != name) continue;
    const int tid = std::stoi(e.path().filename().string());
    out.push_back(sched_getscheduler(tid));
  }
  return out;
}

// Whether this process may use SCHED_RR at all (root or CAP_SYS_NICE or RLIMIT_RTPRIO).
bool rt_allowed() {
  std::thread t;
  bool ok = false;
  t = std::thread([&ok] {
    sched_param p{.sched_priority = 1};
    ok = pthread_setschedparam(pthread_self(), SCHED_RR, &p) == 0;
  });
  t.join();
  return ok;
}

std::unique_ptr<Server> rt_server(int priority, std::chrono::microseconds budget, std::chrono::milliseconds window,
                                  int64_t max_wakeups = 0) {
  auto s = std::make_unique<Server>(ServerOptions{.host = "127.0.0.1", .port = 0, .num_io_threads = 2,
                                                  .io_rt_priority = priority, .io_rt_budget = budget,
                                                  .io_rt_window = window, .io_rt_max_wakeups = max_wakeups});
  s->route(Method::kGet, "/hello", [](const ExchangePtr& ex) {
    Response r;
    r.body = "hello";
    ex->respond(std::move(r));
  });
  s->route(Method::kGet, "/burn", [](const ExchangePtr& ex) {  // CPU on the io thread itself
    const auto until = std::chrono::steady_clock::now() + 150ms;
    volatile uint64_t x = 0;
    while (std::chrono::steady_clock::now() < until) x = x + 1;
    Response r;
    r.body = "burnt";
    ex->respond(std::move(r));
  });
  return s;
}

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5000ms) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

TEST(IoRtPriority, OffByDefault) {
  Server s(ServerOptions{.host = "127.0.0.1", .port = 0, .num_io_threads = 2});
  ASSERT_TRUE(s.start().ok());
  for (int p : policies_of("ts-http-io")) EXPECT_NE(p, SCHED_RR);
  EXPECT_EQ(s.stats().io_rt_threads, 0u);
  EXPECT_FALSE(s.stats().io_rt_denied);
  s.stop();
}

TEST(IoRtPriority, StatsAppearInTheMetricsText) {
  const std::string m = server_metrics_text(
      ServerStats{.num_connections_open = 3, .num_requests = 41, .io_rt_threads = 2, .io_rt_demotions = 5, .io_rt_denied = false});
  EXPECT_NE(m.find("# TYPE tokenserve_http_connections_open gauge\ntokenserve_http_connections_open 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("# TYPE tokenserve_http_requests_total counter\ntokenserve_http_requests_total 41\n"), std::string::npos) << m;
  EXPECT_NE(m.find("# TYPE tokenserve_http_io_rt_threads gauge\ntokenserve_http_io_rt_threads 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("# TYPE tokenserve_http_io_rt_demotions_total counter\ntokenserve_http_io_rt_demotions_total 5\n"),
            std::string::npos) << m;
  EXPECT_NE(m.find("tokenserve_http_io_rt_denied 0\n"), std::string::npos) << m;
  EXPECT_NE(server_metrics_text(ServerStats{.io_rt_denied = true}).find("tokenserve_http_io_rt_denied 1\n"), std::string::npos);
}

TEST(IoRtPriority, IoThreadsRunRoundRobinAndTheGuardDemotesABusyOne) {
  if (!rt_allowed()) GTEST_SKIP() << "no permission for SCHED_RR here (the denied path is tested below)";
  auto s = rt_server(1, 30'000us, 50ms);
  ASSERT_TRUE(s->start().ok());
  ASSERT_TRUE(eventually([&] { return s->stats().io_rt_threads == 2; }));
  std::vector<int> pol = policies_of("ts-http-io");
  ASSERT_EQ(pol.size(), 2u);
  for (int p : pol) EXPECT_EQ(p, SCHED_RR);
  Client c;
  ASSERT_TRUE(c.connect("127.0.0.1", s->port()).ok());
  auto r = c.request("GET", "/hello");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "hello");
  EXPECT_EQ(s->stats().io_rt_demotions, 0u);  // answering a request is far under the budget
  // 150 ms of CPU on one io thread: over 30 ms in a 50 ms window.
  r = c.request("GET", "/burn");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "burnt");
  ASSERT_TRUE(eventually([&] { return s->stats().io_rt_demotions >= 1; }));
  EXPECT_LE(s->stats().io_rt_threads, 1u);
  pol = policies_of("ts-http-io");
  EXPECT_EQ(std::count(pol.begin(), pol.end(), SCHED_RR), static_cast<long>(s->stats().io_rt_threads));
  // Quiet again: promoted back after IoRtGuard::kQuietWindows windows.
  EXPECT_TRUE(eventually([&] { return s->stats().io_rt_threads == 2; }));
  pol = policies_of("ts-http-io");
  for (int p : pol) EXPECT_EQ(p, SCHED_RR);
  r = c.request("GET", "/hello");
  ASSERT_TRUE(r.ok());
  s->stop();
}

// Requests one after another on one keep-alive connection for `d`, each after `gap`: every
// request wakes the io thread that owns the connection once. Returns how many were answered.
int requests_for(Client& c, std::chrono::milliseconds d, std::chrono::microseconds gap) {
  int n = 0;
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    auto r = c.request("GET", "/hello");
    if (!r.ok() || r->body != "hello") return -1;
    ++n;
    if (gap.count() > 0) std::this_thread::sleep_for(gap);
  }
  return n;
}

TEST(IoRtPriority, TheGuardDemotesIoThreadsThatWakeTooOften) {
  if (!rt_allowed()) GTEST_SKIP() << "no permission for SCHED_RR here (the denied path is tested below)";
  // A CPU budget above the window (never exceeded): any demotion here is for wake-ups.
  auto s = rt_server(1, 1'000'000us, 50ms, /*max_wakeups=*/40);
  ASSERT_TRUE(s->start().ok());
  ASSERT_TRUE(eventually([&] { return s->stats().io_rt_threads == 2; }));
  Client c;
  ASSERT_TRUE(c.connect("127.0.0.1", s->port()).ok());
  // ~4 requests per 50 ms window (a 10 ms gap): under the limit for 400 ms, no demotion.
  ASSERT_GT(requests_for(c, 400ms, 10'000us), 20);
  EXPECT_EQ(s->stats().io_rt_demotions, 0u);
  EXPECT_EQ(s->stats().io_rt_threads, 2u);
  // Back to back (thousands a second): the io threads running the connection's handlers (the
  // strand's work goes to either) wake far over 40 times a window and are demoted.
  ASSERT_GT(requests_for(c, 400ms, 0us), 200);
  ASSERT_TRUE(eventually([&] { return s->stats().io_rt_demotions >= 1; }));
  EXPECT_LT(s->stats().io_rt_threads, 2u);
  std::vector<int> pol = policies_of("ts-http-io");
  EXPECT_EQ(std::count(pol.begin(), pol.end(), SCHED_RR), static_cast<long>(s->stats().io_rt_threads));
  // Quiet again: promoted back after IoRtGuard::kQuietWindows windows.
  EXPECT_TRUE(eventually([&] { return s->stats().io_rt_threads == 2; }));
  pol = policies_of("ts-http-io");
  for (int p : pol) EXPECT_EQ(p, SCHED_RR);
  s->stop();
}

// Drops CAP_SYS_NICE from this (forked, single-threaded) process and its real-time rlimit, so
// SCHED_RR is refused as for an unprivileged user.
bool drop_rt_permission() {
  __user_cap_header_struct hdr{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  data[CAP_TO_INDEX(CAP_SYS_NICE)].effective &= ~CAP_TO_MASK(CAP_SYS_NICE);
  data[CAP_TO_INDEX(CAP_SYS_NICE)].permitted &= ~CAP_TO_MASK(CAP_SYS_NICE);
  if (syscall(SYS_capset, &hdr, data) != 0) return false;
  rlimit none{0, 0};
  return setrlimit(RLIMIT_RTPRIO, &none) == 0;
}

TEST(IoRtPriority, WithoutPermissionItLogsAndServesNormally) {
  // In a child process: the permission is dropped for good there.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!drop_rt_permission()) _exit(10);
    sched_param p{.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_RR, &p) == 0) _exit(11);  // still allowed: the test proves nothing
    auto s = rt_server(5, 50'000us, 250ms);
    if (!s->start().ok()) _exit(12);
    Client c;
    if (!c.connect("127.0.0.1", s->port()).ok()) _exit(13);
    auto r = c.request("GET", "/hello");
    if (!r.ok() || r->body != "hello") _exit(14);
    const ServerStats st = s->stats();
    if (!st.io_rt_denied || st.io_rt_threads != 0) _exit(15);
    for (int pol : policies_of("ts-http-io"))
      if (pol == SCHED_RR) _exit(16);
    s->stop();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10 capset, 11 still allowed, 12 start, 13 connect, 14 request, 15 stats, 16 policy";
}

}  // namespace
}  // namespace ts::http
