// tokenserve eval: layered regression suites against an OpenAI-compatible server (tools/eval.h).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/cli_util.h"
#include "tools/eval.h"

namespace ts::cli {

namespace {

std::atomic<bool> g_eval_stop{false};

extern "C" void on_eval_sigint(int) {
  g_eval_stop.store(true);
  std::signal(SIGINT, SIG_DFL);
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  CLI::App app(
      "Run a layered eval suite against an OpenAI-compatible server; compare with a baseline.\n"
      "Exit status: 0 ok, 1 error, 3 a layer regressed (significant drop beyond --threshold).",
      "eval");
  tools::EvalOptions o;
  tools::CompareOptions co;
  std::string suite_dir, baseline, out = "RUN.json";
  bool quiet = false;
  app.add_option("--suite", suite_dir, "suite folder: one sub-folder (layer) of .jsonl cases per scenario")->required();
  app.add_option("--url", o.url, "server root, e.g. http://127.0.0.1:8080")->required();
  app.add_option("--model", o.model, "model name (default: the first of GET /v1/models)");
  app.add_option("--api-key", o.api_key, "API key (Authorization: Bearer)");
  app.add_option("--baseline", baseline, "RUN.json of an earlier run to compare with");
  app.add_option("--concurrency", o.concurrency, "parallel requests (default 4)")->check(CLI::Range(1, 1024));
  app.add_option("--timeout", o.request_timeout_s, "per-request timeout in seconds (default 300)")->check(CLI::PositiveNumber);
  app.add_option("--threshold", co.regression_threshold, "score drop counted as a regression (default 0.05)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--alpha", co.alpha, "significance level of the paired test (default 0.05)")->check(CLI::Range(0.0, 1.0));
  app.add_option("-o,--output", out, "RUN.json to write (report .md and .svg charts beside it)");
  app.add_flag("-q,--quiet", quiet, "no progress line");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  auto suite = tools::load_suite(suite_dir);
  if (!suite.ok()) return fail("eval", suite.status().message(), 2);
  {
    std::error_code ec;
    const auto parent = std::filesystem::absolute(out, ec).parent_path();
    if (!std::filesystem::is_directory(parent, ec))
      return fail("eval", "output folder " + parent.string() + " does not exist", 2);
  }
  std::optional<tools::EvalRun> base;
  if (!baseline.empty()) {
    std::ifstream f(baseline, std::ios::binary);
    if (!f) return fail("eval", "cannot read baseline " + baseline, 2);
    std::stringstream ss;
    ss << f.rdbuf();
    auto b = tools::parse_run_json(ss.str());
    if (!b.ok()) return fail("eval", "baseline " + baseline + ": " + b.status().message(), 2);
    base = std::move(*b);
  }
  o.stop = &g_eval_stop;
  if (!quiet && ::isatty(STDERR_FILENO)) o.progress = stderr;
  g_eval_stop = false;
  auto old = std::signal(SIGINT, on_eval_sigint);
  auto run = tools::run_eval(*suite, o);
  std::signal(SIGINT, old);
  if (!run.ok()) return fail("eval", run.status().message());
  std::optional<tools::Comparison> cmp;
  if (base) {
    cmp = tools::compare_runs(*base, *run, co);
    cmp->baseline_path = baseline;
  }
  const tools::Comparison* cp = cmp ? &*cmp : nullptr;
  std::fputs(tools::format_eval_summary(*run, cp).c_str(), stdout);
  Status st = tools::write_eval_outputs(out, *run, cp);
  if (!st.ok()) return fail("eval", st.message());
  if (g_eval_stop.load()) return 130;
  return cmp && !cmp->regressed.empty() ? 3 : 0;
}

}  // namespace ts::cli
