// `tokenserve usage --export-suite DIR`: turns failed or flagged requests recorded in the ledger
// into an eval suite layer, DIR/ledger-failures/.
//
// Failed: HTTP status >= 400 or finish_reason "error". Flagged: finish_reason "length" (the
// answer was cut at max_tokens), or judged by a person (LedgerRequest::judgement: e.g. a route
// later judged wrong, `usage --export-suite --flag-request ID`). For a request whose tenant/app opted into body logging
// (gateway/config.h log_bodies) the ledger holds its body and output, and it becomes a runnable
// case in cases.jsonl, in the format `tokenserve eval` reads (eval_suite.h):
//   {"id": request_id, "messages" | "prompt": ..., "max_tokens"?, "temperature"?, "stop"?,
//    "scorer", "expected", "ledger": {metadata, "recorded_output"}}
// The ledger knows what was asked, not what the right answer is, so the scorer is a floor the
// request failed to reach: json_schema with the request's response_format schema when it asked
// for one (json_object: any object), else regex "\S" (a non-empty answer comes back). A person
// tightens "expected" by hand; the recorded output is kept beside it for that.
// Everything else (no body logged, or a body the eval format cannot express, e.g. multi-part
// message content) is written as metadata to PENDING.ndjson with a "reason", as before.
// A README.md says what was written. With no runnable case the layer has no .jsonl file and
// `tokenserve eval` does not pick it up.
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
  std::string request_body;  // JSON body when body logging was on, else ""
  std::string output_text;   // the output then, else ""
  // A person's verdict on a request that succeeded but should not have gone where it did, e.g.
  // "route judged wrong: rule long-prompt -> remote:big" ("" = none). Judged requests are
  // exported like failed ones, with this in their metadata ("judgement").
  std::string judgement;
};

// True for a failed request: an error status (>= 400) or finish_reason "error".
bool is_failed_request(const LedgerRequest& r);
// True for a failed request, one cut at max_tokens (finish_reason "length"), or a judged one.
bool is_flagged_request(const LedgerRequest& r);

struct SuiteExport {
  int64_t cases = 0;          // runnable cases written to cases.jsonl
  int64_t metadata_only = 0;  // lines written to PENDING.ndjson
};

// Writes DIR/ledger-failures/{cases.jsonl,PENDING.ndjson,README.md} for the flagged requests
// among `requests` (files with no lines are left out; DIR is created; an existing
// ledger-failures layer is refused so nothing is overwritten). Written under a temporary folder
// and renamed, so a failure leaves nothing behind.
Result<SuiteExport> export_failed_requests(const std::vector<LedgerRequest>& requests, const std::string& dir);

}  // namespace ts::tools
