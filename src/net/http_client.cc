#include "net/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "core/strings.h"

namespace ts::net {

namespace {

using ts::ascii_iequals;
constexpr auto iequals = [](std::string_view a, std::string_view b) { return ascii_iequals(a, b); };

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

// State of one call, shared with libcurl's callbacks.
struct Call {
  const HttpHandlers* handlers = nullptr;
  HttpResponseHead head;        // the response being received (reset at each status line)
  bool head_delivered = false;  // on_head called for the final response
  bool stopped = false;         // a handler returned false
  size_t body_bytes = 0;
  std::chrono::steady_clock::time_point last_byte;  // last response byte (or the call's start)

  bool deliver_head() {
    head_delivered = true;
    if (handlers->on_head && !handlers->on_head(head)) stopped = true;
    return !stopped;
  }
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  Call& c = *static_cast<Call*>(user);
  const size_t len = size * n;
  c.last_byte = std::chrono::steady_clock::now();
  if (c.head_delivered) return len;  // trailers after a chunked body
  std::string_view line(data, len);
  if (line.substr(0, 5) == "HTTP/") {
    c.head = HttpResponseHead{};
    size_t sp = line.find(' ');
    if (sp != std::string_view::npos) {
      std::string_view code = line.substr(sp + 1, 3);
      int v = 0;
      auto [p, ec] = std::from_chars(code.data(), code.data() + code.size(), v);
      if (ec == std::errc() && p == code.data() + code.size()) c.head.status = v;
    }
    return len;
  }
  std::string_view t = trim(line);
  if (t.empty()) {  // end of a header section
    if (c.head.status >= 200 && !c.deliver_head()) return 0;
    return len;
  }
  size_t colon = t.find(':');
  if (colon != std::string_view::npos)
    c.head.headers.emplace_back(std::string(trim(t.substr(0, colon))), std::string(trim(t.substr(colon + 1))));
  return len;
}

size_t on_write(char* data, size_t size, size_t n, void* user) {
  Call& c = *static_cast<Call*>(user);
  const size_t len = size * n;
  c.last_byte = std::chrono::steady_clock::now();
  if (!c.head_delivered && !c.deliver_head()) return 0;
  c.body_bytes += len;
  if (len > 0 && c.handlers->on_body && !c.handlers->on_body(std::string_view(data, len))) {
    c.stopped = true;
    return 0;
  }
  return len;
}

Status from_curl(CURLcode rc, const char* errbuf, const Url& url) {
  std::string what = errbuf[0] != '\0' ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
  const std::string where = url.origin();
  switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
      return Status(StatusCode::kDeadlineExceeded, "deadline exceeded (" + where + ")");
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_UNSUPPORTED_PROTOCOL:  // e.g. an HTTP/0.9 answer
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_TOO_MANY_REDIRECTS:
      return Status(StatusCode::kDataLoss, "malformed response from " + where + ": " + what);
    default:
      return unavailable(where + ": " + what);
  }
}

std::string no_proxy_list() {
  std::string list = "localhost,127.0.0.1,::1";
  for (const char* name : {"no_proxy", "NO_PROXY"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      list += ",";
      list += v;
      break;
    }
  }
  return list;
}

struct EasyDeleter {
  void operator()(CURL* e) const { curl_easy_cleanup(e); }
};
struct MultiDeleter {
  void operator()(CURLM* m) const { curl_multi_cleanup(m); }
};
struct SlistDeleter {
  void operator()(curl_slist* s) const { curl_slist_free_all(s); }
};

}  // namespace

