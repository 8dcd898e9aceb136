#include "router/upstream_native.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include "core/strings.h"

namespace ts::router::native {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

// One response's parser: Beast's HTTP/1.1 framing, the head and body handed to the call as
// they are parsed. A new one per response (Beast parsers are not reusable).
class Parser final : public bhttp::basic_parser<false> {
 public:
  explicit Parser(Call& c) : c_(c) {}

 private:
  void on_request_impl(bhttp::verb, boost::beast::string_view, boost::beast::string_view, int, error_code&) override {}
  void on_response_impl(int code, boost::beast::string_view, int, error_code&) override;
  void on_field_impl(bhttp::field, boost::beast::string_view name, boost::beast::string_view value, error_code&) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(boost::beast::string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view body, error_code& ec) override;
  void on_finish_impl(error_code&) override {}

  Call& c_;
};

struct Conn {
  Conn(const Strand& s, std::string k) : sock(s), key(std::move(k)) {}
  tcp::socket sock;
  std::string key;                   // "ip:port"
  std::shared_ptr<Call> call;        // the call using it (null while idle or connecting-after-cancel)
  std::unique_ptr<char[]> buf;       // read buffer: bytes [begin, end) not parsed yet
  size_t cap = 0, begin = 0, end = 0;
  bool open = true, reading = false, connected = false;
  Clock::time_point idle_since;
};

struct Call {
  UpstreamClient::CallId id = 0;
  net::Url url;
  net::HttpRequest req;
  net::HttpCallOptions opts;
  net::HttpHandlers handlers;
  UpstreamClient::Done done;
  std::string key;       // "ip:port"
  std::string head_out;  // the request line and headers, serialized
  std::shared_ptr<Conn> conn;
  std::optional<Parser> parser;
  net::HttpResponseHead head;
  net::CallStage stage = net::CallStage::kConnecting;
  Clock::time_point started, last_byte;
  uint64_t received = 0;  // response bytes read for this call (on its current connection)
  bool head_delivered = false, stopped = false, reused = false, retried = false, ended = false;
};

void Parser::on_response_impl(int code, boost::beast::string_view, int, error_code&) {
  c_.head = net::HttpResponseHead{};
  c_.head.status = code;
}

void Parser::on_field_impl(bhttp::field, boost::beast::string_view name, boost::beast::string_view value, error_code&) {
  c_.head.headers.emplace_back(std::string(name.data(), name.size()), std::string(value.data(), value.size()));
}

void Parser::on_header_impl(error_code& ec) {
  if (c_.head.status < 200) return;  // an interim response: skipped
  c_.head_delivered = true;
  c_.stage = net::CallStage::kReadingBody;
  if (c_.handlers.on_head && !c_.handlers.on_head(c_.head)) {
    c_.stopped = true;
    ec = asio::error::operation_aborted;
  }
}

std::size_t Parser::on_body_impl(boost::beast::string_view body, error_code& ec) {
  if (!body.empty() && c_.handlers.on_body && !c_.handlers.on_body(std::string_view(body.data(), body.size()))) {
    c_.stopped = true;
    ec = asio::error::operation_aborted;
  }
  return body.size();
}

std::size_t Parser::on_chunk_body_impl(std::uint64_t, boost::beast::string_view body, error_code& ec) {
  return on_body_impl(body, ec);
}

namespace {

constexpr size_t kReadChunk = 16u << 10;      // read buffer, grown for a long head
constexpr size_t kMaxHead = 256u << 10;       // response head limit

std::string where(const Call& c) { return c.url.origin(); }

// "a.b.c.d" or an IPv6 literal.
std::optional<asio::ip::address> ip_of(const std::string& host) {
  error_code ec;
  asio::ip::address a = asio::ip::make_address(host, ec);
  if (ec) return std::nullopt;
  return a;
}

void serialize_head(Call& c) {
  std::string& o = c.head_out;
  const std::string target = c.url.base_path + c.req.path;
  o.reserve(64 + target.size() + c.req.headers.size() * 48);
  o.append(c.req.method).append(" ").append(target.empty() ? "/" : target).append(" HTTP/1.1\r\nHost: ");
  std::string origin = c.url.origin();  // "http://host:port"
  o.append(std::string_view(origin).substr(origin.find("://") + 3)).append("\r\n");
  for (const auto& [k, v] : c.req.headers) {
    if (ascii_iequals(k, "host") || ascii_iequals(k, "content-length") || ascii_iequals(k, "connection")) continue;
    o.append(k).append(": ").append(v).append("\r\n");
  }
  if (!c.req.body.empty() || (c.req.method != "GET" && c.req.method != "HEAD"))
    o.append("Content-Length: ").append(std::to_string(c.req.body.size())).append("\r\n");
  o.append("\r\n");
}

}  // namespace

Transport::Transport(const Strand& strand) : strand_(strand), sweep_timer_(strand) {}

Transport::~Transport() {
  closing_ = true;
  for (auto& [id, c] : calls_) {
    // What the handlers and `done` hold goes now, even where a queued completion (never run
    // again) keeps the call itself alive until the io_context is destroyed.
    c->handlers = {};
    c->done = nullptr;
    if (c->conn) {
      c->conn->call.reset();
      error_code ec;
      c->conn->sock.close(ec);
      c->conn->open = false;
    }
    c->conn.reset();
  }
  calls_.clear();
  for (auto& [key, list] : idle_)
    for (auto& conn : list) {
      error_code ec;
      conn->sock.close(ec);
      conn->open = false;
    }
  idle_.clear();
  error_code ec;
  sweep_timer_.cancel(ec);
}

bool Transport::eligible(const net::Url& url, const net::HttpCallOptions& opts) {
  return !url.tls && opts.direct && ip_of(url.host).has_value();
}

Transport::Stats Transport::stats() const {
  return Stats{.connects = connects_.load(), .reuses = reuses_.load(), .retries = retries_.load(), .idle = idle_count_.load()};
}

bool Transport::cancel(UpstreamClient::CallId id) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return false;
  std::shared_ptr<Call> c = it->second;
  finish(c, Status(StatusCode::kCancelled, "cancelled"), false);
  return true;
}

