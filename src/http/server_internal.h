// Internal to src/http: the server's shared state (Server::Impl), one connection's state
// machine (Connection, in connection.cc) and the Exchange handed to handlers (ExchangeImpl).
// Only server.cc and connection.cc include it; they are the only translation units that include
// Boost.Beast/Asio (compile cost). Beast parses requests; responses are formatted by hand
// (status line, headers, chunk framing) so one write path serves whole and streamed responses.
//
// Threading: every connection's state lives on its own strand; Exchange calls from other threads
// post onto it. Ownership: Connection -> Server::Impl (shared, so sockets never outlive the
// io_context); Exchange -> Connection (shared); Connection -> Exchange (weak, so a handler that
// drops its Exchange unanswered is noticed and answered 500).
#pragma once

#include "http/server.h"
#include "http/conn_limits.h"
#include "http/io_rt.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/log.h"
#include "http/wire.h"

namespace ts::http {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Strand = net::strand<net::io_context::executor_type>;

class Connection;

struct Server::Impl {
  explicit Impl(ServerOptions o)
      : opts(std::move(o)), ioc(std::max(1, opts.num_io_threads)),
        limiter(opts.max_connections, opts.max_connections_per_client) {}

  ServerOptions opts;
  Router router;
  net::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::optional<Strand> accept_strand;
  std::optional<net::steady_timer> accept_retry;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  uint16_t port = 0;
  std::atomic<bool> started{false}, draining{false}, stopped{false};

  std::mutex mu;  // guards conns; cv signals connection/in-flight changes
  std::condition_variable cv;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> conns;
  std::atomic<uint64_t> num_open{0}, num_accepted{0}, num_requests{0}, num_in_flight{0},
      num_cancelled{0};

  ConnectionLimiter limiter;
  std::unique_ptr<IoRtGuard> rt_guard;  // io_rt_priority > 0
  std::mutex post_mu;  // posts vs. stop(): no handler is queued after the io_context stopped

  Response render_error(int status, std::string_view message) const {
    if (opts.error_renderer) {
      Response r = opts.error_renderer(status, message);
      r.status = status;
      return r;
    }
    Response r;
    r.status = status;
    r.content_type = "text/plain; charset=utf-8";
    r.body = std::string(message) + "\n";
    return r;
  }
  void notify() {
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_all();
  }
  template <typename F>
  bool post(const Strand& strand, F&& f) {
    std::lock_guard<std::mutex> lock(post_mu);
    if (stopped.load()) return false;
    net::post(strand, std::forward<F>(f));
    return true;
  }
  void do_accept(const std::shared_ptr<Impl>& self);
};


inline std::string_view sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

class ExchangeImpl;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `socket` must have been accepted onto `strand`: its completions then run on it too.
  Connection(std::shared_ptr<Server::Impl> server, Strand strand, tcp::socket socket)
      : server_(std::move(server)),
        strand_(std::move(strand)),
        socket_(std::move(socket)),
        read_timer_(strand_),
        write_timer_(strand_) {
    boost::system::error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    socket_.set_option(tcp::no_delay(true), ec);
    // Synchronous writes never block (do_write tries one before starting an async write).
    socket_.non_blocking(true, ec);
  }

  const Strand& strand() const { return strand_; }
  Server::Impl& server() { return *server_; }
  // The address counted by the connection limiter; released when the connection closes.
  void set_client(std::string client) { client_ = std::move(client); }

  void start() { do_read(); }

  // --- Called on the strand (posted by ExchangeImpl). `id` guards against stale calls. ---
  void send_whole(uint64_t id, Response r);
  void start_stream(uint64_t id, int status, std::string content_type, HeaderList headers);
  void queue_chunk(uint64_t id, std::string data);
  void finish_stream(uint64_t id);
  void abort(uint64_t id) {
    if (id == exchange_id_ && response_pending_) close();
  }
  void on_drain() {
    keep_alive_ = false;
    if (phase_ == Phase::kIdle) close();
  }
  void close();

 private:
  enum class Phase { kIdle, kReading, kHandling, kClosed };

  void do_read();
  void read_header();
  void on_header(boost::system::error_code ec);
  void on_body(boost::system::error_code ec);
  void on_read_error(boost::system::error_code ec);
  void on_request();
  void start_watch();
  void queue_bytes(std::string bytes, bool complete);
  void do_write();
  void response_done();
  void linger_close();
  void send_error(int status, std::string_view message, bool close_after);

