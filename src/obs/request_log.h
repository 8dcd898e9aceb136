// Structured request logs and request ids.
//
// request_log_json() builds the one JSON object logged per request (request id, tenant, app,
// model, tier, tokens, TTFT, duration, status, finish reason); log_request() writes it as its
// own line through ts::log::write_json_line (whatever the text/JSON log format).
// resolve_request_id() implements the x-request-id contract: a valid incoming id is echoed,
// anything else (absent, too long, odd characters) is replaced by a fresh random one.
//
// Thread-safety: all functions are thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "obs/server_metrics.h"

namespace ts::obs {

inline constexpr size_t kMaxRequestIdLength = 128;

// True for 1..128 characters of [A-Za-z0-9] and "-_.:/+=@" (UUIDs, trace ids, base64 ids).
bool is_valid_request_id(std::string_view id);
// A fresh id: "req-" + 32 lowercase hex digits: 12 of the Unix time in ms, then 20 random (80
// bits: unique without coordination across threads and processes). Time first, so ids made
// later sort later: the ledger's and the audit table's request_id keys then grow at the right
// edge of their B-trees (a few pages per commit) instead of landing on random pages (each row of
// a commit dirtying, writing and checkpointing a page of its own; SCALEOUT.md §8.14).
std::string generate_request_id();
// `incoming` when valid (the header as the client sent it), else a generated id.
std::string resolve_request_id(std::string_view incoming);

// {"ts": UTC ISO-8601 ms, "event": "request", "request_id", "tenant", "app", "model", "tier",
//  "prompt_tokens", "cached_tokens", "completion_tokens", "total_tokens", "ttft_ms" (null when
//  no token came), "queue_ms", "duration_ms", "tpot_ms" (null below 2 tokens),
//  "finish_reason", "status", "preemptions"}. Durations in milliseconds.
nlohmann::json request_log_json(std::string_view request_id, const RequestObservation& obs);
// Writes request_log_json() as one line.
void log_request(std::string_view request_id, const RequestObservation& obs);

}  // namespace ts::obs
