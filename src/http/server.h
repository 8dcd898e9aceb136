// Asynchronous HTTP/1.1 server (Boost.Asio/Beast inside server.cc only).
//
// A few io threads serve every connection: idle keep-alive and long SSE streams hold no thread.
// Per connection: keep-alive, header limit (431), body limit (413), idle timeout between requests
// (quiet close), read timeout for one request once its first byte arrived (408), write timeout
// per write (close + cancel). While a response is pending the server keeps reading the socket so a
// disconnect is seen at once and the Exchange is cancelled (pipelined bytes are kept, not lost).
//
// Lifecycle: construct, add routes, start() (binds; port 0 = ephemeral, see port()), then
// drain() or stop() (the destructor stops). drain(): stop accepting, close idle connections, let
// in-flight requests finish (their connection then closes) until the deadline, then close the
// rest (cancelling their exchanges). Connection caps (max_connections, per client address):
// a connection beyond them is answered 503 + Retry-After and closed without reading. Memory per
// connection grows only as data arrives (reads of 4 KiB into a buffer bounded by the header and
// body limits). Thread-safe: start/drain/stop from one controlling thread;
// stats from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "http/message.h"
#include "http/router.h"

namespace boost::asio {
class io_context;
}

namespace ts::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;                                  // 0: an ephemeral port
  int num_io_threads = 2;
  size_t max_body_bytes = 8u << 20;                   // larger -> 413
  size_t max_header_bytes = 16u << 10;                // request line + headers; larger -> 431
  std::chrono::milliseconds idle_timeout{60'000};     // keep-alive wait for the next request
  std::chrono::milliseconds read_timeout{30'000};     // one request, first byte to last
  std::chrono::milliseconds write_timeout{30'000};    // each write of a response or chunk
  size_t max_stream_buffer_bytes = 16u << 20;         // queued, unsent chunk bytes per stream
  size_t max_connections = 0;                         // open connections at most (0 = no cap);
                                                      // beyond: 503 + close (conn_limits.h)
  size_t max_connections_per_client = 0;              // per client IP address (0 = no cap)
  std::string server_name = "tokenserve";             // "Server" header
  HeaderList extra_headers;                           // added to every response (e.g.
                                                      // x-tokenserve-served-by), also errors
  ErrorRenderer error_renderer;                       // empty: text/plain
  // > 0: each io thread asks the kernel for this short scheduler slice (core/thread_sched.h), so
  // it preempts compute threads at once when a request or a write completion wakes it; 0 =
  // kernel default. serve and gateway set 100 us unless --no-sched-hints.
  std::chrono::microseconds io_thread_slice{0};
  // > 0: io threads run SCHED_RR at this priority, guarded (http/io_rt.h): one that uses more
  // than io_rt_budget of CPU, or wakes more than io_rt_max_wakeups times, in an io_rt_window is
  // demoted to normal scheduling (counted in ServerStats), promoted again after quiet windows.
  // Without permission: logged, never fatal. 0 (the library default) = off; `serve` asks for 1
  // unless told otherwise, `gateway` for 0 (--io-rt-priority).
  int io_rt_priority = 0;
  std::chrono::microseconds io_rt_budget{50'000};
  std::chrono::milliseconds io_rt_window{250};
  // Wake-ups one io thread may have per io_rt_window before it is demoted too (0 = any): 250
  // per 250 ms, 1000 a second, bounds what real-time wake-ups cost the compute threads (~15 us
  // each on a 2-core host) at ~1.5 % of a core per io thread. A streamed token wakes an io
  // thread ~2.4 times (SmolLM2 shape at --max-seqs 2: 950 wake-ups a second for 400 tokens).
  int64_t io_rt_max_wakeups = 250;
  // io_rt_priority came from the user (a refusal is logged as a warning) or is a default (info).
  bool io_rt_explicit = true;
  // >= 0: adopt this already bound and listening TCP socket (from another Server's
  // release_listener()) instead of binding host:port; start() owns it from then on.
  int listen_fd = -1;
};

struct ServerStats {
  uint64_t num_connections_open = 0;
  uint64_t num_connections_accepted = 0;
  uint64_t num_requests = 0;       // requests dispatched to handlers or answered with an error
  uint64_t num_in_flight = 0;      // requests whose response is not finished
  uint64_t num_cancelled = 0;      // exchanges cancelled before their response finished
  uint64_t num_refused_connections = 0;  // refused by max_connections / per-client caps
  // ServerOptions::io_rt_priority: io threads under SCHED_RR now, demotions for using over the
  // budget, and whether SCHED_RR was refused (no permission).
  uint64_t io_rt_threads = 0;
  uint64_t io_rt_demotions = 0;
  bool io_rt_denied = false;
};

// The HTTP server's own families in Prometheus text format, for serve's and the gateway's
// /metrics: open connections, requests received, and the --io-rt-priority state (io threads
// under SCHED_RR now, guard demotions, whether SCHED_RR was refused).
std::string server_metrics_text(const ServerStats& s);

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Routes must be added before start().
  Router& router();
  void route(Method method, std::string pattern, Handler handler);

  // Binds host:port, listens, starts the io threads. Fails (state unchanged, nothing running)
  // with kUnavailable "address 127.0.0.1:8080 is already in use" or kInvalidArgument for a bad
  // host. Call once.
  Status start();
  // The bound port (meaningful after a successful start()).
  uint16_t port() const;
  // Stops accepting and hands the listening socket to the caller (for ServerOptions::listen_fd
  // of the next Server), so the port is never unbound between two servers: connections that
  // arrive meanwhile wait in the kernel's backlog for the next server. Connections already
  // accepted stay with this server (drain()/stop() them). Returns -1 when not started, already
  // released or stopped.
  int release_listener();

  // Graceful drain, blocking until done: see the header comment. Idempotent.
  void drain(std::chrono::milliseconds deadline);
  // drain(0): close everything now and join the io threads.
  void stop();
  bool draining() const;

  ServerStats stats() const;

  // The event loop the io threads run (they run it from start() until drain()/stop() ends), for
  // a client that drives its own sockets on those threads instead of handing work to others
  // (the gateway's upstream transfers, router/upstream_client.h). The pointer shares ownership
  // of the server's internals: the io_context outlives the Server while it is held, so objects
  // bound to it may be destroyed after the Server (with no io thread running any more).
  std::shared_ptr<boost::asio::io_context> io_context() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ts::http
