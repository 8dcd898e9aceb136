// The instruction-throughput ceilings the matmul and attention kernels are built on, measured on
// this host, one thread: each benchmark steps 10 (ymm) or 12 (zmm) independent chains of one
// instruction mix from registers (no memory), so its rate is the core's throughput for that mix
// rather than one chain's latency.
//   Clock            a dependent chain of scalar adds (1 cycle each): the core clock, to turn the
//                    rates below into per-cycle figures (a turbo clock moves with load)
//   Avx2Dot          vpmaddubsw + vpmaddwd + vpaddd: the plain-AVX2 int8 dot of 32 MACs (u8 x s8)
//   Avx2Madd16       vpmaddwd + vpaddd: 16 int16 MACs (the AVX2 Q8_0 panels, kernels_avx2_panels.h)
//   AvxVnniDot       vpdpbusd on ymm: 32 MACs (the avxvnni tier)
//   Avx512Dot        vpdpbusd on zmm: 64 MACs (the avx512 tier)
//   Fma256 / Fma512  vfmadd on ymm / zmm: 16 / 32 flops
//   Fp16Step256/512  vfmadd + vcvtps2ph + vcvtph2ps: one step of attention's fp16 V accumulator
//                    (attention_x86_impl.h r16) per 8 / 16 values
// Counters: "G/s" steps a second, "GMAC/s" / "GFLOP/s" / "Gvalues/s", and "per_cycle" (steps a
// cycle against the Clock benchmark's rate in the same process). A tier the CPU lacks is skipped.
// A kernel's share of its ceiling is its MACs a second on one thread (kernels_bench
// BM_MatmulHot / BM_Matmul with 1 thread) over GMAC/s here. Session 52, the Zen 5 guest
// (2 vCPUs, clock ~3.5 GHz): Avx2Dot ~0.96 a cycle (~108 GMAC/s), Avx2Madd16 ~1.34 (~75),
// AvxVnniDot ~1.7 (~195), Avx512Dot ~2.0 (~445), Fma256 / Fma512 ~2.0, Fp16Step ~0.5.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <chrono>
#include <cstdint>

#include "tensor/cpu_features.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_* values that its -Wuninitialized
// flags (as in src/tensor/kernels_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace {

constexpr int kChains = 12;  // the most chains a benchmark steps
constexpr int64_t kIters = 1 << 16;  // loop trips per benchmark iteration
double g_clock_hz = 0;               // set by BM_Clock, which runs first

// steps_per_iter chain steps a benchmark iteration, each worth work_per_step units of work_name.
void report(benchmark::State& state, double steps_per_iter, double work_per_step, const char* work_name) {
  const double steps = steps_per_iter * static_cast<double>(state.iterations());
  state.counters["G/s"] = benchmark::Counter(steps / 1e9, benchmark::Counter::kIsRate);
  state.counters[work_name] = benchmark::Counter(steps * work_per_step / 1e9, benchmark::Counter::kIsRate);
  if (g_clock_hz > 0) {
    // per_cycle = steps a second / clock (benchmark divides kIsRate counters by the time).
    state.counters["per_cycle"] = benchmark::Counter(steps / g_clock_hz, benchmark::Counter::kIsRate);
  }
}

void BM_Clock(benchmark::State& state) {
  uint64_t x = 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (int64_t i = 0; i < kIters; ++i) {
      // Eight dependent adds a trip; the asm keeps them one chain the compiler cannot fold.
      __asm__ volatile(
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
          : "+r"(x));
    }
  }
  benchmark::DoNotOptimize(x);
  const double adds = 8.0 * kIters * static_cast<double>(state.iterations());
  state.counters["GHz"] = benchmark::Counter(adds / 1e9, benchmark::Counter::kIsRate);
  g_clock_hz = adds / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One benchmark: NAME_run steps CH independent chains c0.. (named variables, so they stay in
// registers, in a function that makes no call) by c = STEP(c) kIters times, the asm hiding the
// operands a and b from GCC; each step reads its own chain, so nothing is shared between chains
// for GCC to compute once. CH is 10 on ymm (16 registers: with 12 chains and the two operands
// GCC stored chains to the stack every step) and 12 on zmm. NAME(state) runs NAME_run once per
// benchmark iteration and reports WORK units (WNAME) per chain step. Macros, not
// lambdas: a lambda would not inherit the target attribute.
#define TS_8(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7)
#define TS_10(F) TS_8(F) F(8) F(9)
#define TS_12(F) TS_10(F) F(10) F(11)
#define TS_LOAD(n) V c##n = c[n];
#define TS_STEP(n) c##n = STEP(c##n);
#define TS_STORE(n) c[n] = c##n;
#define TS_PEAK(NAME, TARGET, V_, A, B, INIT, WORK, WNAME, CH)                        \
  __attribute__((target(TARGET), noinline)) void NAME##_run(V_* c) {                   \
    using V = V_;                                                                      \
    V a = A, b = B;                                                                    \
    __asm__("" : "+v"(a), "+v"(b));                                                    \
    TS_##CH(TS_LOAD)                                                                   \
    for (int64_t i = 0; i < kIters; ++i) {                                             \
      TS_##CH(TS_STEP)                                                                 \
    }                                                                                  \
    TS_##CH(TS_STORE)                                                                  \
  }                                                                                    \
  __attribute__((target(TARGET))) void NAME(benchmark::State& state) {                 \
    alignas(64) V_ c[kChains];                                                         \
    for (int k = 0; k < kChains; ++k) c[k] = INIT(k);                                  \
    for (auto _ : state) {                                                             \
      NAME##_run(c);                                                                   \
      benchmark::DoNotOptimize(c);                                                     \
    }                                                                                  \
    report(state, static_cast<double>(CH) * kIters, WORK, WNAME);                      \
  }

