// The gateway's upstream HTTP(S) client: many concurrent transfers driven by one libcurl multi
// handle (curl_multi_socket_action) on the HTTP server's own event loop (Boost.Asio), so a
// proxied request needs no thread of its own: the io thread that read the client's request
// starts the upstream transfer, the same loop wakes when the upstream's socket is readable, and
// the answer is written to the client from there (SCALEOUT.md §8.14: the worker-thread hand-off,
// its futex wake-ups and context switches, and libcurl's own poll loop per call are gone).
//
// Two transports behind this one interface: plain-HTTP calls made `direct` to an IP address (the
// local replicas, a chained proxy) go through the native HTTP/1.1 transport (upstream_native.h:
// Asio sockets and Beast's parser on the same strand, keep-alive pool, one sweep timer), the rest
// (https, remotes, names to resolve, environment proxies) through libcurl. Same semantics either
// way. UpstreamClientOptions::native = false, or TOKENSERVE_UPSTREAM_TRANSPORT=curl in the
// environment, sends everything through libcurl.
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

struct UpstreamClientOptions {
  bool native = true;  // the native transport for the calls it can take (see above)
};

class UpstreamClient {
 public:
  using CallId = uint64_t;  // 0 = none
  using Done = std::function<void(UpstreamEnd)>;

  explicit UpstreamClient(std::shared_ptr<boost::asio::io_context> ioc, UpstreamClientOptions options = {});
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
  // The native transport's counters (zeros when it is off); any thread.
  struct NativeStats {
    uint64_t connects = 0, reuses = 0, retries = 0;
    size_t idle = 0;
  };
  NativeStats native_stats() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ts::router
