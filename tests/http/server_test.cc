// The HTTP server over real sockets on 127.0.0.1:0, driven by the blocking test client.
#include "http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "support/wire_client.h"

namespace ts::http {
namespace {

using namespace std::chrono_literals;

// Polls `pred` every 2 ms until it holds or `limit` passes.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 2000ms) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

Response text(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = "text/plain";
  r.body = std::move(body);
  return r;
}

// Holds exchanges parked by handlers so a test can answer them later from its own thread.
struct Parking {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ExchangePtr> parked;
  Handler handler() {
    return [this](const ExchangePtr& ex) {
      std::lock_guard<std::mutex> lock(mu);
      parked.push_back(ex);
      cv.notify_all();
    };
  }
  ExchangePtr wait_one() {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, 5s, [this] { return !parked.empty(); })) return nullptr;
    ExchangePtr ex = parked.front();
    parked.erase(parked.begin());
    return ex;
  }
};

class ServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions opts = {}) {
    server_ = std::make_unique<Server>(std::move(opts));
    server_->route(Method::kGet, "/hello", [](const ExchangePtr& ex) {
      ex->respond(text(200, "hello"));
    });
    server_->route(Method::kGet, "/items/{id}", [](const ExchangePtr& ex) {
      ex->respond(text(200, "item=" + std::string(ex->request().path_param("id"))));
    });
    server_->route(Method::kPost, "/echo", [](const ExchangePtr& ex) {
      const Request& req = ex->request();
      Response r = text(200, req.body);
      r.set_header("X-Request-Id", std::string(req.header("x-request-id")));
      r.set_header("X-Auth", std::string(req.header("authorization")));
      r.set_header("X-Query", req.query);
      ex->respond(std::move(r));
    });
    server_->route(Method::kPost, "/park", parking_.handler());
    server_->route(Method::kGet, "/drop", [](const ExchangePtr&) {});
    server_->route(Method::kGet, "/throw", [](const ExchangePtr&) {
      throw std::runtime_error("boom");
    });
    ASSERT_TRUE(server_->start().ok());
    ASSERT_NE(server_->port(), 0);
  }
  Client connect() {
    Client c;
    EXPECT_TRUE(c.connect("127.0.0.1", server_->port()).ok());
    return c;
  }

  std::unique_ptr<Server> server_;
  Parking parking_;
};

TEST_F(ServerTest, RoutesRequestsAndPathParams) {
  start();
  Client c = connect();
  auto r = c.request("GET", "/hello");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
  EXPECT_EQ(r->header("content-type"), "text/plain");
  EXPECT_EQ(r->header("server"), "tokenserve");

  r = c.request("GET", "/items/a%20b");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "item=a b");
}

TEST_F(ServerTest, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  start();
  Client c = connect();
  auto r = c.request("GET", "/nope");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("/nope"), std::string::npos);
  r = c.request("DELETE", "/hello");  // same connection: 404/405 keep it alive
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->header("allow"), "GET");
}

TEST_F(ServerTest, CustomErrorRendererShapesServerErrors) {
  ServerOptions opts;
  opts.error_renderer = [](int status, std::string_view message) {
    Response r;
    r.body = "{\"code\":" + std::to_string(status) + ",\"msg\":\"" + std::string(message) + "\"}";
    return r;
  };
  start(std::move(opts));
  Client c = connect();
  auto r = c.request("GET", "/nope");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->header("content-type"), "application/json");
  EXPECT_EQ(r->body, "{\"code\":404,\"msg\":\"no route for GET /nope\"}");
}