std::shared_ptr<Call> Transport::prepare(UpstreamClient::CallId id, net::Url url, net::HttpRequest req,
                                         net::HttpCallOptions opts, net::HttpHandlers handlers,
                                         UpstreamClient::Done done) {
  auto c = std::make_shared<Call>();
  c->id = id;
  c->url = std::move(url);
  c->req = std::move(req);
  c->opts = std::move(opts);
  c->handlers = std::move(handlers);
  c->done = std::move(done);
  c->key = c->url.host + ":" + std::to_string(c->url.port);
  serialize_head(*c);
  return c;
}

void Transport::start(std::shared_ptr<Call> c) {
  const UpstreamClient::CallId id = c->id;
  c->started = c->last_byte = Clock::now();
  calls_.emplace(id, c);
  arm_sweep();
  if (c->started >= c->opts.deadline)
    return finish(c, Status(StatusCode::kDeadlineExceeded, "deadline exceeded (" + where(*c) + ")"), false);
  if (auto conn = take_idle(c->key)) {
    c->conn = conn;
    conn->call = c;
    c->reused = true;
    reuses_.fetch_add(1);
    send(c);
    return;
  }
  connect(c);
}

std::shared_ptr<Conn> Transport::take_idle(const std::string& key) {
  auto it = idle_.find(key);
  if (it == idle_.end()) return nullptr;
  auto& list = it->second;
  const auto now = Clock::now();
  while (!list.empty()) {
    std::shared_ptr<Conn> conn = std::move(list.back());
    list.pop_back();
    idle_count_.fetch_sub(1);
    if (conn->open && now - conn->idle_since < kMaxIdleAge) return conn;
    close(conn);
  }
  return nullptr;
}

void Transport::connect(const std::shared_ptr<Call>& c) {
  c->stage = net::CallStage::kConnecting;
  c->received = 0;
  auto conn = std::make_shared<Conn>(strand_, c->key);
  c->conn = conn;
  conn->call = c;
  connects_.fetch_add(1);
  tcp::endpoint ep(*ip_of(c->url.host), c->url.port);
  conn->sock.async_connect(ep, asio::bind_executor(strand_, [this, conn](const error_code& ec) {
    if (closing_ || !conn->open) return;
    std::shared_ptr<Call> c = conn->call;
    if (!c) {  // the call ended (cancelled, timed out) while connecting
      close(conn);
      return;
    }
    if (ec) {
      finish(c, unavailable(where(*c) + ": cannot connect: " + ec.message()), false);
      return;
    }
    conn->connected = true;
    error_code e2;
    conn->sock.set_option(tcp::no_delay(true), e2);
    conn->sock.non_blocking(true, e2);
    conn->cap = kReadChunk;
    conn->buf = std::make_unique<char[]>(conn->cap);
    read(conn);
    send(c);
  }));
}

