// JSON text written straight into a string, for records on the request path (the gateway's
// audit rows, decision records, the ledger's journal line) that used to be built as a
// nlohmann::json tree and dumped: the tree's node allocations were a visible share of the
// gateway's CPU per request (SCALEOUT.md §8.14). Each function writes byte for byte what
// nlohmann's dump() (no indent, ensure_ascii off, invalid UTF-8 replaced by U+FFFD) writes for
// the same value, so a record reads back the same and the tests can compare the direct writer
// with its JSON-tree reference as text.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ts::gateway {

// `s` as a JSON string (quoted; escapes and UTF-8 replacement as nlohmann's dump).
void append_json_string(std::string& out, std::string_view s);
// A number as nlohmann's dump writes a double: shortest round-trip digits, "1.0" for an
// integral value, exponent form outside its range; NaN and infinities as null.
void append_json_double(std::string& out, double v);
void append_json_int(std::string& out, int64_t v);
inline void append_json_bool(std::string& out, bool v) { out += v ? "true" : "false"; }
// `"key":` (the key must need no escaping: callers pass literals), after a ',' unless `first`.
inline void append_json_key(std::string& out, std::string_view key, bool first = false) {
  if (!first) out += ',';
  out += '"';
  out += key;
  out += "\":";
}

}  // namespace ts::gateway