TEST_F(ServerTest, RequestHeadersBodyAndResponseHeaders) {
  start();
  Client c = connect();
  auto r = c.request("POST", "/echo?x=1", "{\"a\":1}",
                     {{"Authorization", "Bearer sk-1"}, {"X-Request-Id", "req-42"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{\"a\":1}");
  EXPECT_EQ(r->header("x-request-id"), "req-42");
  EXPECT_EQ(r->header("x-auth"), "Bearer sk-1");
  EXPECT_EQ(r->header("x-query"), "x=1");
}

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  start();
  Client c = connect();
  for (int i = 0; i < 20; ++i) {
    auto r = c.request("POST", "/echo", "n" + std::to_string(i));
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().to_string();
    EXPECT_EQ(r->body, "n" + std::to_string(i));
    EXPECT_EQ(r->header("connection"), "keep-alive");
  }
  EXPECT_EQ(server_->stats().num_connections_accepted, 1u);
  EXPECT_EQ(server_->stats().num_requests, 20u);
}

// After a response the read that watched for a disconnect stays pending as the wait for the
// next request (no new read): a later request, a client that leaves and a drain must all be
// seen through it.
TEST_F(ServerTest, KeptAliveConnectionWaitsOnItsWatchReadAfterAResponse) {
  start();
  Client c = connect();
  for (int i = 0; i < 3; ++i) {
    auto r = c.request("POST", "/echo", "p" + std::to_string(i));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->body, "p" + std::to_string(i));
    std::this_thread::sleep_for(30ms);  // the next request comes well after the response
  }
  // A client that closes right after reading its answer: its EOF can complete the watch read
  // just before the response's end cancels it, and must still close the connection. That race
  // hit ~2 % of single tries, so several clients each run it.
  constexpr int kGone = 40;
  for (int i = 0; i < kGone; ++i) {
    Client gone = connect();
    ASSERT_TRUE(gone.request("GET", "/hello").ok());
    ASSERT_TRUE(eventually([&] { return server_->stats().num_connections_open == 2; }));
    gone.close();
    ASSERT_TRUE(eventually([&] { return server_->stats().num_connections_open == 1; })) << "client " << i;
  }
  Client idle = connect();
  ASSERT_TRUE(idle.request("GET", "/hello").ok());
  auto drained = std::async(std::launch::async, [&] { server_->drain(5000ms); });
  EXPECT_TRUE(idle.wait_closed(2000ms));  // idle after a response: closed at once by the drain
  EXPECT_TRUE(c.wait_closed(2000ms));
  ASSERT_EQ(drained.wait_for(3000ms), std::future_status::ready);
  EXPECT_EQ(server_->stats().num_requests, 4u + kGone);
}

TEST_F(ServerTest, PipelinedRequestsAnsweredInOrderWhileFirstIsPending) {
  start();
  Client c = connect();
  // Both requests arrive together; the first is answered later from another thread.
  ASSERT_TRUE(c.send_raw("POST /park HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nA"
                         "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nB")
                  .ok());
  ExchangePtr ex = parking_.wait_one();
  ASSERT_NE(ex, nullptr);
  EXPECT_EQ(ex->request().body, "A");
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(ex->cancelled());  // pipelined bytes are not a disconnect
  std::thread([ex] { ex->respond(text(201, "first")); }).join();
  auto r1 = c.read_response();
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->status, 201);
  EXPECT_EQ(r1->body, "first");
  auto r2 = c.read_response();
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->body, "B");
}

TEST_F(ServerTest, BodyOverLimitIs413AndCloses) {
  ServerOptions opts;
  opts.max_body_bytes = 1024;
  start(std::move(opts));
  Client c = connect();
  auto ok = c.request("POST", "/echo", std::string(1024, 'x'));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
  auto r = c.request("POST", "/echo", std::string(1025, 'x'));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(c.wait_closed(2000ms));
}

TEST_F(ServerTest, ChunkedBodyOverLimitIs413) {
  ServerOptions opts;
  opts.max_body_bytes = 100;
  start(std::move(opts));
  Client c = connect();
  std::string chunk(80, 'y');
  ASSERT_TRUE(c.send_raw("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "50\r\n" + chunk + "\r\n50\r\n" + chunk + "\r\n0\r\n\r\n")
                  .ok());
  auto r = c.read_response();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 413);
}

