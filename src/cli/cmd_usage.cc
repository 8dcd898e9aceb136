// tokenserve usage: usage reports and replay export from the ledger (gateway/admin.h).
#include <iostream>

#include "cli/cli_util.h"
#include "gateway/admin.h"
#include "gateway/ledger.h"
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
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (!export_suite.empty()) {
    // Glue only: ledger rows -> tools::LedgerRequest (tools does not depend on gateway).
    auto db = gateway::open_sql_db(a.ledger);
    if (!db.ok()) return fail("usage", db.status().message());
    auto ledger = gateway::make_sql_ledger(std::shared_ptr<gateway::SqlDb>(std::move(*db)));
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
