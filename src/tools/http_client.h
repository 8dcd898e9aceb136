// A small HTTP/1.1 client for the load generator, on plain POSIX sockets: one request per
// connection (Connection: close), non-blocking I/O with poll() so every call honours a deadline
// and a cancel flag, Content-Length / chunked / read-until-close bodies delivered incrementally
// as they arrive (so a caller can timestamp SSE events), plus the incremental chunked-transfer
// decoder and Server-Sent-Events parser it uses. http:// only (https gives kUnimplemented).
// Functions are thread-safe (no shared state); the decoder and parser objects are not.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ts::tools {

// "http://host:port/base" split into parts. base_path has no trailing slash ("" or "/v1").
struct Url {
  std::string host;       // name or address, without brackets for IPv6
  uint16_t port = 80;
  std::string base_path;  // prefix joined before request paths
};

// Parses an http:// URL. Errors: kInvalidArgument (malformed), kUnimplemented (https).
Result<Url> parse_url(std::string_view url);

// Incremental decoder of a chunked transfer-coded body (RFC 9112 section 7.1). Chunk
// extensions are ignored; trailers are read and dropped.
class ChunkedDecoder {
 public:
  // Consumes `in`, appending decoded payload to *out. Error kDataLoss on malformed framing;
  // the decoder is then unusable. Bytes after the terminating chunk are ignored.
  Status feed(std::string_view in, std::string* out);
  // True once the zero-length chunk and the trailer section were read.
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataCrlf, kTrailer, kDone, kError };
  State state_ = State::kSize;
  std::string line_;       // partial size or trailer line
  uint64_t remaining_ = 0; // bytes left in the current chunk
};

// One Server-Sent Event: its `event:` name ("" when absent) and data lines joined by '\n'.
struct SseEvent {
  std::string event;
  std::string data;
};

// Incremental SSE parser (WHATWG event-stream rules): lines end in \n, \r\n or \r; an empty
// line dispatches the event if it has data; lines starting with ':' are comments; "field:
// value" drops one leading space from the value; `id` and `retry` are ignored.
class SseParser {
 public:
  // Feeds bytes (any split); calls on_event for each complete event in order.
  void feed(std::string_view in, const std::function<void(const SseEvent&)>& on_event);

 private:
  void line(std::string_view l, const std::function<void(const SseEvent&)>& on_event);
  std::string buf_;       // incomplete line
  bool pending_cr_ = false;
  SseEvent cur_;
  bool has_data_ = false;
};

struct HttpRequest {
  std::string method = "GET";
  std::string path = "/";  // appended to Url::base_path
  std::vector<std::pair<std::string, std::string>> headers;  // besides Host/Content-Length/Connection
  std::string body;
};

struct HttpResponseHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  // Value of the first header named `name` (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

struct HttpCallOptions {
  std::chrono::steady_clock::time_point deadline;  // whole call, connect to last byte
  const std::atomic<bool>* cancel = nullptr;       // polled every ~50 ms; stops the call
};

// Called once with the response head, then with decoded body bytes as they arrive. Returning
// false from either stops reading (the call then returns the head with OK status).
struct HttpHandlers {
  std::function<bool(const HttpResponseHead&)> on_head;
  std::function<bool(std::string_view)> on_body;
};

// Sends one request on a fresh connection and streams the response to `handlers`.
// Errors: kUnavailable (cannot resolve/connect, connection reset or closed before the body
// ended), kDeadlineExceeded (deadline passed), kCancelled (cancel flag set), kDataLoss
// (malformed response). The connection is always closed on return.
Result<HttpResponseHead> http_stream(const Url& url, const HttpRequest& req,
                                     const HttpCallOptions& opts, const HttpHandlers& handlers);

struct HttpResult {
  HttpResponseHead head;
  std::string body;
};

// http_stream collecting the whole body (bounded by max_body bytes; more is kDataLoss).
Result<HttpResult> http_fetch(const Url& url, const HttpRequest& req, const HttpCallOptions& opts,
                              size_t max_body = 64u << 20);

}  // namespace ts::tools
