#include "net/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace ts::net {
namespace {

using namespace std::chrono_literals;

TEST(Url, Parses) {
  auto u = parse_url("http://127.0.0.1:8080");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "");
  u = parse_url("http://example.com/v1/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "example.com");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->base_path, "/v1");
  u = parse_url("http://[::1]:9000/x");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9000);
  auto t = parse_url("https://api.example.com/v1");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->tls);
  EXPECT_EQ(t->port, 443);
  EXPECT_EQ(t->origin(), "https://api.example.com:443");
  EXPECT_EQ(parse_url("ftp://x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_url("http://x:99999").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_url("http://:80").status().code(), StatusCode::kInvalidArgument);
}

TEST(Sse, ParsesEventsAcrossSplitsAndLineEndings) {
  const std::string stream =
      ": keep-alive comment\n"
      "data: {\"a\":1}\n\n"
      "event: update\r\ndata:first\r\ndata: second\r\n\r\n"
      "id: 7\rdata: cr-only\r\r"
      "data\n\n"          // field with no colon: empty data
      "retry: 10\n\n"     // no data: not dispatched
      "data: [DONE]\n\n"
      "data: incomplete";  // never terminated
  std::vector<SseEvent> expect_events;
  for (size_t split = 1; split <= stream.size(); split += 3) {
    SseParser p;
    std::vector<SseEvent> got;
    auto cb = [&](const SseEvent& e) { got.push_back(e); };
    for (size_t i = 0; i < stream.size(); i += split) p.feed(std::string_view(stream).substr(i, split), cb);
    ASSERT_EQ(got.size(), 5u) << "split " << split;
    EXPECT_EQ(got[0].data, "{\"a\":1}");
    EXPECT_EQ(got[0].event, "");
    EXPECT_EQ(got[1].event, "update");
    EXPECT_EQ(got[1].data, "first\nsecond");
    EXPECT_EQ(got[2].data, "cr-only");
    EXPECT_EQ(got[2].event, "");
    EXPECT_EQ(got[3].data, "");
    EXPECT_EQ(got[4].data, "[DONE]");
  }
}

// Serves one connection with `response` (written in pieces of `piece` bytes), then closes.
class OneShotServer {
 public:
  OneShotServer(std::string response, size_t piece) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, response, piece] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      request_ = req;
      for (size_t i = 0; i < response.size(); i += piece) {
        ::send(c, response.data() + i, std::min(piece, response.size() - i), MSG_NOSIGNAL);
        std::this_thread::sleep_for(1ms);
      }
      ::close(c);
    });
  }
  ~OneShotServer() {
    thread_.join();
    ::close(fd_);
  }
  Url url() const { return Url{"127.0.0.1", port_, ""}; }
  std::string request_;

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

HttpCallOptions soon() { return {.deadline = std::chrono::steady_clock::now() + 10s}; }

TEST(HttpClient, ContentLengthBody) {
  OneShotServer s("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhelloEXTRA", 3);
  HttpRequest req;
  req.method = "POST";
  req.path = "/tokenize";
  req.body = "{}";
  auto r = http_fetch(s.url(), req, soon());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->head.status, 200);
  EXPECT_EQ(r->head.header("x-a"), "b");
  EXPECT_EQ(r->body, "hello");
}

TEST(HttpClient, ChunkedBodyArrivesIncrementally) {
  OneShotServer s("HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", 4);
  std::vector<std::string> pieces;
  HttpHandlers h;
  int status = 0;
  h.on_head = [&](const HttpResponseHead& head) {
    status = head.status;
    return true;
  };
  h.on_body = [&](std::string_view b) {
    pieces.emplace_back(b);
    return true;
  };
  auto r = http_stream(s.url(), HttpRequest{}, soon(), h);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(status, 201);
  std::string joined;
  for (auto& p : pieces) joined += p;
  EXPECT_EQ(joined, "abcde");
  EXPECT_GT(pieces.size(), 1u);  // delivered as it arrived, not at the end
  EXPECT_NE(s.request_.find("GET / HTTP/1.1\r\n"), std::string::npos);
}

