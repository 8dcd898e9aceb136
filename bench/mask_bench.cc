// Constrained-decoding mask cost per decode step, compared with the model's decode step.
//
//   mask_bench VOCAB.gguf [--model MODEL.gguf] [--batch 8] [--steps 300] [--threads 2] [--gen 24]
//
// Part 1 (masks): `batch` sequences under one JSON Schema constraint walk the grammar with the
// vocabulary's tokens: each step computes every sequence's allowed-token mask (trie walk, memoized
// per automaton state), applies it in the sampler to random logits (as the engine does), draws
// an allowed token and advances; a sequence whose value is complete starts over. Reported: mean
// and p90 of the per-step cost for the whole batch (mask computation + sampler masking), cold
// (first steps) and overall, plus the one-off costs (vocabulary index, compile). The cost is
// (mask + masked sampling) - plain sampling of the same logits, so it can read 0 when masked
// sampling (fewer candidates) is cheaper than plain sampling.
// Part 2 (--model): the engine's mean decode step at the same batch (unconstrained,
// ignore_eos, prefix cache off), and the ratio mask cost / decode step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "structured/constraint.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

constexpr const char* kSchema = R"({
  "type":"object",
  "properties":{
    "name":{"type":"string","maxLength":40},
    "age":{"type":"integer","minimum":0,"maximum":150},
    "email":{"type":"string","format":"email"},
    "tags":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":6},
    "address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","pattern":"[0-9]{5}"}},"required":["city"]},
    "kind":{"enum":["person","company","other"]},
    "score":{"type":"number"},
    "note":{"anyOf":[{"type":"null"},{"type":"string"}]}
  },
  "required":["name","age","tags","address","kind"],
  "additionalProperties":false
})";

int usage() {
  std::fprintf(stderr, "usage: mask_bench VOCAB.gguf [--model MODEL.gguf] [--batch 8] [--steps 300] [--threads 2] [--gen 24]\n");
  return 2;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}
