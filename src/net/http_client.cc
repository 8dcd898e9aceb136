#include "net/http_client.h"

#include "net/curl_transfer.h"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <mutex>

#include "core/strings.h"

namespace ts::net {

namespace {

struct EasyDeleter {
  void operator()(CURL* e) const { curl_easy_cleanup(e); }
};
struct MultiDeleter {
  void operator()(CURLM* m) const { curl_multi_cleanup(m); }
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
    if (ascii_iequals(k, name)) return v;
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

// One request on `e` (added to `m` for the call), driven by this thread until it ends. reuse =
// keep-alive through m's connection cache; otherwise a fresh connection, closed after.
Result<HttpResponseHead> perform(CURL* e, CURLM* m, bool reuse, const Url& url, const HttpRequest& req,
                                 const HttpCallOptions& opts, const HttpHandlers& handlers) {
  using Clock = std::chrono::steady_clock;
  if (opts.stage) *opts.stage = CallStage::kConnecting;
  if (opts.cancel && opts.cancel->load(std::memory_order_relaxed)) return Status(StatusCode::kCancelled, "cancelled");
  auto left_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(opts.deadline - Clock::now()).count();
  };
  if (Clock::now() >= opts.deadline) return Status(StatusCode::kDeadlineExceeded, "deadline exceeded (" + url.origin() + ")");

  CurlTransfer call;
  call.setup(e, url, req, opts, handlers, reuse);
  if (curl_multi_add_handle(m, e) != CURLM_OK) return internal_error("libcurl could not start the transfer");
  Status stop_reason;
  for (;;) {
    int running = 0;
    CURLMcode mc = curl_multi_perform(m, &running);
    if (mc != CURLM_OK) {
      stop_reason = internal_error(std::string("libcurl: ") + curl_multi_strerror(mc));
      break;
    }
    if (running == 0 || call.stopped()) break;
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
      auto idle_left = std::chrono::duration_cast<std::chrono::milliseconds>(call.last_byte() + opts.idle_timeout - now).count();
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
  curl_multi_remove_handle(m, e);
  return call.finish(e, rc, stop_reason, opts.stage);
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