void Transport::send(const std::shared_ptr<Call>& c) {
  c->stage = net::CallStage::kSending;
  std::shared_ptr<Conn> conn = c->conn;
  std::array<asio::const_buffer, 2> bufs = {asio::buffer(c->head_out), asio::buffer(c->req.body)};
  const size_t total = c->head_out.size() + c->req.body.size();
  // The socket is non-blocking: most requests go out in this one write, with no completion hop.
  error_code ec;
  size_t n = conn->sock.write_some(bufs, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    ec.clear();
    n = 0;
  }
  if (ec) return conn_failed(c, "send: " + ec.message());
  if (n == total) {
    c->stage = net::CallStage::kAwaitingHead;
    return;
  }
  // The rest when the socket takes it (a large body).
  const size_t hs = c->head_out.size();
  std::array<asio::const_buffer, 2> rest = {
      n < hs ? asio::buffer(c->head_out.data() + n, hs - n) : asio::const_buffer(),
      n < hs ? asio::buffer(c->req.body) : asio::buffer(c->req.body.data() + (n - hs), c->req.body.size() - (n - hs))};
  asio::async_write(conn->sock, rest, asio::bind_executor(strand_, [this, conn, c](const error_code& ec, size_t) {
                      if (closing_ || c->ended || conn->call != c) return;
                      if (ec) return conn_failed(c, "send: " + ec.message());
                      if (c->stage == net::CallStage::kSending) c->stage = net::CallStage::kAwaitingHead;
                    }));
}

void Transport::read(const std::shared_ptr<Conn>& conn) {
  if (conn->reading || !conn->open) return;
  if (conn->end == conn->cap) {  // a head longer than the buffer (begin is 0 here: see parse)
    conn->cap = std::min(conn->cap * 2, kMaxHead + kReadChunk);
    auto bigger = std::make_unique<char[]>(conn->cap);
    std::memcpy(bigger.get(), conn->buf.get() + conn->begin, conn->end - conn->begin);
    conn->end -= conn->begin;
    conn->begin = 0;
    conn->buf = std::move(bigger);
  }
  conn->reading = true;
  conn->sock.async_read_some(asio::buffer(conn->buf.get() + conn->end, conn->cap - conn->end),
                             asio::bind_executor(strand_, [this, conn](const error_code& ec, size_t n) {
                               if (closing_) return;
                               conn->reading = false;
                               on_read(conn, ec, n);
                             }));
}

void Transport::on_read(const std::shared_ptr<Conn>& conn, const error_code& ec, size_t n) {
  if (!conn->open) return;
  std::shared_ptr<Call> c = conn->call;
  if (!c) {  // idle: the server closed it, or sent what nobody asked for
    close(conn);
    return;
  }
  if (ec) {
    if (ec == asio::error::eof && c->parser && c->parser->is_header_done() && c->parser->need_eof()) {
      error_code pe;
      c->parser->put_eof(pe);  // a body delimited by the connection's end
      if (!pe) return finish(c, c->head, false);
    }
    return conn_failed(c, ec == asio::error::eof ? std::string("connection closed before the response ended")
                                                 : "read: " + ec.message());
  }
  conn->end += n;
  c->received += n;
  c->last_byte = Clock::now();
  parse(conn);
  if (conn->open && !conn->reading) read(conn);
}

void Transport::parse(const std::shared_ptr<Conn>& conn) {
  while (conn->open && conn->call && conn->begin < conn->end) {
    std::shared_ptr<Call> c = conn->call;
    if (!c->parser) {
      c->parser.emplace(*c);
      c->parser->eager(true);
      c->parser->header_limit(static_cast<std::uint32_t>(kMaxHead));
      c->parser->body_limit(std::numeric_limits<std::uint64_t>::max());  // (boost::none trips a Boost 1.74 bug: every body over "the limit")
      if (c->req.method == "HEAD") c->parser->skip(true);
    }
    error_code ec;
    const size_t used = c->parser->put(asio::buffer(conn->buf.get() + conn->begin, conn->end - conn->begin), ec);
    conn->begin += used;
    if (c->stopped) return finish(c, c->head, false);  // a handler's stop: not an error
    if (ec == bhttp::error::need_more) {
      if (conn->begin == conn->end) conn->begin = conn->end = 0;
      else if (conn->begin > 0 && conn->end == conn->cap) {  // keep the partial head at the front
        std::memmove(conn->buf.get(), conn->buf.get() + conn->begin, conn->end - conn->begin);
        conn->end -= conn->begin;
        conn->begin = 0;
      }
      if (conn->end == conn->cap && conn->cap >= kMaxHead + kReadChunk)
        return finish(c, Status(StatusCode::kDataLoss, "malformed response from " + where(*c) + ": head too long"), false);
      return;
    }
    if (ec) return finish(c, Status(StatusCode::kDataLoss, "malformed response from " + where(*c) + ": " + ec.message()), false);
    if (!c->parser->is_done()) continue;
    if (c->head.status < 200) {  // an interim response: the final one follows
      c->parser.reset();
      continue;
    }
    const bool keep = c->parser->keep_alive() && conn->begin == conn->end;
    if (conn->begin == conn->end) conn->begin = conn->end = 0;
    return finish(c, c->head, keep);
  }
  if (conn->begin == conn->end) conn->begin = conn->end = 0;
}

