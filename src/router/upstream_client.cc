#include "router/upstream_client.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <vector>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "core/log.h"
#include "net/curl_transfer.h"
#include "router/upstream_native.h"

namespace ts::router {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using Strand = asio::strand<asio::io_context::executor_type>;

namespace {

// One socket libcurl asked to watch. Completion handlers hold it (shared) and check `alive`:
// libcurl may stop watching a socket (and close it, and the number come back for another
// socket) while a wait is still queued.
struct Watch {
  Watch(const Strand& s, int fd_) : fd(fd_), desc(s) {}
  int fd;
  asio::posix::stream_descriptor desc;
  int want = 0;  // CURL_POLL_IN | CURL_POLL_OUT bits
  bool reading = false, writing = false, alive = true;
};

// One transfer. Heap-allocated: libcurl and the transfer hold pointers into it.
struct Call {
  explicit Call(const Strand& s) : timer(s) {}
  UpstreamClient::CallId id = 0;
  CURL* easy = nullptr;
  net::Url url;
  net::HttpRequest req;
  net::HttpCallOptions opts;
  net::HttpHandlers handlers;
  UpstreamClient::Done done;
  net::CurlTransfer transfer;
  asio::steady_timer timer;  // deadline and idle timeout
};

}  // namespace

struct UpstreamClient::Impl {
  explicit Impl(std::shared_ptr<asio::io_context> io) : ioc(std::move(io)), strand(asio::make_strand(*ioc)), curl_timer(strand) {}
  ~Impl();

  void begin(std::shared_ptr<Call> call);
  void action(curl_socket_t fd, int events);
  void drain_done();
  void complete(CallId id, CURLcode rc, const Status& stop_reason);
  void arm_call_timer(Call& c);
  void on_call_timer(CallId id);
  void arm(const std::shared_ptr<Watch>& w);
  void unwatch(int fd);

  static int on_socket(CURL* easy, curl_socket_t s, int what, void* userp, void* socketp);
  static int on_timer(CURLM* multi, long timeout_ms, void* userp);
  void arm_curl_timer(Clock::time_point at);  // (strand) one wait on curl_timer, due at `at`
  static int on_close_socket(void* clientp, curl_socket_t s);

