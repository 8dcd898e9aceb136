// HTTP endpoints of governance, over a gateway::Governor:
//
//   GET  /v1/usage/me                  the caller's limits and quotas (API key required)
//   POST /admin/keys                   {"tenant","app","rpm"?,"tpm"?,"models"?:[..],"tiers"?:[..],
//                                       "expires"?: RFC 3339 or "30d"} -> 201 {"key": plaintext, ...}
//   GET  /admin/keys[?tenant=T]        {"object":"list","data":[key, ...]} (never secrets)
//   POST /admin/keys/{id}/disable      {"id","enabled":false}
//   POST /admin/keys/{id}/rotate       201 {"key": new plaintext, "replaces": id, ...}
//   GET  /admin/usage?by=tenant|app|model|key|day[&from=&to=&tenant=]
//                                      the report of `tokenserve usage --format json`
//
// /admin/* needs the admin key ([admin] key_sha256 in the governance config): 401 otherwise.
// Errors use OpenAI's error body. Handlers run on io threads and touch the ledger database
// (admin calls are rare; /v1/usage/me reads cached counters and seeds them once per period).
// Thread-safe as the Governor is; it must outlive the server.
#pragma once

#include "gateway/governor.h"
#include "http/server.h"

namespace ts::server {

void register_governance_routes(http::Server& server, gateway::Governor& governor);

}  // namespace ts::server
