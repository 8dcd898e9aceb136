// Mat-mul kernel throughput against memory bandwidth measured in the same process.
//
//   build-kern-bench/bench/kernels_bench [--benchmark_filter=...]
//
// BM_Bandwidth: streaming read (sum of a 1 GiB buffer), 1 and 2 threads.
// BM_Matmul/<type>/<shape>/<n_tok>/<threads>/<repack>: Qwen2.5-0.5B-sized matrices (shape 0: 4864x896
// as gate/up, shape 1: 896x4864 as down; K-quants need cols % 256 == 0, so their shape 0 is
// 4864x1024). Each iteration uses the next of several copies of the
// weights, 1 GiB in all (more than L3), so they stream from DRAM like a real forward pass. Counters:
// GB/s = weight bytes / time, frac_bw = GB/s over the bandwidth measured at start-up with the
// same thread count, tok/s = n_tok per matmul time. repack 0 keeps the plain GGUF layout
// (MatrixOptions::allow_repack = false), so the R16 kernels and the per-row ones compare in one run. BM_PoolRun / BM_PoolChunks: fork-join cost
// of run() / parallel_chunks().
// BM_MatmulOp/<op>/<n_tok>/<threads>: Q8_0 at the SmolLM2-135M / Qwen2.5-0.5B decode op shapes
// (see kOpShapes), 1-8 tokens, streamed from DRAM; frac_bw as in BM_Matmul.
// BM_PrefetchAB/<type>/<op>/<n_tok>/<threads>: software prefetch on vs off, alternated (see there).
// BM_ActPrepAB/<cols>/<n_tok>: activation preparation on one thread vs split over two (see there).
// BM_MatmulHot/<type>/<op>/<n_tok>/<threads>: one copy of the op's weights used again and again
// (ops 0, 1, 5: 576x576, 192x576, 896x896, each fits L2), so the kernel's compute rate shows
// without DRAM; with 2 threads, the fixed cost of splitting a decode-sized matmul over the pool
// (publishing the job, the worker joining, the caller's activation stores reaching the other
// core). type: 0 Q8_0, 1 Q4_0, 2 Q4_K, 3 Q6_K, 4 Q5_0, 5 Q4_1, 6 Q5_1, 7 Q2_K, 8 Q3_K, 9 Q5_K,
// 10 IQ4_NL, 11 IQ4_XS. Counters: GB/s, ns/line (per 32 weights x 1 token). A 1-thread 1-token
// GB/s near or below one thread's share of the streaming bandwidth (BM_Bandwidth/2 / 2) means the
// type's decode kernel cannot keep up with DRAM on that tier. Session 47 (the Zen 5 guest below, op 5, 1 token,
// 1 thread, GB/s; BM_Bandwidth/2 / 2 was 16-22): avx2 Q3_K 15, Q2_K 17, IQ4_NL 18-27, Q5_0 and
// IQ4_XS 23, Q5_K 25-27, Q6_K 26-30, Q4_K 38, Q8_0 58-60; avx-vnni Q3_K 18, Q2_K 21-22, Q5_K 27,
// Q6_K 32-35, IQ4_XS 37; avx512 every type 38 or more. Session 38 (2-core Zen 5 PVM guest, ~0.22
// us one way between the two vCPUs' caches): Q8_0 at 1 token, avx512, 1 / 2 threads: 576x576 2.50 / 2.94 us, 192x576
// 0.95 / 2.50 us, 896x896 7.18 / 4.78 us (avx2: 6.07 / 6.45, 1.93 / 3.49, 13.9 / 11.9): ~1.5-2 us
// of fixed cost a 2-thread op. Streamed from DRAM (BM_MatmulOp) the second thread's bandwidth
// about pays for it at 192x576 (4.94 vs 4.98 us) and wins from ~0.3 MB (576x576 13.3 vs 9.68).
// BM_PrepQ8/<cols>/<n_tok>/<repack>: quantizing activations for a Q8_0 matmul (Matrix::prepare),
// calling thread, input hot in cache; repack 0: the plain layout's Q8_0 blocks alone, 1: the
// repacked (R16) layout's forms (plus the tile interleave on avx512/avxvnni, the int16 copy on
// avx2 from 16 tokens).
// BM_AddRmsNorm/<n>/<T>/<threads>: the residual add + RMSNorm of T rows of n
// (model::add_rms_norm_rows) on the calling thread or split over the 2-thread pool, under the
// active tier (--isa scalar runs the scalar reference).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_isa.h"
#include "core/thread_pool.h"
#include "model/ops.h"
#include "tensor/kernels.h"
#include "tensor/matrix.h"

