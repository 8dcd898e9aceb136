// Connection: reading requests, dispatching them to handlers and writing responses (see
// server_internal.h for the threading and ownership rules).
#include "http/server_internal.h"

namespace ts::http {

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
    if (ec && ec != net::error::operation_aborted) {
      // EOF or a reset: the client went away, or sent all it will. It must end here even when the
      // response just finished and the next read was asked for (read_after_watch_): the reactor
      // reports a peer's EOF once, so a read started after this one would wait for an event that
      // never comes and hold the connection open until the idle timeout (a client that closed
      // right after reading its response raced the cancel in response_done). Requests already
      // received (pipelined before the EOF) are still answered, then the connection closes.
      if (self->read_after_watch_ && self->buffer_.size() > 0) {
        self->read_after_watch_ = false;
        self->keep_alive_ = false;
        self->do_read();
        return;
      }
      self->close();  // cancels the exchange if its response is still pending
      return;
    }
    if (self->read_after_watch_) {
      self->read_after_watch_ = false;
      self->do_read();
      return;
    }
    if (ec == net::error::operation_aborted) return;
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
  if (writing_ || write_posted_) return;  // the write in flight or the one posted takes these bytes too
  if (complete && !streaming_) {
    do_write();  // a whole response: nothing else can follow it in this turn
    return;
  }
  // A stream's head, event or end: written from a handler posted behind the ones already queued,
  // so what the same turn queues next (the first event right after the head, the last chunk right
  // after the last event, as a relayed upstream answer read in one go gives them) leaves in the
  // same send: one syscall here and one wake-up of the client instead of two or three. The post
  // is from the io thread onto its own queue (no wake-up), so an event is not held back.
  write_posted_ = true;
  net::post(strand_, [self = shared_from_this()] {
    self->write_posted_ = false;
    if (!self->writing_) self->do_write();
  });
}

void Connection::do_write() {
  if (phase_ == Phase::kClosed) return;
  // First a non-blocking send of what is queued, from this handler: a client that keeps up
  // (the usual case, an SSE event or a small answer) takes it all at once, and then no write
  // timer is armed and cancelled and no async write's completion is posted. Each of those was
  // a handler that woke the other io thread: a streamed token woke the io threads ~2.3 times
  // (SmolLM2 shape, c32), and every wake-up of a real-time io thread preempts compute. Only
  // what the socket does not take now goes the async way, under the write timeout.
  while (!out_pending_.empty()) {
    boost::system::error_code ec;
    const size_t n = socket_.write_some(net::buffer(out_pending_), ec);
    if (ec == net::error::would_block || ec == net::error::try_again) break;
    if (ec) {
      close();
      return;
    }
    if (n == 0) break;
    out_pending_.erase(0, n);
  }
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

}  // namespace ts::http