TEST_F(ServerTest, HeadersOverLimitAre431) {
  ServerOptions opts;
  opts.max_header_bytes = 1024;
  start(std::move(opts));
  Client c = connect();
  auto r = c.request("GET", "/hello", "", {{"X-Big", std::string(2000, 'h')}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 431);
  EXPECT_TRUE(c.wait_closed(2000ms));
}

TEST_F(ServerTest, MalformedRequestIs400) {
  start();
  Client c = connect();
  ASSERT_TRUE(c.send_raw("GET /hello HTTP/9\r\n\r\n").ok());
  auto r = c.read_response();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 400);
}

TEST_F(ServerTest, IdleTimeoutClosesQuietly) {
  ServerOptions opts;
  opts.idle_timeout = 150ms;
  start(std::move(opts));
  Client c = connect();
  auto r = c.request("GET", "/hello");
  ASSERT_TRUE(r.ok());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.wait_closed(3000ms));
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 100ms);
  EXPECT_LT(waited, 2000ms);
  EXPECT_TRUE(eventually([&] { return server_->stats().num_connections_open == 0; }));
}

TEST_F(ServerTest, SlowRequestGets408) {
  ServerOptions opts;
  opts.read_timeout = 150ms;
  start(std::move(opts));
  Client c = connect();
  ASSERT_TRUE(c.send_raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc").ok());
  auto r = c.read_response();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 408);
  EXPECT_TRUE(c.wait_closed(2000ms));
}

TEST_F(ServerTest, ExpectContinueGets100ThenResponse) {
  start();
  Client c = connect();
  ASSERT_TRUE(c.send_raw("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                         "Content-Length: 5\r\n\r\n")
                  .ok());
  // The interim response arrives before we send the body.
  auto interim = c.read_head(/*skip_interim=*/false);
  ASSERT_TRUE(interim.ok()) << interim.status().to_string();
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.send_raw("hello").ok());
  auto r = c.read_response();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
}

TEST_F(ServerTest, Http10ClosesAfterResponse) {
  start();
  Client c = connect();
  ASSERT_TRUE(c.send_raw("GET /hello HTTP/1.0\r\n\r\n").ok());
  auto r = c.read_response();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello");
  EXPECT_TRUE(c.wait_closed(2000ms));
}

TEST_F(ServerTest, UnansweredHandlerGets500AndThrowingHandlerGets500) {
  start();
  Client c = connect();
  auto r = c.request("GET", "/drop");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 500);
  r = c.request("GET", "/throw");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 500);
}

TEST_F(ServerTest, StreamsChunksPushedFromAnotherThread) {
  start();
  Client c = connect();
  ASSERT_TRUE(c.send_request("POST", "/park", "{}").ok());
  ExchangePtr ex = parking_.wait_one();
  ASSERT_NE(ex, nullptr);
  std::thread producer([ex] {
    ex->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(ex->write("data: " + std::to_string(i) + "\n\n"));
      std::this_thread::sleep_for(20ms);
    }
    ex->finish();
    EXPECT_FALSE(ex->write("late"));
  });
  auto head = c.read_head();
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->chunked);
  EXPECT_EQ(head->header("content-type"), "text/event-stream");
  EXPECT_EQ(head->header("cache-control"), "no-cache");
  std::string all;
  int num_chunks = 0;
  while (true) {
    auto chunk = c.read_chunk();
    ASSERT_TRUE(chunk.ok()) << chunk.status().to_string();
    if (chunk->empty()) break;
    all += *chunk;
    ++num_chunks;
  }
  producer.join();
  EXPECT_EQ(all, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_GE(num_chunks, 2);  // pushed 20 ms apart: not one buffered blob
  EXPECT_FALSE(ex->cancelled());
  // The connection is still usable after the stream.
  auto r = c.request("GET", "/hello");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "hello");
}

