// `pull` against a real local HTTP server (loopback) that serves files with Range support, can
// cut a transfer short, redirect, ignore Range, or refuse.
#include "tools/pull.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "gateway/sha256.h"
#include "test_util.h"

namespace ts::tools {
namespace {

class FileServer {
 public:
  std::map<std::string, std::string> files;  // path -> body
  std::atomic<int64_t> cut_after{-1};        // close the connection after this many body bytes
  bool ignore_range = false;
  std::atomic<int> requests{0};
  std::atomic<int64_t> body_bytes_sent{0};
  bool send_etag = false;                    // ETag: "<sha256 of the body>" (as HF's CDN)
  bool linked_etag = false;                  // X-Linked-Etag on a redirect (as huggingface.co)
  std::string etag_override;                 // announce this sha256 instead of the body's

  FileServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 16);
    thread_ = std::thread([this] { loop(); });
  }
  ~FileServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void loop() {
    while (!stop_) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      handle(c);
      close(c);
    }
  }
  void send_all(int c, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  void handle(int c) {
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      req.append(buf, static_cast<size_t>(n));
    }
    ++requests;
    std::string path = req.substr(4, req.find(' ', 4) - 4);
    if (path.rfind("/redirect/", 0) == 0) {
      std::string linked;
      auto target = files.find("/" + path.substr(10));
      if (linked_etag && target != files.end())
        linked = "X-Linked-Etag: \"" + etag_of(target->second) + "\"\r\n";
      send_all(c, "HTTP/1.1 302 Found\r\nLocation: /" + path.substr(10) + "\r\n" + linked +
                      "Content-Length: 0\r\nConnection: close\r\n\r\n");
      return;
    }
    if (path.find("gated") != std::string::npos) {
      send_all(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
      return;
    }
    auto it = files.find(path);
    if (it == files.end()) {
      send_all(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found");
      return;
    }
    const std::string& body = it->second;
    size_t from = 0;
    auto r = req.find("Range: bytes=");
    bool partial = r != std::string::npos && !ignore_range;
    auto ir = req.find("If-Range: ");
    if (partial && ir != std::string::npos) {  // a stale validator: send the whole (new) file
      std::string v = req.substr(ir + 10, req.find("\r\n", ir) - ir - 10);
      if (v != "\"" + etag_of(body) + "\"") partial = false;
    }
    if (partial) from = std::stoull(req.substr(r + 13));
    std::string head;
    if (partial) {
      head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " + std::to_string(from) + "-" +
             std::to_string(body.size() - 1) + "/" + std::to_string(body.size()) + "\r\n";
    } else {
      head = "HTTP/1.1 200 OK\r\n";
    }
    if (send_etag) head += "ETag: \"" + etag_of(body) + "\"\r\n";
    head += "Content-Length: " + std::to_string(body.size() - from) + "\r\nConnection: close\r\n\r\n";
    send_all(c, head);
    std::string rest = body.substr(from);
    int64_t cut = cut_after.exchange(-1);
    if (cut >= 0 && cut < static_cast<int64_t>(rest.size())) rest.resize(static_cast<size_t>(cut));
    body_bytes_sent += static_cast<int64_t>(rest.size());
    send_all(c, rest);
  }
  std::string etag_of(const std::string& body) const {
    return etag_override.empty() ? gateway::sha256_hex(body) : etag_override;
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string fake_gguf(size_t n) {
  std::string s = "GGUF";
  for (size_t i = 4; i < n; ++i) s += static_cast<char>('a' + i % 26);
  return s;
}

TEST(Pull, ParsesSpecs) {
  auto s = parse_pull_spec("Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->repo, "Qwen/Qwen2.5-0.5B-Instruct-GGUF");
  EXPECT_EQ(s->file, "qwen2.5-0.5b-instruct-q8_0.gguf");
  EXPECT_TRUE(parse_pull_spec("a/b/sub/dir/f.gguf").ok());
  for (const char* bad : {"", "a", "a/b", "a/b/", "/b/c", "a//c", "a/b/../../etc/passwd", "a/b//etc/passwd",
                          "../../x/f.gguf", "a/../f.gguf", "..a/b/f.gguf", "a/b/./f.gguf", "a/b/dir/../f.gguf",
                          "a/b c/f.gguf", "a/b/f\\x.gguf", "a/b/f\nx.gguf", "a/b/f%2e.gguf", "a/b--c/f.gguf"}) {
    EXPECT_FALSE(parse_pull_spec(bad).ok()) << bad;
  }
  EXPECT_EQ(default_models_dir("/m", "/home/x"), "/m");
  EXPECT_EQ(default_models_dir(nullptr, "/home/x"), "/home/x/.cache/tokenserve/models");
  PullOptions o;
  EXPECT_EQ(resolve_url(o, *s), "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q8_0.gguf");
}

TEST(Pull, DownloadsResumesAndVerifies) {
  FileServer srv;
  const std::string body = fake_gguf(300000);
  srv.files["/o/r/resolve/main/m.gguf"] = body;
  srv.send_etag = true;
  PullOptions o{.endpoint = srv.url(), .models_dir = ::ts::testing::temp_dir()};
  int64_t last_done = 0, last_total = 0;
  o.progress = [&](int64_t d, int64_t t) { last_done = d; last_total = t; };
  PullSpec spec{"o/r", "m.gguf"};

  // First attempt is cut short: the partial file stays, the error says how to resume.
  srv.cut_after = 100000;
  auto r1 = pull_model(spec, o);
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("resume"), std::string::npos) << r1.status().message();
  std::string partial = model_path_for(o.models_dir, spec) + ".partial";
  ASSERT_TRUE(std::filesystem::exists(partial));
  EXPECT_EQ(std::filesystem::file_size(partial), 100000u);

  // Second attempt continues with a Range request and completes; the SHA-256 is checked over
  // the whole file.
  srv.body_bytes_sent = 0;
  auto r2 = pull_model(spec, o);
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_EQ(srv.body_bytes_sent, static_cast<int64_t>(body.size()) - 100000);
  EXPECT_EQ(::ts::testing::read_file(*r2), body);
  EXPECT_FALSE(std::filesystem::exists(partial));
  EXPECT_EQ(last_done, static_cast<int64_t>(body.size()));
  EXPECT_EQ(last_total, static_cast<int64_t>(body.size()));

  // Already complete: no request at all.
  int before = srv.requests;
  ASSERT_TRUE(pull_model(spec, o).ok());
  EXPECT_EQ(srv.requests, before);
}

TEST(Pull, ServerIgnoringRangeRestartsCleanly) {
  FileServer srv;
  srv.ignore_range = true;
  const std::string body = fake_gguf(50000);
  srv.files["/o/r/resolve/main/m.gguf"] = body;
  PullOptions o{.endpoint = srv.url(), .models_dir = ::ts::testing::temp_dir()};
  PullSpec spec{"o/r", "m.gguf"};
  srv.cut_after = 20000;
  ASSERT_FALSE(pull_model(spec, o).ok());
  auto r = pull_model(spec, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(::ts::testing::read_file(*r), body);
}

TEST(Pull, FollowsRedirects) {
  FileServer srv;
  srv.files["/o/r/resolve/main/m.gguf"] = fake_gguf(1000);
  PullOptions o{.endpoint = srv.url() + "/redirect", .models_dir = ::ts::testing::temp_dir()};
  auto r = pull_model({"o/r", "m.gguf"}, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(std::filesystem::file_size(*r), 1000u);
}

TEST(Pull, ClearErrors) {
  FileServer srv;
  srv.files["/o/r/resolve/main/notgguf.bin"] = std::string(5000, 'x');
  PullOptions o{.endpoint = srv.url(), .models_dir = ::ts::testing::temp_dir()};
  auto missing = pull_model({"o/r", "nope.gguf"}, o);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto gated = pull_model({"o/gated", "m.gguf"}, o);
  EXPECT_EQ(gated.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(gated.status().message().find("HF_TOKEN"), std::string::npos);
  auto bad = pull_model({"o/r", "notgguf.bin"}, o);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(std::filesystem::exists(model_path_for(o.models_dir, {"o/r", "notgguf.bin"})));
  PullOptions down{.endpoint = "http://127.0.0.1:1", .models_dir = ::ts::testing::temp_dir()};
  EXPECT_EQ(pull_model({"o/r", "m.gguf"}, down).status().code(), StatusCode::kUnavailable);
}

TEST(Pull, ChecksumMismatchIsRefusedAndRemoved) {
  FileServer srv;
  srv.files["/o/r/resolve/main/m.gguf"] = fake_gguf(40000);
  srv.send_etag = true;
  srv.etag_override = gateway::sha256_hex("some other content");
  PullOptions o{.endpoint = srv.url(), .models_dir = ::ts::testing::temp_dir()};
  PullSpec spec{"o/r", "m.gguf"};
  auto r = pull_model(spec, o);
  ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
  EXPECT_NE(r.status().message().find("checksum mismatch"), std::string::npos) << r.status().message();
  EXPECT_FALSE(std::filesystem::exists(model_path_for(o.models_dir, spec)));
  EXPECT_FALSE(std::filesystem::exists(model_path_for(o.models_dir, spec) + ".partial"));
}

TEST(Pull, LinkedEtagOfTheHubRedirectIsVerifiedAfterAResume) {
  FileServer srv;
  const std::string body = fake_gguf(60000);
  srv.files["/o/r/resolve/main/m.gguf"] = body;
  srv.send_etag = true;
  srv.linked_etag = true;
  PullOptions o{.endpoint = srv.url() + "/redirect", .models_dir = ::ts::testing::temp_dir()};
  PullSpec spec{"o/r", "m.gguf"};
  srv.cut_after = 25000;
  ASSERT_FALSE(pull_model(spec, o).ok());
  // Corrupt the kept part: the resume itself succeeds but the whole-file checksum cannot.
  {
    std::FILE* f = std::fopen((model_path_for(o.models_dir, spec) + ".partial").c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 1000, SEEK_SET);
    std::fputc('#', f);
    std::fclose(f);
  }
  auto bad = pull_model(spec, o);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status().to_string();
  auto good = pull_model(spec, o);  // a clean restart
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  EXPECT_EQ(::ts::testing::read_file(*good), body);
}

TEST(Pull, ChangedRemoteFileRestartsCleanlyThroughIfRange) {
  FileServer srv;
  const std::string v1 = fake_gguf(50000);
  std::string v2 = v1;
  for (size_t i = 30000; i < v2.size(); ++i) v2[i] = 'Z';  // same size, new revision
  srv.files["/o/r/resolve/main/m.gguf"] = v1;
  srv.send_etag = true;
  PullOptions o{.endpoint = srv.url(), .models_dir = ::ts::testing::temp_dir()};
  PullSpec spec{"o/r", "m.gguf"};
  srv.cut_after = 20000;
  ASSERT_FALSE(pull_model(spec, o).ok());
  srv.files["/o/r/resolve/main/m.gguf"] = v2;
  srv.body_bytes_sent = 0;
  auto r = pull_model(spec, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(::ts::testing::read_file(*r), v2);  // not v1's first 20000 bytes spliced onto v2
  EXPECT_EQ(srv.body_bytes_sent, static_cast<int64_t>(v2.size()));
}

TEST(Pull, HandBuiltSpecsAndRevisionsAreValidatedToo) {
  PullOptions o{.endpoint = "http://127.0.0.1:1", .models_dir = ::ts::testing::temp_dir()};
  EXPECT_EQ(pull_model({"o/r", "/etc/passwd"}, o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pull_model({"../..", "f.gguf"}, o).status().code(), StatusCode::kInvalidArgument);
  o.revision = "../../x";
  EXPECT_EQ(pull_model({"o/r", "f.gguf"}, o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(validate_revision("main").ok());
  EXPECT_TRUE(validate_revision("refs/pr/1").ok());
}

}  // namespace
}  // namespace ts::tools
