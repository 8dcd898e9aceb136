#include "http/wire.h"

#include <gtest/gtest.h>

namespace ts::http {
namespace {

TEST(Wire, WholeResponseHead) {
  std::string h = format_response_head(404, "ts", "application/json", {{"Retry-After", "1"}}, 12, false, true);
  EXPECT_EQ(h,
            "HTTP/1.1 404 Not Found\r\nServer: ts\r\nContent-Type: application/json\r\n"
            "Content-Length: 12\r\nConnection: keep-alive\r\nRetry-After: 1\r\n\r\n");
}

TEST(Wire, ChunkedHeadDropsFramingHeadersAndInjection) {
  std::string h = format_response_head(200, "", "text/event-stream",
                                       {{"Content-Length", "5"}, {"connection", "x"},
                                        {"X-Evil", "a\r\nSet-Cookie: b"}},
                                       std::nullopt, true, false);
  EXPECT_EQ(h,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            "Connection: close\r\nX-Evil: aSet-Cookie: b\r\n\r\n");
}

TEST(Wire, ChunkFraming) {
  std::string out;
  append_chunk(&out, "");
  EXPECT_EQ(out, "");  // an empty chunk would end the body
  append_chunk(&out, std::string(26, 'a'));
  EXPECT_EQ(out, "1a\r\n" + std::string(26, 'a') + "\r\n");
  EXPECT_EQ(kLastChunk, "0\r\n\r\n");
}

}  // namespace
}  // namespace ts::http
