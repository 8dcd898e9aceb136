// x86 CPU feature detection (CPUID + XGETBV), cached. Thread-safe.
#pragma once

#include <string>

namespace ts::tensor {

struct CpuFeatures {
  // CPUID vendor: AMD ("AuthenticAMD", and Hygon's Zen-derived "HygonGenuine") or Intel
  // ("GenuineIntel"); neither for anything else. Policies that differ by microarchitecture
  // (software prefetch, matrix.h set_sw_prefetch) key on it.
  bool amd = false;
  bool intel = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx_vnni = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool os_ymm = false;  // OS saves YMM state
  bool os_zmm = false;  // OS saves ZMM/opmask state
  bool os_amx = false;  // XCR0 has XTILECFG and XTILEDATA

  // Tiers the kernels are compiled for.
  bool avx2_tier() const { return os_ymm && avx2 && fma && f16c; }
  bool avx512_tier() const {
    return avx2_tier() && os_zmm && avx512f && avx512bw && avx512vl && avx512dq && avx512vnni;
  }
  // The CPU has AMX tiles with int8 and the OS enables their state in XCR0 (the process must still
  // ask Linux for permission: amx_permission()).
  bool amx_cpu() const { return amx_tile && amx_int8 && os_amx; }
};

const CpuFeatures& cpu_features();

// Linux only lets a process use AMX tile data after arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA). The first call makes that request (once per process; the permission
// covers every thread) and caches the outcome. Thread-safe.
struct AmxPermission {
  bool granted = false;
  std::string why;  // when not granted: the reason, for resolve_isa's warning and start-up logs
};
const AmxPermission& amx_permission();

}  // namespace ts::tensor
