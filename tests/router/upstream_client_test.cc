#include "router/upstream_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "http/server.h"

namespace ts::router {
namespace {

using namespace std::chrono_literals;

// The upstream: the project's own HTTP server on an ephemeral loopback port.
//   GET /json    200 with a Content-Length body
//   GET /stream  a chunked body, "a" then "b" 150 ms later
//   GET /hold    never answered until the test ends (a silent upstream)
class Upstream {
 public:
  Upstream() : server_(http::ServerOptions{.host = "127.0.0.1", .port = 0, .num_io_threads = 1}) {
    server_.route(http::Method::kGet, "/json", [](const http::ExchangePtr& ex) {
      http::Response r;
      r.content_type = "application/json";
      r.body = R"({"ok":true})";
      r.set_header("x-a", "b");
      ex->respond(std::move(r));
    });
    server_.route(http::Method::kGet, "/stream", [this](const http::ExchangePtr& ex) {
      ex->start_stream(200, "text/event-stream");
      ex->write("a");
      std::lock_guard lock(mu_);
      later_.emplace_back(std::async(std::launch::async, [ex] {
        std::this_thread::sleep_for(150ms);
        ex->write("b");
        ex->finish();
      }));
    });
    server_.route(http::Method::kGet, "/hold", [this](const http::ExchangePtr& ex) {
      std::lock_guard lock(mu_);
      held_.push_back(ex);
    });
    EXPECT_TRUE(server_.start().ok());
  }
  ~Upstream() {
    for (auto& f : later_) f.wait();
    {
      std::lock_guard lock(mu_);
      held_.clear();
    }
    server_.stop();
  }
  net::Url url() const { return net::Url{.host = "127.0.0.1", .port = server_.port()}; }
  uint64_t connections() const { return server_.stats().num_connections_accepted; }

 private:
  http::Server server_;
  std::mutex mu_;
  std::vector<http::ExchangePtr> held_;
  std::vector<std::future<void>> later_;
};

// An io_context with one thread, as the gateway's server runs; the client is destroyed after it
// stopped (the client's contract).
class Loop {
 public:
  explicit Loop(bool native = true)
      : ioc_(std::make_shared<boost::asio::io_context>()), work_(boost::asio::make_work_guard(*ioc_)),
        client_(std::make_unique<UpstreamClient>(ioc_, UpstreamClientOptions{.native = native})),
        thread_([this] { ioc_->run(); }) {}
  ~Loop() {
    work_.reset();
    ioc_->stop();
    thread_.join();
    client_.reset();
  }
  UpstreamClient& client() { return *client_; }