namespace {

using ts::ThreadPool;
using ts::tensor::DType;
using ts::tensor::Matrix;

constexpr size_t kBandwidthBytes = size_t{1} << 30;
constexpr size_t kWorkingSetBytes = size_t{1} << 30;  // > L3 (this VM reports 300 MB)

ThreadPool& pool_for(int threads) {
  static ThreadPool one(1);
  static ThreadPool two(2);
  return threads == 1 ? one : two;
}

struct StreamBuffer {
  float* data = nullptr;
  size_t count = 0;
  StreamBuffer() {
    void* p = mmap(nullptr, kBandwidthBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    madvise(p, kBandwidthBytes, MADV_HUGEPAGE);
    data = static_cast<float*>(p);
    count = kBandwidthBytes / sizeof(float);
    for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(i & 1023);
  }
};

StreamBuffer& stream_buffer() {
  static StreamBuffer b;
  return b;
}

// One streaming pass over the buffer split across the pool; returns the sum (kept alive).
__attribute__((noinline)) float stream_sum(ThreadPool& pool) {
  StreamBuffer& b = stream_buffer();
  float partial[64] = {};
  pool.run([&](int i, int n) {
    const size_t per = b.count / static_cast<size_t>(n);
    const float* p = b.data + per * static_cast<size_t>(i);
    // Eight independent SSE accumulators (baseline x86-64): far more adds per cycle than DRAM
    // can feed, so the figure is the memory system's, not this loop's.
    __m128 acc[8];
    for (auto& a : acc) a = _mm_setzero_ps();
    for (size_t k = 0; k + 32 <= per; k += 32) {
      for (int j = 0; j < 8; ++j) acc[j] = _mm_add_ps(acc[j], _mm_loadu_ps(p + k + 4 * static_cast<size_t>(j)));
    }
    float s[8];
    for (int j = 0; j < 8; ++j) {
      float lanes[4];
      _mm_storeu_ps(lanes, acc[j]);
      s[j] = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    }
    partial[i] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
  });
  float total = 0;
  for (int i = 0; i < pool.num_threads(); ++i) total += partial[i];
  return total;
}

// Best of a few passes, in GB/s.
double measure_bandwidth(int threads) {
  ThreadPool& pool = pool_for(threads);
  stream_sum(pool);  // fault in / warm up
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(stream_sum(pool));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(kBandwidthBytes) / s / 1e9);
  }
  return best;
}

double g_bandwidth[3] = {0, 0, 0};  // by thread count

void BM_Bandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  ThreadPool& pool = pool_for(threads);
  for (auto _ : state) benchmark::DoNotOptimize(stream_sum(pool));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBandwidthBytes));
}
BENCHMARK(BM_Bandwidth)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// Cost of publishing one empty job to the pool and waiting for it (fork-join overhead).
void BM_PoolRun(benchmark::State& state) {
  ThreadPool& pool = pool_for(static_cast<int>(state.range(0)));
  int64_t sink = 0;
  for (auto _ : state) {
    pool.run([&](int i, int) {
      if (i == 0) ++sink;
    });
  }
  benchmark::DoNotOptimize(sink);
}
BENCHMARK(BM_PoolRun)->Arg(1)->Arg(2)->UseRealTime();

// Same for parallel_chunks (what matmul uses): the caller does not wait for late workers.
void BM_PoolChunks(benchmark::State& state) {
  ThreadPool& pool = pool_for(static_cast<int>(state.range(0)));
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool.parallel_chunks(8, 1, [&](int64_t b, int64_t e) { sink.fetch_add(e - b, std::memory_order_relaxed); });
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_PoolChunks)->Arg(1)->Arg(2)->UseRealTime();

const DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,   DType::kQ6_K, DType::kF16,
                        DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,   DType::kQ2_K, DType::kQ3_K,
                        DType::kQ5_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kBF16};
constexpr int kNumTypes = static_cast<int>(sizeof(kTypes) / sizeof(kTypes[0]));
const int64_t kShapes[][2] = {{4864, 896}, {896, 4864}};

int64_t cols_for(DType type, int shape) {
  const int64_t cols = kShapes[shape][1];
  const bool k_quant = ts::tensor::type_traits(static_cast<uint32_t>(type))->block_size == 256;
  return k_quant && cols % 256 != 0 ? (cols + 255) / 256 * 256 : cols;
}

// Several copies of one weight matrix (> kWorkingSetBytes together).
struct WeightSet {
  std::vector<std::vector<uint8_t>> sources;
  std::vector<Matrix> mats;
};

