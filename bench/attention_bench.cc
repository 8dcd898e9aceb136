// Attention alone, tiled (paged_attention) against the untiled original
// (paged_attention_reference), measured in the same process on the Qwen2.5-0.5B shape
// (14 query heads, 2 KV heads, head_dim 64, 16-token blocks), 2 threads (ATTN_BENCH_THREADS
// sets another count; 1 gives CPU-time figures unaffected by other processes):
//   Prefill/N    one sequence, N prompt tokens at once (causal)
//   Decode8/C    8 sequences, one token each, C tokens of context
//   .../cold     the same with the caches flushed before each call (a decode step's KV reads)
//   Decode1/C, Decode3/C   1 or 3 sequences (the small-batch item split); SmolLM2's Decode1 at
//                C = 16, 64, 128, 256 shows the cost per key (linear in C, ~1 us fixed)
// "f16" is the F16 cache with llama.cpp's fp16 V accumulator (the default), "f16acc32" with the
// opt-in f32 one (AttentionParams::f16_ggml = false).
// ".../smollm2": SmolLM2-135M's shape (9 heads, 3 KV heads, head_dim 64); ".../stories":
// stories260K's (8 heads, 4 KV heads, head_dim 8, the narrow-head path); ".../wide": the
// wide-1024 models' of compare_llamacpp.sh (16 heads, 4 KV heads, head_dim 64).
// Arguments: Google Benchmark flags, plus --isa NAME (bench_isa.h).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "bench_isa.h"
#include "model/attention.h"

namespace {

using namespace ts::model;

struct Shape {
  int32_t n_head, n_head_kv, head_dim;
};
constexpr Shape kQwen{14, 2, 64}, kSmol{9, 3, 64}, kStories{8, 4, 8}, kWide{16, 4, 64};

struct Setup {
  KvStorage kv;
  std::vector<std::vector<int32_t>> tables;
  std::vector<SeqSlice> slices;
  std::vector<float> q, out;
  AttentionParams p;
  AttentionScratch scratch;
};

// num_seqs sequences with `ctx` positions of KV each; the last `num_tokens` are this step's.
Setup make(KvType type, int32_t num_seqs, int32_t ctx, int32_t num_tokens, Shape sh = kQwen) {
  ModelConfig cfg;
  cfg.n_layer = 1;
  cfg.n_head = sh.n_head;
  cfg.n_head_kv = sh.n_head_kv;
  cfg.head_dim = sh.head_dim;
  const int32_t bs = 16, per = (ctx + bs - 1) / bs;
  Setup s{.kv = std::move(KvStorage::create(cfg, type, bs, per * num_seqs).value())};
  s.p = {.n_head = sh.n_head, .n_head_kv = sh.n_head_kv, .head_dim = sh.head_dim,
         .scale = 1.f / std::sqrt(static_cast<float>(sh.head_dim))};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t KD = int64_t{sh.n_head_kv} * sh.head_dim;
  for (int32_t i = 0; i < num_seqs; ++i) {
    std::vector<int32_t> t(per);
    std::iota(t.begin(), t.end(), i * per);
    s.tables.push_back(std::move(t));
  }
  for (int32_t i = 0; i < num_seqs; ++i) {
    std::vector<float> k(ctx * KD), v(ctx * KD);
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    SeqSlice all{.num_tokens = ctx, .start_pos = 0, .block_table = s.tables[i]};
    write_kv(s.kv, 0, std::span<const SeqSlice>(&all, 1), k.data(), v.data());
  }
  for (int32_t i = 0; i < num_seqs; ++i)
    s.slices.push_back({.num_tokens = num_tokens, .start_pos = ctx - num_tokens, .block_table = s.tables[i]});
  s.q.resize(static_cast<size_t>(num_seqs) * num_tokens * sh.n_head * sh.head_dim);
  for (float& x : s.q) x = nd(rng);
  s.out.resize(s.q.size());
  return s;
}

ts::ThreadPool& pool() {
  static ts::ThreadPool p([] {
    const char* e = std::getenv("ATTN_BENCH_THREADS");
    return e ? std::max(1, std::atoi(e)) : 2;
  }());
  return p;
}

template <bool kTiled>
void run(benchmark::State& state, Setup& s) {
  for (auto _ : state) {
    if (kTiled) {
      paged_attention(s.kv, 0, s.p, s.slices, s.q.data(), s.out.data(), s.scratch, &pool());
    } else {
      paged_attention_reference(s.kv, 0, s.p, s.slices, s.q.data(), s.out.data(), s.scratch, &pool());
    }
    benchmark::DoNotOptimize(s.out.data());
  }
}

template <bool kTiled, KvType kType, const Shape& kShape = kQwen>
void Prefill(benchmark::State& state) {
  const int32_t n = static_cast<int32_t>(state.range(0));
  Setup s = make(kType, 1, n, n, kShape);
  run<kTiled>(state, s);
  state.counters["tok/s"] = benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate);
}

