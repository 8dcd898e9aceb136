// The logic behind `tokenserve keys ...` and `tokenserve usage ...` (src/cli/cmd_*.cc only
// parse flags and call these). Each function opens the ledger database named by `ledger`
// (SQLite path or postgresql:// URL), writes its output to `out`, and returns a Status whose
// message is the one-line error for the CLI. Not meant for concurrent use (CLI helpers).
#pragma once

#include <ostream>
#include <string>

#include "core/status.h"
#include "gateway/clock.h"

namespace ts::gateway {

inline constexpr const char* kDefaultLedger = "tokenserve.db";

struct KeysCreateArgs {
  std::string ledger = kDefaultLedger;
  std::string tenant;
  std::string app;
  int64_t rpm = 0;
  int64_t tpm = 0;
  std::string models;           // "a,b" (empty = all)
  std::string tiers;            // "interactive,batch" (empty = all)
  std::string expires;          // RFC 3339 or a duration from now ("30d"); empty = never
};

// Creates a key; prints its id and settings, then the plaintext key alone on the last line.
Status keys_create(const KeysCreateArgs& args, const Clock& clock, std::ostream& out);
// Table of keys (newest first), or JSON lines with json = true. Never prints secrets.
Status keys_list(const std::string& ledger, const std::string& tenant, bool json,
                 const Clock& clock, std::ostream& out);
Status keys_disable(const std::string& ledger, const std::string& id, std::ostream& out);
// Prints the new key alone on the last line; the old one is disabled.
Status keys_rotate(const std::string& ledger, const std::string& id, const Clock& clock,
                   std::ostream& out);

struct UsageArgs {
  std::string ledger = kDefaultLedger;
  std::string by = "tenant";    // tenant | app | model | key | day
  std::string from;             // RFC 3339 or YYYY-MM-DD (inclusive); empty = beginning
  std::string to;               // RFC 3339 (exclusive) or YYYY-MM-DD (that whole day); empty = now
  std::string format = "table"; // table | csv | json
  std::string tenant;           // only this tenant
  std::string config_path;      // prices from this governance config
  std::string export_replay;    // write the replay JSONL here instead of a report
};

Status usage_report(const UsageArgs& args, std::ostream& out);

}  // namespace ts::gateway
