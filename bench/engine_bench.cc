// Engine-level benchmark (no HTTP): output tokens/s and per-step time at several concurrencies.
//
//   engine_bench MODEL.gguf [--threads 2] [--prompt 128] [--gen 128] [--conc 1,4,8,16]
//                           [--max-batch-tokens 512] [--kv f16|q8_0|f32] [--isa avx2]
//
// For each concurrency c: c requests with distinct random prompts (prefix cache off) are
// submitted at once to an engine driven step by step on this thread; every request generates
// exactly --gen tokens (ignore_eos). Reported per c:
//   out tok/s   all output tokens / wall time from submit to the last token (prefill included)
//   decode tok/s   c / mean decode-step time (steps that computed no prompt token)
//   step ms     mean and p50/p90 of decode steps
//   prefill ms  time of the steps that computed prompt tokens
//   min ms      fastest decode step (wall)
//   cpu ms      mean process CPU time of a decode step (all threads). With --threads 1 it is the
//               step's work, unaffected by other processes time-sharing the cores (compare
//               builds with it on a busy machine); with more threads it includes spin-waiting.
//   prefill cpu process CPU ms of the steps that computed prompt tokens (same caveat)
#include <algorithm>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_isa.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double process_cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int usage() {
  std::fprintf(stderr,
               "usage: engine_bench MODEL.gguf [--threads N] [--prompt N] [--gen N] [--conc 1,4,8,16] "
               "[--max-batch-tokens N] [--kv f16|q8_0|f32] [--isa scalar|avx2|avxvnni|avx512|amx]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (!ts::bench::apply_isa_arg(&argc, argv)) return 2;
  if (argc < 2) return usage();
  std::string path = argv[1];
  int threads = 2, prompt_len = 128, gen = 128, max_batch_tokens = 512;
  std::vector<int> concs = {1, 4, 8, 16};
  std::string kv = "f16";
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    std::string v = argv[++i];
    if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--prompt") prompt_len = std::atoi(v.c_str());
    else if (a == "--gen") gen = std::atoi(v.c_str());
    else if (a == "--max-batch-tokens") max_batch_tokens = std::atoi(v.c_str());
    else if (a == "--kv") kv = v;
    else if (a == "--conc") {
      concs.clear();
      std::stringstream ss(v);
      for (std::string p; std::getline(ss, p, ',');) concs.push_back(std::atoi(p.c_str()));
    } else {
      return usage();
    }
  }
  auto kv_type = ts::model::parse_kv_type(kv);
  if (!kv_type.ok()) {
    std::fprintf(stderr, "error: %s\n", kv_type.status().to_string().c_str());
    return 2;
  }
  auto model = ts::model::Model::load(path);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().to_string().c_str());
    return 1;
  }
  auto& m = **model;
  const auto& cfg = m.config();
  std::printf("model %s (%s, %d layers, embd %d, vocab %d), weights %.1f MiB, %d threads, prompt %d, gen %d, "
              "max_batch_tokens %d, kv %s\n",
              path.c_str(), cfg.arch.c_str(), cfg.n_layer, cfg.n_embd, cfg.n_vocab, m.weight_bytes() / 1048576.0,
              threads, prompt_len, gen, max_batch_tokens, kv.c_str());
  std::printf("%5s %12s %13s %10s %9s %9s %12s %7s %8s %8s %12s\n", "conc", "out tok/s", "decode tok/s", "step ms",
              "p50 ms", "p90 ms", "prefill ms", "steps", "min ms", "cpu ms", "prefill cpu");

  ts::engine::Rng rng(12345);
  for (int c : concs) {
    ts::engine::EngineOptions o;
    o.start_thread = false;
    o.num_threads = threads;
    o.max_seqs = std::max(c, 1);
    o.max_batch_tokens = std::max(max_batch_tokens, c);
    o.kv_type = *kv_type;
    o.enable_prefix_cache = false;
    o.kv_cache_bytes = 0;
    o.num_kv_blocks = c * ((prompt_len + gen + 15) / 16 + 1);
    o.seed = 1;
    auto engine = ts::engine::Engine::create(m, o);
    if (!engine.ok()) {
      std::fprintf(stderr, "error: %s\n", engine.status().to_string().c_str());
      return 1;
    }
    auto& e = **engine;
    std::vector<std::shared_ptr<ts::engine::RequestHandle>> hs;
    const auto t0 = Clock::now();
    for (int r = 0; r < c; ++r) {
      ts::engine::Request req;
      req.prompt_tokens.resize(static_cast<size_t>(prompt_len));
      for (auto& t : req.prompt_tokens) t = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(cfg.n_vocab));
      req.sampling.temperature = 0.0f;
      req.sampling.max_tokens = gen;
      req.sampling.ignore_eos = true;
      auto h = e.submit(std::move(req));
      if (!h.ok()) {
        std::fprintf(stderr, "error: %s\n", h.status().to_string().c_str());
        return 1;
      }
      hs.push_back(*h);
    }
    std::vector<double> decode_ms;
    double prefill_ms = 0.0, decode_cpu_ms = 0.0, prefill_cpu_ms = 0.0;
    int64_t steps = 0;
    for (;;) {
      const int64_t prefill_before = e.stats().prefill_tokens_total;
      const auto ts = Clock::now();
      const double cpu0 = process_cpu_ms();
      if (!e.step()) break;
      const double dt = ms_since(ts);
      const double dcpu = process_cpu_ms() - cpu0;
      ++steps;
      if (e.stats().prefill_tokens_total == prefill_before) {
        decode_ms.push_back(dt);
        decode_cpu_ms += dcpu;
      } else {
        prefill_ms += dt;
        prefill_cpu_ms += dcpu;
      }
      // Drain events so handles do not grow.
      for (auto& h : hs) {
        while (h->next(std::chrono::milliseconds(0))) {
        }
      }
    }
    const double wall = ms_since(t0);
    const int64_t out_tokens = e.stats().generation_tokens_total;
    double mean = 0.0;
    for (double d : decode_ms) mean += d;
    mean = decode_ms.empty() ? 0.0 : mean / static_cast<double>(decode_ms.size());
    std::sort(decode_ms.begin(), decode_ms.end());
    auto pct = [&](double q) {
      return decode_ms.empty() ? 0.0 : decode_ms[static_cast<size_t>(q * static_cast<double>(decode_ms.size() - 1))];
    };
    const double cpu_mean = decode_ms.empty() ? 0.0 : decode_cpu_ms / static_cast<double>(decode_ms.size());
    std::printf("%5d %12.1f %13.1f %10.2f %9.2f %9.2f %12.1f %7lld %8.2f %8.2f %12.1f\n", c, out_tokens / (wall / 1000.0),
                mean > 0 ? c / (mean / 1000.0) : 0.0, mean, pct(0.5), pct(0.9), prefill_ms,
                static_cast<long long>(steps), pct(0.0), cpu_mean, prefill_cpu_ms);
    std::fflush(stdout);
  }
  return 0;
}
