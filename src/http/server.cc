// The only translation unit that includes Boost.Beast/Asio (compile cost). Beast parses
// requests; responses are formatted by hand (status line, headers, chunk framing) so one write
// path serves whole and streamed responses.
//
// Threading: every connection's state lives on its own strand; Exchange calls from other threads
// post onto it. Ownership: Connection -> Server::Impl (shared, so sockets never outlive the
// io_context); Exchange -> Connection (shared); Connection -> Exchange (weak, so a handler that
// drops its Exchange unanswered is noticed and answered 500).
#include "http/server.h"

#include "http/conn_limits.h"

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

namespace {

std::string_view sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

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

// ------------------------------------------------------------------------------------------
// Reading

void Connection::do_read() {
  if (phase_ == Phase::kClosed) return;
  if (server_->draining.load()) keep_alive_ = false;
  phase_ = Phase::kIdle;
  read_timed_out_ = false;
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(server_->opts.max_header_bytes));
  parser_->body_limit(static_cast<uint64_t>(server_->opts.max_body_bytes));
  if (buffer_.size() > 0) {
    read_header();
    return;
  }
  if (server_->draining.load()) {
    close();
    return;
  }
  // Idle: wait for the first byte of the next request under the idle timeout.
  arm_read_timer(server_->opts.idle_timeout, /*idle=*/true);
  socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](
                                                     boost::system::error_code ec, size_t n) {
    if (self->phase_ == Phase::kClosed) return;
    self->cancel_read_timer();
    if (ec) {
      self->close();  // eof, reset, or idle timeout: nothing to answer
      return;
    }
    self->buffer_.commit(n);
    self->read_header();
  });
}

void Connection::read_header() {
  phase_ = Phase::kReading;
  arm_read_timer(server_->opts.read_timeout, /*idle=*/false);
  bhttp::async_read_header(socket_, buffer_, *parser_,
                           [self = shared_from_this()](boost::system::error_code ec, size_t) {
                             self->on_header(ec);
                           });
}

void Connection::on_header(boost::system::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  if (ec) return on_read_error(ec);
  if (parser_->is_done()) {
    cancel_read_timer();
    return on_request();
  }
  auto read_body = [self = shared_from_this()] {
    bhttp::async_read(self->socket_, self->buffer_, *self->parser_,
                      [self](boost::system::error_code ec, size_t) { self->on_body(ec); });
  };
  const auto& msg = parser_->get();
  auto expect = msg.find(bhttp::field::expect);
  if (expect != msg.end() && iequals(sv(expect->value()), "100-continue")) {
    auto bytes = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    net::async_write(socket_, net::buffer(*bytes),
                     [self = shared_from_this(), bytes, read_body](boost::system::error_code ec,
                                                                    size_t) {
                       if (self->phase_ == Phase::kClosed) return;
                       if (ec) return self->close();
                       read_body();
                     });
    return;
  }
  read_body();
}

void Connection::on_body(boost::system::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  cancel_read_timer();
  if (ec) return on_read_error(ec);
  on_request();
}

void Connection::on_read_error(boost::system::error_code ec) {
  cancel_read_timer();
  keep_alive_ = false;
  if (read_timed_out_) {
    send_error(408, "timed out reading the request", true);
  } else if (ec == bhttp::error::header_limit) {
    send_error(431, "request headers exceed " + std::to_string(server_->opts.max_header_bytes) +
                        " bytes", true);
  } else if (ec == bhttp::error::body_limit) {
    send_error(413, "request body exceeds " + std::to_string(server_->opts.max_body_bytes) +
                        " bytes", true);
  } else if (ec == net::error::eof || ec == bhttp::error::end_of_stream ||
             ec == net::error::connection_reset || ec == net::error::operation_aborted ||
             ec == bhttp::error::partial_message) {
    close();
  } else {
    send_error(400, "malformed HTTP request: " + ec.message(), true);
  }
}

