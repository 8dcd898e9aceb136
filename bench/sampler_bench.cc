// Sampling cost per token on a Qwen2-sized vocabulary (152,064 logits): greedy, top_k 40,
// top_p 0.9, top_k 40 + top_p 0.9 and plain temperature sampling. The logits look like a real
// model's: a Gaussian floor with a few dozen tokens well above it, so the nucleus holds tens to
// hundreds of tokens. Run: build/sampler_bench [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "engine/batch_sampler.h"
#include "engine/sampler.h"

namespace {

using ts::engine::Rng;
using ts::engine::Sampler;
using ts::engine::SamplingParams;

constexpr int32_t kVocab = 152064;

std::vector<float> make_logits(uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(kVocab);
  for (auto& x : v) {
    // Box-Muller: N(0, 2) floor.
    const double u1 = r.uniform() + 1e-12, u2 = r.uniform();
    x = static_cast<float>(2.0 * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  for (int i = 0; i < 64; ++i) v[r.next() % kVocab] += static_cast<float>(8.0 + 6.0 * r.uniform());
  return v;
}

void run(benchmark::State& state, SamplingParams p) {
  Sampler s(kVocab);
  std::vector<std::vector<float>> rows;
  for (uint64_t i = 0; i < 8; ++i) rows.push_back(make_logits(i + 1));
  Rng rng(7);
  size_t i = 0;
  for (auto _ : state) {
    int32_t t = s.sample(rows[i++ % rows.size()], p, {}, {}, rng, nullptr);
    benchmark::DoNotOptimize(t);
  }
}

void BM_Greedy(benchmark::State& st) {
  SamplingParams p;
  p.temperature = 0.0f;
  run(st, p);
}
void BM_TopK40(benchmark::State& st) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  run(st, p);
}
void BM_TopP09(benchmark::State& st) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  run(st, p);
}
void BM_TopK40TopP09(benchmark::State& st) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.9f;
  run(st, p);
}
// The sampler test's flat case: 150k near-uniform logits, the nucleus holds ~12k tokens.
void BM_TopP05Flat(benchmark::State& st) {
  Sampler s(kVocab);
  Rng gen(42);
  std::vector<float> logits(kVocab);
  for (auto& v : logits) v = static_cast<float>(gen.uniform() * 6.0);
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_p = 0.5f;
  Rng rng(9);
  for (auto _ : st) {
    int32_t t = s.sample(logits, p, {}, {}, rng, nullptr);
    benchmark::DoNotOptimize(t);
  }
}
void BM_Temperature1(benchmark::State& st) {
  SamplingParams p;
  run(st, p);
}

// One decode step of 8 sequences (top_p 0.9, temperature 0.8): the rows sampled one after
// another, or by BatchSampler on a pool of 2 threads (what the engine does).
void BM_Step8Rows(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  std::vector<std::vector<float>> rows;
  for (uint64_t i = 0; i < 8; ++i) rows.push_back(make_logits(i + 1));
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  std::vector<Rng> rngs;
  for (int i = 0; i < 8; ++i) rngs.emplace_back(100 + i);
  ts::ThreadPool pool(threads);
  ts::engine::BatchSampler bs(kVocab);
  Sampler serial(kVocab);
  std::vector<ts::engine::SampleRow> batch(8);
  for (auto _ : st) {
    if (threads == 1) {
      for (int i = 0; i < 8; ++i) benchmark::DoNotOptimize(serial.sample(rows[i], p, {}, {}, rngs[i], nullptr));
    } else {
      for (int i = 0; i < 8; ++i) batch[i] = {.logits = rows[i].data(), .params = &p, .rng = &rngs[i]};
      bs.sample(pool, batch);
      benchmark::DoNotOptimize(batch[7].token);
    }
  }
}

BENCHMARK(BM_Step8Rows)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK40)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP09)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK40TopP09)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP05Flat)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Temperature1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
