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
// Errors use OpenAI's error body. Handlers touch the ledger database and the limit store, so
// the service registers them through an `offload` that runs them off the io threads.
// Thread-safe as the Governor is; it must outlive the server.
#pragma once

#include <functional>

#include "gateway/governor.h"
#include "http/server.h"

namespace ts::server {

// `offload`, when set, wraps each handler (e.g. to run it on a WorkPool off the io threads).
void register_governance_routes(http::Server& server, gateway::Governor& governor,
                                std::function<http::Handler(http::Handler)> offload = {});

}  // namespace ts::server