void Connection::on_request() {
  phase_ = Phase::kHandling;
  auto& msg = parser_->get();
  Request req;
  req.method_text = std::string(sv(msg.method_string()));
  req.method = parse_method(req.method_text);
  req.target = std::string(sv(msg.target()));
  size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  for (const auto& f : msg) req.headers.emplace_back(std::string(sv(f.name_string())), std::string(sv(f.value())));
  req.body = std::move(msg.body());
  req.remote_address = remote_;
  http10_ = msg.version() < 11;
  keep_alive_ = msg.keep_alive() && !server_->draining.load();
  head_request_ = req.method == Method::kHead;
  parser_.reset();

  ++exchange_id_;
  response_pending_ = true;
  response_started_ = response_complete_ = streaming_ = false;
  counted_in_flight_ = true;
  server_->num_in_flight.fetch_add(1);
  server_->num_requests.fetch_add(1);

  Router::Match m = server_->router.match(req.method, req.path);
  if (m.kind == Router::MatchKind::kNoPath) {
    send_error(404, "no route for " + req.method_text + " " + req.path, false);
    return;
  }
  if (m.kind == Router::MatchKind::kMethodNotAllowed) {
    Response r = server_->render_error(405, "method " + req.method_text + " not allowed for " + req.path);
    std::string allow;
    for (Method a : m.allowed) allow += std::string(allow.empty() ? "" : ", ") + method_name(a);
    r.set_header("Allow", allow);
    send_whole(exchange_id_, std::move(r));
    return;
  }
  req.path_params = std::move(m.params);
  auto ex = std::make_shared<ExchangeImpl>(shared_from_this(), exchange_id_, std::move(req));
  exchange_ = ex;
  start_watch();
  const Handler* handler = m.handler;
  ExchangePtr base = ex;
  ex.reset();
  try {
    (*handler)(base);
  } catch (const std::exception& e) {
    log::error(std::string("http handler threw: ") + e.what());
    base->respond(server_->render_error(500, "internal error"));
  } catch (...) {
    base->respond(server_->render_error(500, "internal error"));
  }
}

// Reads while a response is pending: sees a disconnect at once; keeps pipelined bytes.
void Connection::start_watch() {
  if (watch_pending_ || phase_ == Phase::kClosed) return;
  if (buffer_.size() >= server_->opts.max_header_bytes + server_->opts.max_body_bytes) return;
  watch_pending_ = true;
  socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](
                                                     boost::system::error_code ec, size_t n) {
    self->watch_pending_ = false;
    if (self->phase_ == Phase::kClosed) return;
    if (!ec) self->buffer_.commit(n);
    if (self->read_after_watch_) {
      self->read_after_watch_ = false;
      self->do_read();
      return;
    }
    if (ec == net::error::operation_aborted) return;
    if (ec) {
      self->close();  // the client went away: cancels the exchange
      return;
    }
    self->start_watch();
  });
}

// ------------------------------------------------------------------------------------------
// Writing

void Connection::send_whole(uint64_t id, Response r) {
  if (id != exchange_id_ || !response_pending_ || response_started_ || phase_ == Phase::kClosed)
    return;
  response_started_ = true;
  bool keep = keep_alive_ && !server_->draining.load();
  keep_alive_ = keep;
  for (const auto& h : server_->opts.extra_headers) r.headers.push_back(h);
  std::string bytes = format_response_head(r.status, server_->opts.server_name, r.content_type, r.headers,
                                  r.body.size(), false, keep);
  if (!head_request_) bytes += r.body;
  queue_bytes(std::move(bytes), /*complete=*/true);
}

void Connection::start_stream(uint64_t id, int status, std::string content_type,
                              HeaderList headers) {
  if (id != exchange_id_ || !response_pending_ || response_started_ || phase_ == Phase::kClosed)
    return;
  response_started_ = true;
  streaming_ = true;
  if (http10_) keep_alive_ = false;  // no chunked framing in HTTP/1.0: the close ends the body
  bool keep = keep_alive_ && !server_->draining.load();
  keep_alive_ = keep;
  for (const auto& h : server_->opts.extra_headers) headers.push_back(h);
  queue_bytes(format_response_head(status, server_->opts.server_name, content_type, headers, std::nullopt,
                          !http10_, keep),
              false);
}

