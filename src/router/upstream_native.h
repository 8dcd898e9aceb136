// Internal to the gateway's upstream client (upstream_client.cc): its native transport for
// plain-HTTP upstreams reached directly at an IP address (the local replicas, a chained proxy,
// a GIE pool route without TLS). It speaks HTTP/1.1 itself on the client's Asio strand, so the
// call path has no libcurl multi-handle bookkeeping, no timer re-arm per transfer and no
// socket-interest churn (SCALEOUT.md §8.14): per request on a kept-alive connection it costs one
// write system call (request head and body gathered), the reactor's wake-up and one read (the
// response head and a small body arrive together).
//
//   - Connections: kept alive per "ip:port" (at most kMaxIdlePerOrigin idle each, newest reused
//     first); each connection always has one read pending, so a connection the server closes
//     while idle is noticed and dropped at once; bytes arriving on an idle connection drop it too.
//     A reused connection that fails before any response byte (the server closed it as the request
//     was sent) is retried once on a fresh connection, as libcurl does; every other failure is the
//     call's.
//   - Responses: parsed by Beast's basic_parser straight out of the connection's read buffer; the
//     head goes to on_head when complete, body bytes (chunk framing removed) to on_body as each
//     read brings them: nothing is held back (SSE events pass through at once).
//   - Timeouts: one timer for all calls (kSweep period while any call runs) checks each call's
//     deadline, idle timeout (from the last response byte, or the start) and connect timeout; no
//     timer is armed per call.
// Results, stages and error codes as net::http_stream's (net/http_client.h): kUnavailable (cannot
// connect, reset, closed before the response ended), kDeadlineExceeded (deadline, idle or
// connect timeout), kCancelled (cancel()), kDataLoss (malformed response); a handler's `false`
// is not an error (the head is returned) and closes the connection.
//
// Threading: everything runs on the strand given at construction (start, cancel and every
// handler). Destroy it only while no thread runs the io_context: pending operations then never
// complete, and `done` of a call still running is not called.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "net/http_client.h"
#include "router/upstream_client.h"

namespace ts::router::native {

using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

struct Conn;
struct Call;

class Transport {
 public:
  explicit Transport(const Strand& strand);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Whether a call to `url` with `opts` can go through this transport: http (no TLS), direct
  // (no environment proxy applies), the host an IP address literal (nothing to resolve).
  static bool eligible(const net::Url& url, const net::HttpCallOptions& opts);

  // (any thread) A call, ready to start: its request head serialized.
  static std::shared_ptr<Call> prepare(UpstreamClient::CallId id, net::Url url, net::HttpRequest req,
                                       net::HttpCallOptions opts, net::HttpHandlers handlers,
                                       UpstreamClient::Done done);
  // (strand) Starts a prepared call; its `done` runs exactly once (on the strand), unless the
  // transport is destroyed first.
  void start(std::shared_ptr<Call> c);
  // (strand) Ends the call `id` with kCancelled; false when no such call runs here.
  bool cancel(UpstreamClient::CallId id);

  // Counters for tests and metrics (any thread).
  struct Stats {
    uint64_t connects = 0;   // connections opened
    uint64_t reuses = 0;     // calls sent on a kept-alive connection
    uint64_t retries = 0;    // calls re-sent on a fresh connection after a stale reused one failed
    size_t idle = 0;         // connections kept alive now
  };
  Stats stats() const;

  static constexpr size_t kMaxIdlePerOrigin = 256;
  static constexpr std::chrono::milliseconds kSweep{25};
  static constexpr std::chrono::seconds kMaxIdleAge{30};  // older idle connections are not reused

 private:
  friend struct Conn;
  friend struct Call;
  void connect(const std::shared_ptr<Call>& c);
  void send(const std::shared_ptr<Call>& c);
  void read(const std::shared_ptr<Conn>& conn);
  void on_read(const std::shared_ptr<Conn>& conn, const boost::system::error_code& ec, size_t n);
  void parse(const std::shared_ptr<Conn>& conn);
  // A connection error while `c` used it: retry on a fresh connection when allowed, else fail.
  void conn_failed(const std::shared_ptr<Call>& c, const std::string& what);
  // Ends call `c` with `result`; keep = its connection goes back to the pool (else closed).
  void finish(const std::shared_ptr<Call>& c, Result<net::HttpResponseHead> result, bool keep);
  void close(const std::shared_ptr<Conn>& conn);
  void release(const std::shared_ptr<Conn>& conn);  // into the idle pool
  std::shared_ptr<Conn> take_idle(const std::string& key);
  void arm_sweep();
  void sweep();

  Strand strand_;
  boost::asio::steady_timer sweep_timer_;
  bool sweep_armed_ = false;
  std::unordered_map<UpstreamClient::CallId, std::shared_ptr<Call>> calls_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Conn>>> idle_;
  std::atomic<uint64_t> connects_{0}, reuses_{0}, retries_{0};
  std::atomic<size_t> idle_count_{0};
  bool closing_ = false;
};

}  // namespace ts::router::native
