#include "tools/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace ts::tools {
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
  EXPECT_EQ(parse_url("https://x").status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(parse_url("ftp://x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_url("http://x:99999").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_url("http://:80").status().code(), StatusCode::kInvalidArgument);
}

TEST(Chunked, DecodesWholeAndByteByByte) {
  const std::string wire = "4\r\nWiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\nJUNK";
  {
    ChunkedDecoder d;
    std::string out;
    ASSERT_TRUE(d.feed(wire, &out).ok());
    EXPECT_TRUE(d.done());
    EXPECT_EQ(out, "Wikipedia in \r\n\r\nchunks.");
  }
  ChunkedDecoder d;
  std::string out;
  for (char c : wire) {
    ASSERT_TRUE(d.feed(std::string_view(&c, 1), &out).ok());
  }
  EXPECT_TRUE(d.done());
  EXPECT_EQ(out, "Wikipedia in \r\n\r\nchunks.");
}

TEST(Chunked, RejectsMalformed) {
  std::string out;
  ChunkedDecoder bad_size;
  EXPECT_EQ(bad_size.feed("zz\r\nabc\r\n", &out).code(), StatusCode::kDataLoss);
  ChunkedDecoder missing_crlf;
  EXPECT_EQ(missing_crlf.feed("3\r\nabcX\r\n", &out).code(), StatusCode::kDataLoss);
  ChunkedDecoder partial;
  out.clear();
  ASSERT_TRUE(partial.feed("5\r\nab", &out).ok());
  EXPECT_FALSE(partial.done());
  EXPECT_EQ(out, "ab");
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
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);  // bound then closed: nothing listens on this port
  auto r = http_fetch(Url{"127.0.0.1", ntohs(a.sin_port), ""}, HttpRequest{}, soon());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ts::tools