void Connection::queue_chunk(uint64_t id, std::string data) {
  if (id != exchange_id_ || !streaming_ || response_complete_ || phase_ == Phase::kClosed) return;
  if (out_pending_.size() + data.size() > server_->opts.max_stream_buffer_bytes) {
    log::warn("http: client " + remote_ + " reads too slowly; closing its stream");
    close();
    return;
  }
  if (head_request_) return;
  std::string framed;
  if (http10_) {
    framed = std::move(data);
  } else {
    append_chunk(&framed, data);
  }
  queue_bytes(std::move(framed), false);
}

void Connection::finish_stream(uint64_t id) {
  if (id != exchange_id_ || !streaming_ || response_complete_ || phase_ == Phase::kClosed) return;
  queue_bytes(http10_ || head_request_ ? std::string() : std::string(kLastChunk), true);
}

void Connection::queue_bytes(std::string bytes, bool complete) {
  out_pending_ += bytes;
  if (complete) response_complete_ = true;
  if (!writing_) do_write();
}

void Connection::do_write() {
  if (phase_ == Phase::kClosed) return;
  if (out_pending_.empty()) {
    if (response_complete_ && response_pending_) response_done();
    return;
  }
  writing_ = true;
  out_inflight_.swap(out_pending_);
  out_pending_.clear();
  uint64_t gen = ++write_timer_gen_;
  write_timer_.expires_after(server_->opts.write_timeout);
  write_timer_.async_wait([self = shared_from_this(), gen](boost::system::error_code ec) {
    if (ec || gen != self->write_timer_gen_ || self->phase_ == Phase::kClosed) return;
    log::warn("http: write timed out for " + self->remote_);
    self->close();
  });
  net::async_write(socket_, net::buffer(out_inflight_),
                   [self = shared_from_this()](boost::system::error_code ec, size_t) {
                     self->writing_ = false;
                     ++self->write_timer_gen_;
                     self->write_timer_.cancel();
                     if (self->phase_ == Phase::kClosed) return;
                     if (ec) {
                       self->close();
                       return;
                     }
                     self->out_inflight_.clear();
                     self->do_write();
                   });
}

void Connection::response_done() {
  response_pending_ = false;
  exchange_.reset();
  if (counted_in_flight_) {
    counted_in_flight_ = false;
    server_->num_in_flight.fetch_sub(1);
    server_->notify();
  }
  if (!keep_alive_ || server_->draining.load()) {
    linger_close();
    return;
  }
  if (watch_pending_) {
    read_after_watch_ = true;  // the watch read's handler starts the next read
    boost::system::error_code ignored;
    socket_.cancel(ignored);
    return;
  }
  do_read();
}

void Connection::send_error(int status, std::string_view message, bool close_after) {
  if (close_after) keep_alive_ = false;
  if (!response_pending_) {
    // A read error: there is no exchange; answer it as one so the write path is shared.
    ++exchange_id_;
    response_pending_ = true;
    response_started_ = response_complete_ = streaming_ = false;
  }
  phase_ = Phase::kHandling;
  send_whole(exchange_id_, server_->render_error(status, message));
}

// Half-close, then discard what the client still sends (briefly), so it reads our last
// response instead of a reset.
void Connection::linger_close() {
  if (phase_ == Phase::kClosed) return;
  lingering_ = true;
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  if (watch_pending_) {
    // The pending watch read now drains; its failure or EOF closes. Bound it in time.
    arm_read_timer(std::chrono::milliseconds(1000), true);
    return;
  }
  arm_read_timer(std::chrono::milliseconds(1000), true);
  auto self = shared_from_this();
  auto drain = std::make_shared<std::function<void()>>();
  *drain = [self, drain] {
    self->buffer_.clear();
    self->socket_.async_read_some(self->buffer_.prepare(4096),
                                  [self, drain](boost::system::error_code ec, size_t) {
                                    if (self->phase_ == Phase::kClosed) {
                                      *drain = nullptr;
                                      return;
                                    }
                                    if (ec) {
                                      *drain = nullptr;
                                      self->close();
                                      return;
                                    }
                                    (*drain)();
                                  });
  };
  (*drain)();
}