 private:
  std::shared_ptr<boost::asio::io_context> ioc_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<UpstreamClient> client_;
  std::thread thread_;
};

net::HttpCallOptions soon() { return {.deadline = std::chrono::steady_clock::now() + 10s}; }

// Every test below runs on both transports behind the one client: libcurl (the call not
// `direct`, as a remote's) and the native one (`direct` to an IP address, as a local replica's).
class Transports : public ::testing::TestWithParam<bool> {
 protected:
  bool native() const { return GetParam(); }
  net::HttpCallOptions opts(net::HttpCallOptions o = soon()) const {
    o.direct = native();
    return o;
  }
  // The calls went where the parameter says.
  void expect_transport(const UpstreamClient& c) const {
    if (native()) {
      EXPECT_GT(c.native_stats().connects, 0u);
    } else {
      EXPECT_EQ(c.native_stats().connects, 0u);
    }
  }
};
INSTANTIATE_TEST_SUITE_P(UpstreamClient, Transports, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? std::string("native") : std::string("curl"); });

// What one call delivered, gathered on the client's strand and read after `done`.
struct Got {
  int status = 0;
  std::string header_a, body;
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> pieces;
  UpstreamEnd end;
  std::promise<void> finished;
};

UpstreamClient::CallId call(UpstreamClient& c, const net::Url& url, const std::string& path, Got& got,
                            net::HttpCallOptions opts = soon(), bool stop_at_first_byte = false) {
  net::HttpHandlers h;
  h.on_head = [&got](const net::HttpResponseHead& head) {
    got.status = head.status;
    got.header_a = head.header("x-a");
    return true;
  };
  h.on_body = [&got, stop_at_first_byte](std::string_view d) {
    got.body.append(d);
    got.pieces.emplace_back(std::chrono::steady_clock::now(), std::string(d));
    return !stop_at_first_byte;
  };
  return c.start(url, net::HttpRequest{.path = path}, opts, std::move(h), [&got](UpstreamEnd e) {
    got.end = std::move(e);
    got.finished.set_value();
  });
}

void wait(Got& g) { ASSERT_EQ(g.finished.get_future().wait_for(10s), std::future_status::ready); }

TEST_P(Transports, WholeBodyAndHeaders) {
  Upstream up;
  Loop loop(native());
  Got g;
  call(loop.client(), up.url(), "/json", g, opts());
  wait(g);
  ASSERT_TRUE(g.end.result.ok()) << g.end.result.status().to_string();
  EXPECT_EQ(g.end.result->status, 200);
  EXPECT_EQ(g.status, 200);
  EXPECT_EQ(g.header_a, "b");
  EXPECT_EQ(g.body, R"({"ok":true})");
  EXPECT_EQ(g.end.stage, net::CallStage::kReadingBody);
  expect_transport(loop.client());
}

TEST_P(Transports, StreamedBodyArrivesAsItIsSent) {
  Upstream up;
  Loop loop(native());
  Got g;
  call(loop.client(), up.url(), "/stream", g, opts());
  wait(g);
  ASSERT_TRUE(g.end.result.ok()) << g.end.result.status().to_string();
  EXPECT_EQ(g.body, "ab");
  ASSERT_EQ(g.pieces.size(), 2u);  // not buffered until the end
  EXPECT_GE(g.pieces[1].first - g.pieces[0].first, 100ms);
}

TEST_P(Transports, ReusesKeepAliveConnectionsAcrossCalls) {
  Upstream up;
  Loop loop(native());
  for (int i = 0; i < 5; ++i) {
    Got g;
    call(loop.client(), up.url(), "/json", g, opts());
    wait(g);
    ASSERT_TRUE(g.end.result.ok());
  }
  EXPECT_EQ(up.connections(), 1u);
  Got stopped;  // a transfer stopped by its handler closes its connection
  call(loop.client(), up.url(), "/stream", stopped, opts(), /*stop_at_first_byte=*/true);
  wait(stopped);
  EXPECT_TRUE(stopped.end.result.ok());  // a handler's stop is not an error
  Got after;
  call(loop.client(), up.url(), "/json", after, opts());
  wait(after);
  ASSERT_TRUE(after.end.result.ok());
  EXPECT_EQ(up.connections(), 2u);
  expect_transport(loop.client());
  if (native()) {
    EXPECT_EQ(loop.client().native_stats().reuses, 5u);  // calls 2-5 and the stopped stream
    EXPECT_EQ(loop.client().native_stats().connects, 2u);
  }
}

TEST_P(Transports, ManyConcurrentCallsOnOneThread) {
  Upstream up;
  Loop loop(native());
  constexpr int kCalls = 64;
  std::vector<std::unique_ptr<Got>> gots;
  for (int i = 0; i < kCalls; ++i) {
    gots.push_back(std::make_unique<Got>());
    call(loop.client(), up.url(), i % 2 ? "/json" : "/stream", *gots.back(), opts());
  }
  for (auto& g : gots) {
    wait(*g);
    ASSERT_TRUE(g->end.result.ok()) << g->end.result.status().to_string();
  }
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(gots[i]->body, i % 2 ? R"({"ok":true})" : "ab");
  EXPECT_EQ(loop.client().num_active(), 0u);
}

TEST_P(Transports, CancelEndsARunningCall) {
  Upstream up;
  Loop loop(native());
  Got g;
  auto id = call(loop.client(), up.url(), "/hold", g, opts());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(loop.client().num_active(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  loop.client().cancel(id);
  wait(g);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  ASSERT_FALSE(g.end.result.ok());
  EXPECT_EQ(g.end.result.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(g.end.stage, net::CallStage::kAwaitingHead);
  loop.client().cancel(id);  // already ended: no-op (done is not called twice)
  std::this_thread::sleep_for(20ms);
}

TEST_P(Transports, IdleTimeoutAndDeadlineEndASilentUpstream) {
  Upstream up;
  Loop loop(native());
  Got idle;
  net::HttpCallOptions o = opts();
  o.idle_timeout = 200ms;
  const auto t0 = std::chrono::steady_clock::now();
  call(loop.client(), up.url(), "/hold", idle, o);
  wait(idle);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(idle.end.result.ok());
  EXPECT_EQ(idle.end.result.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(idle.end.result.status().message().find("no response byte for 200 ms"), std::string::npos);
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 2s);
  Got busy;  // a stream whose bytes come 150 ms apart is not idle for 200 ms
  call(loop.client(), up.url(), "/stream", busy, o);
  wait(busy);
  EXPECT_TRUE(busy.end.result.ok()) << busy.end.result.status().to_string();
  Got late;
  net::HttpCallOptions d = opts({.deadline = std::chrono::steady_clock::now() + 150ms});
  call(loop.client(), up.url(), "/hold", late, d);
  wait(late);
  ASSERT_FALSE(late.end.result.ok());
  EXPECT_EQ(late.end.result.status().code(), StatusCode::kDeadlineExceeded);
}

TEST_P(Transports, RefusedConnectionFailsWhileConnecting) {
  uint16_t port = 0;
  {
    Upstream gone;  // a port that was just free again
    port = gone.url().port;
  }
  Loop loop(native());
  Got g;
  call(loop.client(), net::Url{.host = "127.0.0.1", .port = port}, "/json", g, opts());
  wait(g);
  ASSERT_FALSE(g.end.result.ok());
  EXPECT_EQ(g.end.result.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(g.end.stage, net::CallStage::kConnecting);
  EXPECT_EQ(g.status, 0);
}

// A scripted upstream on a raw loopback socket, for what the project's server never does
// (closing mid-answer, interim responses, malformed heads). Each accepted connection runs
// `script(fd, n)` on its own thread (n = connections accepted before it), which reads requests
// with read_request() and writes what it likes; the connection is closed when it returns.
class RawUpstream {
 public:
  using Script = std::function<void(int fd, int n)>;
  explicit RawUpstream(Script script) : script_(std::move(script)) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(lfd_, 16), 0);
    socklen_t len = sizeof(a);
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] {
      for (int n = 0;; ++n) {
        int fd = ::accept(lfd_, nullptr, nullptr);
        if (fd < 0) return;
        std::lock_guard lock(mu_);
        if (stopping_) {
          ::close(fd);
          return;
        }
        conns_.emplace_back([this, fd, n] {
          script_(fd, n);
          ::close(fd);
        });
      }
    });
  }
  ~RawUpstream() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    ::shutdown(lfd_, SHUT_RDWR);
    ::close(lfd_);
    acceptor_.join();
    for (auto& t : conns_) t.join();
  }
  net::Url url() const { return net::Url{.host = "127.0.0.1", .port = port_}; }