void curl_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string Url::origin() const {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(tls ? "https://" : "http://") + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<Url> parse_url(std::string_view s) {
  Url u;
  if (s.substr(0, 8) == "https://") {
    u.tls = true;
    u.port = 443;
    s.remove_prefix(8);
  } else if (s.substr(0, 7) == "http://") {
    s.remove_prefix(7);
  } else {
    return invalid_argument("URL must start with http:// or https://: " + std::string(s));
  }
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

const char* call_stage_name(CallStage s) {
  switch (s) {
    case CallStage::kConnecting: return "connecting";
    case CallStage::kSending: return "sending";
    case CallStage::kAwaitingHead: return "awaiting_head";
    case CallStage::kReadingBody: return "reading_body";
  }
  return "?";
}

namespace {

// Where a call that ended with `rc` stood.
CallStage stage_of(CURL* e, CURLcode rc, const Call& call, bool tls) {
  if (call.head_delivered) return CallStage::kReadingBody;
  if (rc == CURLE_SEND_ERROR) return CallStage::kSending;
  curl_off_t connected = 0, app_connected = 0, pretransfer = 0;
  curl_easy_getinfo(e, CURLINFO_CONNECT_TIME_T, &connected);
  curl_easy_getinfo(e, CURLINFO_APPCONNECT_TIME_T, &app_connected);
  curl_easy_getinfo(e, CURLINFO_PRETRANSFER_TIME_T, &pretransfer);
  if (connected <= 0 || (tls && app_connected <= 0) || pretransfer <= 0) return CallStage::kConnecting;
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
      return CallStage::kConnecting;
    default:
      return CallStage::kAwaitingHead;
  }
}

// One request on `e` (added to `m` for the call). reuse = keep-alive through m's connection
// cache; otherwise a fresh connection, closed after.
Result<HttpResponseHead> perform(CURL* e, CURLM* m, bool reuse, const Url& url, const HttpRequest& req,
                                 const HttpCallOptions& opts, const HttpHandlers& handlers) {
  using Clock = std::chrono::steady_clock;
  if (opts.stage) *opts.stage = CallStage::kConnecting;
  if (opts.cancel && opts.cancel->load(std::memory_order_relaxed)) return Status(StatusCode::kCancelled, "cancelled");
  auto left_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(opts.deadline - Clock::now()).count();
  };
  if (Clock::now() >= opts.deadline) return Status(StatusCode::kDeadlineExceeded, "deadline exceeded (" + url.origin() + ")");

  Call call;
  call.handlers = &handlers;
  call.last_byte = Clock::now();
  char errbuf[CURL_ERROR_SIZE] = {};
  const std::string target = url.origin() + url.base_path + req.path;
  const std::string no_proxy = opts.direct ? std::string() : no_proxy_list();  // direct: no proxy at all

  curl_slist* raw = nullptr;
  bool has_type = false;
  for (const auto& [k, v] : req.headers) {
    raw = curl_slist_append(raw, (k + ": " + v).c_str());
    has_type = has_type || iequals(k, "content-type");
  }
  if (!reuse) raw = curl_slist_append(raw, "Connection: close");
  raw = curl_slist_append(raw, "Expect:");  // no 100-continue round trip for large bodies
  if (!has_type) raw = curl_slist_append(raw, "Content-Type:");  // no default form type
  std::unique_ptr<curl_slist, SlistDeleter> header_list(raw);

  curl_easy_reset(e);  // a session's handle: options from its last call go; its connections stay
  curl_easy_setopt(e, CURLOPT_URL, target.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(e, CURLOPT_FORBID_REUSE, reuse ? 0L : 1L);
  curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, reuse ? 0L : 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  if (opts.direct) curl_easy_setopt(e, CURLOPT_PROXY, "");  // "" = no proxy, whatever the environment says
  else curl_easy_setopt(e, CURLOPT_NOPROXY, no_proxy.c_str());
  curl_easy_setopt(e, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, header_list.get());
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &call);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &call);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!opts.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, opts.ca_file.c_str());
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts.connect_timeout.count()));
  // The loop below enforces the deadline exactly; libcurl's own timeout is only a backstop a
  // second later (its clock could otherwise fire a hair before ours says the deadline passed).
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(std::clamp<int64_t>(left_ms(), 1, int64_t{1} << 40) + 1000));
  if (req.method == "GET") {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else if (req.method == "HEAD") {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else {
    if (req.method != "POST") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, req.body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  }

  if (curl_multi_add_handle(m, e) != CURLM_OK) return internal_error("libcurl could not start the transfer");
  Status stop_reason;
  for (;;) {
    int running = 0;
    CURLMcode mc = curl_multi_perform(m, &running);
    if (mc != CURLM_OK) {
      stop_reason = internal_error(std::string("libcurl: ") + curl_multi_strerror(mc));
      break;
    }
    if (running == 0 || call.stopped) break;
    if (opts.cancel && opts.cancel->load(std::memory_order_relaxed)) {
      stop_reason = Status(StatusCode::kCancelled, "cancelled");
      break;
    }
    const auto now = Clock::now();
    if (now >= opts.deadline) {
      stop_reason = Status(StatusCode::kDeadlineExceeded, "deadline exceeded (" + url.origin() + ")");
      break;
    }
    int64_t wait = std::clamp<int64_t>(left_ms() + 1, 1, 50);
    if (opts.idle_timeout.count() > 0) {
      auto idle_left = std::chrono::duration_cast<std::chrono::milliseconds>(call.last_byte + opts.idle_timeout - now).count();
      if (idle_left <= 0) {
        stop_reason = Status(StatusCode::kDeadlineExceeded,
                             "no response byte for " + std::to_string(opts.idle_timeout.count()) + " ms (" + url.origin() + ")");
        break;
      }
      wait = std::min<int64_t>(wait, idle_left + 1);
    }
    curl_multi_poll(m, nullptr, 0, static_cast<int>(wait), nullptr);
  }
  CURLcode rc = CURLE_OK;
  int queued = 0;
  while (CURLMsg* msg = curl_multi_info_read(m, &queued))
    if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
  if (opts.stage) *opts.stage = stage_of(e, rc, call, url.tls);
  curl_multi_remove_handle(m, e);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, nullptr);  // errbuf and the header list die here
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, nullptr);

  if (call.stopped) return call.head;  // a handler asked to stop: not an error
  if (!stop_reason.ok()) return stop_reason;
  if (rc != CURLE_OK) return from_curl(rc, errbuf, url);
  if (!call.head_delivered) {
    if (call.head.status < 200) return Status(StatusCode::kDataLoss, "no response head from " + url.origin());
    call.deliver_head();
  }
  return call.head;
}

