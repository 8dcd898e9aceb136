// Scheduling hints for the calling thread (Linux; elsewhere they do nothing and answer
// kUnimplemented). They let a replica's latency-sensitive threads (HTTP io: /metrics scrapes,
// SSE writes) get onto a CPU at once while compute threads keep both cores busy (SCALEOUT.md
// §8.1's scrape clause on a 2-core machine):
//   - compute threads (the engine thread and its ThreadPool workers) run as SCHED_BATCH: the
//     same nice value and so the same CPU share as before, but the kernel treats them as
//     CPU-bound and does not favour them on wake-up;
//   - io threads ask the fair scheduler (EEVDF, Linux >= 6.12) for a short slice: a woken task
//     with a shorter slice preempts a running long-slice one at once instead of waiting for the
//     rest of its slice (about 1.5 ms on 2 CPUs, several hops per scrape).
// Neither changes priorities between processes (no nice value is raised or lowered), so a
// benchmark client or another service on the same machine keeps its share. Failures (an older
// kernel, a seccomp filter) are returned, never fatal: the thread just keeps its defaults.
// Thread-safe (each call affects only the calling thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace ts {

#if defined(__linux__)
// The kernel's struct sched_attr (include/uapi/linux/sched/types.h) for the raw
// sched_getattr/sched_setattr system calls: glibc 2.36 has no wrapper.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};
#endif

// SCHED_BATCH at the thread's current nice value.
Status set_current_thread_batch();
// A fair-scheduler slice request (sched_setattr sched_runtime; Linux clamps it to 0.1..100 ms).
Status set_current_thread_slice(std::chrono::microseconds slice);
// The thread's name as `top -H`, `perf` and /proc show it (truncated to 15 bytes).
void set_current_thread_name(std::string_view name);

}  // namespace ts
