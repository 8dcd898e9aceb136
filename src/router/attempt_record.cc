#include "router/attempt_record.h"

#include "gateway/json_text.h"

namespace ts::router {

nlohmann::json AttemptRecord::to_json() const {
  nlohmann::json j = {{"target", target}, {"result", result}};
  if (endpoint) j["endpoint"] = *endpoint;
  if (detail) j["detail"] = *detail;
  return j;
}

nlohmann::json attempts_to_json(const std::vector<AttemptRecord>& attempts) {
  nlohmann::json a = nlohmann::json::array();
  for (const AttemptRecord& r : attempts) a.push_back(r.to_json());
  return a;
}

void append_attempts_json(std::string& out, const std::vector<AttemptRecord>& attempts) {
  using namespace gateway;  // keys in nlohmann's (sorted) order
  out += '[';
  for (size_t i = 0; i < attempts.size(); ++i) {
    const AttemptRecord& r = attempts[i];
    out += i ? ",{" : "{";
    bool first = true;
    if (r.detail) {
      append_json_key(out, "detail", true);
      append_json_string(out, *r.detail);
      first = false;
    }
    if (r.endpoint) {
      append_json_key(out, "endpoint", first);
      append_json_string(out, *r.endpoint);
      first = false;
    }
    append_json_key(out, "result", first);
    append_json_string(out, r.result);
    append_json_key(out, "target");
    append_json_string(out, r.target);
    out += '}';
  }
  out += ']';
}

}  // namespace ts::router
