#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tensor/cpu_features.h"
#include "tensor/matrix.h"

namespace ts::tensor {

// ---------------------------------------------------------------------------------------------
// Software prefetch policy (matrix.h set_sw_prefetch)

Result<SwPrefetch> parse_sw_prefetch(std::string_view name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (SwPrefetch m : {SwPrefetch::kAuto, SwPrefetch::kOn, SwPrefetch::kOff}) {
    if (lower == sw_prefetch_name(m)) return m;
  }
  return invalid_argument("unknown software prefetch mode '" + std::string(name) + "' (expected auto, on or off)");
}

const char* sw_prefetch_name(SwPrefetch mode) {
  switch (mode) {
    case SwPrefetch::kAuto: return "auto";
    case SwPrefetch::kOn: return "on";
    case SwPrefetch::kOff: return "off";
  }
  return "unknown";
}

namespace {

std::atomic<int>& sw_prefetch_slot() {
  static std::atomic<int> slot{[] {
    const char* env = std::getenv("TOKENSERVE_SW_PREFETCH");
    if (env == nullptr || *env == '\0') return static_cast<int>(SwPrefetch::kAuto);
    auto m = parse_sw_prefetch(env);
    if (!m.ok()) {
      std::fprintf(stderr, "warning: TOKENSERVE_SW_PREFETCH: %s; using auto\n", m.status().message().c_str());
      return static_cast<int>(SwPrefetch::kAuto);
    }
    return static_cast<int>(*m);
  }()};
  return slot;
}

}  // namespace

void set_sw_prefetch(SwPrefetch mode) { sw_prefetch_slot().store(static_cast<int>(mode), std::memory_order_relaxed); }
SwPrefetch sw_prefetch_mode() { return static_cast<SwPrefetch>(sw_prefetch_slot().load(std::memory_order_relaxed)); }

// kAuto on AMD: no software prefetch in the Q8_0_R16 decode kernels at small batches (avx512
// r16_il_tile up to kSwPrefetchOffAvx512Tokens tokens, avxvnni gemm_q8_0_r16_il_vnni up to
// kSwPrefetchOffAvxVnniTokens). Zen 5 shared KVM host, alternated A/B in one process
// (kernels_bench BM_PrefetchAB) and end to end (tokenserve generate, main vs this): see the
// commit that introduced it. Above those batch sizes the kernels are compute-bound enough that
// spreading the next lines' fetches (PERFORMANCE.md: batch-8 ~1.5x batch-1 without) still pays;
// Intel hosts keep the prefetches everywhere (they were tuned there: kernels_avx512.cc).
bool sw_prefetch_enabled(Isa isa, DType type, int64_t n_tok) {
  switch (sw_prefetch_mode()) {
    case SwPrefetch::kOn: return true;
    case SwPrefetch::kOff: return false;
    case SwPrefetch::kAuto: break;
  }
  if (!cpu_features().amd) return true;
  if (type == DType::kQ8_0) {
    if ((isa == Isa::kAvx512 || isa == Isa::kAmx) && n_tok <= kSwPrefetchOffAvx512Tokens) return false;
    if (isa == Isa::kAvxVnni && n_tok <= kSwPrefetchOffAvxVnniTokens) return false;
  }
  return true;
}

}  // namespace ts::tensor