  // Declared first, destroyed last: every io object below is bound to it.
  std::shared_ptr<asio::io_context> ioc;
  Strand strand;
  asio::steady_timer curl_timer;  // libcurl's own timeouts (CURLMOPT_TIMERFUNCTION)
  bool curl_timer_armed = false;  // a wait is pending on curl_timer, due at curl_timer_at
  Clock::time_point curl_timer_at;
  // The deadline libcurl asked for last (unset: none). It can be later than curl_timer_at: an
  // earlier wait is kept rather than re-armed, and after it fires libcurl does not repeat an
  // unchanged deadline, so the timer is re-armed for this one then (on_curl_timer).
  std::optional<Clock::time_point> curl_want_at;
  CURLM* multi = nullptr;
  std::unordered_map<int, std::shared_ptr<Watch>> watches;
  std::unordered_map<CallId, std::shared_ptr<Call>> calls;
  std::vector<CURL*> idle_easy;  // handles kept for reuse (their set-up allocations stay warm)
  std::atomic<CallId> next_id{1};
  std::atomic<size_t> num_active{0};
  std::unique_ptr<native::Transport> native;  // null = every call through libcurl
};

UpstreamClient::Impl::~Impl() {
  native.reset();
  for (auto& [id, c] : calls) {
    curl_multi_remove_handle(multi, c->easy);
    curl_easy_cleanup(c->easy);
  }
  calls.clear();
  for (CURL* e : idle_easy) curl_easy_cleanup(e);
  idle_easy.clear();
  if (multi) curl_multi_cleanup(multi);  // closes cached connections (through on_close_socket)
  for (auto& [fd, w] : watches) {
    w->alive = false;
    w->desc.release();  // libcurl owns and closes its sockets
  }
  watches.clear();
}

int UpstreamClient::Impl::on_socket(CURL*, curl_socket_t s, int what, void* userp, void*) {
  Impl& self = *static_cast<Impl*>(userp);
  if (what == CURL_POLL_REMOVE) {
    // Kept registered (a socket back in the connection cache is watched again by its next
    // transfer: no reactor registration per request); only the interest goes. A wait still
    // queued completes once and is ignored. The close callback deregisters it.
    if (auto it = self.watches.find(s); it != self.watches.end()) it->second->want = 0;
    return 0;
  }
  auto& w = self.watches[s];
  if (!w) {
    w = std::make_shared<Watch>(self.strand, s);
    boost::system::error_code ec;
    w->desc.assign(s, ec);
    if (ec) {
      log::warn("gateway upstream client: cannot watch a socket: " + ec.message());
      self.watches.erase(s);
      return -1;  // libcurl fails the transfer
    }
  }
  w->want = what;
  self.arm(w);
  return 0;
}

void UpstreamClient::Impl::unwatch(int fd) {
  auto it = watches.find(fd);
  if (it == watches.end()) return;
  it->second->alive = false;
  it->second->desc.release();  // deregisters from the reactor; queued waits end as aborted
  watches.erase(it);
}

int UpstreamClient::Impl::on_close_socket(void* clientp, curl_socket_t s) {
  // Deregistered before the close, so the reactor never sees a number reused by another socket.
  static_cast<Impl*>(clientp)->unwatch(s);
  return ::close(s);
}

int UpstreamClient::Impl::on_timer(CURLM*, long timeout_ms, void* userp) {
  // libcurl asks for one timer, replaced at each call (several times per transfer). Firing
  // early is harmless (socket_action finds nothing due and asks again), so a timer already
  // armed for an earlier time is kept, and "no timer" (-1) leaves it be: each re-arm of the
  // earliest timer costs the reactor a timerfd_settime, which per request was a measurable share
  // of the io thread's system calls. 0 ("now") is a post, not a timer.
  Impl& self = *static_cast<Impl*>(userp);
  if (timeout_ms < 0) {
    self.curl_want_at.reset();
    return 0;
  }
  if (timeout_ms == 0) {
    self.curl_want_at.reset();
    asio::post(self.strand, [p = &self] { p->action(CURL_SOCKET_TIMEOUT, 0); });
    return 0;
  }
  const auto at = Clock::now() + std::chrono::milliseconds(timeout_ms);
  self.curl_want_at = at;
  if (self.curl_timer_armed && self.curl_timer_at <= at) return 0;
  self.arm_curl_timer(at);
  return 0;
}

void UpstreamClient::Impl::arm_curl_timer(Clock::time_point at) {
  curl_timer_armed = true;
  curl_timer_at = at;
  curl_timer.expires_at(at);
  curl_timer.async_wait(asio::bind_executor(strand, [p = this](boost::system::error_code ec) {
    if (ec) return;  // replaced by an earlier one (that wait is pending) or the client is going
    p->curl_timer_armed = false;
    p->action(CURL_SOCKET_TIMEOUT, 0);
    // Fired early for a deadline libcurl still holds (it asked for a later one meanwhile and
    // will not ask again while that stays its next): wait for that one now.
    if (!p->curl_timer_armed && p->curl_want_at && *p->curl_want_at > Clock::now()) p->arm_curl_timer(*p->curl_want_at);
  }));
}

void UpstreamClient::Impl::arm(const std::shared_ptr<Watch>& w) {
  if ((w->want & CURL_POLL_IN) && !w->reading) {
    w->reading = true;
    w->desc.async_wait(asio::posix::descriptor_base::wait_read,
                       asio::bind_executor(strand, [p = this, w](boost::system::error_code ec) {
                         w->reading = false;
                         if (ec || !w->alive || !(w->want & CURL_POLL_IN)) return;
                         p->action(w->fd, CURL_CSELECT_IN);
                         if (w->alive) p->arm(w);
                       }));
  }
  if ((w->want & CURL_POLL_OUT) && !w->writing) {
    w->writing = true;
    w->desc.async_wait(asio::posix::descriptor_base::wait_write,
                       asio::bind_executor(strand, [p = this, w](boost::system::error_code ec) {
                         w->writing = false;
                         if (ec || !w->alive || !(w->want & CURL_POLL_OUT)) return;
                         p->action(w->fd, CURL_CSELECT_OUT);
                         if (w->alive) p->arm(w);
                       }));
  }
}

void UpstreamClient::Impl::action(curl_socket_t fd, int events) {
  int running = 0;
  CURLMcode mc = curl_multi_socket_action(multi, fd, events, &running);
  if (mc != CURLM_OK) log::warn(std::string("gateway upstream client: libcurl: ") + curl_multi_strerror(mc));
  drain_done();
}

void UpstreamClient::Impl::drain_done() {
  int queued = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
    if (msg->msg != CURLMSG_DONE) continue;
    Call* c = nullptr;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &c);
    const CURLcode rc = msg->data.result;  // msg dies with the handle's removal
    if (c) complete(c->id, rc, Status());
  }
}