void Connection::close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  ++read_timer_gen_;
  ++write_timer_gen_;
  read_timer_.cancel();
  write_timer_.cancel();
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  if (response_pending_) {
    response_pending_ = false;
    if (auto ex = exchange_.lock()) {
      server_->num_cancelled.fetch_add(1);
      ex->mark_cancelled();
    }
    exchange_.reset();
  }
  if (counted_in_flight_) {
    counted_in_flight_ = false;
    server_->num_in_flight.fetch_sub(1);
  }
  {
    std::lock_guard<std::mutex> lock(server_->mu);
    server_->conns.erase(this);
    server_->num_open.fetch_sub(1);
    server_->limiter.release(client_);
    server_->cv.notify_all();
  }
}

// ------------------------------------------------------------------------------------------
// Server

void Server::Impl::do_accept(const std::shared_ptr<Impl>& self) {
  Strand strand = net::make_strand(ioc);
  acceptor->async_accept(
      strand, net::bind_executor(*accept_strand, [self, strand](boost::system::error_code ec,
                                                                tcp::socket socket) {
        if (self->draining.load() || !self->acceptor->is_open()) return;
        if (ec) {
          if (ec == net::error::operation_aborted) return;
          log::warn("http: accept failed: " + ec.message());
          self->accept_retry->expires_after(std::chrono::milliseconds(50));
          self->accept_retry->async_wait(net::bind_executor(
              *self->accept_strand, [self](boost::system::error_code e) {
                if (!e && !self->draining.load()) self->do_accept(self);
              }));
          return;
        }
        boost::system::error_code aec;
        auto ep = socket.remote_endpoint(aec);
        std::string client = aec ? std::string("?") : ep.address().to_string();
        ConnVerdict verdict = self->limiter.try_acquire(client);
        if (verdict != ConnVerdict::kAccepted) {
          // Small enough for the socket buffer: written without waiting, then closed.
          Response r = self->render_error(503, connection_refusal_message(verdict, client, self->opts.max_connections,
                                                                          self->opts.max_connections_per_client));
          std::string bytes = connection_refusal(r.content_type, r.body);
          socket.non_blocking(true, aec);
          net::write(socket, net::buffer(bytes), aec);
          socket.shutdown(tcp::socket::shutdown_both, aec);
          socket.close(aec);
          self->do_accept(self);
          return;
        }
        auto conn = std::make_shared<Connection>(self, strand, std::move(socket));
        conn->set_client(std::move(client));
        {
          std::lock_guard<std::mutex> lock(self->mu);
          self->conns.emplace(conn.get(), conn);
          self->num_open.fetch_add(1);
          self->num_accepted.fetch_add(1);
        }
        net::post(conn->strand(), [conn] { conn->start(); });
        self->do_accept(self);
      }));
}

