#include "tools/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace ts::tools {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Owns a socket descriptor.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Milliseconds to wait in one poll: until the deadline, at most 50 ms so cancel is noticed.
int poll_slice_ms(const HttpCallOptions& o) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(o.deadline -
                                                                    std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 50));
}

// Checks deadline and cancel; OK to keep going.
Status check_time(const HttpCallOptions& o) {
  if (o.cancel && o.cancel->load(std::memory_order_relaxed)) return {StatusCode::kCancelled, "cancelled"};
  if (std::chrono::steady_clock::now() >= o.deadline) return {StatusCode::kDeadlineExceeded, "deadline exceeded"};
  return ok_status();
}

Result<int> connect_to(const Url& url, const HttpCallOptions& o) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(url.port);
  if (int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return unavailable("cannot resolve " + url.host + ": " + ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    Fd s;
    s.fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (s.fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      continue;
    }
    for (;;) {
      if (Status st = check_time(o); !st.ok()) {
        ::freeaddrinfo(res);
        return st;
      }
      pollfd p{s.fd, POLLOUT, 0};
      int n = ::poll(&p, 1, poll_slice_ms(o));
      if (n < 0 && errno != EINTR) break;
      if (n > 0) break;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      last_error = std::strerror(err);
      continue;
    }
    int fd = s.fd;
    s.fd = -1;
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return unavailable("cannot connect to " + url.host + ":" + port + ": " + last_error);
}

Status send_all(int fd, std::string_view data, const HttpCallOptions& o) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return unavailable(std::string("send failed: ") + std::strerror(errno));
    TS_RETURN_IF_ERROR(check_time(o));
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, poll_slice_ms(o));
  }
  return ok_status();
}

// Parses "HTTP/1.1 200 OK\r\nName: value\r\n...\r\n" (without the final blank line).
Status parse_head(std::string_view text, HttpResponseHead* head) {
  size_t eol = text.find("\r\n");
  std::string_view status_line = text.substr(0, eol);
  if (status_line.substr(0, 5) != "HTTP/") return data_loss("not an HTTP response");
  size_t sp = status_line.find(' ');
  if (sp == std::string_view::npos || status_line.size() < sp + 4) return data_loss("bad status line");
  int code = 0;
  auto [p, ec] = std::from_chars(status_line.data() + sp + 1, status_line.data() + sp + 4, code);
  if (ec != std::errc() || code < 100 || code > 999) return data_loss("bad status code");
  head->status = code;
  head->headers.clear();
  while (eol != std::string_view::npos) {
    size_t start = eol + 2;
    eol = text.find("\r\n", start);
    std::string_view l = text.substr(start, eol == std::string_view::npos ? std::string_view::npos : eol - start);
    if (l.empty()) continue;
    size_t colon = l.find(':');
    if (colon == std::string_view::npos) return data_loss("bad header line");
    head->headers.emplace_back(std::string(trim(l.substr(0, colon))), std::string(trim(l.substr(colon + 1))));
  }
  return ok_status();
}

}  // namespace

Result<Url> parse_url(std::string_view s) {
  if (s.substr(0, 8) == "https://") return unimplemented("https is not supported; use http://");
  if (s.substr(0, 7) != "http://") return invalid_argument("URL must start with http://: " + std::string(s));
  s.remove_prefix(7);
  Url u;
  size_t slash = s.find('/');
  std::string_view authority = s.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : s.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  u.base_path = std::string(path);
  if (authority.empty()) return invalid_argument("URL has no host");
  std::string_view host = authority, port;
  if (authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return invalid_argument("bad IPv6 host in URL");
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return invalid_argument("bad URL authority");
      port = authority.substr(close + 2);
    }
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return invalid_argument("URL has no host");
  u.host = std::string(host);
  if (!port.empty()) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec != std::errc() || p != port.data() + port.size() || v == 0 || v > 65535)
      return invalid_argument("bad port in URL: " + std::string(port));
    u.port = static_cast<uint16_t>(v);
  }
  return u;
}

Status ChunkedDecoder::feed(std::string_view in, std::string* out) {
  while (!in.empty()) {
    switch (state_) {
      case State::kDone:
        return ok_status();
      case State::kError:
        return data_loss("chunked decoder used after an error");
      case State::kData: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size()));
        out->append(in.substr(0, take));
        in.remove_prefix(take);
        remaining_ -= take;
        if (remaining_ == 0) state_ = State::kDataCrlf;
        break;
      }
      case State::kSize:
      case State::kDataCrlf:
      case State::kTrailer: {
        size_t nl = in.find('\n');
        line_.append(in.substr(0, nl));
        if (line_.size() > 4096) {
          state_ = State::kError;
          return data_loss("chunked framing line too long");
        }
        if (nl == std::string_view::npos) return ok_status();
        in.remove_prefix(nl + 1);
        std::string_view l = line_;
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        if (state_ == State::kDataCrlf) {
          if (!l.empty()) {
            state_ = State::kError;
            return data_loss("chunk data not followed by CRLF");
          }
          state_ = State::kSize;
        } else if (state_ == State::kTrailer) {
          if (l.empty()) state_ = State::kDone;
        } else {
          std::string_view hex = trim(l.substr(0, l.find(';')));
          uint64_t size = 0;
          auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), size, 16);
          if (hex.empty() || ec != std::errc() || p != hex.data() + hex.size()) {
            state_ = State::kError;
            return data_loss("bad chunk size line: '" + std::string(l) + "'");
          }
          remaining_ = size;
          state_ = size == 0 ? State::kTrailer : State::kData;
        }
        line_.clear();
        break;
      }
    }
  }
  return ok_status();
}