void Transport::conn_failed(const std::shared_ptr<Call>& c, const std::string& what) {
  std::shared_ptr<Conn> conn = c->conn;
  // The server closed a kept-alive connection as this request went out: nothing of the request
  // was answered, so it goes once more on a fresh connection.
  if (c->reused && !c->retried && c->received == 0 && !c->head_delivered) {
    c->retried = true;
    c->reused = false;
    retries_.fetch_add(1);
    if (conn) {
      conn->call.reset();
      close(conn);
    }
    c->conn.reset();
    connect(c);
    return;
  }
  finish(c, unavailable(where(*c) + ": " + what), false);
}

void Transport::finish(const std::shared_ptr<Call>& c, Result<net::HttpResponseHead> result, bool keep) {
  if (c->ended) return;
  c->ended = true;
  calls_.erase(c->id);
  if (std::shared_ptr<Conn> conn = std::move(c->conn)) {
    conn->call.reset();
    if (keep && conn->open) release(conn);
    else close(conn);
  }
  c->parser.reset();
  UpstreamEnd end{.result = std::move(result), .stage = c->stage};
  UpstreamClient::Done done = std::move(c->done);
  c->handlers = {};  // what the handlers hold goes before `done` runs on
  if (done) done(std::move(end));
}

void Transport::close(const std::shared_ptr<Conn>& conn) {
  if (!conn->open) return;
  conn->open = false;
  error_code ec;
  conn->sock.close(ec);  // a pending read ends as aborted (and is ignored: open is false)
  auto it = idle_.find(conn->key);
  if (it != idle_.end()) {
    auto& list = it->second;
    const size_t before = list.size();
    list.erase(std::remove(list.begin(), list.end(), conn), list.end());
    idle_count_.fetch_sub(before - list.size());
  }
}

void Transport::release(const std::shared_ptr<Conn>& conn) {
  auto& list = idle_[conn->key];
  if (list.size() >= kMaxIdlePerOrigin) {
    close(conn);
    return;
  }
  conn->idle_since = Clock::now();
  list.push_back(conn);
  idle_count_.fetch_add(1);
  read(conn);  // watched while idle (usually still pending from the call)
}

void Transport::arm_sweep() {
  if (sweep_armed_) return;
  sweep_armed_ = true;
  sweep_timer_.expires_after(kSweep);
  sweep_timer_.async_wait(asio::bind_executor(strand_, [this](const error_code& ec) {
    if (ec || closing_) return;
    sweep_armed_ = false;
    sweep();
  }));
}

void Transport::sweep() {
  const auto now = Clock::now();
  std::vector<std::pair<std::shared_ptr<Call>, Status>> late;
  for (auto& [id, c] : calls_) {
    if (now >= c->opts.deadline) {
      late.emplace_back(c, Status(StatusCode::kDeadlineExceeded, "deadline exceeded (" + where(*c) + ")"));
    } else if (c->stage == net::CallStage::kConnecting && c->opts.connect_timeout.count() > 0 &&
               now >= c->started + c->opts.connect_timeout) {
      late.emplace_back(c, Status(StatusCode::kDeadlineExceeded,
                                  "no connection within " + std::to_string(c->opts.connect_timeout.count()) +
                                      " ms (" + where(*c) + ")"));
    } else if (c->opts.idle_timeout.count() > 0 && now >= c->last_byte + c->opts.idle_timeout) {
      late.emplace_back(c, Status(StatusCode::kDeadlineExceeded, "no response byte for " +
                                                                     std::to_string(c->opts.idle_timeout.count()) +
                                                                     " ms (" + where(*c) + ")"));
    }
  }
  for (auto& [c, st] : late) finish(c, std::move(st), false);
  if (!calls_.empty()) arm_sweep();
}

}  // namespace ts::router::native
