// x86 CPU feature detection (CPUID + XGETBV), cached. Thread-safe.
#pragma once

namespace ts::tensor {

struct CpuFeatures {
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

  // Tiers the kernels are compiled for.
  bool avx2_tier() const { return os_ymm && avx2 && fma && f16c; }
  bool avx512_tier() const {
    return avx2_tier() && os_zmm && avx512f && avx512bw && avx512vl && avx512dq && avx512vnni;
  }
};

const CpuFeatures& cpu_features();

}  // namespace ts::tensor
