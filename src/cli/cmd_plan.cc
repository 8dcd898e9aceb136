// tokenserve plan: KV-cache capacity planning (see tools/plan.h).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/cli_util.h"
#include "gateway/ledger.h"
#include "gateway/report.h"
#include "gateway/sql_db.h"
#include "tools/plan.h"

namespace ts::cli {

int cmd_plan(int argc, char** argv) {
  CLI::App app("Plan KV-cache memory and concurrency for a model and a context-length distribution", "plan");
  std::string model_path, weight_type = "f16", memory, kv_type = "f16", lengths_file;
  tools::ModelShape shape;
  double params = 0;
  tools::PlanOptions o;
  bool as_json = false;
  auto* m = app.add_option("-m,--model", model_path, "GGUF model (shape and weight bytes from the file)");
  auto* layers = app.add_option("--layers", shape.n_layer, "transformer layers")->check(CLI::Range(1, 1 << 20));
  auto* kvh = app.add_option("--kv-heads", shape.n_head_kv, "KV heads")->check(CLI::Range(1, 1 << 20));
  auto* hd = app.add_option("--head-dim", shape.head_dim, "head dimension")->check(CLI::Range(1, 1 << 20));
  auto* pp = app.add_option("--params", params, "parameter count (e.g. 8e9) for weight memory")->check(CLI::PositiveNumber);
  auto* wt = app.add_option("--weight-type", weight_type, "weight type for --params: f32 f16 bf16 q8_0 q4_0 q4_k q6_k (default f16)");
  for (auto* opt : {layers, kvh, hd, pp, wt}) m->excludes(opt);
  app.add_option("--memory", memory, "memory for weights + KV, e.g. 24GiB")->required();
  app.add_option("--kv-type", kv_type, "KV cache type: f16 (default), q8_0, f32");
  auto* lf = app.add_option("--lengths", lengths_file, "file of context lengths (one per line) or replay JSONL");
  std::string ledger;
  auto* lg = app.add_option("--ledger", ledger, "take the length distribution from a usage ledger (PATH.db or postgresql://...)");
  lg->excludes(lf);
  auto* p50 = app.add_option("--p50", o.lengths.p50, "P50 context length (prompt + output tokens)")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  auto* p95 = app.add_option("--p95", o.lengths.p95, "P95 context length")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  auto* p99 = app.add_option("--p99", o.lengths.p99, "P99 context length")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  for (auto* opt : {p50, p95, p99}) {
    lf->excludes(opt);
    lg->excludes(opt);
  }
  app.add_option("--concurrency", o.concurrency, "check that this many concurrent requests fit")->check(CLI::Range(1, 1 << 24));
  app.add_option("--headroom", o.headroom, "fraction of memory kept free (default 0.2)")->check(CLI::Range(0.0, 0.99));
  app.add_option("--block-size", o.block_size, "KV block size in tokens (default 16)")->check(CLI::Range(1, 1 << 16));
  app.add_flag("--json", as_json, "print JSON instead of a table");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  if (!model_path.empty()) {
    auto s = tools::model_shape_from_gguf(model_path);
    if (!s.ok()) return fail("plan", s.status().message());
    o.model = *s;
  } else {
    if (!shape.n_layer || !shape.n_head_kv || !shape.head_dim)
      return fail("plan", "give -m MODEL, or --layers, --kv-heads and --head-dim", 2);
    o.model = shape;
    if (params > 0) {
      auto wb = tools::weight_bytes_for(params, weight_type);
      if (!wb.ok()) return fail("plan", wb.status().message(), 2);
      o.model.weight_bytes = *wb;
      o.model.weight_source = "--params x " + weight_type;
    } else {
      o.model.weight_source = "not counted: give --params or -m";
    }
  }
  auto mem = parse_bytes(memory);
  if (!mem || *mem == 0) return fail("plan", "bad --memory '" + memory + "' (e.g. 24GiB)", 2);
  o.memory_bytes = *mem;
  auto kt = model::parse_kv_type(kv_type);
  if (!kt.ok()) return fail("plan", "bad --kv-type '" + kv_type + "' (f16, q8_0, f32)", 2);
  o.kv_type = *kt;
  if (!ledger.empty()) {
    // The ledger's rows as replay lines (prompt + completion tokens per request).
    auto db = gateway::open_sql_db(ledger);
    if (!db.ok()) return fail("plan", db.status().message());
    auto store = gateway::make_sql_ledger(std::shared_ptr<gateway::SqlDb>(std::move(*db)));
    std::ostringstream lines;
    auto n = gateway::export_replay(*store, gateway::LedgerFilter{}, lines);
    if (!n.ok()) return fail("plan", n.status().message());
    auto d = tools::parse_lengths(lines.str());
    if (!d.ok()) return fail("plan", "ledger " + ledger + ": " + d.status().message());
    o.lengths = *d;
  }
  if (!lengths_file.empty()) {
    std::ifstream f(lengths_file);
    if (!f) return fail("plan", "cannot read " + lengths_file);
    std::stringstream ss;
    ss << f.rdbuf();
    auto d = tools::parse_lengths(ss.str());
    if (!d.ok()) return fail("plan", d.status().message(), 2);
    o.lengths = *d;
  } else if (!o.lengths.p50 || !o.lengths.p95 || !o.lengths.p99) {
    return fail("plan", "give --lengths FILE, or --p50, --p95 and --p99", 2);
  }
  auto r = tools::compute_plan(o);
  if (!r.ok()) return fail("plan", r.status().message(), 2);
  std::fputs((as_json ? tools::plan_json(*r) : tools::format_plan(*r)).c_str(), stdout);
  return 0;
}

}  // namespace ts::cli