// rows x cols of `type`, enough copies to stream from DRAM; one set cached at a time.
WeightSet& weights(DType type, int64_t rows, int64_t cols, bool repack) {
  static std::map<std::tuple<int, int64_t, int64_t, bool>, std::unique_ptr<WeightSet>> cache;
  auto key = std::make_tuple(static_cast<int>(type), rows, cols, repack);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  cache.clear();  // keep memory bounded: one weight set at a time
  auto ws = std::make_unique<WeightSet>();
  auto traits = *ts::tensor::type_traits(static_cast<uint32_t>(type));
  const size_t rb = ts::tensor::row_bytes(traits, cols);
  std::vector<uint8_t> base(rb * static_cast<size_t>(rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  if (ts::tensor::has_row_quantizer(type)) {
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = dist(rng);
      ts::tensor::quantize_row(type, row.data(), base.data() + rb * static_cast<size_t>(r), cols);
    }
  } else {
    // No quantizer for this type here: random blocks (speed does not depend on the values).
    // Every 16-bit word is a small fp16 (exponent forced low), so scales stay finite.
    for (size_t i = 0; i + 1 < base.size(); i += 2) {
      const uint16_t h = static_cast<uint16_t>((rng() & 0x83FF) | 0x2000);
      std::memcpy(base.data() + i, &h, 2);
    }
  }
  const size_t copies = std::max<size_t>(2, kWorkingSetBytes / base.size() + 1);
  for (size_t c = 0; c < copies; ++c) {
    ws->sources.push_back(base);
    auto m = Matrix::create(type, ws->sources.back().data(), rows, cols,
                            ts::tensor::MatrixOptions{.allow_repack = repack});
    if (!m.ok()) {
      std::fprintf(stderr, "create failed: %s\n", m.status().to_string().c_str());
      std::abort();
    }
    ws->mats.push_back(std::move(m).value());
    // A repacked matrix owns its copy; the source is no longer needed.
    if (ws->mats.back().repacked()) ws->sources.back() = {};
  }
  return *(cache[key] = std::move(ws));
}

// The timed loop of BM_Matmul / BM_MatmulOp: n_tok random activation rows times the set's
// matrices in turn (each read from DRAM, not from cache); returns one matrix's weight bytes.
double run_matmuls(benchmark::State& state, WeightSet& ws, int64_t n_tok, int64_t rows, int64_t cols, int threads) {
  std::vector<float> x(static_cast<size_t>(n_tok * cols)), y(static_cast<size_t>(n_tok * rows));
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  ThreadPool& pool = pool_for(threads);
  size_t next = 0;
  for (auto _ : state) {
    ws.mats[next].matmul(x.data(), n_tok, y.data(), &pool);
    benchmark::ClobberMemory();
    next = (next + 1) % ws.mats.size();
  }
  return static_cast<double>(ws.mats[0].weight_bytes());
}

void BM_Matmul(benchmark::State& state) {
  const DType type = kTypes[state.range(0)];
  const int shape = static_cast<int>(state.range(1));
  const int64_t n_tok = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const bool repack = state.range(4) != 0;
  const int64_t rows = kShapes[shape][0], cols = cols_for(type, shape);
  WeightSet& ws = weights(type, rows, cols, repack);
  const double bytes = run_matmuls(state, ws, n_tok, rows, cols, threads);
  state.SetBytesProcessed(static_cast<int64_t>(bytes * static_cast<double>(state.iterations())));
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(n_tok), benchmark::Counter::kIsIterationInvariantRate);
  // frac_bw = (bytes/s) / bandwidth: computed as a rate of bytes / (bandwidth) per iteration.
  state.counters["frac_bw"] = benchmark::Counter(bytes / (g_bandwidth[threads] * 1e9),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(ts::tensor::type_name(static_cast<uint32_t>(type))) + " " + std::to_string(rows) + "x" +
                 std::to_string(cols) + " " + ts::tensor::isa_name(ts::tensor::active_isa()) +
                 (ws.mats[0].repacked() ? " r16" : ""));
}

void matmul_args(benchmark::internal::Benchmark* b) {
  for (int t = 0; t < kNumTypes; ++t)
    for (int s = 0; s < 2; ++s)
      for (int n : {1, 8, 16, 32, 64, 512})
        for (int th : {1, 2})
          for (int rp : {1, 0}) b->Args({t, s, n, th, rp});
}
BENCHMARK(BM_Matmul)->Apply(matmul_args)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.3);

