// Speculative decoding benchmark (a program, not a test): output tokens/s with --speculative off
// versus ngram (and draft, with --draft) at several concurrencies, all modes in the same run.
//
//   spec_bench MODEL.gguf [--draft DRAFT.gguf] [--threads 2] [--gen 96] [--conc 1,4,8]
//                         [--workload grounded|open] [--draft-tokens 4] [--reps 3]
//
// Workloads: `grounded` gives each request a passage of text repeated twice (the model's greedy
// continuation copies spans of its input, as quoting, summarizing or editing a given text
// does); `open` gives a short story opening. Requests are greedy, ignore EOS and generate
// exactly --gen tokens; every mode must produce the same tokens (checked, reported). The engine
// is stepped on this thread; throughput = all output tokens / wall time from submit to the last
// token, best of --reps runs per cell (modes interleaved). `cpu tok/s` divides by the process's
// CPU time instead: on a shared machine it is the steadier figure (wall time counts other
// processes' use of the cores).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_isa.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace ts;

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Cell {
  double tok_s = 0;
  double cpu_tok_s = 0;               // tokens per CPU second of this process (robust on a shared machine)
  int64_t drafted = 0, accepted = 0, steps = 0;
  std::vector<std::vector<int32_t>> outputs;
};

std::vector<std::vector<int32_t>> prompts(const model::Model& m, const std::string& workload, int n, int gen) {
  const char* passages[] = {
      "Tom had a red ball. He liked to throw the ball in the park with his dog Max. One day the ball "
      "went into the pond. Max jumped in and got the ball. Tom was happy and gave Max a big hug.",
      "Lily wanted to bake a cake for her mom. She got flour, eggs and sugar. She mixed them in a big "
      "bowl. Her mom came home and saw the cake. She smiled and said thank you to Lily.",
      "The little bird could not fly. It sat on the ground and cried. A kind girl found the bird and "
      "took it home. She gave it water and seeds. Soon the bird was strong and flew away.",
      "Ben and Sue went to the beach. They made a big sand castle with a flag on top. A wave came and "
      "broke the castle. Ben was sad, but Sue said they could make a new one together.",
  };
  const int32_t ctx = m.config().n_ctx_train > 0 ? m.config().n_ctx_train : 2048;
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::string text = workload == "grounded"
                           ? std::string(passages[i % 4]) + " " + passages[i % 4]
                           : std::string(i % 2 ? "Once upon a time, there was a " : "One day, a little ");
    auto ids = m.tokenizer().encode(text, true, false);
    const size_t room = static_cast<size_t>(std::max(2, ctx - gen - 1));
    if (ids.size() > room) ids.erase(ids.begin() + 1, ids.begin() + 1 + static_cast<long>(ids.size() - room));
    out.push_back(std::move(ids));
  }
  return out;
}