TEST(HttpClient, ReadUntilCloseAndTruncation) {
  {
    OneShotServer s("HTTP/1.0 200 OK\r\n\r\nuntil close", 5);
    auto r = http_fetch(s.url(), HttpRequest{}, soon());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->body, "until close");
  }
  {
    OneShotServer s("HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", 100);
    auto r = http_fetch(s.url(), HttpRequest{}, soon());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  }
  {
    OneShotServer s("garbage\r\n\r\n", 100);
    auto r = http_fetch(s.url(), HttpRequest{}, soon());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
}

TEST(HttpClient, ConnectionRefusedIsUnavailable) {
  // Port 1: nothing listens there, and it is outside the ephemeral range (a bound-then-closed
  // ephemeral port could be picked as the client's own source port: a TCP self-connect).
  auto r = http_fetch(Url{"127.0.0.1", 1, ""}, HttpRequest{}, soon());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
}

// A server that accepts and reads but never answers.
// A server that accepts (the kernel completes handshakes from the backlog) but never answers.
class SilentServer {
 public:
  SilentServer() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_TRUE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(fd_, 4) == 0 &&
                ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
  }
  ~SilentServer() { ::close(fd_); }
  Url url() const { return Url{"127.0.0.1", port_, ""}; }

 private:
  int fd_;
  uint16_t port_ = 0;
};

TEST(HttpClient, DeadlineAndCancelStopAStalledCall) {
  SilentServer s;  // the kernel completes the handshake from the backlog; nobody answers
  auto t0 = std::chrono::steady_clock::now();
  auto r = http_fetch(s.url(), HttpRequest{}, {.deadline = t0 + 200ms});
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);

  std::atomic<bool> cancel{false};
  std::thread flip([&] {
    std::this_thread::sleep_for(100ms);
    cancel = true;
  });
  t0 = std::chrono::steady_clock::now();
  r = http_fetch(s.url(), HttpRequest{}, {.deadline = t0 + 10s, .cancel = &cancel});
  flip.join();
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(HttpClient, InterimResponsesAreSkippedAndHandlersCanStop) {
  OneShotServer s("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", 4);
  HttpHandlers h;
  std::vector<int> heads;
  std::string got;
  h.on_head = [&](const HttpResponseHead& head) {
    heads.push_back(head.status);
    return true;
  };
  h.on_body = [&](std::string_view b) {
    got.append(b);
    return false;  // stop after the first piece
  };
  HttpRequest req;
  req.method = "POST";
  req.body = "x";
  auto r = http_stream(s.url(), req, soon(), h);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(heads, std::vector<int>{200});
  EXPECT_FALSE(got.empty());
  EXPECT_LT(got.size(), 10u);
  // The request carries what the caller gave and no default form content type.
  EXPECT_NE(s.request_.find("POST / HTTP/1.1\r\n"), std::string::npos) << s.request_;
  EXPECT_NE(s.request_.find("Content-Length: 1\r\n"), std::string::npos) << s.request_;
  EXPECT_EQ(s.request_.find("Content-Type"), std::string::npos) << s.request_;
  EXPECT_EQ(s.request_.find("Expect:"), std::string::npos) << s.request_;
}

}  // namespace
}  // namespace ts::net

namespace ts::net {
namespace {

TEST(HttpClient, StageSaysHowFarAFailedCallGot) {
  CallStage stage = CallStage::kReadingBody;
  auto opts = soon();
  opts.stage = &stage;
  auto r = http_fetch(Url{"127.0.0.1", 1, ""}, HttpRequest{}, opts);  // refused: nothing reached a server
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(stage, CallStage::kConnecting) << call_stage_name(stage);

  SilentServer s;  // connected and sent, no head
  opts.deadline = std::chrono::steady_clock::now() + 200ms;
  r = http_fetch(s.url(), HttpRequest{}, opts);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(stage, CallStage::kAwaitingHead) << call_stage_name(stage);

  OneShotServer cut("HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", 100);  // head, then the body is cut
  opts.deadline = std::chrono::steady_clock::now() + 10s;
  r = http_fetch(cut.url(), HttpRequest{}, opts);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(stage, CallStage::kReadingBody) << call_stage_name(stage);
}

TEST(HttpClient, IdleTimeoutEndsASilentCallButNotABusyOne) {
  SilentServer s;
  auto t0 = std::chrono::steady_clock::now();
  HttpCallOptions opts{.deadline = t0 + 10s};
  opts.idle_timeout = 150ms;
  auto r = http_fetch(s.url(), HttpRequest{}, opts);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().to_string();
  EXPECT_NE(r.status().message().find("no response byte for 150 ms"), std::string::npos) << r.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);

