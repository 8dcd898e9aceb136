// tokenserve bench: load-test an OpenAI-compatible server (see tools/bench.h).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>

#include "cli/cli_util.h"
#include "tools/bench.h"

namespace ts::cli {

namespace {

std::atomic<bool> g_bench_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_bench_sigint(int) {
  g_bench_stop.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  return static_cast<bool>(f);
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app("Load-test an OpenAI-compatible server with streaming completions", "bench");
  tools::BenchOptions o;
  std::string slo_ttft, slo_tpot, json_out, plot_out;
  double timeout_s = 600;
  app.add_option("--url", o.url, "server root, e.g. http://127.0.0.1:8080")->required();
  app.add_option("--model", o.model, "model name sent with each request")->required();
  app.add_option("--api-key", o.api_key, "API key (Authorization: Bearer)");
  app.add_option("--scenario", o.scenario, "short-short | long-short | short-long | mixed | replay:FILE (default short-short)");
  auto* conc = app.add_option("--concurrency", o.concurrency, "closed loop: this many clients")->check(CLI::Range(1, 100000));
  auto* rate = app.add_option("--rate", o.rate, "open loop: Poisson arrivals, requests per second")->check(CLI::PositiveNumber);
  conc->excludes(rate);
  app.add_option("--requests", o.max_requests, "stop after this many requests")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--duration", o.duration_s, "stop sending after this many seconds")->check(CLI::PositiveNumber);
  app.add_option("--drain", o.drain_s, "after --duration, seconds in-flight requests may finish (default 30)")->check(CLI::NonNegativeNumber);
  app.add_option("--timeout", timeout_s, "per-request timeout in seconds (default 600)")->check(CLI::PositiveNumber);
  app.add_option("--tier", o.tier, "tier field of each request (interactive | batch)");
  app.add_option("--shared-prefix", o.shared_prefix, "common prompt prefix of N tokens on purpose")->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--input-tokens", o.input_tokens, "override the scenario's prompt length")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--output-tokens", o.output_tokens, "override the scenario's output length")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--slo-ttft", slo_ttft, "goodput SLO on time to first token, e.g. 800ms");
  app.add_option("--slo-tpot", slo_tpot, "goodput SLO on time per output token, e.g. 100ms");
  app.add_option("--seed", o.seed, "seed for arrivals, shapes and prompt words (default 1)");
  app.add_option("--max-inflight", o.max_inflight, "open loop: client threads at most (default 1024)")->check(CLI::Range(1, 100000));
  bool no_ignore_eos = false, no_tokenize = false, quiet = false;
  app.add_flag("--no-ignore-eos", no_ignore_eos, "do not send ignore_eos (servers that reject it)");
  app.add_flag("--no-tokenize", no_tokenize, "do not size prompts with POST /tokenize");
  app.add_flag("-q,--quiet", quiet, "no progress line");
  app.add_option("--json", json_out, "write every number (and each request) as JSON to this file");
  app.add_option("--plot", plot_out, "write an SVG of latency CDFs and throughput over time");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  for (auto [text, dest, name] : {std::tuple{&slo_ttft, &o.slo_ttft_ms, "--slo-ttft"},
                                  std::tuple{&slo_tpot, &o.slo_tpot_ms, "--slo-tpot"}}) {
    if (text->empty()) continue;
    auto ms = tools::parse_duration_ms(*text);
    if (!ms) return fail("bench", std::string("bad ") + name + " '" + *text + "' (e.g. 800ms, 0.5s)", 2);
    *dest = *ms;
  }
  const bool replay = o.scenario.rfind("replay:", 0) == 0;
  if (o.max_requests == 0 && o.duration_s == 0 && !replay) {
    o.max_requests = 100;
    std::fprintf(stderr, "bench: neither --requests nor --duration given; sending 100 requests\n");
  }
  o.request_timeout_s = timeout_s;
  o.ignore_eos = !no_ignore_eos;
  o.use_tokenize = !no_tokenize;
  o.stop = &g_bench_stop;
  o.log = stderr;
  if (!quiet && ::isatty(STDERR_FILENO)) o.progress = stderr;

  g_bench_stop = false;
  auto old = std::signal(SIGINT, on_bench_sigint);
  auto rep = tools::run_bench(o);
  std::signal(SIGINT, old);
  if (!rep.ok()) return fail("bench", rep.status().message());
  std::fputs(tools::format_report(*rep).c_str(), stdout);
  if (!json_out.empty() && !write_file(json_out, tools::report_json(*rep)))
    return fail("bench", "cannot write " + json_out);
  if (!plot_out.empty() && !write_file(plot_out, tools::report_svg(*rep)))
    return fail("bench", "cannot write " + plot_out);
  return rep->interrupted ? 130 : 0;
}

}  // namespace ts::cli
