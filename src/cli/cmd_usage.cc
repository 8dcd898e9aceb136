// tokenserve usage: usage reports and replay export from the ledger (gateway/admin.h).
#include <iostream>

#include "cli/cli_util.h"
#include "gateway/admin.h"

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
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  Status st = gateway::usage_report(a, std::cout);
  std::cout.flush();
  return st.ok() ? 0 : fail("usage", st.message());
}

}  // namespace ts::cli