// Writes pushed from another thread faster than the io thread sends them: every byte arrives
// once and in order, however the server groups them into chunks, and a write after finish() is
// refused.
TEST_F(ServerTest, BurstOfStreamWritesArrivesCompleteAndInOrder) {
  start();
  Client c = connect();
  ASSERT_TRUE(c.send_request("POST", "/park", "{}").ok());
  ExchangePtr ex = parking_.wait_one();
  ASSERT_NE(ex, nullptr);
  constexpr int kWrites = 5000;
  std::string expected;
  for (int i = 0; i < kWrites; ++i) expected += "data: " + std::to_string(i) + "\n\n";
  std::thread producer([ex] {
    ex->start_stream(200, "text/event-stream");
    for (int i = 0; i < kWrites; ++i) EXPECT_TRUE(ex->write("data: " + std::to_string(i) + "\n\n"));
    ex->finish();
    EXPECT_FALSE(ex->write("late"));
  });
  auto head = c.read_head();
  ASSERT_TRUE(head.ok());
  EXPECT_TRUE(head->chunked);
  std::string all;
  int num_chunks = 0;
  while (true) {
    auto chunk = c.read_chunk();
    ASSERT_TRUE(chunk.ok()) << chunk.status().to_string();
    if (chunk->empty()) break;
    all += *chunk;
    ++num_chunks;
  }
  producer.join();
  EXPECT_EQ(all, expected);
  EXPECT_LE(num_chunks, kWrites);
  EXPECT_FALSE(ex->cancelled());
}

TEST_F(ServerTest, DisconnectMidStreamCancelsWithinMilliseconds) {
  start();
  Client c = connect();
  ASSERT_TRUE(c.send_request("POST", "/park", "{}").ok());
  ExchangePtr ex = parking_.wait_one();
  ASSERT_NE(ex, nullptr);
  std::promise<std::chrono::steady_clock::time_point> cancelled_at;
  ex->on_cancel([&] { cancelled_at.set_value(std::chrono::steady_clock::now()); });
  ex->start_stream(200, "text/event-stream");
  ASSERT_TRUE(ex->write("data: x\n\n"));
  auto head = c.read_head();
  ASSERT_TRUE(head.ok());
  auto closed_at = std::chrono::steady_clock::now();
  c.close();
  auto fut = cancelled_at.get_future();
  ASSERT_EQ(fut.wait_for(1s), std::future_status::ready);
  EXPECT_LT(fut.get() - closed_at, 200ms);
  EXPECT_TRUE(ex->cancelled());
  EXPECT_FALSE(ex->write("data: y\n\n"));
  EXPECT_EQ(server_->stats().num_cancelled, 1u);
  EXPECT_TRUE(eventually([&] { return server_->stats().num_in_flight == 0; }));
}

TEST_F(ServerTest, DisconnectBeforeWholeResponseCancels) {
  start();
  Client c = connect();
  ASSERT_TRUE(c.send_request("POST", "/park", "{}").ok());
  ExchangePtr ex = parking_.wait_one();
  ASSERT_NE(ex, nullptr);
  std::atomic<bool> called{false};
  ex->on_cancel([&] { called = true; });
  c.close();
  EXPECT_TRUE(eventually([&] { return called.load(); }, 1000ms));
  EXPECT_TRUE(ex->cancelled());
  ex->respond(text(200, "too late"));  // harmless no-op
  // A callback set after cancellation runs at once.
  bool late = false;
  ex->on_cancel([&] { late = true; });
  EXPECT_TRUE(late);
}