double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string vocab_path = argv[1], model_path;
  int batch = 8, steps = 300, threads = 2, gen = 24;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") model_path = next();
    else if (a == "--batch") batch = std::atoi(next().c_str());
    else if (a == "--steps") steps = std::atoi(next().c_str());
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--gen") gen = std::atoi(next().c_str());
    else return usage();
  }
  auto f = ts::gguf::GgufFile::open(vocab_path);
  if (!f.ok()) { std::fprintf(stderr, "error: %s\n", f.status().to_string().c_str()); return 1; }
  auto tok = ts::tokenizer::Tokenizer::from_gguf(**f);
  if (!tok.ok()) { std::fprintf(stderr, "error: %s\n", tok.status().to_string().c_str()); return 1; }
  auto t0 = Clock::now();
  auto index = std::make_shared<const ts::structured::TokenIndex>(**tok);
  const double index_ms = ms_since(t0);
  t0 = Clock::now();
  auto c = ts::structured::compile({.kind = ts::structured::ConstraintKind::kJsonSchema, .source = kSchema}, index);
  const double compile_ms = ms_since(t0);
  if (!c.ok()) { std::fprintf(stderr, "error: %s\n", c.status().to_string().c_str()); return 1; }
  const int32_t V = index->n_vocab();
  std::printf("vocabulary %d tokens, trie %zu nodes: index %.1f ms, schema compile %.2f ms\n", V,
              index->trie().byte.size(), index_ms, compile_ms);

  std::vector<ts::structured::ConstraintState> seqs;
  for (int b = 0; b < batch; ++b) seqs.emplace_back(*c);
  ts::engine::Sampler sampler(V);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(V));
  for (float& x : logits) x = normal(rng);
  ts::engine::SamplingParams sp;
  sp.temperature = 1.0f;
  std::vector<double> step_ms, sample_plain_ms, mask_ms;
  int64_t completed = 0, tokens = 0;
  for (int s = 0; s < steps; ++s) {
    double masked_total = 0, mask_only = 0;
    for (int b = 0; b < batch; ++b) {
      // The logits change per step (a real model's would); the draw is among allowed tokens.
      for (int k = 0; k < 64; ++k) logits[rng() % static_cast<uint64_t>(V)] = normal(rng);
      ts::engine::Rng r(rng());
      const auto t1 = Clock::now();
      auto mask = seqs[static_cast<size_t>(b)].mask();
      mask_only += ms_since(t1);
      const int32_t t = sampler.sample(logits, sp, {}, {}, r, nullptr, mask);
      masked_total += ms_since(t1);
      const auto t2 = Clock::now();
      (void)sampler.sample(logits, sp, {}, {}, r, nullptr);
      sample_plain_ms.push_back(ms_since(t2));
      if (!seqs[static_cast<size_t>(b)].accept(t).ok()) { std::fprintf(stderr, "error: refused token\n"); return 1; }
      ++tokens;
      if (seqs[static_cast<size_t>(b)].is_complete()) {
        seqs[static_cast<size_t>(b)] = ts::structured::ConstraintState(*c);
        ++completed;
      }
    }
    step_ms.push_back(masked_total);
    mask_ms.push_back(mask_only);
  }
  // Masking cost = (mask + masked sample) - plain sample, per step of `batch` sequences.
  const double plain_step = mean(sample_plain_ms) * batch;
  std::vector<double> cost;
  for (double x : step_ms) cost.push_back(std::max(0.0, x - plain_step));
  std::vector<double> cold(cost.begin(), cost.begin() + std::min<size_t>(cost.size(), 10));
  std::printf("batch %d, %d steps, %lld tokens, %lld values completed\n", batch, steps,
              static_cast<long long>(tokens), static_cast<long long>(completed));
  std::printf("mask cost per step (batch): mean %.3f ms, p50 %.3f, p90 %.3f, max %.3f; first 10 steps mean %.3f ms\n",
              mean(cost), pct(cost, 0.5), pct(cost, 0.9), pct(cost, 1.0), mean(cold));
  std::printf("  of which mask computation alone: mean %.3f ms, p50 %.3f, p90 %.3f (rest: applying it in the sampler)\n",
              mean(mask_ms), pct(mask_ms, 0.5), pct(mask_ms, 0.9));
  std::printf("(plain sampling per step, not counted: %.3f ms)\n", plain_step);
  if (model_path.empty()) return 0;

  auto model = ts::model::Model::load(model_path);
  if (!model.ok()) { std::fprintf(stderr, "error: %s\n", model.status().to_string().c_str()); return 1; }
  ts::engine::EngineOptions o;
  o.num_threads = threads;
  o.start_thread = false;
  o.enable_prefix_cache = false;
  o.max_seqs = batch;
  o.kv_cache_bytes = size_t{512} << 20;
  auto e = ts::engine::Engine::create(**model, o);
  if (!e.ok()) { std::fprintf(stderr, "error: %s\n", e.status().to_string().c_str()); return 1; }
  for (int b = 0; b < batch; ++b) {
    ts::engine::Request req;
    for (int k = 0; k < 16; ++k) req.prompt_tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>((*model)->config().n_vocab)));
    req.sampling.max_tokens = gen;
    req.sampling.ignore_eos = true;
    auto h = (*e)->submit(std::move(req));
    if (!h.ok()) { std::fprintf(stderr, "error: %s\n", h.status().to_string().c_str()); return 1; }
  }
  std::vector<double> decode;
  for (;;) {
    const int64_t before = (*e)->stats().prefill_tokens_total;
    const auto t1 = Clock::now();
    if (!(*e)->step()) break;
    const double dt = ms_since(t1);
    if ((*e)->stats().prefill_tokens_total == before && (*e)->stats().num_running == batch) decode.push_back(dt);
  }
  const double d = mean(decode);
  std::printf("decode step at batch %d (%s, %d threads): mean %.2f ms over %zu steps\n", batch, model_path.c_str(),
              threads, d, decode.size());
  std::printf("mask cost / decode step: mean %.2f%%, p90 %.2f%%\n", d > 0 ? 100.0 * mean(cost) / d : 0.0,
              d > 0 ? 100.0 * pct(cost, 0.9) / d : 0.0);
  return 0;
}