// BM_MatmulOp/<op>/<n_tok>/<threads>: Q8_0 (repacked: Q8_0_R16 where the ISA has it) at the
// decode op shapes of the two reference models, streamed from DRAM as in BM_Matmul; frac_bw
// against the bandwidth of this process with the same thread count. Ops 0-4: SmolLM2-135M
// (q/o 576x576, k/v 192x576, gate+up 3072x576, down 576x1536, lm_head 49152x576); 5-9:
// Qwen2.5-0.5B (q/o 896x896, k/v 128x896, gate+up 9728x896, down 896x4864, lm_head 151936x896);
// 10-12: the matrices as the models hold them where that differs: SmolLM2 gate or up alone
// 1536x576, q+k+v stacked 960x576, Qwen gate or up alone 4864x896.
const int64_t kOpShapes[][2] = {{576, 576}, {192, 576}, {3072, 576}, {576, 1536}, {49152, 576},
                                {896, 896}, {128, 896}, {9728, 896}, {896, 4864}, {151936, 896},
                                {1536, 576}, {960, 576}, {4864, 896}};
constexpr int kNumOps = static_cast<int>(sizeof(kOpShapes) / sizeof(kOpShapes[0]));

void BM_MatmulOp(benchmark::State& state) {
  const int64_t rows = kOpShapes[state.range(0)][0], cols = kOpShapes[state.range(0)][1];
  const int64_t n_tok = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  WeightSet& ws = weights(DType::kQ8_0, rows, cols, true);
  const double bytes = run_matmuls(state, ws, n_tok, rows, cols, threads);
  const double macs = static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(n_tok);
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMAC/s"] = benchmark::Counter(macs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["frac_bw"] = benchmark::Counter(bytes / (g_bandwidth[threads] * 1e9),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(rows) + "x" + std::to_string(cols) + " " + ts::tensor::isa_name(ts::tensor::active_isa()) +
                 (ws.mats[0].repacked() ? " r16" : ""));
}
void matmul_op_args(benchmark::internal::Benchmark* b) {
  for (int op = 0; op < kNumOps; ++op)  // op outermost: one weight set is built per op
    for (int th : {1, 2})
      for (int n : {1, 2, 4, 8}) b->Args({op, n, th});
}
BENCHMARK(BM_MatmulOp)
    ->Apply(matmul_op_args)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.1);

// BM_PrefetchAB/<type>/<op>/<n_tok>/<threads>: software prefetch on against off
// (tensor::set_sw_prefetch), alternated in the same process and the same seconds: each
// iteration runs a block of kAbBlock matmuls with the prefetches on and a block with them off
// (the order swapping every iteration), over the op's weight copies streamed from DRAM as in
// BM_MatmulOp. type: 0 Q8_0, 1 Q4_0, 2 Q4_K, 3 Q6_K (K-quants round cols up to a multiple of
// 256). Counters: on_GB/s, off_GB/s, their frac_bw, and on/off = time on / time off (> 1: off
// is faster). The mode set before the run (auto, or TOKENSERVE_SW_PREFETCH) is restored after.
const DType kAbTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};
constexpr int kAbBlock = 8;

// The timed loop of the A/B benchmarks: blocks of kAbBlock matmuls over the set's matrices in
// turn (streamed from DRAM), set(true) for one block and set(false) for the next, the order
// swapping every iteration. Adds each mode's seconds to secs[0] (true) / secs[1] (false);
// returns the number of iterations.
template <typename Set>
int64_t alternate_ab(benchmark::State& state, WeightSet& ws, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
                     double* secs, Set set) {
  size_t next = 0;
  int64_t blocks = 0;
  for (auto _ : state) {
    for (int k = 0; k < 2; ++k) {
      const int which = (k + static_cast<int>(blocks & 1)) & 1;
      set(which == 0);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kAbBlock; ++i) {
        ws.mats[next].matmul(x, n_tok, y, &pool);
        benchmark::ClobberMemory();
        next = (next + 1) % ws.mats.size();
      }
      secs[which] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    ++blocks;
  }
  return blocks;
}

// Op `op`'s rows and columns for `type` (K-quants round the columns up to a multiple of 256).
std::pair<int64_t, int64_t> op_dims(DType type, int64_t op) {
  int64_t cols = kOpShapes[op][1];
  if (ts::tensor::type_traits(static_cast<uint32_t>(type))->block_size == 256) cols = (cols + 255) / 256 * 256;
  return {kOpShapes[op][0], cols};
}