TEST_F(ServerTest, StalledReaderHitsWriteTimeoutAndCancels) {
  ServerOptions opts;
  opts.write_timeout = 200ms;
  opts.max_stream_buffer_bytes = size_t{1} << 30;
  start(std::move(opts));
  Client c = connect();
  ASSERT_TRUE(c.send_request("POST", "/park", "{}").ok());
  ExchangePtr ex = parking_.wait_one();
  ASSERT_NE(ex, nullptr);
  ex->start_stream(200, "application/octet-stream");
  std::string mb(1 << 20, 'z');
  // The client never reads: socket buffers fill, a write stalls past the timeout.
  for (int i = 0; i < 512 && !ex->cancelled(); ++i) {
    ex->write(mb);
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(eventually([&] { return ex->cancelled(); }, 3000ms));
}

TEST_F(ServerTest, SlowReaderOverStreamBufferIsCancelled) {
  ServerOptions opts;
  opts.max_stream_buffer_bytes = 1 << 20;
  start(std::move(opts));
  Client c = connect();
  ASSERT_TRUE(c.send_request("POST", "/park", "{}").ok());
  ExchangePtr ex = parking_.wait_one();
  ASSERT_NE(ex, nullptr);
  ex->start_stream(200, "application/octet-stream");
  std::string mb(256 << 10, 'z');
  for (int i = 0; i < 4096 && !ex->cancelled(); ++i) ex->write(mb);
  EXPECT_TRUE(eventually([&] { return ex->cancelled(); }, 3000ms));
}

TEST_F(ServerTest, ManyIdleConnectionsWithTwoIoThreads) {
  ServerOptions opts;
  opts.num_io_threads = 2;
  start(std::move(opts));
  constexpr int kConns = 400;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kConns; ++i) {
    clients.push_back(std::make_unique<Client>());
    ASSERT_TRUE(clients.back()->connect("127.0.0.1", server_->port()).ok()) << i;
  }
  EXPECT_TRUE(eventually([&] { return server_->stats().num_connections_open == kConns; }));
  // Every one of them is still served.
  for (int i = 0; i < kConns; i += 7) {
    auto r = clients[i]->request("GET", "/items/" + std::to_string(i));
    ASSERT_TRUE(r.ok()) << i;
    EXPECT_EQ(r->body, "item=" + std::to_string(i));
  }
}

TEST_F(ServerTest, ConnectionCapsRefuseWith503AndFreeSlotsOnClose) {
  ServerOptions opts;
  opts.max_connections = 3;
  opts.max_connections_per_client = 2;
  start(std::move(opts));
  // Per client (every test connection comes from 127.0.0.1): the third is refused.
  auto a = std::make_unique<Client>(connect());
  auto b = std::make_unique<Client>(connect());
  ASSERT_TRUE(a->request("GET", "/hello").ok());
  ASSERT_TRUE(b->request("GET", "/hello").ok());
  Client c = connect();
  auto refused = c.read_response();  // the server speaks first: 503 and close
  ASSERT_TRUE(refused.ok()) << refused.status().to_string();
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->header("retry-after"), "1");
  EXPECT_NE(refused->body.find("Too many connections from 127.0.0.1"), std::string::npos) << refused->body;
  EXPECT_TRUE(c.wait_closed(2000ms));
  EXPECT_EQ(server_->stats().num_refused_connections, 1u);
  // Closing one frees its slot.
  a.reset();
  EXPECT_TRUE(eventually([&] { return server_->stats().num_connections_open == 1; }));
  Client d = connect();
  auto ok = d.request("GET", "/hello");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
}

TEST_F(ServerTest, TotalConnectionCapRefusesWith503) {
  ServerOptions opts;
  opts.max_connections = 2;
  start(std::move(opts));
  Client a = connect(), b = connect();
  ASSERT_TRUE(a.request("GET", "/hello").ok());
  ASSERT_TRUE(b.request("GET", "/hello").ok());
  Client c = connect();
  auto refused = c.read_response();
  ASSERT_TRUE(refused.ok()) << refused.status().to_string();
  EXPECT_EQ(refused->status, 503);
  EXPECT_NE(refused->body.find("too many open connections (limit 2)"), std::string::npos) << refused->body;
}