void SseParser::feed(std::string_view in, const std::function<void(const SseEvent&)>& on_event) {
  for (char c : in) {
    if (pending_cr_) {
      pending_cr_ = false;
      if (c == '\n') continue;  // the \n of a \r\n pair
    }
    if (c == '\r' || c == '\n') {
      pending_cr_ = c == '\r';
      line(buf_, on_event);
      buf_.clear();
    } else {
      buf_.push_back(c);
    }
  }
}

void SseParser::line(std::string_view l, const std::function<void(const SseEvent&)>& on_event) {
  if (l.empty()) {
    if (has_data_) on_event(cur_);
    cur_ = SseEvent();
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;
  size_t colon = l.find(':');
  std::string_view field = l.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) cur_.data.push_back('\n');
    cur_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    cur_.event = std::string(value);
  }
}

std::string HttpResponseHead::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return "";
}

Result<HttpResponseHead> http_stream(const Url& url, const HttpRequest& req,
                                     const HttpCallOptions& opts, const HttpHandlers& handlers) {
  TS_ASSIGN_OR_RETURN(int raw_fd, connect_to(url, opts));
  Fd sock;
  sock.fd = raw_fd;

  std::string msg = req.method + " " + url.base_path + req.path + " HTTP/1.1\r\n";
  msg += "Host: " + url.host + ":" + std::to_string(url.port) + "\r\n";
  msg += "Connection: close\r\n";
  for (const auto& [k, v] : req.headers) msg += k + ": " + v + "\r\n";
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT")
    msg += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  msg += "\r\n";
  msg += req.body;
  TS_RETURN_IF_ERROR(send_all(sock.fd, msg, opts));

  HttpResponseHead head;
  bool have_head = false, chunked = false, stopped = false;
  int64_t content_left = -1;  // -1: read until close
  std::string raw;            // bytes before the head is complete
  ChunkedDecoder dechunk;
  std::string decoded;
  char buf[16384];

  auto deliver = [&](std::string_view bytes) -> Status {
    if (chunked) {
      decoded.clear();
      TS_RETURN_IF_ERROR(dechunk.feed(bytes, &decoded));
      if (!decoded.empty() && handlers.on_body && !handlers.on_body(decoded)) stopped = true;
    } else {
      if (content_left >= 0) bytes = bytes.substr(0, static_cast<size_t>(std::min<int64_t>(content_left, bytes.size())));
      if (content_left > 0) content_left -= static_cast<int64_t>(bytes.size());
      if (!bytes.empty() && handlers.on_body && !handlers.on_body(bytes)) stopped = true;
    }
    return ok_status();
  };
  auto body_done = [&] { return have_head && (chunked ? dechunk.done() : content_left == 0); };

  for (;;) {
    if (stopped || body_done()) return head;
    TS_RETURN_IF_ERROR(check_time(opts));
    pollfd p{sock.fd, POLLIN, 0};
    int pr = ::poll(&p, 1, poll_slice_ms(opts));
    if (pr < 0 && errno != EINTR) return unavailable(std::string("poll failed: ") + std::strerror(errno));
    if (pr <= 0) continue;
    ssize_t n = ::recv(sock.fd, buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return unavailable(std::string("connection error: ") + std::strerror(errno));
    }
    if (n == 0) {  // peer closed
      if (!have_head) return unavailable("connection closed before a response");
      if (!chunked && content_left < 0) return head;
      return unavailable("connection closed before the body ended");
    }
    std::string_view data(buf, static_cast<size_t>(n));
    if (have_head) {
      TS_RETURN_IF_ERROR(deliver(data));
      continue;
    }
    raw.append(data);
    size_t end = raw.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (raw.size() > (64u << 10)) return data_loss("response head too large");
      continue;
    }
    TS_RETURN_IF_ERROR(parse_head(std::string_view(raw).substr(0, end), &head));
    if (head.status >= 100 && head.status < 200) {  // interim response: skip it
      raw.erase(0, end + 4);
      continue;
    }
    have_head = true;
    std::string te = head.header("Transfer-Encoding");
    chunked = te.find("chunked") != std::string::npos || te.find("Chunked") != std::string::npos;
    if (!chunked) {
      std::string cl = head.header("Content-Length");
      if (!cl.empty()) {
        int64_t v = -1;
        auto [p2, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), v);
        if (ec != std::errc() || v < 0) return data_loss("bad Content-Length: " + cl);
        content_left = v;
      }
      if (head.status == 204 || head.status == 304 || req.method == "HEAD") content_left = 0;
    }
    if (handlers.on_head && !handlers.on_head(head)) return head;
    std::string rest = raw.substr(end + 4);
    raw.clear();
    if (!rest.empty()) TS_RETURN_IF_ERROR(deliver(rest));
  }
}

Result<HttpResult> http_fetch(const Url& url, const HttpRequest& req, const HttpCallOptions& opts,
                              size_t max_body) {
  HttpResult out;
  bool too_big = false;
  HttpHandlers h;
  h.on_body = [&](std::string_view b) {
    if (out.body.size() + b.size() > max_body) {
      too_big = true;
      return false;
    }
    out.body.append(b);
    return true;
  };
  TS_ASSIGN_OR_RETURN(out.head, http_stream(url, req, opts, h));
  if (too_big) return data_loss("response body larger than " + std::to_string(max_body) + " bytes");
  return out;
}

}  // namespace ts::tools