void BM_PrefetchAB(benchmark::State& state) {
  const DType type = kAbTypes[state.range(0)];
  const auto [rows, cols] = op_dims(type, state.range(1));
  const int64_t n_tok = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  WeightSet& ws = weights(type, rows, cols, true);
  std::vector<float> x(static_cast<size_t>(n_tok * cols)), y(static_cast<size_t>(n_tok * rows));
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  ThreadPool& pool = pool_for(threads);
  const ts::tensor::SwPrefetch saved = ts::tensor::sw_prefetch_mode();
  double secs[2] = {0, 0};  // [0]: on, [1]: off
  const int64_t blocks = alternate_ab(state, ws, x.data(), n_tok, y.data(), pool, secs, [](bool on) {
    ts::tensor::set_sw_prefetch(on ? ts::tensor::SwPrefetch::kOn : ts::tensor::SwPrefetch::kOff);
  });
  ts::tensor::set_sw_prefetch(saved);
  const double bytes = static_cast<double>(ws.mats[0].weight_bytes()) * kAbBlock * static_cast<double>(blocks);
  const double bw = g_bandwidth[threads] * 1e9;
  state.counters["on_GB/s"] = bytes / secs[0] / 1e9;
  state.counters["off_GB/s"] = bytes / secs[1] / 1e9;
  state.counters["on_frac_bw"] = bytes / secs[0] / bw;
  state.counters["off_frac_bw"] = bytes / secs[1] / bw;
  state.counters["on/off"] = secs[0] / secs[1];
  state.SetLabel(std::string(ts::tensor::type_name(static_cast<uint32_t>(type))) + " " + std::to_string(rows) + "x" +
                 std::to_string(cols) + " " + ts::tensor::isa_name(ts::tensor::active_isa()) +
                 (ws.mats[0].repacked() ? " r16" : ""));
}
void prefetch_ab_args(benchmark::internal::Benchmark* b) {
  for (int t = 0; t < 4; ++t)
    for (int op = 0; op < kNumOps; ++op)  // type and op outermost: one weight set is built per pair
      for (int th : {1, 2})
        for (int n : {1, 2, 3, 4, 5, 8}) b->Args({t, op, n, th});
}
BENCHMARK(BM_PrefetchAB)->Apply(prefetch_ab_args)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.2);

// BM_MatmulHot/<type>/<op>/<n_tok>/<threads>: see the file's head.
const DType kHotTypes[] = {DType::kQ8_0, DType::kQ4_0,   DType::kQ4_K,   DType::kQ6_K,  DType::kQ5_0,  DType::kQ4_1,
                           DType::kQ5_1, DType::kQ2_K,   DType::kQ3_K,   DType::kQ5_K,  DType::kIQ4_NL, DType::kIQ4_XS};
void BM_MatmulHot(benchmark::State& state) {
  const DType type = kHotTypes[state.range(0)];
  const auto [rows, cols] = op_dims(type, state.range(1));
  const int64_t n_tok = state.range(2);
  WeightSet& ws = weights(type, rows, cols, true);
  std::vector<float> x(static_cast<size_t>(n_tok * cols)), y(static_cast<size_t>(n_tok * rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i * 37 % 101) - 50) * 0.01f;
  ThreadPool& pool = pool_for(static_cast<int>(state.range(3)));
  for (auto _ : state) {
    ws.mats[0].matmul(x.data(), n_tok, y.data(), &pool);
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(ws.mats[0].weight_bytes());
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ns/line"] = benchmark::Counter(static_cast<double>(rows) * static_cast<double>(cols) / 32 / 1e9 * static_cast<double>(n_tok),
                                                 benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(std::string(ts::tensor::type_name(static_cast<uint32_t>(type))) + " " + std::to_string(rows) + "x" +
                 std::to_string(cols) + " " + ts::tensor::isa_name(ts::tensor::active_isa()));
}
BENCHMARK(BM_MatmulHot)->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {0, 1, 5}, {1, 2, 8}, {1, 2}})->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.3);