// serve's loading server hands its socket to the real server: the port stays bound throughout,
// and a client that connects during the switch is answered by the second server.
TEST_F(ServerTest, ReleasedListenerIsAdoptedWithoutUnbindingThePort) {
  start();
  const uint16_t port = server_->port();
  int fd = server_->release_listener();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(server_->release_listener(), -1);  // only once
  server_->stop();
  // Nothing accepts now, but the port is still bound and listening: a connect succeeds (it
  // waits in the backlog) and a second bind of the port fails.
  Client early;
  ASSERT_TRUE(early.connect("127.0.0.1", port).ok());
  ASSERT_TRUE(early.send_request("GET", "/hello", "", {}).ok());
  ServerOptions clash;
  clash.port = port;
  EXPECT_EQ(Server(clash).start().code(), StatusCode::kUnavailable);

  ServerOptions opts;
  opts.listen_fd = fd;
  Server second(opts);
  second.route(Method::kGet, "/hello", [](const ExchangePtr& ex) { ex->respond(text(200, "second")); });
  ASSERT_TRUE(second.start().ok());
  EXPECT_EQ(second.port(), port);
  auto head = early.read_head();
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  EXPECT_EQ(head->status, 200);
  Client later;
  ASSERT_TRUE(later.connect("127.0.0.1", port).ok());
  auto r = later.request("GET", "/hello", "", {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "second");
  second.stop();
}

TEST_F(ServerTest, OccupiedPortFailsWithClearStatus) {
  start();
  ServerOptions opts;
  opts.port = server_->port();
  Server second(opts);
  Status st = second.start();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("already in use"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(std::to_string(server_->port())), std::string::npos);
}

TEST_F(ServerTest, BadHostFails) {
  ServerOptions opts;
  opts.host = "no-such-host.invalid";
  Server s(opts);
  Status st = s.start();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
}

TEST_F(ServerTest, DrainFinishesInFlightStreamThenCloses) {
  start();
  Client idle = connect();
  Client c = connect();
  ASSERT_TRUE(c.send_request("POST", "/park", "{}").ok());
  ExchangePtr ex = parking_.wait_one();
  ASSERT_NE(ex, nullptr);
  ex->start_stream(200, "text/event-stream");
  ASSERT_TRUE(ex->write("data: 0\n\n"));
  auto head = c.read_head();
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->header("connection"), "keep-alive");  // sent before the drain began
  auto drained = std::async(std::launch::async, [&] { server_->drain(5000ms); });
  ASSERT_TRUE(eventually([&] { return server_->draining(); }));
  EXPECT_TRUE(idle.wait_closed(2000ms));  // idle connections close at once
  Client late;
  bool refused = !late.connect("127.0.0.1", server_->port()).ok() ||
                 !late.request("GET", "/hello").ok();
  EXPECT_TRUE(refused);  // no longer accepting
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(ex->write("data: 1\n\n"));  // the in-flight stream still flows
  ex->finish();
  ASSERT_EQ(drained.wait_for(3000ms), std::future_status::ready);
  std::string all;
  while (true) {
    auto chunk = c.read_chunk();
    ASSERT_TRUE(chunk.ok());
    if (chunk->empty()) break;
    all += *chunk;
  }
  EXPECT_EQ(all, "data: 0\n\ndata: 1\n\n");
  EXPECT_FALSE(ex->cancelled());
  EXPECT_TRUE(c.wait_closed(1000ms));
}

TEST_F(ServerTest, DrainDeadlineCancelsUnfinishedRequests) {
  start();
  Client c = connect();
  ASSERT_TRUE(c.send_request("POST", "/park", "{}").ok());
  ExchangePtr ex = parking_.wait_one();
  ASSERT_NE(ex, nullptr);
  auto t0 = std::chrono::steady_clock::now();
  server_->drain(200ms);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 2000ms);
  EXPECT_TRUE(ex->cancelled());
  EXPECT_TRUE(c.wait_closed(1000ms));
  ex->respond(text(200, "after stop"));  // must not crash or leak
  ex.reset();
  server_.reset();
}

}  // namespace
}  // namespace ts::http
