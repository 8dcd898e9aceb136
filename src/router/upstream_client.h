// The gateway's upstream HTTP(S) client: many concurrent transfers driven by one libcurl multi
// handle (curl_multi_socket_action) on the HTTP server's own event loop (Boost.Asio), so a
// proxied request needs no thread of its own: the io thread that read the client's request
// starts the upstream transfer, the same loop wakes when the upstream's socket is readable, and
// the answer is written to the client from there (SCALEOUT.md §8.14: the worker-thread hand-off,
// its futex wake-ups and context switches, and libcurl's own poll loop per call are gone).
//
// Semantics per call are http_stream's (net/http_client.h, the same CurlTransfer): the head and
// then the body bytes as they arrive go to the handlers; `done` gets the result (errors as
// http_stream's, plus the stage the call reached). Connections are kept alive in the multi
// handle's cache and reused by later calls to the same origin (a transfer stopped early closes
// its connection). Deadline, idle timeout and connect timeout as HttpCallOptions says; the
// options' cancel flag and stage pointer are not used (cancel() and UpstreamEnd::stage instead).
//
// Threading: every handler and `done` run on the client's strand (one at a time, on an io
// thread); they must not block. start(), cancel() and post() are thread-safe. `done` is called
// exactly once per started call, never from inside start(), except when the client is destroyed
// first (then it is not called; the handlers and `done` are destroyed). Destroy the client only
// while no thread runs the io_context (after the Server's drain()/stop()).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/status.h"
#include "net/http_client.h"

namespace boost::asio {
class io_context;
}

namespace ts::router {

// How one call ended.
struct UpstreamEnd {
  Result<net::HttpResponseHead> result = Status(StatusCode::kInternal, "not finished");
  net::CallStage stage = net::CallStage::kConnecting;  // how far it got
};

class UpstreamClient {
 public:
  using CallId = uint64_t;  // 0 = none
  using Done = std::function<void(UpstreamEnd)>;

  explicit UpstreamClient(std::shared_ptr<boost::asio::io_context> ioc);
  ~UpstreamClient();
  UpstreamClient(const UpstreamClient&) = delete;
  UpstreamClient& operator=(const UpstreamClient&) = delete;

  // Starts `req` to `url`; returns the call's id at once.
  CallId start(net::Url url, net::HttpRequest req, net::HttpCallOptions opts, net::HttpHandlers handlers, Done done);
  // Stops a call that has not ended: its `done` gets kCancelled ("cancelled"). No-op otherwise.
  void cancel(CallId id);
  // Runs `task` on the client's strand.
  void post(std::function<void()> task);
  // Calls running now (for metrics and tests).
  size_t num_active() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ts::router
