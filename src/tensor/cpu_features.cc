#include "tensor/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#endif

namespace ts::tensor {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return f;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  __builtin_memcpy(vendor, &b, 4);
  __builtin_memcpy(vendor + 4, &d, 4);
  __builtin_memcpy(vendor + 8, &c, 4);
  f.amd = __builtin_strcmp(vendor, "AuthenticAMD") == 0 || __builtin_strcmp(vendor, "HygonGenuine") == 0;
  f.intel = __builtin_strcmp(vendor, "GenuineIntel") == 0;
  __cpuid(1, a, b, c, d);
  const bool osxsave = (c >> 27) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  const bool avx = (c >> 28) & 1;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    f.os_ymm = avx && (lo & 0x6) == 0x6;
    f.os_zmm = f.os_ymm && (lo & 0xE0) == 0xE0;
    f.os_amx = (lo & 0x60000) == 0x60000;  // bits 17 (XTILECFG) and 18 (XTILEDATA)
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = (b >> 5) & 1;
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512vnni = (c >> 11) & 1;
    f.amx_tile = (d >> 24) & 1;
    f.amx_int8 = (d >> 25) & 1;
    __cpuid_count(7, 1, a, b, c, d);
    f.avx_vnni = (a >> 4) & 1;
    f.avx512bf16 = (a >> 5) & 1;
  }
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

const AmxPermission& amx_permission() {
  static const AmxPermission p = [] {
    AmxPermission r;
    const CpuFeatures& f = cpu_features();
    if (!f.amx_tile || !f.amx_int8) {
      r.why = "this CPU has no AMX int8 tiles";
      return r;
    }
    if (!f.os_amx) {
      r.why = "the OS does not enable AMX tile state (XCR0)";
      return r;
    }
#if defined(__linux__) && defined(__x86_64__)
    constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      r.why = std::string("Linux refused the AMX tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
              std::strerror(errno) + ")";
      return r;
    }
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bits) != 0 || ((bits >> kXfeatureXtiledata) & 1) == 0) {
      r.why = "Linux did not grant the AMX tile data permission (arch_prctl ARCH_GET_XCOMP_PERM)";
      return r;
    }
    r.granted = true;
#else
    r.why = "AMX needs Linux's arch_prctl permission request, which this build lacks";
#endif
    return r;
  }();
  return p;
}

}  // namespace ts::tensor