// BM_ActPrepAB/<cols>/<n_tok>: the activation preparation a Q8_0 matmul makes (Matrix::prepare:
// quantize + the ISA's interleave) on the calling thread alone against split over the 2-thread
// pool, alternated in the same process and seconds. Before each timed preparation a pool job
// rewrites the input, each thread its half of every token's row (as the gate/up job leaves
// ffn_a before down), so half the input arrives from the other core's cache as in a forward.
// Counters: serial_us, pooled_us (per preparation) and pooled/serial.
void BM_ActPrepAB(benchmark::State& state) {
  const int64_t cols = state.range(0), n_tok = state.range(1);
  std::vector<uint8_t> wbytes(static_cast<size_t>(cols / 32 * 34 * 16), 0);
  auto m = Matrix::create(DType::kQ8_0, wbytes.data(), 16, cols);
  if (!m.ok()) {
    state.SkipWithError("matrix");
    return;
  }
  std::vector<float> x(static_cast<size_t>(n_tok * cols));
  ThreadPool& pool = pool_for(2);
  ts::tensor::PreparedActivations prep;
  float salt = 0;
  auto dirty = [&] {
    salt += 1.0f;
    pool.run([&](int i, int nt) {
      const int64_t c0 = cols * i / nt, c1 = cols * (i + 1) / nt;
      for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t c = c0; c < c1; ++c) x[static_cast<size_t>(t * cols + c)] = static_cast<float>((c * 7 + t) % 61) - 30.0f + salt;
    });
  };
  double ns[2] = {0, 0};
  int64_t iters = 0;
  for (auto _ : state) {
    for (int k = 0; k < 2; ++k) {
      const int mode = (iters + k) & 1;  // order swaps every iteration
      dirty();
      const auto t0 = std::chrono::steady_clock::now();
      prep.reset(x.data(), n_tok, cols);
      m->prepare(prep, mode == 0 ? nullptr : &pool);
      ns[mode] += static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    }
    ++iters;
  }
  state.counters["serial_us"] = ns[0] / 1e3 / static_cast<double>(iters);
  state.counters["pooled_us"] = ns[1] / 1e3 / static_cast<double>(iters);
  state.counters["pooled/serial"] = ns[1] / ns[0];
}
BENCHMARK(BM_ActPrepAB)
    ->Args({896, 8})
    ->Args({576, 8})
    ->Args({1536, 8})
    ->Args({4864, 1})
    ->Args({4864, 2})
    ->Args({4864, 4})
    ->Args({4864, 8})
    ->Args({896, 512})
    ->Args({4864, 512})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);

// BM_MatmulL2/<type>/<n_tok>: one 1024x1024 (Q8_0: 1024x896) matrix, 1 thread, repacked, the
// same copy every iteration, so the weights stay in L2 (about 1 MB; the 2 MB L2 of current
// Intel/AMD cores holds it) and the figure is the micro-kernel's compute rate: GMAC/s and
// MAC/cycle (int8 multiply-adds per core clock, the clock estimated at start-up from a chain of
// dependent adds). The AVX2 vpmaddubsw + vpmaddwd limit is ~20-24 MAC/cycle.
double g_ghz = 0;

__attribute__((noinline)) uint64_t add_chain(uint64_t n) {
  uint64_t x = 0;
  for (uint64_t i = 0; i < n; ++i) __asm__ volatile("add $1, %0" : "+r"(x));  // 1 cycle each, serial
  return x;
}

// This thread's CPU time: BM_MatmulL2's counters are per CPU second (it does not use real time),
// so the clock is too. On a shared VM a wall-clock estimate counts the time another process held
// the core as cycles not run, and MAC/cycle came out 2-3x too high under load.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double measure_ghz() {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    constexpr uint64_t kN = 200'000'000;
    const double t0 = thread_cpu_seconds();
    benchmark::DoNotOptimize(add_chain(kN));
    const double s = thread_cpu_seconds() - t0;
    best = std::max(best, static_cast<double>(kN) / s / 1e9);
  }
  return best;
}

const DType kL2Types[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};

void BM_MatmulL2(benchmark::State& state) {
  const DType type = kL2Types[state.range(0)];
  const int64_t n_tok = state.range(1);
  const int64_t rows = 1024, cols = type == DType::kQ8_0 ? 896 : 1024;
  auto traits = *ts::tensor::type_traits(static_cast<uint32_t>(type));
  const size_t rb = ts::tensor::row_bytes(traits, cols);
  std::vector<uint8_t> src(rb * static_cast<size_t>(rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    ts::tensor::quantize_row(type, row.data(), src.data() + rb * static_cast<size_t>(r), cols);
  }
  auto m = Matrix::create(type, src.data(), rows, cols, ts::tensor::MatrixOptions{.allow_repack = true});
  if (!m.ok()) {
    state.SkipWithError(m.status().to_string().c_str());
    return;
  }
  std::vector<float> x(static_cast<size_t>(n_tok * cols)), y(static_cast<size_t>(n_tok * rows));
  std::normal_distribution<float> xd(0.0f, 1.0f);
  for (float& v : x) v = xd(rng);
  ThreadPool& pool = pool_for(1);
  for (auto _ : state) {
    m->matmul(x.data(), n_tok, y.data(), &pool);
    benchmark::ClobberMemory();
  }
  const double macs = static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(n_tok);
  state.counters["GMAC/s"] = benchmark::Counter(macs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MAC/cyc"] = benchmark::Counter(macs / (g_ghz * 1e9), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(ts::tensor::type_name(static_cast<uint32_t>(type))) + " " +
                 ts::tensor::isa_name(ts::tensor::active_isa()) + (m->repacked() ? " r16" : ""));
}
BENCHMARK(BM_MatmulL2)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128}})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.2);