// kF32Acc: F16 with the opt-in f32 V accumulator instead of llama.cpp's fp16 one
// (AttentionParams::f16_ggml). kSeqs: sequences in the step.
template <bool kTiled, KvType kType, const Shape& kShape = kQwen, bool kF32Acc = false, int kSeqs = 8>
void Decode(benchmark::State& state) {
  const int32_t ctx = static_cast<int32_t>(state.range(0));
  Setup s = make(kType, kSeqs, ctx, 1, kShape);
  s.p.f16_ggml = !kF32Acc;
  run<kTiled>(state, s);
  state.counters["steps/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

// Decode8 with the caches cold, as in a decode step, where the weights' stream (136-500 MB)
// has evicted the KV pages since the layer's attention last read them: before each timed call
// a 256 MiB buffer is read (untimed). The gap to Decode8 is the cost of reading the KV cache
// from memory rather than from L2/L3. A fixed 200 calls: the untimed flush (~10 ms) would
// otherwise repeat until the timed part alone reaches the minimum time.
template <KvType kType, const Shape& kShape = kQwen, bool kF32Acc = false>
void DecodeCold(benchmark::State& state) {
  const int32_t ctx = static_cast<int32_t>(state.range(0));
  Setup s = make(kType, 8, ctx, 1, kShape);
  s.p.f16_ggml = !kF32Acc;
  static std::vector<uint64_t> flush(size_t{256} << 17, 1);  // 256 MiB
  uint64_t sink = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t i = 0; i < flush.size(); i += 8) sink += flush[i];  // one load per 64-byte line
    pool().run([](int, int) {});  // the workers slept during the flush: wake them untimed
    state.ResumeTiming();
    paged_attention(s.kv, 0, s.p, s.slices, s.q.data(), s.out.data(), s.scratch, &pool());
    benchmark::DoNotOptimize(s.out.data());
  }
  benchmark::DoNotOptimize(sink);
}

BENCHMARK(Prefill<false, KvType::kF16>)->Name("Prefill/untiled/f16")->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Prefill<true, KvType::kF16>)->Name("Prefill/tiled/f16")->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Prefill<false, KvType::kQ8_0>)->Name("Prefill/untiled/q8_0")->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Prefill<true, KvType::kQ8_0>)->Name("Prefill/tiled/q8_0")->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Decode<false, KvType::kF16>)->Name("Decode8/untiled/f16")->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16>)->Name("Decode8/tiled/f16")->Arg(256)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<false, KvType::kQ8_0>)->Name("Decode8/untiled/q8_0")->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kQ8_0>)->Name("Decode8/tiled/q8_0")->Arg(256)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Prefill<true, KvType::kF16, kSmol>)->Name("Prefill/tiled/f16/smollm2")->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kSmol>)->Name("Decode8/tiled/f16/smollm2")->Arg(256)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kQ8_0, kSmol>)->Name("Decode8/tiled/q8_0/smollm2")->Arg(256)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kSmol>)->Name("Decode8/tiled/f16/smollm2/warm")->Arg(160)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(DecodeCold<KvType::kF16, kSmol>)->Name("Decode8/tiled/f16/smollm2/cold")->Arg(160)->Iterations(200)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kWide>)->Name("Decode8/tiled/f16/wide")->Arg(96)->Arg(512)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kWide, false, 1>)->Name("Decode1/tiled/f16/wide")->Arg(96)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(DecodeCold<KvType::kF16, kWide>)->Name("Decode8/tiled/f16/wide/cold")->Arg(96)->Arg(512)->Iterations(200)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(DecodeCold<KvType::kQ8_0, kSmol>)->Name("Decode8/tiled/q8_0/smollm2/cold")->Arg(160)->Iterations(200)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kQwen, true>)->Name("Decode8/tiled/f16acc32")->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kSmol, true>)->Name("Decode8/tiled/f16acc32/smollm2")->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(DecodeCold<KvType::kF16, kSmol, true>)->Name("Decode8/tiled/f16acc32/smollm2/cold")->Arg(160)->Iterations(200)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kSmol, false, 1>)->Name("Decode1/tiled/f16/smollm2")->Arg(16)->Arg(64)->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kQwen, false, 1>)->Name("Decode1/tiled/f16")->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kSmol, false, 3>)->Name("Decode3/tiled/f16/smollm2")->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Prefill<true, KvType::kF16, kStories>)->Name("Prefill/tiled/f16/stories")->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF16, kStories>)->Name("Decode8/tiled/f16/stories")->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(Decode<true, KvType::kF32, kStories>)->Name("Decode8/tiled/f32/stories")->Arg(128)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  if (!ts::bench::apply_isa_arg(&argc, argv)) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
