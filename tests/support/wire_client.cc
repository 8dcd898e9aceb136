#include "support/wire_client.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ts::http {

std::string_view ClientResponse::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

Client::~Client() { close(); }

void Client::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buf_.clear();
  eof_ = false;
}

Status Client::connect(const std::string& host, uint16_t port) {
  close();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return unavailable("cannot resolve " + host + ": " + gai_strerror(rc));
  Status st = unavailable("cannot connect to " + host + ":" + std::to_string(port));
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      fd_ = fd;
      st = ok_status();
      break;
    }
    st = unavailable("cannot connect to " + host + ":" + std::to_string(port) + ": " +
                     std::strerror(errno));
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return st;
}

Status Client::send_raw(std::string_view bytes) {
  if (fd_ < 0) return unavailable("not connected");
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return unavailable(std::string("send failed: ") + std::strerror(errno));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return ok_status();
}

Status Client::send_request(std::string_view method, std::string_view target,
                            std::string_view body, const HeaderList& headers) {
  std::string req;
  req += method;
  req += ' ';
  req += target;
  req += " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  bool has_ct = false;
  for (const auto& [k, v] : headers) {
    req += k + ": " + v + "\r\n";
    if (iequals(k, "content-type")) has_ct = true;
  }
  if (!body.empty() || method == "POST") {
    if (!has_ct) req += "Content-Type: application/json\r\n";
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n";
  req += body;
  return send_raw(req);
}

Result<ClientResponse> Client::request(std::string_view method, std::string_view target,
                                       std::string_view body, const HeaderList& headers) {
  TS_RETURN_IF_ERROR(send_request(method, target, body, headers));
  return read_response();
}

Status Client::fill(std::chrono::milliseconds timeout) {
  if (fd_ < 0) return unavailable("not connected");
  if (eof_) return unavailable("connection closed by the server");
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  int rc;
  do {
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return Status(StatusCode::kDeadlineExceeded, "timed out waiting for the server");
  if (rc < 0) return unavailable(std::string("poll failed: ") + std::strerror(errno));
  char tmp[16384];
  ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
  if (n <= 0) {
    eof_ = true;
    return unavailable(n == 0 ? "connection closed by the server"
                              : std::string("recv failed: ") + std::strerror(errno));
  }
  buf_.append(tmp, static_cast<size_t>(n));
  return ok_status();
}

Result<std::string> Client::read_line() {
  while (true) {
    size_t pos = buf_.find("\r\n");
    if (pos != std::string::npos) {
      std::string line = buf_.substr(0, pos);
      buf_.erase(0, pos + 2);
      return line;
    }
    TS_RETURN_IF_ERROR(fill(timeout_));
  }
}

Status Client::read_exact(size_t n, std::string* out) {
  while (buf_.size() < n) TS_RETURN_IF_ERROR(fill(timeout_));
  out->append(buf_, 0, n);
  buf_.erase(0, n);
  return ok_status();
}

Result<ClientResponse> Client::read_head(bool skip_interim) {
  while (true) {
    ClientResponse r;
    TS_ASSIGN_OR_RETURN(std::string status_line, read_line());
    // "HTTP/1.1 200 OK"
    size_t sp = status_line.find(' ');
    if (sp == std::string::npos || status_line.compare(0, 5, "HTTP/") != 0)
      return data_loss("bad status line: " + status_line);
    r.status = std::atoi(status_line.c_str() + sp + 1);
    while (true) {
      TS_ASSIGN_OR_RETURN(std::string line, read_line());
      if (line.empty()) break;
      size_t colon = line.find(':');
      if (colon == std::string::npos) return data_loss("bad header line: " + line);
      std::string value = line.substr(colon + 1);
      size_t b = value.find_first_not_of(" \t");
      value = b == std::string::npos ? "" : value.substr(b);
      r.headers.emplace_back(line.substr(0, colon), value);
    }
    if (skip_interim && r.status >= 100 && r.status < 200) continue;
    r.chunked = iequals(r.header("transfer-encoding"), "chunked");
    return r;
  }
}

Result<std::string> Client::read_chunk() {
  TS_ASSIGN_OR_RETURN(std::string size_line, read_line());
  size_t size = std::strtoul(size_line.c_str(), nullptr, 16);
  std::string data;
  if (size == 0) {
    // Trailers end with an empty line.
    while (true) {
      TS_ASSIGN_OR_RETURN(std::string line, read_line());
      if (line.empty()) break;
    }
    return data;
  }
  TS_RETURN_IF_ERROR(read_exact(size, &data));
  std::string crlf;
  TS_RETURN_IF_ERROR(read_exact(2, &crlf));
  if (crlf != "\r\n") return data_loss("chunk not followed by CRLF");
  return data;
}

Status Client::read_body(ClientResponse* r) {
  if (r->chunked) {
    while (true) {
      TS_ASSIGN_OR_RETURN(std::string chunk, read_chunk());
      if (chunk.empty()) break;
      r->body += chunk;
      r->chunks.push_back(std::move(chunk));
    }
  } else if (std::string_view cl = r->header("content-length"); !cl.empty()) {
    TS_RETURN_IF_ERROR(read_exact(std::strtoul(std::string(cl).c_str(), nullptr, 10), &r->body));
  } else if (r->status != 204 && r->status != 304) {
    while (fill(timeout_).ok()) {
    }
    r->body = std::move(buf_);
    buf_.clear();
  }
  return ok_status();
}

Result<ClientResponse> Client::read_response() {
  TS_ASSIGN_OR_RETURN(ClientResponse r, read_head());
  TS_RETURN_IF_ERROR(read_body(&r));
  return r;
}

bool Client::wait_closed(std::chrono::milliseconds wait) {
  auto until = std::chrono::steady_clock::now() + wait;
  while (true) {
    if (eof_) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    Status st = fill(left);
    if (!st.ok()) {
      if (st.code() == StatusCode::kDeadlineExceeded) return false;
      return true;
    }
  }
}

}  // namespace ts::http
