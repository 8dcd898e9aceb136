// The one outbound HTTP(S) client of the project, on libcurl: `tokenserve bench` and `eval`
// (load generation against any OpenAI-compatible server), the gateway's upstream calls, and the
// Server-Sent-Events parser they share. (`pull` drives libcurl directly for its resumable
// file download, with the same global initialisation, curl_init() below.)
//
// One request per call on a fresh connection (no reuse: a load generator measures connection
// setup like a new client would, and a gateway upstream call never inherits a half-read
// stream); HttpSession below reuses connections for pollers. Every call honours a deadline and a cancel flag (checked at least every 50 ms), and
// delivers the body as it arrives, so a caller can timestamp SSE events. http:// and https://
// (TLS verified with the system's CA store, or a given CA file). Proxies from the environment (http_proxy,
// https_proxy) are used except for loopback addresses, no_proxy hosts and `direct` calls.
//
// Functions are thread-safe (no shared state besides libcurl's one-time global init); the
// SseParser is not.
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

namespace ts::net {

// "http[s]://host:port/base" split into parts. base_path has no trailing slash ("" or "/v1").
struct Url {
  std::string host;       // name or address, without brackets for IPv6
  uint16_t port = 80;
  std::string base_path;  // prefix joined before request paths
  bool tls = false;       // https
  // "http://host:port" (brackets around IPv6 hosts), without base_path.
  std::string origin() const;
};

// Parses an http:// or https:// URL (default ports 80 / 443). Errors: kInvalidArgument naming
// what is wrong (scheme, host, port).
Result<Url> parse_url(std::string_view url);

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
  // Sent as given, besides Host, Content-Length and Connection (set by the client). No
  // Content-Type is added when the caller gives none.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct HttpResponseHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  // Value of the first header named `name` (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

// How far a call got (for a caller that fails over: a failure at kConnecting or kSending
// means the server never saw a whole request).
enum class CallStage {
  kConnecting,    // resolving, TCP connect, TLS handshake (and certificate verification)
  kSending,       // the request is being written
  kAwaitingHead,  // the request was sent; no final response head yet
  kReadingBody,   // the head was delivered to on_head
};
const char* call_stage_name(CallStage s);  // "connecting" | "sending" | "awaiting_head" | "reading_body"

struct HttpCallOptions {
  std::chrono::steady_clock::time_point deadline;  // whole call, connect to last byte
  const std::atomic<bool>* cancel = nullptr;       // checked every <= 50 ms; stops the call
  // 0 = none. Else: no response byte for this long (from the start, or since the last byte)
  // ends the call with kDeadlineExceeded: a long stream may outlive any fixed deadline while a
  // silent upstream may not.
  std::chrono::milliseconds idle_timeout{0};
  std::chrono::milliseconds connect_timeout{0};    // 0 = bounded by deadline / idle_timeout only
  // https: PEM file of the CA certificate(s) to verify the server with, instead of the system
  // store ("" = system store). Verification (chain and host name) is never turned off.
  std::string ca_file;
  CallStage* stage = nullptr;                      // out (optional): how far the call got
  bool direct = false;  // never through an environment proxy (calls inside a private network)
};

// Called once with the final response head (1xx interim responses are skipped), then with the
// decoded body bytes (chunked framing removed) as they arrive. Returning false from either
// stops reading (the call then returns the head with OK status).
struct HttpHandlers {
  std::function<bool(const HttpResponseHead&)> on_head;
  std::function<bool(std::string_view)> on_body;
};

// Sends one request on a fresh connection and streams the response to `handlers`.
// Errors: kUnavailable (cannot resolve/connect, TLS failure, connection reset or closed before
// the body ended), kDeadlineExceeded (deadline passed), kCancelled (cancel flag set), kDataLoss
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

// A keep-alive session for repeated calls to the same servers (the gateway's /ready and
// /metrics poller, and its upstream calls through a pool of sessions): calls reuse a live connection from the session's cache when the server kept
// it open, and otherwise connect afresh. Same semantics and errors as http_stream/http_fetch.
// Not thread-safe: one thread uses a session at a time.
class HttpSession {
 public:
  HttpSession();
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  Result<HttpResult> fetch(const Url& url, const HttpRequest& req, const HttpCallOptions& opts,
                           size_t max_body = 64u << 20);
  // As http_stream, on the session's connections. A transfer stopped early (a handler returned
  // false, cancel, deadline) closes its connection; it is never handed to a later call.
  Result<HttpResponseHead> stream(const Url& url, const HttpRequest& req, const HttpCallOptions& opts,
                                  const HttpHandlers& handlers);

 private:
  struct Handles;
  Handles* h_;
};

// libcurl's process-wide initialisation, done once (thread-safe); every user of libcurl in the
// project calls it before its first handle.
void curl_init();

}  // namespace ts::net
