#include "router/upstream_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

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
  Loop()
      : ioc_(std::make_shared<boost::asio::io_context>()), work_(boost::asio::make_work_guard(*ioc_)),
        client_(std::make_unique<UpstreamClient>(ioc_)), thread_([this] { ioc_->run(); }) {}
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

TEST(UpstreamClient, WholeBodyAndHeaders) {
  Upstream up;
  Loop loop;
  Got g;
  call(loop.client(), up.url(), "/json", g);
  wait(g);
  ASSERT_TRUE(g.end.result.ok()) << g.end.result.status().to_string();
  EXPECT_EQ(g.end.result->status, 200);
  EXPECT_EQ(g.status, 200);
  EXPECT_EQ(g.header_a, "b");
  EXPECT_EQ(g.body, R"({"ok":true})");
  EXPECT_EQ(g.end.stage, net::CallStage::kReadingBody);
}

TEST(UpstreamClient, StreamedBodyArrivesAsItIsSent) {
  Upstream up;
  Loop loop;
  Got g;
  call(loop.client(), up.url(), "/stream", g);
  wait(g);
  ASSERT_TRUE(g.end.result.ok()) << g.end.result.status().to_string();
  EXPECT_EQ(g.body, "ab");
  ASSERT_EQ(g.pieces.size(), 2u);  // not buffered until the end
  EXPECT_GE(g.pieces[1].first - g.pieces[0].first, 100ms);
}

TEST(UpstreamClient, ReusesKeepAliveConnectionsAcrossCalls) {
  Upstream up;
  Loop loop;
  for (int i = 0; i < 5; ++i) {
    Got g;
    call(loop.client(), up.url(), "/json", g);
    wait(g);
    ASSERT_TRUE(g.end.result.ok());
  }
  EXPECT_EQ(up.connections(), 1u);
  Got stopped;  // a transfer stopped by its handler closes its connection
  call(loop.client(), up.url(), "/stream", stopped, soon(), /*stop_at_first_byte=*/true);
  wait(stopped);
  EXPECT_TRUE(stopped.end.result.ok());  // a handler's stop is not an error
  Got after;
  call(loop.client(), up.url(), "/json", after);
  wait(after);
  ASSERT_TRUE(after.end.result.ok());
  EXPECT_EQ(up.connections(), 2u);
}

TEST(UpstreamClient, ManyConcurrentCallsOnOneThread) {
  Upstream up;
  Loop loop;
  constexpr int kCalls = 64;
  std::vector<std::unique_ptr<Got>> gots;
  for (int i = 0; i < kCalls; ++i) {
    gots.push_back(std::make_unique<Got>());
    call(loop.client(), up.url(), i % 2 ? "/json" : "/stream", *gots.back());
  }
  for (auto& g : gots) {
    wait(*g);
    ASSERT_TRUE(g->end.result.ok()) << g->end.result.status().to_string();
  }
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(gots[i]->body, i % 2 ? R"({"ok":true})" : "ab");
  EXPECT_EQ(loop.client().num_active(), 0u);
}

TEST(UpstreamClient, CancelEndsARunningCall) {
  Upstream up;
  Loop loop;
  Got g;
  auto id = call(loop.client(), up.url(), "/hold", g);
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

TEST(UpstreamClient, IdleTimeoutAndDeadlineEndASilentUpstream) {
  Upstream up;
  Loop loop;
  Got idle;
  net::HttpCallOptions o = soon();
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
  net::HttpCallOptions d{.deadline = std::chrono::steady_clock::now() + 150ms};
  call(loop.client(), up.url(), "/hold", late, d);
  wait(late);
  ASSERT_FALSE(late.end.result.ok());
  EXPECT_EQ(late.end.result.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(UpstreamClient, RefusedConnectionFailsWhileConnecting) {
  uint16_t port = 0;
  {
    Upstream gone;  // a port that was just free again
    port = gone.url().port;
  }
  Loop loop;
  Got g;
  call(loop.client(), net::Url{.host = "127.0.0.1", .port = port}, "/json", g);
  wait(g);
  ASSERT_FALSE(g.end.result.ok());
  EXPECT_EQ(g.end.result.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(g.end.stage, net::CallStage::kConnecting);
  EXPECT_EQ(g.status, 0);
}

}  // namespace
}  // namespace ts::router