  // A steady trickle keeps the call alive even when the whole call outlasts the idle timeout.
  std::string body(400, 'x');
  OneShotServer slow("HTTP/1.1 200 OK\r\nContent-Length: 400\r\n\r\n" + body, 2);  // ~200 pieces, 1 ms apart
  opts.deadline = std::chrono::steady_clock::now() + 10s;
  opts.idle_timeout = 100ms;
  auto t1 = std::chrono::steady_clock::now();
  r = http_fetch(slow.url(), HttpRequest{}, opts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->body, body);
  EXPECT_GT(std::chrono::steady_clock::now() - t1, 100ms);  // longer than the idle timeout in all
}

TEST(HttpClient, TlsToAPlainServerFailsWhileConnecting) {
  // A plain-HTTP server that answers the TLS ClientHello with an HTTP error and closes.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_TRUE(::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(fd, 4) == 0 &&
              ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  std::thread server([fd] {
    int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) return;
    char buf[512];
    (void)::recv(c, buf, sizeof(buf), 0);
    const std::string resp = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
    ::close(c);
  });
  Url u{"127.0.0.1", ntohs(a.sin_port), ""};
  u.tls = true;
  CallStage stage = CallStage::kReadingBody;
  auto opts = soon();
  opts.stage = &stage;
  auto r = http_fetch(u, HttpRequest{}, opts);
  server.join();
  ::close(fd);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
  EXPECT_EQ(stage, CallStage::kConnecting) << call_stage_name(stage);
}

// Answers keep-alive requests on each accepted connection; counts connections.
class KeepAliveServer {
 public:
  KeepAliveServer() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_TRUE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(fd_, 4) == 0 &&
                ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        ++connections;
        std::string buf;
        char tmp[4096];
        for (;;) {
          size_t end;
          while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
            ssize_t n = ::recv(c, tmp, sizeof(tmp), 0);
            if (n <= 0) break;
            buf.append(tmp, static_cast<size_t>(n));
          }
          if (end == std::string::npos) break;
          buf.erase(0, end + 4);
          const std::string resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
          ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
        }
        ::close(c);
      }
    });
  }
  ~KeepAliveServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  Url url() const { return Url{"127.0.0.1", port_, ""}; }
  std::atomic<int> connections{0};

 private:
  int fd_;
  uint16_t port_ = 0;
  std::thread thread_;
};

TEST(HttpSession, ReusesItsConnection) {
  KeepAliveServer s;
  {
    HttpSession session;
    for (int i = 0; i < 5; ++i) {
      auto r = session.fetch(s.url(), HttpRequest{.path = "/ready"}, soon());
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(r->body, "ok");
    }
  }
  EXPECT_EQ(s.connections.load(), 1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(http_fetch(s.url(), HttpRequest{}, soon()).ok());
  EXPECT_EQ(s.connections.load(), 3);  // one-shot calls connect afresh
}

TEST(HttpSession, AStoppedStreamNeverHandsItsConnectionOn) {
  KeepAliveServer s;
  HttpSession session;
  HttpHandlers stop_early;
  stop_early.on_body = [](std::string_view) { return false; };  // e.g. the gateway's client left
  ASSERT_TRUE(session.stream(s.url(), HttpRequest{}, soon(), stop_early).ok());
  auto r = session.fetch(s.url(), HttpRequest{}, soon());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->body, "ok");
  EXPECT_EQ(s.connections.load(), 2);  // the stopped transfer's connection was closed, not reused
  ASSERT_TRUE(session.fetch(s.url(), HttpRequest{}, soon()).ok());
  EXPECT_EQ(s.connections.load(), 2);  // a completed one is
}

}  // namespace
}  // namespace ts::net
