// Test-only: a small blocking HTTP/1.1 client over a POSIX socket, for wire-level tests of the
// server (malformed or partial requests, pipelining, keep-alive, slow readers, reading a chunked
// body chunk by chunk). The product's one outbound HTTP client is src/net/http_client.h (libcurl:
// gateway, bench, eval, pull); this one is never linked into tokenserve. One connection per Client; keep-alive by reusing it. Understands
// Content-Length, chunked and read-until-close bodies, and can read a chunked body one chunk at
// a time (SSE). Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "http/message.h"

namespace ts::http {

struct ClientResponse {
  int status = 0;
  HeaderList headers;
  std::string body;                 // whole body (chunks joined)
  std::vector<std::string> chunks;  // chunk payloads as received, when chunked
  bool chunked = false;

  std::string_view header(std::string_view name) const;
};

class Client {
 public:
  Client() = default;
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&& o) noexcept
      : fd_(o.fd_), buf_(std::move(o.buf_)), timeout_(o.timeout_), eof_(o.eof_) {
    o.fd_ = -1;
  }

  Status connect(const std::string& host, uint16_t port);
  bool connected() const { return fd_ >= 0; }
  void close();
  // Timeout for each wait on the socket (default 10 s). Expiry gives kDeadlineExceeded.
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // Sends bytes as they are (for malformed or partial requests).
  Status send_raw(std::string_view bytes);
  // Sends a request with Host and, when body is non-empty or method is POST, Content-Length.
  Status send_request(std::string_view method, std::string_view target, std::string_view body,
                      const HeaderList& headers = {});
  // send_request + read_response.
  Result<ClientResponse> request(std::string_view method, std::string_view target,
                                 std::string_view body = {}, const HeaderList& headers = {});

  // Reads a status line and headers (skipping 1xx interim responses unless told not to).
  Result<ClientResponse> read_head(bool skip_interim = true);
  // After read_head of a chunked response: the next chunk's payload, "" after the last chunk.
  Result<std::string> read_chunk();
  // After read_head: reads the whole body into head->body (chunked, Content-Length or until
  // close), as read_response does.
  Status read_body(ClientResponse* head);
  // read_head + the whole body.
  Result<ClientResponse> read_response();

  // True if the server closes the connection (EOF or reset) within `wait`; bytes that arrive
  // meanwhile are kept for later reads.
  bool wait_closed(std::chrono::milliseconds wait);

 private:
  Status fill(std::chrono::milliseconds timeout);
  Result<std::string> read_line();
  Status read_exact(size_t n, std::string* out);

  int fd_ = -1;
  std::string buf_;
  std::chrono::milliseconds timeout_{10'000};
  bool eof_ = false;
};

}  // namespace ts::http