  // Reads one request (head and Content-Length body); false at the connection's end.
  static bool read_request(int fd, std::string* got = nullptr) {
    std::string buf;
    char tmp[4096];
    size_t need = std::string::npos;
    for (;;) {
      size_t he = buf.find("\r\n\r\n");
      if (he != std::string::npos && need == std::string::npos) {
        need = he + 4;
        size_t cl = buf.find("Content-Length: ");
        if (cl != std::string::npos && cl < he) need += std::stoul(buf.substr(cl + 16));
      }
      if (need != std::string::npos && buf.size() >= need) break;
      ssize_t n = ::read(fd, tmp, sizeof(tmp));
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
    }
    if (got) *got = buf;
    return true;
  }
  static void send_all(int fd, std::string_view s) {
    while (!s.empty()) {
      ssize_t n = ::write(fd, s.data(), s.size());
      if (n <= 0) return;
      s.remove_prefix(static_cast<size_t>(n));
    }
  }

 private:
  Script script_;
  int lfd_ = -1;
  uint16_t port_ = 0;
  std::mutex mu_;
  bool stopping_ = false;
  std::thread acceptor_;
  std::vector<std::thread> conns_;
};

net::HttpCallOptions direct() {
  net::HttpCallOptions o = soon();
  o.direct = true;
  return o;
}

constexpr std::string_view kOk = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";

TEST(NativeTransport, UpstreamClosingMidStreamFailsAfterTheBytesItSent) {
  RawUpstream up([](int fd, int) {
    if (!RawUpstream::read_request(fd)) return;
    RawUpstream::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "d\r\ndata: first\n\n\r\n");
    std::this_thread::sleep_for(50ms);
    RawUpstream::send_all(fd, "f\r\ndata: sec");  // a chunk cut short, then the connection ends
  });
  Loop loop;
  Got g;
  call(loop.client(), up.url(), "/v1/completions", g, direct());
  wait(g);
  EXPECT_EQ(g.status, 200);
  EXPECT_EQ(g.pieces.size() >= 1 ? g.pieces[0].second : "", "data: first\n\n");
  ASSERT_FALSE(g.end.result.ok());
  EXPECT_EQ(g.end.result.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(g.end.result.status().message().find("closed before the response ended"), std::string::npos)
      << g.end.result.status().to_string();
  EXPECT_EQ(g.end.stage, net::CallStage::kReadingBody);
  EXPECT_EQ(loop.client().native_stats().retries, 0u);  // a head came: never re-sent
  EXPECT_EQ(loop.client().native_stats().idle, 0u);
}

