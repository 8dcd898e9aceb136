#include "core/thread_sched.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ts {

#if defined(__linux__)
namespace {

Status errno_status(const char* what) {
  return unavailable(std::string(what) + ": " + std::strerror(errno));
}

Result<SchedAttr> current_attr() {
  SchedAttr a{};
  if (syscall(SYS_sched_getattr, 0, &a, sizeof(a), 0) != 0) return errno_status("sched_getattr");
  return a;
}
}  // namespace

Status set_current_thread_batch() {
  TS_ASSIGN_OR_RETURN(SchedAttr a, current_attr());
  if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH)
    return ok_status();  // real-time or idle policies set by the operator stay
  a.size = sizeof(a);
  a.sched_policy = SCHED_BATCH;
  a.sched_flags = 0;
  if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) return errno_status("sched_setattr(SCHED_BATCH)");
  return ok_status();
}

Status set_current_thread_slice(std::chrono::microseconds slice) {
  TS_ASSIGN_OR_RETURN(SchedAttr a, current_attr());
  if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH) return ok_status();
  a.size = sizeof(a);
  a.sched_flags = 0;
  a.sched_runtime = static_cast<uint64_t>(slice.count()) * 1000;  // ns
  if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) return errno_status("sched_setattr(slice)");
  return ok_status();
}

void set_current_thread_name(std::string_view name) {
  std::string n(name.substr(0, 15));
  pthread_setname_np(pthread_self(), n.c_str());
}
#else
Status set_current_thread_batch() { return unimplemented("SCHED_BATCH needs Linux"); }
Status set_current_thread_slice(std::chrono::microseconds) { return unimplemented("scheduler slices need Linux"); }
void set_current_thread_name(std::string_view) {}
#endif

}  // namespace ts
