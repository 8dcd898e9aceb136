// One upstream attempt of a proxied request, as the decision record (/router/decisions) and
// the route_decisions audit row list it: [{"target","endpoint"?,"result","detail"?}]. Plain
// data kept per request; serialized straight to text on the request path (append_json), the
// JSON tree form (to_json) is the reference the tests compare it with.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::router {

struct AttemptRecord {
  std::string target;                   // "local:r1" | "local:gie" | "remote:big"
  std::optional<std::string> endpoint;  // the endpoint tried (local targets)
  std::string result;                   // "ok" | "connect_error" | "503" | "cancelled" | ...
  std::optional<std::string> detail;    // the client library's message for a failed call

  nlohmann::json to_json() const;
};

// Appends the list as a JSON array: byte for byte nlohmann's dump() of the to_json() array.
void append_attempts_json(std::string& out, const std::vector<AttemptRecord>& attempts);
nlohmann::json attempts_to_json(const std::vector<AttemptRecord>& attempts);

}  // namespace ts::router
