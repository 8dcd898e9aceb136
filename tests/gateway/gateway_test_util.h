// Helpers for the gateway tests: real PostgreSQL databases and Redis prefixes from the services
// started by scripts/start_test_services.sh, and a TCP forwarder to simulate a database outage.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gateway/sha256.h"
#include "gateway/sql_db.h"

namespace ts::gateway::testing {

inline std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

#define TS_REQUIRE_PG(var)                                                                   \
  std::string var = ::ts::gateway::testing::env_or_empty("TOKENSERVE_TEST_PG");              \
  if (var.empty()) GTEST_SKIP() << "TOKENSERVE_TEST_PG not set; run "                        \
                                   "eval \"$(scripts/start_test_services.sh)\" first"
#define TS_REQUIRE_REDIS(var)                                                                \
  std::string var = ::ts::gateway::testing::env_or_empty("TOKENSERVE_TEST_REDIS");           \
  if (var.empty()) GTEST_SKIP() << "TOKENSERVE_TEST_REDIS not set; run "                     \
                                   "eval \"$(scripts/start_test_services.sh)\" first"

// "postgresql://u@h:p/db" -> ("postgresql://u@h:p/", "db").
inline std::string pg_url_with_db(const std::string& url, const std::string& db) {
  size_t scheme = url.find("://");
  size_t slash = url.find('/', scheme + 3);
  std::string base = slash == std::string::npos ? url + "/" : url.substr(0, slash + 1);
  return base + db;
}

inline std::string pg_url_with_port(const std::string& url, int port) {
  size_t scheme = url.find("://");
  size_t at = url.find('@', scheme + 3);
  size_t host = at == std::string::npos ? scheme + 3 : at + 1;
  size_t slash = url.find('/', host);
  std::string hostport = url.substr(host, slash - host);
  std::string h = hostport.substr(0, hostport.rfind(':'));
  return url.substr(0, host) + h + ":" + std::to_string(port) + url.substr(slash);
}

// A fresh PostgreSQL database for one test, dropped at the end.
class PgDatabase {
 public:
  explicit PgDatabase(const std::string& admin_url) : admin_(make_postgres_db(admin_url)) {
    auto suffix = random_base62(10);
    name_ = "ts_test_" + std::string(suffix.ok() ? *suffix : "x");
    for (char& c : name_) c = char(std::tolower(static_cast<unsigned char>(c)));
    Status st = admin_->exec("CREATE DATABASE " + name_);
    EXPECT_TRUE(st.ok()) << st.to_string();
    url_ = pg_url_with_db(admin_url, name_);
  }
  ~PgDatabase() { (void)admin_->exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)"); }
  const std::string& url() const { return url_; }
  const std::string& name() const { return name_; }

 private:
  std::unique_ptr<SqlDb> admin_;
  std::string name_, url_;
};

// Unique Redis key prefix per test.
inline std::string redis_prefix() {
  auto r = random_base62(8);
  return "tstest:" + (r.ok() ? *r : std::string("x")) + ":";
}

// A port nothing listens on (bound then released).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Forwards 127.0.0.1:listen_port to 127.0.0.1:target_port. stop() cuts every connection, which
// to a client looks like the database going away; start() again brings it back.
class TcpForwarder {
 public:
  explicit TcpForwarder(int target_port) : target_(target_port) {}
  ~TcpForwarder() { stop(); }

  bool start(int listen_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(listen_port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(listen_fd_, 16) != 0) {
      ::close(listen_fd_);
      return false;
    }
    running_ = true;
    acceptor_ = std::thread([this] { accept_loop(); });
    return true;
  }

  void stop() {
    if (!running_.exchange(false)) return;
    acceptor_.join();
    ::close(listen_fd_);
    {
      std::lock_guard lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : pumps_) t.join();
    pumps_.clear();
    for (int fd : fds_) ::close(fd);
    fds_.clear();
  }

 private:
  void accept_loop() {
    while (running_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) continue;
      int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(uint16_t(target_));
      if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      std::lock_guard lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { pump(client, server); });
    }
  }

  void pump(int a, int b) {
    char buf[16384];
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    while (running_) {
      if (::poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
        if (n <= 0 || ::send(p[1 - i].fd, buf, size_t(n), MSG_NOSIGNAL) != n) {
          ::shutdown(a, SHUT_RDWR);
          ::shutdown(b, SHUT_RDWR);
          return;
        }
      }
    }
  }

  int target_;
  int listen_fd_ = -1;
  std::atomic<bool> running_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

// A listener that never accepts and never answers: connections complete in the kernel's
// backlog and then hang, as a partitioned or stopped-but-not-dead server looks to a client.
class BlackHole {
 public:
  BlackHole() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd_, 64);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~BlackHole() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace ts::gateway::testing
