#include "net/curl_transfer.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/strings.h"

namespace ts::net {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
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

// Where a call that ended with `rc` stood.
CallStage stage_of(CURL* e, CURLcode rc, bool head_delivered, bool tls) {
  if (head_delivered) return CallStage::kReadingBody;
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

}  // namespace

CurlTransfer::~CurlTransfer() {
  if (headers_) curl_slist_free_all(headers_);
}

bool CurlTransfer::deliver_head() {
  head_delivered_ = true;
  if (handlers_->on_head && !handlers_->on_head(head_)) stopped_ = true;
  return !stopped_;
}

size_t CurlTransfer::on_header(char* data, size_t size, size_t n, void* user) {
  CurlTransfer& c = *static_cast<CurlTransfer*>(user);
  const size_t len = size * n;
  c.last_byte_ = std::chrono::steady_clock::now();
  if (c.head_delivered_) return len;  // trailers after a chunked body
  std::string_view line(data, len);
  if (line.substr(0, 5) == "HTTP/") {
    c.head_ = HttpResponseHead{};
    size_t sp = line.find(' ');
    if (sp != std::string_view::npos) {
      std::string_view code = line.substr(sp + 1, 3);
      int v = 0;
      auto [p, ec] = std::from_chars(code.data(), code.data() + code.size(), v);
      if (ec == std::errc() && p == code.data() + code.size()) c.head_.status = v;
    }
    return len;
  }
  std::string_view t = trim(line);
  if (t.empty()) {  // end of a header section
    if (c.head_.status >= 200 && !c.deliver_head()) return 0;
    return len;
  }
  size_t colon = t.find(':');
  if (colon != std::string_view::npos)
    c.head_.headers.emplace_back(std::string(trim(t.substr(0, colon))), std::string(trim(t.substr(colon + 1))));
  return len;
}

size_t CurlTransfer::on_write(char* data, size_t size, size_t n, void* user) {
  CurlTransfer& c = *static_cast<CurlTransfer*>(user);
  const size_t len = size * n;
  c.last_byte_ = std::chrono::steady_clock::now();
  if (!c.head_delivered_ && !c.deliver_head()) return 0;
  if (len > 0 && c.handlers_->on_body && !c.handlers_->on_body(std::string_view(data, len))) {
    c.stopped_ = true;
    return 0;
  }
  return len;
}

void CurlTransfer::setup(CURL* e, const Url& url, const HttpRequest& req, const HttpCallOptions& opts,
                         const HttpHandlers& handlers, bool reuse) {
  handlers_ = &handlers;
  url_ = url;
  head_ = HttpResponseHead{};
  head_delivered_ = stopped_ = false;
  last_byte_ = std::chrono::steady_clock::now();
  errbuf_[0] = '\0';
  target_ = url.origin() + url.base_path + req.path;
  no_proxy_ = opts.direct ? std::string() : no_proxy_list();  // direct: no proxy at all
  if (headers_) curl_slist_free_all(headers_);
  headers_ = nullptr;
  bool has_type = false;
  std::string line;
  for (const auto& [k, v] : req.headers) {
    line.assign(k).append(": ").append(v);
    headers_ = curl_slist_append(headers_, line.c_str());
    has_type = has_type || ascii_iequals(k, "content-type");
  }
  if (!reuse) headers_ = curl_slist_append(headers_, "Connection: close");
  headers_ = curl_slist_append(headers_, "Expect:");  // no 100-continue round trip for large bodies
  if (!has_type) headers_ = curl_slist_append(headers_, "Content-Type:");  // no default form type

  curl_easy_reset(e);  // options from the handle's last call go; the multi handle's connections stay
  curl_easy_setopt(e, CURLOPT_URL, target_.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf_);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(e, CURLOPT_FORBID_REUSE, reuse ? 0L : 1L);
  curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, reuse ? 0L : 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  if (opts.direct) curl_easy_setopt(e, CURLOPT_PROXY, "");  // "" = no proxy, whatever the environment says
  else curl_easy_setopt(e, CURLOPT_NOPROXY, no_proxy_.c_str());
  curl_easy_setopt(e, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &CurlTransfer::on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &CurlTransfer::on_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!opts.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, opts.ca_file.c_str());
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts.connect_timeout.count()));
  // The driver enforces the deadline exactly; libcurl's own timeout is only a backstop a second
  // later (its clock could otherwise fire a hair before the driver's says the deadline passed).
  const int64_t left_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(opts.deadline - std::chrono::steady_clock::now()).count();
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(std::clamp<int64_t>(left_ms, 1, int64_t{1} << 40) + 1000));
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
}

Result<HttpResponseHead> CurlTransfer::finish(CURL* e, CURLcode rc, const Status& stop_reason, CallStage* stage) {
  if (stage) *stage = stage_of(e, rc, head_delivered_, url_.tls);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, nullptr);  // errbuf and the header list may die after this
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, nullptr);
  if (stopped_) return head_;  // a handler asked to stop: not an error
  if (!stop_reason.ok()) return stop_reason;
  if (rc != CURLE_OK) return from_curl(rc, errbuf_, url_);
  if (!head_delivered_) {
    if (head_.status < 200) return Status(StatusCode::kDataLoss, "no response head from " + url_.origin());
    deliver_head();
  }
  return head_;
}

}  // namespace ts::net