// BM_Avx2Int16Cap/<T>: the ceiling of the AVX2 int16 Q8_0 panel kernel's inner loop
// (q8_0_panel_tile_avx2 in src/tensor/kernels_avx2_panels.h) on this CPU, with nothing else:
// per pair of values, two 16-row int16 weight vectors and T broadcast activation pairs feed 2T
// vpmaddwd + 2T vpaddd, 32 blocks of 32 values (16 KB of weights, 2 KB of activations per token,
// all L1-resident), then each block's int32 sums are turned to float and added once. No decode,
// no block scales, no L2 traffic. BM_MatmulL2/0/<n_tok> (Q8_0, 1 thread) divided by this
// figure is how close the real kernel is to what its instruction mix allows here; the MACs
// counted are real (the sums are kept and checked against a scalar recount once).
constexpr int kCapBlocks = 32;
alignas(64) int16_t g_cap_w[kCapBlocks * 512];     // [block][16 pairs][16 rows][2]
alignas(64) int16_t g_cap_x[8][kCapBlocks * 32];   // [token][block][32]
alignas(64) float g_cap_acc[8][16];

template <int T>
__attribute__((target("avx2"), noinline)) void cap_tile() {
  for (int b = 0; b < kCapBlocks; ++b) {
    __m256i s0[T], s1[T];
    for (int t = 0; t < T; ++t) s0[t] = s1[t] = _mm256_setzero_si256();
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(g_cap_w + b * 512 + 32 * j));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(g_cap_w + b * 512 + 32 * j + 16));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        int32_t v;
        std::memcpy(&v, g_cap_x[t] + b * 32 + 2 * j, 4);
        const __m256i x = _mm256_set1_epi32(v);
        s0[t] = _mm256_add_epi32(s0[t], _mm256_madd_epi16(w0, x));
        s1[t] = _mm256_add_epi32(s1[t], _mm256_madd_epi16(w1, x));
        __asm__("" : "+x"(s0[t]), "+x"(s1[t]));  // as keep_reg() in the kernel
      }
    }
    for (int t = 0; t < T; ++t) {
      _mm256_store_ps(g_cap_acc[t], _mm256_add_ps(_mm256_load_ps(g_cap_acc[t]), _mm256_cvtepi32_ps(s0[t])));
      _mm256_store_ps(g_cap_acc[t] + 8, _mm256_add_ps(_mm256_load_ps(g_cap_acc[t] + 8), _mm256_cvtepi32_ps(s1[t])));
    }
  }
}

// Scalar recount of cap_tile's sums for token t, row r (weights and activations are small, so
// the float sums are exact).
double cap_expected(int t, int r) {
  double sum = 0;
  for (int b = 0; b < kCapBlocks; ++b) {
    for (int j = 0; j < 16; ++j) {
      for (int e = 0; e < 2; ++e) {
        // Row r's pair j: vector (r / 8), lane r % 8, two int16 values.
        const int16_t w = g_cap_w[b * 512 + 32 * j + 16 * (r / 8) + 2 * (r % 8) + e];
        sum += static_cast<double>(w) * g_cap_x[t][b * 32 + 2 * j + e];
      }
    }
  }
  return sum;
}

template <int T>
void BM_Avx2Int16Cap(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2")) {
    state.SkipWithError("no AVX2 on this CPU");
    return;
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> wd(-128, 127), xd(-127, 127);
  for (int16_t& w : g_cap_w) w = static_cast<int16_t>(wd(rng));
  for (auto& row : g_cap_x) {
    for (int16_t& x : row) x = static_cast<int16_t>(xd(rng));
  }
  std::memset(g_cap_acc, 0, sizeof(g_cap_acc));
  cap_tile<T>();
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < 16; ++r) {
      if (static_cast<double>(g_cap_acc[t][r]) != cap_expected(t, r)) {
        state.SkipWithError("cap_tile sums differ from the scalar recount");
        return;
      }
    }
  }
  for (auto _ : state) {
    cap_tile<T>();
    benchmark::ClobberMemory();
  }
  const double macs = 16.0 * 32.0 * kCapBlocks * T;
  state.counters["GMAC/s"] = benchmark::Counter(macs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MAC/cyc"] = benchmark::Counter(macs / (g_ghz * 1e9), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Avx2Int16Cap<1>)->MinTime(0.2);
BENCHMARK(BM_Avx2Int16Cap<2>)->MinTime(0.2);
BENCHMARK(BM_Avx2Int16Cap<4>)->MinTime(0.2);
BENCHMARK(BM_Avx2Int16Cap<6>)->MinTime(0.2);

}  // namespace

