// Usage reports over the ledger: sums per tenant | app | model | key | day within [from, to),
// as a table, CSV or JSON, with cost from per-model prices; and the replay export for the
// bench tool. Totals are computed as the sum of the printed rows (integers), so they equal the
// ledger rows' sums exactly. Pure functions over a LedgerStore; thread-safe as the store is.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "core/status.h"
#include "gateway/config.h"
#include "gateway/ledger.h"

namespace ts::gateway {

struct ReportRow {
  std::string group;            // see UsageGroupRow::group; "total" for the totals row
  int64_t num_requests = 0;
  int64_t prompt_tokens = 0;    // cached included
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t total_tokens = 0;     // prompt + completion
  int64_t cost_pico = 0;        // money in 1e-12 units (models without a price cost 0)
};

struct Report {
  GroupBy by = GroupBy::kTenant;
  std::vector<ReportRow> rows;  // ordered by group
  ReportRow totals;             // the sum of rows
  bool priced = false;          // at least one price was configured
  std::vector<std::string> unpriced_models;  // models in the report without a price
};

enum class ReportFormat { kTable, kCsv, kJson };
Result<ReportFormat> parse_report_format(std::string_view name);  // table | csv | json

Result<Report> build_report(LedgerStore& ledger, GroupBy by, const LedgerFilter& filter,
                            const std::map<std::string, Price>& prices);
std::string format_report(const Report& report, ReportFormat format);

// Writes one JSON line per ledger row, oldest first:
//   {"arrival_s": 1.25, "input_tokens": 512, "output_tokens": 128, "tier": "interactive"}
// arrival_s is seconds since the first row (millisecond precision). Returns the line count.
Result<int64_t> export_replay(LedgerStore& ledger, const LedgerFilter& filter, std::ostream& out);

}  // namespace ts::gateway