TEST(NativeTransport, ClosedBeforeTheHeadOnAFreshConnectionIsNotRetried) {
  std::atomic<int> requests{0};
  RawUpstream up([&](int fd, int) {
    if (RawUpstream::read_request(fd)) requests.fetch_add(1);
  });
  Loop loop;
  Got g;
  call(loop.client(), up.url(), "/x", g, direct());
  wait(g);
  ASSERT_FALSE(g.end.result.ok());
  EXPECT_EQ(g.end.result.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(g.end.stage, net::CallStage::kAwaitingHead);  // the gateway's "reset_before_head": failover
  EXPECT_EQ(requests.load(), 1);
  EXPECT_EQ(loop.client().native_stats().retries, 0u);
}

TEST(NativeTransport, AStaleKeptAliveConnectionIsRetriedOnceOnAFreshOne) {
  // The first connection answers one request, then takes the next and closes without an answer
  // (the server's idle close racing the request); the second connection answers.
  std::atomic<int> requests{0};
  RawUpstream up([&](int fd, int n) {
    if (!RawUpstream::read_request(fd)) return;
    requests.fetch_add(1);
    RawUpstream::send_all(fd, kOk);
    if (n > 0) {
      while (RawUpstream::read_request(fd)) {
        requests.fetch_add(1);
        RawUpstream::send_all(fd, kOk);
      }
      return;
    }
    if (RawUpstream::read_request(fd)) requests.fetch_add(1);
  });
  Loop loop;
  for (int i = 0; i < 3; ++i) {
    Got g;
    call(loop.client(), up.url(), "/x", g, direct());
    wait(g);
    ASSERT_TRUE(g.end.result.ok()) << i << ": " << g.end.result.status().to_string();
    EXPECT_EQ(g.body, "{}");
  }
  const auto st = loop.client().native_stats();
  EXPECT_EQ(st.connects, 2u);
  EXPECT_EQ(st.retries, 1u);
  EXPECT_EQ(st.reuses, 2u);
  EXPECT_EQ(requests.load(), 4);
}

TEST(NativeTransport, AnIdleConnectionTheServerClosesIsDroppedAtOnce) {
  RawUpstream up([](int fd, int) {
    if (!RawUpstream::read_request(fd)) return;
    RawUpstream::send_all(fd, kOk);
    std::this_thread::sleep_for(50ms);  // then closes: an idle timeout on the server's side
  });
  Loop loop;
  Got a;
  call(loop.client(), up.url(), "/x", a, direct());
  wait(a);
  ASSERT_TRUE(a.end.result.ok());
  for (int i = 0; i < 100 && loop.client().native_stats().idle > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(loop.client().native_stats().idle, 0u);
  Got b;
  call(loop.client(), up.url(), "/x", b, direct());
  wait(b);
  ASSERT_TRUE(b.end.result.ok());
  EXPECT_EQ(loop.client().native_stats().retries, 0u);
  EXPECT_EQ(loop.client().native_stats().connects, 2u);
}

TEST(NativeTransport, InterimResponsesSkippedAndABodyEndedByClose) {
  RawUpstream up([](int fd, int) {
    if (!RawUpstream::read_request(fd)) return;
    RawUpstream::send_all(fd, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nX-A: b\r\nConnection: close\r\n\r\n"
                              "until the end");
  });
  Loop loop;
  Got g;
  call(loop.client(), up.url(), "/x", g, direct());
  wait(g);
  ASSERT_TRUE(g.end.result.ok()) << g.end.result.status().to_string();
  EXPECT_EQ(g.status, 201);
  EXPECT_EQ(g.header_a, "b");
  EXPECT_EQ(g.body, "until the end");
  EXPECT_EQ(loop.client().native_stats().idle, 0u);  // Connection: close is not kept
}

TEST(NativeTransport, MalformedResponseIsDataLoss) {
  RawUpstream up([](int fd, int) {
    if (!RawUpstream::read_request(fd)) return;
    RawUpstream::send_all(fd, "HTTP/1.1 2x0 What\r\n\r\n");
    std::this_thread::sleep_for(100ms);
  });
  Loop loop;
  Got g;
  call(loop.client(), up.url(), "/x", g, direct());
  wait(g);
  ASSERT_FALSE(g.end.result.ok());
  EXPECT_EQ(g.end.result.status().code(), StatusCode::kDataLoss) << g.end.result.status().to_string();
}

TEST(NativeTransport, RequestOnTheWireAndLargeBodiesBothWays) {
  std::string seen;
  std::mutex mu;
  const std::string big_out(3u << 20, 'q');  // beyond the socket buffers: written in parts
  RawUpstream up([&](int fd, int) {
    std::string req;
    if (!RawUpstream::read_request(fd, &req)) return;
    {
      std::lock_guard lock(mu);
      seen = req;
    }
    std::string resp = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 64; ++i) resp += "4000\r\n" + std::string(0x4000, static_cast<char>('a' + i % 26)) + "\r\n";
    resp += "0\r\n\r\n";
    RawUpstream::send_all(fd, resp);
    RawUpstream::read_request(fd);  // until the client closes or sends more
  });
  Loop loop;
  Got g;
  net::HttpHandlers h;
  net::Url url = up.url();
  url.base_path = "/v1";
  h.on_head = [&g](const net::HttpResponseHead& head) {
    g.status = head.status;
    return true;
  };
  h.on_body = [&g](std::string_view d) {
    g.body.append(d);
    return true;
  };
  loop.client().start(url,
                      net::HttpRequest{.method = "POST", .path = "/completions",
                                       .headers = {{"Content-Type", "application/json"}, {"x-request-id", "r1"}},
                                       .body = big_out},
                      direct(), std::move(h), [&g](UpstreamEnd e) {
                        g.end = std::move(e);
                        g.finished.set_value();
                      });
  wait(g);
  ASSERT_TRUE(g.end.result.ok()) << g.end.result.status().to_string();
  EXPECT_EQ(g.status, 200);
  ASSERT_EQ(g.body.size(), 64u * 0x4000);
  EXPECT_EQ(g.body[0], 'a');
  EXPECT_EQ(g.body.back(), static_cast<char>('a' + 63 % 26));
  std::lock_guard lock(mu);
  const std::string head = seen.substr(0, seen.find("\r\n\r\n") + 4);
  EXPECT_TRUE(head.starts_with("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(url.port) + "\r\n"))
      << head;
  EXPECT_NE(head.find("\r\nx-request-id: r1\r\n"), std::string::npos);
  EXPECT_NE(head.find("\r\nContent-Length: " + std::to_string(big_out.size()) + "\r\n"), std::string::npos);
  EXPECT_EQ(seen.size() - head.size(), big_out.size());
  EXPECT_EQ(seen.substr(head.size()), big_out);
}

TEST(NativeTransport, ConnectTimeoutOnAnUnansweredConnect) {
  // A listener whose backlog is full and never accepts: a SYN then gets no answer.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(lfd, 0), 0);
  socklen_t len = sizeof(a);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::vector<int> fillers;
  for (int i = 0; i < 8; ++i) {  // fill the backlog (non-blocking connects)
    int f = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(f, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    fillers.push_back(f);
  }
  std::this_thread::sleep_for(50ms);
  Loop loop;
  Got g;
  net::HttpCallOptions o = direct();
  o.connect_timeout = 200ms;
  const auto t0 = std::chrono::steady_clock::now();
  call(loop.client(), net::Url{.host = "127.0.0.1", .port = ntohs(a.sin_port)}, "/x", g, o);
  wait(g);
  const auto took = std::chrono::steady_clock::now() - t0;
  for (int f : fillers) ::close(f);
  ::close(lfd);
  ASSERT_FALSE(g.end.result.ok());
  EXPECT_EQ(g.end.result.status().code(), StatusCode::kDeadlineExceeded) << g.end.result.status().to_string();
  EXPECT_EQ(g.end.stage, net::CallStage::kConnecting);
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 2s);
}

TEST(NativeTransport, OnlyPlainDirectCallsToAnAddressGoNative) {
  Upstream up;
  Loop loop;
  Got viaCurl;  // not direct: an environment proxy could apply, so libcurl
  call(loop.client(), up.url(), "/json", viaCurl, soon());
  wait(viaCurl);
  ASSERT_TRUE(viaCurl.end.result.ok());
  EXPECT_EQ(loop.client().native_stats().connects, 0u);
  Got byName;  // a name to resolve: libcurl
  net::Url named = up.url();
  named.host = "localhost";
  call(loop.client(), named, "/json", byName, direct());
  wait(byName);
  EXPECT_EQ(loop.client().native_stats().connects, 0u);
  Got native;
  call(loop.client(), up.url(), "/json", native, direct());
  wait(native);
  ASSERT_TRUE(native.end.result.ok());
  EXPECT_EQ(loop.client().native_stats().connects, 1u);
  EXPECT_EQ(native.body, R"({"ok":true})");
}

}  // namespace
}  // namespace ts::router
