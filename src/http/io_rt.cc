#include "http/io_rt.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/log.h"
#include "core/thread_sched.h"

namespace ts::http {

#if defined(__linux__)
namespace {

std::atomic<bool> g_denied_logged{false};

int64_t clock_ns(clockid_t c) {
  timespec ts{};
  if (clock_gettime(c, &ts) != 0) return -1;
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// A thread's voluntary context switches so far (each one a sleep, so each the start of a
// wake-up); -1 when /proc does not say (the thread ended).
int64_t voluntary_switches(int tid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return -1;
  char line[256];
  int64_t v = -1;
  constexpr char kKey[] = "voluntary_ctxt_switches:";
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, kKey, sizeof(kKey) - 1) == 0) {
      v = std::strtoll(line + sizeof(kKey) - 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return v;
}

}  // namespace

IoRtGuard::IoRtGuard(IoRtOptions opts) : opts_(opts) {
  if (opts_.priority > 0) guard_ = std::thread([this] { run(); });
}

IoRtGuard::~IoRtGuard() { stop(); }

void IoRtGuard::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (guard_.joinable()) guard_.join();
}

bool IoRtGuard::set_rt(int tid, bool rt) {
  SchedAttr a{};
  a.size = sizeof(a);
  if (rt) {
    a.sched_policy = SCHED_RR;
    a.sched_priority = static_cast<uint32_t>(opts_.priority);
  } else {
    a.sched_policy = SCHED_OTHER;
    a.sched_runtime = static_cast<uint64_t>(opts_.fair_slice.count()) * 1000;  // 0 = the default slice
  }
  return syscall(SYS_sched_setattr, tid, &a, 0) == 0;
}

bool IoRtGuard::enter() {
  if (opts_.priority <= 0) return false;
  const int tid = static_cast<int>(syscall(SYS_gettid));
  if (!set_rt(tid, true)) {
    const int err = errno;
    denied_.store(true);
    if (!g_denied_logged.exchange(true)) {
      const std::string msg = "--io-rt-priority " + std::to_string(opts_.priority) +
                              ": the HTTP io threads keep normal scheduling (" + std::strerror(err) +
                              "; SCHED_RR needs CAP_SYS_NICE or RLIMIT_RTPRIO >= " + std::to_string(opts_.priority) + ")";
      if (opts_.explicit_request) {
        log::warn(msg);
      } else {
        log::info(msg + "; --io-rt-priority 0 turns the attempt off");
      }
    }
    return false;
  }
  Watched w;
  w.tid = tid;
  if (pthread_getcpuclockid(pthread_self(), &w.clock) != 0) w.clock = CLOCK_THREAD_CPUTIME_ID;  // (never: own thread)
  w.last_ns = clock_ns(w.clock);
  w.last_wakes = voluntary_switches(tid);
  {
    std::lock_guard lock(mu_);
    threads_.push_back(w);
  }
  rt_threads_.fetch_add(1);
  return true;
}

void IoRtGuard::run() {
  ts::set_current_thread_name("ts-http-rtguard");
  {  // above the io threads, so a looping one cannot keep its guard off the CPU (it sleeps otherwise)
    SchedAttr a{};
    a.size = sizeof(a);
    a.sched_policy = SCHED_RR;
    a.sched_priority = static_cast<uint32_t>(std::min(opts_.priority + 1, 99));
    (void)syscall(SYS_sched_setattr, 0, &a, 0);
  }
  const int64_t budget_ns = opts_.budget.count() * 1000;
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, opts_.window, [this] { return stopping_; })) {
    for (Watched& w : threads_) {
      const int64_t now = clock_ns(w.clock);
      if (now < 0) continue;  // the thread ended
      const int64_t used = w.last_ns < 0 ? 0 : now - w.last_ns;
      w.last_ns = now;
      const int64_t sw = opts_.max_wakeups > 0 ? voluntary_switches(w.tid) : -1;
      const int64_t wakes = sw >= 0 && w.last_wakes >= 0 ? sw - w.last_wakes : 0;
      w.last_wakes = sw;
      const bool over_cpu = used > budget_ns;
      const bool over_wakes = opts_.max_wakeups > 0 && wakes > opts_.max_wakeups;
      if (w.rt && (over_cpu || over_wakes)) {
        if (set_rt(w.tid, false)) {
          w.rt = false;
          w.quiet = 0;
          rt_threads_.fetch_sub(1);
          const uint64_t n = demotions_.fetch_add(1) + 1;
          if ((n & (n - 1)) == 0) {  // 1st, 2nd, 4th, 8th ... time: logged, not flooded
            const std::string why =
                over_cpu ? "used " + std::to_string(used / 1000) + " us of CPU in " + std::to_string(opts_.window.count()) +
                               " ms (budget " + std::to_string(opts_.budget.count()) + " us)"
                         : "woke " + std::to_string(wakes) + " times in " + std::to_string(opts_.window.count()) +
                               " ms (at most " + std::to_string(opts_.max_wakeups) +
                               ": each real-time wake-up preempts compute)";
            log::info("http io thread " + std::to_string(w.tid) + " " + why + ": demoted from SCHED_RR (" +
                      std::to_string(n) + " demotions)");
          }
        }
      } else if (!w.rt) {
        const bool quiet = used * 2 < budget_ns && (opts_.max_wakeups <= 0 || wakes * 2 < opts_.max_wakeups);
        w.quiet = quiet ? w.quiet + 1 : 0;
        if (w.quiet >= kQuietWindows && set_rt(w.tid, true)) {
          w.rt = true;
          rt_threads_.fetch_add(1);
          promotions_.fetch_add(1);
        }
      }
    }
  }
}

#else
IoRtGuard::IoRtGuard(IoRtOptions opts) : opts_(opts) {}
IoRtGuard::~IoRtGuard() = default;
void IoRtGuard::stop() {}
bool IoRtGuard::set_rt(int, bool) { return false; }
bool IoRtGuard::enter() {
  if (opts_.priority <= 0) return false;
  denied_.store(true);
  log::warn("--io-rt-priority needs Linux: the HTTP io threads keep normal scheduling");
  return false;
}
void IoRtGuard::run() {}
#endif

}  // namespace ts::http