Cell run(model::Model& m, engine::EngineOptions o, const std::vector<std::vector<int32_t>>& ps, int gen) {
  Cell c;
  auto e = engine::Engine::create(m, o);
  if (!e.ok()) {
    std::fprintf(stderr, "engine: %s\n", e.status().to_string().c_str());
    std::exit(1);
  }
  std::vector<std::shared_ptr<engine::RequestHandle>> hs;
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (const auto& p : ps) {
    engine::Request r;
    r.prompt_tokens = p;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = gen;
    r.sampling.ignore_eos = true;
    auto h = (*e)->submit(std::move(r));
    if (!h.ok()) {
      std::fprintf(stderr, "submit: %s\n", h.status().to_string().c_str());
      std::exit(1);
    }
    hs.push_back(*h);
  }
  while (!(*e)->idle()) (*e)->step();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cs = cpu_seconds() - c0;
  int64_t toks = 0;
  for (auto& h : hs) {
    std::vector<int32_t> ids;
    for (const auto& ev : h->wait_all()) ids.insert(ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    toks += static_cast<int64_t>(ids.size());
    c.outputs.push_back(std::move(ids));
  }
  const auto st = (*e)->stats();
  c.tok_s = static_cast<double>(toks) / s;
  c.cpu_tok_s = static_cast<double>(toks) / cs;
  c.drafted = st.spec_num_draft_tokens;
  c.accepted = st.spec_num_accepted_tokens;
  c.steps = st.num_steps;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (!ts::bench::apply_isa_arg(&argc, argv)) return 2;
  if (argc < 2) {
    std::fprintf(stderr, "usage: spec_bench MODEL.gguf [--draft DRAFT.gguf] [--threads N] [--gen N] "
                         "[--conc 1,4,8] [--workload grounded|open] [--draft-tokens K] [--reps N]\n");
    return 2;
  }
  std::string path = argv[1], draft_path, workload = "grounded", conc_s = "1,4,8";
  int threads = 2, gen = 96, k = 4, reps = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--draft") draft_path = v;
    else if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--gen") gen = std::atoi(v.c_str());
    else if (a == "--conc") conc_s = v;
    else if (a == "--workload") workload = v;
    else if (a == "--draft-tokens") k = std::atoi(v.c_str());
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (workload != "grounded" && workload != "open") {
    std::fprintf(stderr, "--workload must be grounded or open\n");
    return 2;
  }
  auto m = model::Model::load(path);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<model::Model> draft;
  if (!draft_path.empty()) {
    auto d = model::Model::load(draft_path);
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", d.status().to_string().c_str());
      return 1;
    }
    draft = std::move(d).value();
  }
  std::vector<int> concs;
  std::stringstream ss(conc_s);
  for (std::string t; std::getline(ss, t, ',');) concs.push_back(std::atoi(t.c_str()));
  std::vector<engine::SpecMode> modes{engine::SpecMode::kOff, engine::SpecMode::kNgram};
  if (draft) modes.push_back(engine::SpecMode::kDraft);

  std::printf("model %s, workload %s, gen %d, threads %d, draft-tokens %d, best of %d\n", path.c_str(),
              workload.c_str(), gen, threads, k, reps);
  std::printf("%5s %-6s %10s %8s %10s %8s %8s %8s %s\n", "conc", "mode", "tok/s", "vs off", "cpu tok/s", "vs off",
              "accept", "steps", "same");
  for (int c : concs) {
    const auto ps = prompts(**m, workload, c, gen);
    // Modes interleaved within each repetition, so machine noise hits them alike; best of reps.
    std::vector<Cell> bests(modes.size());
    for (int r = 0; r < reps; ++r) {
      for (size_t mi = 0; mi < modes.size(); ++mi) {
        engine::EngineOptions o;
        o.num_threads = threads;
        o.start_thread = false;
        o.enable_prefix_cache = false;
        o.kv_cache_bytes = size_t{64} << 20;
        o.max_seqs = std::max(16, c);
        o.spec.mode = modes[mi];
        o.spec.draft_tokens = k;
        o.spec.draft_model = draft.get();
        Cell x = run(**m, o, ps, gen);
        if (bests[mi].outputs.empty()) {
          bests[mi] = std::move(x);
        } else {
          bests[mi].tok_s = std::max(bests[mi].tok_s, x.tok_s);
          bests[mi].cpu_tok_s = std::max(bests[mi].cpu_tok_s, x.cpu_tok_s);
        }
      }
    }
    const Cell& off = bests[0];
    for (size_t mi = 0; mi < modes.size(); ++mi) {
      const engine::SpecMode mode = modes[mi];
      const Cell& best = bests[mi];
      const bool same = best.outputs == off.outputs;
      char acc[32] = "-";
      if (best.drafted > 0) std::snprintf(acc, sizeof acc, "%.0f%%", 100.0 * best.accepted / best.drafted);
      std::printf("%5d %-6s %10.1f %7.2fx %10.1f %7.2fx %8s %8lld %s\n", c, engine::spec_mode_name(mode), best.tok_s,
                  best.tok_s / off.tok_s, best.cpu_tok_s, best.cpu_tok_s / off.cpu_tok_s, acc,
                  static_cast<long long>(best.steps), same ? "yes" : "NO");
      std::fflush(stdout);
    }
  }
  return 0;
}