Result<HttpResult> collect(const std::function<Result<HttpResponseHead>(const HttpHandlers&)>& run, size_t max_body) {
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
  auto head = run(h);
  if (!head.ok()) return head.status();
  if (too_big) return Status(StatusCode::kDataLoss, "response body over " + std::to_string(max_body) + " bytes");
  out.head = std::move(*head);
  return out;
}

}  // namespace

Result<HttpResponseHead> http_stream(const Url& url, const HttpRequest& req,
                                     const HttpCallOptions& opts, const HttpHandlers& handlers) {
  curl_init();
  std::unique_ptr<CURL, EasyDeleter> easy(curl_easy_init());
  std::unique_ptr<CURLM, MultiDeleter> multi(curl_multi_init());
  if (!easy || !multi) return internal_error("libcurl could not create a handle");
  return perform(easy.get(), multi.get(), /*reuse=*/false, url, req, opts, handlers);
}

struct HttpSession::Handles {
  std::unique_ptr<CURLM, MultiDeleter> multi;  // owns the connection cache
  std::unique_ptr<CURL, EasyDeleter> easy;
};

HttpSession::HttpSession() : h_(new Handles) {
  curl_init();
  h_->multi.reset(curl_multi_init());
  h_->easy.reset(curl_easy_init());
}

HttpSession::~HttpSession() {
  h_->easy.reset();  // before the multi handle that holds its connections
  delete h_;
}

Result<HttpResponseHead> HttpSession::stream(const Url& url, const HttpRequest& req, const HttpCallOptions& opts,
                                             const HttpHandlers& handlers) {
  if (!h_->multi || !h_->easy) return internal_error("libcurl could not create a handle");
  return perform(h_->easy.get(), h_->multi.get(), true, url, req, opts, handlers);
}

Result<HttpResult> HttpSession::fetch(const Url& url, const HttpRequest& req, const HttpCallOptions& opts,
                                      size_t max_body) {
  if (!h_->multi || !h_->easy) return internal_error("libcurl could not create a handle");
  return collect([&](const HttpHandlers& h) { return perform(h_->easy.get(), h_->multi.get(), true, url, req, opts, h); },
                 max_body);
}

Result<HttpResult> http_fetch(const Url& url, const HttpRequest& req, const HttpCallOptions& opts,
                              size_t max_body) {
  return collect([&](const HttpHandlers& h) { return http_stream(url, req, opts, h); }, max_body);
}

}  // namespace ts::net