void UpstreamClient::Impl::complete(CallId id, CURLcode rc, const Status& stop_reason) {
  auto it = calls.find(id);
  if (it == calls.end()) return;
  std::shared_ptr<Call> c = std::move(it->second);
  calls.erase(it);
  num_active.fetch_sub(1);
  UpstreamEnd end;
  c->timer.cancel();
  if (c->easy) {
    curl_multi_remove_handle(multi, c->easy);  // an unfinished transfer's connection is closed
    end.result = c->transfer.finish(c->easy, rc, stop_reason, &end.stage);
    constexpr size_t kIdleHandles = 64;
    if (idle_easy.size() < kIdleHandles) idle_easy.push_back(c->easy);
    else curl_easy_cleanup(c->easy);
    c->easy = nullptr;
  } else {  // ended before it had a handle
    end.result = stop_reason;
  }
  Done done = std::move(c->done);
  c.reset();  // the handlers (and what they hold) go before `done` runs on
  if (done) done(std::move(end));
}

void UpstreamClient::Impl::arm_call_timer(Call& c) {
  Clock::time_point at = c.opts.deadline;
  if (c.opts.idle_timeout.count() > 0) at = std::min(at, c.transfer.last_byte() + c.opts.idle_timeout);
  c.timer.expires_at(at);
  c.timer.async_wait(asio::bind_executor(strand, [p = this, id = c.id](boost::system::error_code ec) {
    if (!ec) p->on_call_timer(id);
  }));
}

void UpstreamClient::Impl::on_call_timer(CallId id) {
  auto it = calls.find(id);
  if (it == calls.end()) return;
  Call& c = *it->second;
  const auto now = Clock::now();
  if (now >= c.opts.deadline)
    return complete(id, CURLE_OK, Status(StatusCode::kDeadlineExceeded, "deadline exceeded (" + c.url.origin() + ")"));
  if (c.opts.idle_timeout.count() > 0 && now >= c.transfer.last_byte() + c.opts.idle_timeout)
    return complete(id, CURLE_OK,
                    Status(StatusCode::kDeadlineExceeded, "no response byte for " + std::to_string(c.opts.idle_timeout.count()) +
                                                              " ms (" + c.url.origin() + ")"));
  arm_call_timer(c);  // bytes came meanwhile: the idle clock restarted
}

void UpstreamClient::Impl::begin(std::shared_ptr<Call> owned) {
  Call& c = *owned;
  const CallId id = c.id;
  calls.emplace(id, std::move(owned));
  num_active.fetch_add(1);
  if (Clock::now() >= c.opts.deadline)
    return complete(id, CURLE_OK, Status(StatusCode::kDeadlineExceeded, "deadline exceeded (" + c.url.origin() + ")"));
  if (!idle_easy.empty()) {
    c.easy = idle_easy.back();
    idle_easy.pop_back();
  } else {
    c.easy = curl_easy_init();
    if (!c.easy) return complete(id, CURLE_OUT_OF_MEMORY, Status(StatusCode::kInternal, "libcurl could not create a handle"));
  }
  c.transfer.setup(c.easy, c.url, c.req, c.opts, c.handlers, /*reuse=*/true);
  curl_easy_setopt(c.easy, CURLOPT_PRIVATE, &c);
  curl_easy_setopt(c.easy, CURLOPT_CLOSESOCKETFUNCTION, &Impl::on_close_socket);
  curl_easy_setopt(c.easy, CURLOPT_CLOSESOCKETDATA, this);
  arm_call_timer(c);
  if (curl_multi_add_handle(multi, c.easy) != CURLM_OK)
    return complete(id, CURLE_OK, Status(StatusCode::kInternal, "libcurl could not start the transfer"));
  action(CURL_SOCKET_TIMEOUT, 0);  // connect / send now rather than on the next timer turn
}