void BM_PrepQ8(benchmark::State& state) {
  const int64_t cols = state.range(0), n_tok = state.range(1);
  std::vector<uint8_t> wbytes(static_cast<size_t>(cols / 32 * 34 * 16), 0);
  auto m = Matrix::create(DType::kQ8_0, wbytes.data(), 16, cols,
                          ts::tensor::MatrixOptions{.allow_repack = state.range(2) != 0});
  if (!m.ok()) {
    state.SkipWithError("matrix");
    return;
  }
  std::vector<float> x(static_cast<size_t>(n_tok * cols));
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : x) v = nd(rng);
  ts::tensor::PreparedActivations prep;
  for (auto _ : state) {
    prep.reset(x.data(), n_tok, cols);
    m->prepare(prep, nullptr);
    benchmark::ClobberMemory();
  }
  state.counters["ns_per_value"] = benchmark::Counter(static_cast<double>(n_tok * cols),
                                                      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_PrepQ8)->ArgsProduct({{896, 4864}, {8, 64, 512}, {0, 1}})->MinTime(0.2);

void BM_AddRmsNorm(benchmark::State& state) {
  const int64_t n = state.range(0), T = state.range(1);
  ThreadPool* pool = state.range(2) > 1 ? &pool_for(2) : nullptr;
  std::vector<float> x(static_cast<size_t>(T * n)), h(x.size()), w(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : x) v = nd(rng);
  for (float& v : w) v = nd(rng);
  for (auto _ : state) {
    for (size_t i = 0; i < h.size(); ++i) h[i] = 1e-3f * static_cast<float>(i & 63);  // x grows slowly
    ts::model::add_rms_norm_rows(x.data(), h.data(), w.data(), h.data(), T, n, 1e-6f, pool);
    benchmark::DoNotOptimize(h.data());
  }
  state.counters["ns_per_row"] = benchmark::Counter(static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate |
                                                                               benchmark::Counter::kInvert);
}
BENCHMARK(BM_AddRmsNorm)->ArgsProduct({{576, 896}, {8, 512}, {1, 2}})->UseRealTime()->MinTime(0.2);

int main(int argc, char** argv) {
  if (!ts::bench::apply_isa_arg(&argc, argv)) return 2;
  benchmark::Initialize(&argc, argv);
  g_bandwidth[1] = measure_bandwidth(1);
  g_bandwidth[2] = measure_bandwidth(2);
  g_ghz = measure_ghz();
  std::printf("isa: %s; streaming read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (2 threads); core clock ~%.2f GHz\n",
              ts::tensor::isa_name(ts::tensor::active_isa()), g_bandwidth[1], g_bandwidth[2], g_ghz);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// BM_PairTileAB/<op>/<n_tok>/<threads>: the avx512 Q8_0_R16 kernel with its two-group decode
// tile (kern::set_r16_pair_tile(true), "pair") against one group at a time ("tile"), alternated
// in blocks in one process over the op's weight copies streamed from DRAM (as BM_PrefetchAB).
// Only matrices of >= 3328 columns take the pair tile (Qwen2.5's down projection, op 8); the
// others are a same-kernel control (pair/tile ~1). Meaningful on the avx512 tier only.
void BM_PairTileAB(benchmark::State& state) {
  const int64_t rows = kOpShapes[state.range(0)][0], cols = kOpShapes[state.range(0)][1];
  const int64_t n_tok = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  WeightSet& ws = weights(DType::kQ8_0, rows, cols, true);
  std::vector<float> x(static_cast<size_t>(n_tok * cols)), y(static_cast<size_t>(n_tok * rows));
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  ThreadPool& pool = pool_for(threads);
  double secs[2] = {0, 0};  // [0]: pair tile on, [1]: off
  const int64_t blocks = alternate_ab(state, ws, x.data(), n_tok, y.data(), pool, secs,
                                      [](bool on) { ts::tensor::kern::set_r16_pair_tile(on); });
  ts::tensor::kern::set_r16_pair_tile(true);
  const double bytes = static_cast<double>(ws.mats[0].weight_bytes()) * kAbBlock * static_cast<double>(blocks);
  state.counters["pair_GB/s"] = bytes / secs[0] / 1e9;
  state.counters["tile_GB/s"] = bytes / secs[1] / 1e9;
  state.counters["pair/tile"] = secs[0] / secs[1];
  state.SetLabel(std::to_string(rows) + "x" + std::to_string(cols) + " " + ts::tensor::isa_name(ts::tensor::active_isa()));
}
BENCHMARK(BM_PairTileAB)
    ->ArgsProduct({{2, 3, 8, 12}, {5, 8}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.3);