Server::Server(ServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

Server::~Server() { stop(); }

Router& Server::router() { return impl_->router; }

void Server::route(Method method, std::string pattern, Handler handler) {
  impl_->router.add(method, std::move(pattern), std::move(handler));
}

uint16_t Server::port() const { return impl_->port; }
bool Server::draining() const { return impl_->draining.load(); }

ServerStats Server::stats() const {
  return ServerStats{.num_connections_open = impl_->num_open.load(),
                     .num_connections_accepted = impl_->num_accepted.load(),
                     .num_requests = impl_->num_requests.load(),
                     .num_in_flight = impl_->num_in_flight.load(),
                     .num_cancelled = impl_->num_cancelled.load(),
                     .num_refused_connections = impl_->limiter.num_refused()};
}

namespace {
Status bind_and_listen(tcp::acceptor& acc, const tcp::endpoint& ep, const std::string& where) {
  boost::system::error_code ec;
  acc.open(ep.protocol(), ec);
  if (ec) return unavailable("cannot open a socket for " + where + ": " + ec.message());
  acc.set_option(net::socket_base::reuse_address(true), ec);
  acc.bind(ep, ec);
  if (ec == net::error::address_in_use) return unavailable("address " + where + " is already in use");
  if (ec == net::error::access_denied) return unavailable("permission denied to bind " + where);
  if (ec) return unavailable("cannot bind " + where + ": " + ec.message());
  acc.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return unavailable("cannot listen on " + where + ": " + ec.message());
  return ok_status();
}
}  // namespace

int Server::release_listener() {
  Impl& s = *impl_;
  if (!s.started.load() || s.stopped.load() || s.draining.load()) return -1;
  std::promise<int> released;
  auto fd = released.get_future();
  net::post(*s.accept_strand, [&s, &released] {
    boost::system::error_code ec;
    s.accept_retry->cancel();
    int h = s.acceptor->is_open() ? static_cast<int>(s.acceptor->release(ec)) : -1;
    released.set_value(ec ? -1 : h);
  });
  return fd.get();
}

Status Server::start() {
  Impl& s = *impl_;
  if (s.started.load()) return Status(StatusCode::kInternal, "http server already started");
  std::string where = s.opts.host + ":" + std::to_string(s.opts.port);
  boost::system::error_code ec;
  tcp::resolver resolver(s.ioc);
  auto results = resolver.resolve(s.opts.host, std::to_string(s.opts.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty())
    return invalid_argument("cannot resolve listen address '" + s.opts.host + "': " + ec.message());
  tcp::endpoint ep = results.begin()->endpoint();
  tcp::acceptor acc(s.ioc);
  if (s.opts.listen_fd >= 0) {
    sockaddr_storage sa{};
    socklen_t len = sizeof(sa);
    if (::getsockname(s.opts.listen_fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
      return unavailable("cannot adopt the listening socket: not a socket");
    acc.assign(sa.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), s.opts.listen_fd, ec);
    if (ec) return unavailable("cannot adopt the listening socket: " + ec.message());
  } else {
    if (Status st = bind_and_listen(acc, ep, where); !st.ok()) return st;
  }
  s.port = acc.local_endpoint().port();
  s.acceptor.emplace(std::move(acc));
  s.accept_strand.emplace(net::make_strand(s.ioc));
  s.accept_retry.emplace(*s.accept_strand);
  s.work.emplace(net::make_work_guard(s.ioc));
  s.started.store(true);
  s.do_accept(impl_);
  int n = std::max(1, s.opts.num_io_threads);
  for (int i = 0; i < n; ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
  return ok_status();
}

void Server::drain(std::chrono::milliseconds deadline) {
  Impl& s = *impl_;
  if (!s.started.load() || s.stopped.load()) return;
  auto until = std::chrono::steady_clock::now() + deadline;
  s.draining.store(true);
  {
    std::promise<void> closed;
    auto done = closed.get_future();
    net::post(*s.accept_strand, [&s, &closed] {
      boost::system::error_code ignored;
      s.acceptor->close(ignored);
      s.accept_retry->cancel();
      closed.set_value();
    });
    done.wait();
  }
  auto for_each_conn = [&s](auto fn) {
    std::vector<std::shared_ptr<Connection>> live;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (auto& [p, w] : s.conns)
        if (auto c = w.lock()) live.push_back(std::move(c));
    }
    for (auto& c : live) net::post(c->strand(), [c, fn] { fn(*c); });
  };
  for_each_conn([](Connection& c) { c.on_drain(); });
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait_until(lock, until, [&s] { return s.conns.empty(); });
  }
  for_each_conn([](Connection& c) { c.close(); });
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait_for(lock, std::chrono::seconds(2), [&s] { return s.conns.empty(); });
  }
  s.work.reset();
  {
    std::lock_guard<std::mutex> lock(s.post_mu);
    s.stopped.store(true);
  }
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  // Run what is still queued (completions of closed sockets) so no handler keeps a Connection
  // (and with it this Impl) alive inside the io_context.
  s.ioc.restart();
  while (s.ioc.poll() > 0) {
  }
}

void Server::stop() { drain(std::chrono::milliseconds(0)); }

}  // namespace ts::http