// The AVX2 int8 dot (two multiply-class instructions and an add a step: 32 MACs).
#define STEP(x) _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(x, a), b))
TS_PEAK(avx2_dot, "avx2,fma", __m256i, _mm256_set1_epi8(3), _mm256_set1_epi16(1), _mm256_set1_epi32, 32,
        "GMAC/s", 10)
#undef STEP
// vpmaddwd + vpaddd: 16 int16 MACs a step.
#define STEP(x) _mm256_add_epi32(x, _mm256_madd_epi16(x, a))
TS_PEAK(avx2_madd16, "avx2,fma", __m256i, _mm256_set1_epi16(3), _mm256_set1_epi16(5), _mm256_set1_epi32, 16,
        "GMAC/s", 10)
#undef STEP
#define STEP(x) _mm256_dpbusd_avx_epi32(x, a, b)
TS_PEAK(avxvnni_dot, "avx2,fma,avxvnni", __m256i, _mm256_set1_epi8(3), _mm256_set1_epi8(5), _mm256_set1_epi32, 32,
        "GMAC/s", 10)
#undef STEP
#define STEP(x) _mm512_dpbusd_epi32(x, a, b)
TS_PEAK(avx512_dot, "avx512f,avx512bw,avx512vl,avx512vnni", __m512i, _mm512_set1_epi8(3), _mm512_set1_epi8(5),
        _mm512_set1_epi32, 64, "GMAC/s", 12)
#undef STEP
#define STEP(x) _mm256_fmadd_ps(x, a, b)
__attribute__((target("avx2,fma"))) inline __m256 set1_256(int k) { return _mm256_set1_ps(static_cast<float>(k)); }
TS_PEAK(fma256, "avx2,fma", __m256, _mm256_set1_ps(0.999f), _mm256_set1_ps(1e-3f), set1_256, 16, "GFLOP/s", 10)
#undef STEP
#define STEP(x) _mm512_fmadd_ps(x, a, b)
__attribute__((target("avx512f"))) inline __m512 set1_512(int k) { return _mm512_set1_ps(static_cast<float>(k)); }
TS_PEAK(fma512, "avx512f,avx512bw,avx512vl", __m512, _mm512_set1_ps(0.999f), _mm512_set1_ps(1e-3f), set1_512, 32,
        "GFLOP/s", 12)
#undef STEP
// One step of the fp16 V accumulator: fma, round to fp16 and back (3 instructions).
#define STEP(x) \
  _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_fmadd_ps(x, a, b), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
TS_PEAK(fp16_step256, "avx2,fma,f16c", __m256, _mm256_set1_ps(0.999f), _mm256_set1_ps(1e-3f), set1_256, 8,
        "Gvalues/s", 10)
#undef STEP
#define STEP(x) \
  _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_fmadd_ps(x, a, b), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
TS_PEAK(fp16_step512, "avx512f,avx512bw,avx512vl", __m512, _mm512_set1_ps(0.999f), _mm512_set1_ps(1e-3f), set1_512,
        16, "Gvalues/s", 12)
#undef STEP

// Registers fn under `name` if the CPU (and OS) can run it.
void add(const char* name, bool ok, void (*fn)(benchmark::State&)) {
  if (!ok) {
    benchmark::RegisterBenchmark(name, [](benchmark::State& st) { st.SkipWithError("not supported by this CPU"); });
    return;
  }
  benchmark::RegisterBenchmark(name, fn)->MinTime(0.2);
}

}  // namespace

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

int main(int argc, char** argv) {
  const ts::tensor::CpuFeatures& f = ts::tensor::cpu_features();
  const bool avx2 = f.avx2_tier(), avx512 = f.avx512_tier();
  benchmark::RegisterBenchmark("Clock", BM_Clock)->MinTime(0.2);
  add("Avx2Dot", avx2, avx2_dot);
  add("Avx2Madd16", avx2, avx2_madd16);
  add("AvxVnniDot", avx2 && f.avx_vnni, avxvnni_dot);
  add("Avx512Dot", avx512, avx512_dot);
  add("Fma256", avx2, fma256);
  add("Fma512", avx512, fma512);
  add("Fp16Step256", avx2, fp16_step256);
  add("Fp16Step512", avx512, fp16_step512);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