  void arm_read_timer(std::chrono::milliseconds d, bool idle) {
    uint64_t gen = ++read_timer_gen_;
    read_timer_.expires_after(d);
    read_timer_.async_wait([self = shared_from_this(), gen, idle](boost::system::error_code ec) {
      if (ec || gen != self->read_timer_gen_ || self->phase_ == Phase::kClosed) return;
      if (idle || self->lingering_) {
        self->close();
      } else {
        self->read_timed_out_ = true;
        boost::system::error_code ignored;
        self->socket_.cancel(ignored);
      }
    });
  }
  void cancel_read_timer() {
    ++read_timer_gen_;
    read_timer_.cancel();
  }

  std::shared_ptr<Server::Impl> server_;
  Strand strand_;
  tcp::socket socket_;
  net::steady_timer read_timer_, write_timer_;
  uint64_t read_timer_gen_ = 0, write_timer_gen_ = 0;
  boost::beast::flat_buffer buffer_;
  std::string client_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::string remote_;

  Phase phase_ = Phase::kIdle;
  bool read_timed_out_ = false;
  bool lingering_ = false;
  bool watch_pending_ = false;
  bool read_after_watch_ = false;
  bool keep_alive_ = true;
  bool head_request_ = false;
  bool http10_ = false;

  // Current exchange.
  uint64_t exchange_id_ = 0;
  std::weak_ptr<ExchangeImpl> exchange_;
  bool response_pending_ = false;   // request dispatched, response not fully written
  bool response_started_ = false;   // head queued
  bool response_complete_ = false;  // everything queued (whole body or last chunk)
  bool streaming_ = false;
  bool counted_in_flight_ = false;

  std::string out_pending_, out_inflight_;
  bool writing_ = false;
  bool write_posted_ = false;  // a do_write is posted (queue_bytes: a stream's writes coalesced)
};

class ExchangeImpl : public Exchange {
 public:
  ExchangeImpl(std::shared_ptr<Connection> conn, uint64_t id, Request req)
      : conn_(std::move(conn)), id_(id), req_(std::move(req)) {}

  ~ExchangeImpl() override {
    bool answered, streaming, finished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      answered = started_ || cancelled_;
      streaming = streaming_;
      finished = finished_;
    }
    auto conn = conn_;
    uint64_t id = id_;
    if (!answered) {
      Response r = conn->server().render_error(500, "the handler did not answer the request");
      conn->server().post(conn->strand(),
                          [conn, id, r = std::move(r)]() mutable { conn->send_whole(id, std::move(r)); });
    } else if (streaming && !finished) {
      conn->server().post(conn->strand(), [conn, id] { conn->abort(id); });
    }
  }

  const Request& request() const override { return req_; }

  void respond(Response response) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (started_ || cancelled_) return;
      started_ = true;
    }
    auto conn = conn_;
    conn->server().post(conn->strand(), [conn, id = id_, r = std::move(response)]() mutable {
      conn->send_whole(id, std::move(r));
    });
  }

  void start_stream(int status, std::string content_type, HeaderList headers) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (started_ || cancelled_) return;
      started_ = true;
      streaming_ = true;
    }
    auto conn = conn_;
    conn->server().post(conn->strand(), [conn, id = id_, status, ct = std::move(content_type),
                                         h = std::move(headers)]() mutable {
      conn->start_stream(id, status, std::move(ct), std::move(h));
    });
  }

  bool write(std::string data) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!streaming_ || finished_ || cancelled_) return false;
    }
    auto conn = conn_;
    return conn->server().post(conn->strand(), [conn, id = id_, d = std::move(data)]() mutable {
      conn->queue_chunk(id, std::move(d));
    });
  }

  void finish() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!streaming_ || finished_ || cancelled_) return;
      finished_ = true;
    }
    auto conn = conn_;
    conn->server().post(conn->strand(), [conn, id = id_] { conn->finish_stream(id); });
  }

  bool cancelled() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

  void on_cancel(std::function<void()> callback) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!cancelled_) {
        on_cancel_ = std::move(callback);
        return;
      }
    }
    if (callback) callback();
  }

  // From the connection's strand when it closes before the response completed.
  void mark_cancelled() {
    std::function<void()> cb;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) return;
      cancelled_ = true;
      cb = std::move(on_cancel_);
    }
    if (cb) cb();
  }

 private:
  std::shared_ptr<Connection> conn_;
  uint64_t id_;
  Request req_;
  mutable std::mutex mu_;
  bool started_ = false, streaming_ = false, finished_ = false, cancelled_ = false;
  std::function<void()> on_cancel_;
};

}  // namespace ts::http
