#include "gateway/json_text.h"

#include <charconv>
#include <cmath>

#include <nlohmann/json.hpp>

namespace ts::gateway {

void append_json_string(std::string& out, std::string_view s) {
  // Printable ASCII without '"' or '\\' is copied as it is (nearly every id, name and reason);
  // anything else goes through nlohmann's serializer (escapes, UTF-8 checks).
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return;
    }
  }
  out += '"';
  out += s;
  out += '"';
}

void append_json_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  // nlohmann's own formatter (the one its serializer calls for a double): the same digits and
  // layout as dump(). It writes at most 25 characters and no terminator.
  char buf[64];
  char* end = nlohmann::detail::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, static_cast<size_t>(end - buf));
}

void append_json_int(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

}  // namespace ts::gateway
