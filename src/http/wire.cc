#include "http/wire.h"

#include <cstdio>

namespace ts::http {

namespace {

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (c != '\r' && c != '\n') out.push_back(c);
  return out;
}

bool is_framing_header(std::string_view name) {
  return iequals(name, "content-length") || iequals(name, "transfer-encoding") ||
         iequals(name, "connection");
}

}  // namespace

std::string format_response_head(int status, std::string_view server_name,
                                 std::string_view content_type, const HeaderList& headers,
                                 std::optional<size_t> content_length, bool chunked,
                                 bool keep_alive) {
  std::string h;
  h.reserve(256);
  h += "HTTP/1.1 ";
  h += std::to_string(status);
  h += ' ';
  h += reason_phrase(status);
  h += "\r\n";
  if (!server_name.empty()) h += "Server: " + sanitize(server_name) + "\r\n";
  if (!content_type.empty()) h += "Content-Type: " + sanitize(content_type) + "\r\n";
  if (content_length) h += "Content-Length: " + std::to_string(*content_length) + "\r\n";
  if (chunked) h += "Transfer-Encoding: chunked\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [k, v] : headers) {
    if (k.empty() || is_framing_header(k)) continue;
    h += sanitize(k) + ": " + sanitize(v) + "\r\n";
  }
  h += "\r\n";
  return h;
}

void append_chunk(std::string* out, std::string_view data) {
  if (data.empty()) return;
  char size[24];
  int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  out->append(size, static_cast<size_t>(n));
  out->append(data);
  out->append("\r\n");
}

}  // namespace ts::http