UpstreamClient::UpstreamClient(std::shared_ptr<asio::io_context> ioc, UpstreamClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(ioc))) {
  net::curl_init();
  Impl& s = *impl_;
  const char* force = std::getenv("TOKENSERVE_UPSTREAM_TRANSPORT");
  if (options.native && !(force && std::strcmp(force, "curl") == 0)) s.native = std::make_unique<native::Transport>(s.strand);
  s.multi = curl_multi_init();
  if (!s.multi) return;  // start() then fails every call
  curl_multi_setopt(s.multi, CURLMOPT_SOCKETFUNCTION, &Impl::on_socket);
  curl_multi_setopt(s.multi, CURLMOPT_SOCKETDATA, &s);
  curl_multi_setopt(s.multi, CURLMOPT_TIMERFUNCTION, &Impl::on_timer);
  curl_multi_setopt(s.multi, CURLMOPT_TIMERDATA, &s);
  // Idle keep-alive connections kept for reuse (libcurl's default follows the number of handles
  // added, which falls between bursts).
  curl_multi_setopt(s.multi, CURLMOPT_MAXCONNECTS, 512L);
}

UpstreamClient::~UpstreamClient() = default;

UpstreamClient::CallId UpstreamClient::start(net::Url url, net::HttpRequest req, net::HttpCallOptions opts,
                                             net::HttpHandlers handlers, Done done) {
  Impl& s = *impl_;
  const CallId id = s.next_id.fetch_add(1);
  opts.cancel = nullptr;
  opts.stage = nullptr;
  if (s.native && native::Transport::eligible(url, opts)) {
    // Prepared here (the request head serialized on the caller's thread), started on the strand.
    Impl* p = impl_.get();
    auto nc = native::Transport::prepare(id, std::move(url), std::move(req), std::move(opts), std::move(handlers),
                                         [p, done = std::move(done)](UpstreamEnd end) mutable {
                                           p->num_active.fetch_sub(1);
                                           if (done) done(std::move(end));
                                         });
    asio::post(s.strand, [p, nc = std::move(nc)]() mutable {
      p->num_active.fetch_add(1);
      p->native->start(std::move(nc));
    });
    return id;
  }
  auto c = std::make_shared<Call>(s.strand);
  c->id = id;
  c->url = std::move(url);
  c->req = std::move(req);
  c->opts = std::move(opts);
  c->handlers = std::move(handlers);
  c->done = std::move(done);
  if (!s.multi) {
    asio::post(s.strand, [d = std::move(c->done)]() mutable {
      d(UpstreamEnd{.result = Status(StatusCode::kInternal, "libcurl could not create a handle")});
    });
    return id;
  }
  asio::post(s.strand, [p = impl_.get(), c = std::move(c)]() mutable { p->begin(std::move(c)); });
  return id;
}

void UpstreamClient::cancel(CallId id) {
  if (id == 0) return;
  asio::post(impl_->strand, [p = impl_.get(), id] {
    if (p->native && p->native->cancel(id)) return;
    p->complete(id, CURLE_OK, Status(StatusCode::kCancelled, "cancelled"));
  });
}

UpstreamClient::NativeStats UpstreamClient::native_stats() const {
  if (!impl_->native) return {};
  const native::Transport::Stats s = impl_->native->stats();
  return NativeStats{.connects = s.connects, .reuses = s.reuses, .retries = s.retries, .idle = s.idle};
}

void UpstreamClient::post(std::function<void()> task) { asio::post(impl_->strand, std::move(task)); }

size_t UpstreamClient::num_active() const { return impl_->num_active.load(); }

}  // namespace ts::router
