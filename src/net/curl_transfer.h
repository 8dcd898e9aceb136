// One HTTP request on a libcurl easy handle: the handle's set-up (options, headers, callbacks
// that deliver the response to HttpHandlers) and the reading of its result. Shared by the
// blocking client (http_client.cc, which runs the transfer in its own multi-handle loop) and the
// gateway's event-loop client (router/upstream_client.h, which runs many transfers on one
// curl_multi_socket_action loop); how a transfer is driven is theirs, what a response means is
// decided here once.
//
// Lifetime: the CurlTransfer, the HttpRequest and the HttpHandlers given to setup() must outlive
// the transfer (libcurl holds pointers to them until finish()). Not thread-safe: one transfer,
// driven by one thread at a time.
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <memory>

#include "core/status.h"
#include "net/http_client.h"

namespace ts::net {

class CurlTransfer {
 public:
  CurlTransfer() = default;
  CurlTransfer(const CurlTransfer&) = delete;
  CurlTransfer& operator=(const CurlTransfer&) = delete;
  ~CurlTransfer();

  // Resets `easy` (its connection cache, held by a multi handle, stays) and sets it up for `req`
  // to `url` with `opts` (deadline as libcurl's backstop timeout a second late: the driver
  // enforces the exact deadline and the idle timeout; opts.cancel and opts.stage are the
  // driver's too). reuse = keep-alive through the multi handle's connection cache; false = a
  // fresh connection, closed after.
  void setup(CURL* easy, const Url& url, const HttpRequest& req, const HttpCallOptions& opts,
             const HttpHandlers& handlers, bool reuse);

  // The call's result once libcurl finished with `rc`, or once the driver stopped the transfer
  // early with a non-OK `stop_reason` (cancelled, deadline, idle timeout: it wins over rc). A
  // handler's `false` is not an error (the head is returned). Errors as http_stream's. `stage`
  // (optional) gets how far the call got. Call after the handle left its multi handle; clears
  // the handle's pointers into this object.
  Result<HttpResponseHead> finish(CURL* easy, CURLcode rc, const Status& stop_reason, CallStage* stage);

  // A handler asked to stop (libcurl then ends the transfer with a write error).
  bool stopped() const { return stopped_; }
  // The last response byte (or the set-up time): the idle timeout runs from here.
  std::chrono::steady_clock::time_point last_byte() const { return last_byte_; }

 private:
  static size_t on_header(char* data, size_t size, size_t n, void* user);
  static size_t on_write(char* data, size_t size, size_t n, void* user);
  bool deliver_head();

  const HttpHandlers* handlers_ = nullptr;
  Url url_;
  HttpResponseHead head_;        // the response being received (reset at each status line)
  bool head_delivered_ = false;  // on_head called for the final response
  bool stopped_ = false;
  std::chrono::steady_clock::time_point last_byte_;
  char errbuf_[CURL_ERROR_SIZE] = {};
  std::string target_, no_proxy_;
  curl_slist* headers_ = nullptr;
};

}  // namespace ts::net
