// `tokenserve usage --export-suite DIR`: turns failed requests recorded in the ledger into an
// eval suite layer, DIR/ledger-failures/. The ledger stores no request or response bodies
// today (no tenant can opt into body logging yet), so a runnable case cannot be rebuilt from
// it: what is exported is each failed request's metadata (request id, time, tenant, app, model,
// status, finish reason, token counts, registry prompt id + version when one was used) as
// PENDING.ndjson, plus a README.md saying so and how to turn a line into a case. The layer has
// no .jsonl file, so `tokenserve eval` does not pick it up until someone writes the cases.
// PARTIAL by design until body logging exists; see README.md written beside the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ts::tools {

// One request worth a regression case, as the ledger knows it.
struct LedgerRequest {
  std::string request_id;
  std::string time;          // RFC 3339
  std::string tenant, app, model;
  int32_t http_status = 0;
  std::string finish_reason;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string prompt_id;     // "" when no registry prompt was used
  int64_t prompt_version = 0;
};

// True for a failed request: an error status (>= 400) or finish_reason "error".
bool is_failed_request(const LedgerRequest& r);

// Writes DIR/ledger-failures/{PENDING.ndjson,README.md} for the failed requests among
// `requests` (DIR is created; an existing ledger-failures layer is refused so nothing is
// overwritten). Written under a temporary folder and renamed. Returns how many were exported.
Result<int64_t> export_failed_requests(const std::vector<LedgerRequest>& requests, const std::string& dir);

}  // namespace ts::tools
