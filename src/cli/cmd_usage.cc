// tokenserve usage: usage reports and replay export from the ledger (gateway/admin.h).
#include <algorithm>
#include <iostream>
#include <map>

#include "cli/cli_util.h"
#include "gateway/admin.h"
#include "gateway/ledger.h"
#include "gateway/route_decisions.h"
#include "tools/eval_export.h"

namespace ts::cli {

int cmd_usage(int argc, char** argv) {
  CLI::App app("Usage report from the ledger: tokens (and cost) per tenant, app, model, key or day",
               "usage");
  gateway::UsageArgs a;
  app.add_option("--ledger", a.ledger, "ledger database: SQLite file or postgresql:// URL")
      ->capture_default_str();
  app.add_option("--by", a.by, "group by tenant|app|model|key|day|prompt (prompt@version)")->capture_default_str();
  app.add_option("--from", a.from, "start, inclusive: 2026-11-01 or 2026-11-01T00:00:00Z");
  app.add_option("--to", a.to, "end: RFC 3339 time (exclusive) or a date (that day included)");
  app.add_option("--format", a.format, "table|csv|json")->capture_default_str();
  app.add_option("--tenant", a.tenant, "only this tenant");
  app.add_option("--config", a.config_path, "governance config with [prices] for costs");
  app.add_option("--export-replay", a.export_replay,
                 "write {arrival_s, input_tokens, output_tokens, tier} JSON lines for `bench`");
  std::string export_suite;
  app.add_option("--export-suite", export_suite,
                 "write failed/flagged requests into DIR/ledger-failures/ for `eval` (runnable cases "
                 "for tenants with log_bodies, metadata only for the rest)");
  std::vector<std::string> flagged_ids;
  std::string flag_reason = "route judged wrong";
  app.add_option("--flag-request", flagged_ids,
                 "with --export-suite: also export this request (judged wrong, e.g. wrongly routed; repeatable); "
                 "its route_decisions row, when there is one, is named in the judgement");
  app.add_option("--flag-reason", flag_reason, "with --flag-request: the judgement (default \"route judged wrong\")");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (!flagged_ids.empty() && export_suite.empty()) return fail("usage", "--flag-request needs --export-suite DIR", 2);
  if (!export_suite.empty()) {
    // Glue only: ledger rows -> tools::LedgerRequest (tools does not depend on gateway).
    auto db = gateway::open_sql_db(a.ledger);
    if (!db.ok()) return fail("usage", db.status().message());
    std::shared_ptr<gateway::SqlDb> shared_db(std::move(*db));
    auto ledger = gateway::make_sql_ledger(shared_db);
    gateway::LedgerFilter filter{.tenant = a.tenant};
    if (!a.from.empty()) {
      auto t = gateway::parse_rfc3339(a.from.size() == 10 ? a.from + "T00:00:00Z" : a.from);
      if (!t.ok()) return fail("usage", "bad --from: " + t.status().message());
      filter.from = *t;
    }
    auto rows = ledger->rows(filter);
    if (!rows.ok()) return fail("usage", rows.status().message());
    std::vector<tools::LedgerRequest> reqs;
    for (const auto& r : *rows)
      reqs.push_back({.request_id = r.request_id, .time = gateway::format_rfc3339(r.time), .tenant = r.tenant,
                      .app = r.app, .model = r.model, .http_status = r.http_status,
                      .finish_reason = r.finish_reason, .prompt_tokens = r.prompt_tokens,
                      .completion_tokens = r.completion_tokens, .prompt_id = r.prompt_id,
                      .prompt_version = r.prompt_version, .request_body = r.request_body,
                      .output_text = r.output_text});
    if (!flagged_ids.empty()) {
      // The gateway's audit rows say where each judged request went and why.
      std::map<std::string, gateway::RouteDecisionRow> routes;
      gateway::RouteDecisionStore store(shared_db);
      if (auto rd = store.rows(); rd.ok())
        for (auto& r : *rd) routes[r.request_id] = std::move(r);
      for (const std::string& id : flagged_ids) {
        auto it = std::find_if(reqs.begin(), reqs.end(), [&](const tools::LedgerRequest& q) { return q.request_id == id; });
        if (it == reqs.end()) return fail("usage", "--flag-request " + id + ": no such request in " + a.ledger);
        it->judgement = flag_reason;
        if (auto r = routes.find(id); r != routes.end())
          it->judgement += ": rule " + r->second.rule_id + " (rules " + r->second.ruleset_version + ") sent it to " +
                           r->second.target + " (" + r->second.reason + ")";
      }
    }
    auto n = tools::export_failed_requests(reqs, export_suite);
    if (!n.ok()) return fail("usage", n.status().message());
    std::cout << "wrote " << n->cases << " runnable cases (cases.jsonl) and " << n->metadata_only
              << " metadata-only records (PENDING.ndjson) to " << export_suite << "/ledger-failures/\n";
    return 0;
  }
  Status st = gateway::usage_report(a, std::cout);
  std::cout.flush();
  return st.ok() ? 0 : fail("usage", st.message());
}

}  // namespace ts::cli
