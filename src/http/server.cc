// Server: binding (or adopting) the listening socket, the accept loop, drain and stop (see
// server_internal.h for the threading and ownership rules).
#include "http/server_internal.h"

#include "core/thread_sched.h"

namespace ts::http {

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

std::shared_ptr<boost::asio::io_context> Server::io_context() const {
  return std::shared_ptr<boost::asio::io_context>(impl_, &impl_->ioc);
}
bool Server::draining() const { return impl_->draining.load(); }

std::string server_metrics_text(const ServerStats& s) {
  std::string m;
  auto family = [&m](const char* name, const char* type, const char* help, uint64_t v) {
    m += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         std::to_string(v) + "\n";
  };
  family("tokenserve_http_connections_open", "gauge", "Open HTTP connections.", s.num_connections_open);
  family("tokenserve_http_requests_total", "counter", "HTTP requests received.", s.num_requests);
  family("tokenserve_http_io_rt_threads", "gauge", "HTTP io threads running SCHED_RR now (--io-rt-priority).",
         s.io_rt_threads);
  family("tokenserve_http_io_rt_demotions_total", "counter",
         "HTTP io threads demoted from SCHED_RR for using more than their CPU budget or waking too often.", s.io_rt_demotions);
  family("tokenserve_http_io_rt_denied", "gauge", "1 when --io-rt-priority was refused (no permission).",
         s.io_rt_denied ? 1 : 0);
  return m;
}

ServerStats Server::stats() const {
  return ServerStats{.num_connections_open = impl_->num_open.load(),
                     .num_connections_accepted = impl_->num_accepted.load(),
                     .num_requests = impl_->num_requests.load(),
                     .num_in_flight = impl_->num_in_flight.load(),
                     .num_cancelled = impl_->num_cancelled.load(),
                     .num_refused_connections = impl_->limiter.num_refused(),
                     .io_rt_threads = impl_->rt_guard ? static_cast<uint64_t>(impl_->rt_guard->rt_threads()) : 0,
                     .io_rt_demotions = impl_->rt_guard ? impl_->rt_guard->demotions() : 0,
                     .io_rt_denied = impl_->rt_guard && impl_->rt_guard->denied()};
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
  if (s.opts.io_rt_priority > 0)
    s.rt_guard = std::make_unique<IoRtGuard>(IoRtOptions{.priority = s.opts.io_rt_priority,
                                                         .budget = s.opts.io_rt_budget,
                                                         .window = s.opts.io_rt_window,
                                                         .fair_slice = s.opts.io_thread_slice,
                                                         .max_wakeups = s.opts.io_rt_max_wakeups,
                                                         .explicit_request = s.opts.io_rt_explicit});
  for (int i = 0; i < n; ++i)
    s.threads.emplace_back([&s] {
      ts::set_current_thread_name("ts-http-io");
      if (s.opts.io_thread_slice.count() > 0) {
        if (Status st = ts::set_current_thread_slice(s.opts.io_thread_slice); !st.ok())
          log::debug("http io thread keeps the default scheduler slice: " + st.message());
      }
      if (s.rt_guard) s.rt_guard->enter();
      s.ioc.run();
    });
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
  if (s.rt_guard) s.rt_guard->stop();  // (its counters stay readable)
  // Run what is still queued (completions of closed sockets) so no handler keeps a Connection
  // (and with it this Impl) alive inside the io_context.
  s.ioc.restart();
  while (s.ioc.poll() > 0) {
  }
}

void Server::stop() { drain(std::chrono::milliseconds(0)); }

}  // namespace ts::http
