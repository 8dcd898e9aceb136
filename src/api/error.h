// OpenAI-shaped API errors: {"error": {"message", "type", "param", "code"}} with an HTTP status.
// Values; thread-safe to copy.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/status.h"

namespace ts::api {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // invalid_request_error | authentication_error |
                                               // permission_error | rate_limit_error |
                                               // server_error | not_found_error ...
  std::string param;  // offending parameter ("messages[0].content"); "" renders as null
  std::string code;   // machine-readable ("invalid_type"); "" renders as null

  // The JSON body {"error": {...}}.
  std::string to_json() const;
};

// HTTP status for a StatusCode (kInvalidArgument -> 400, kNotFound -> 404, kUnauthenticated ->
// 401, kPermissionDenied -> 403, kResourceExhausted -> 429, kPayloadTooLarge -> 413,
// kUnavailable -> 503, kDeadlineExceeded -> 504, kCancelled -> 499, others -> 500).
int http_status_for(StatusCode code);
// OpenAI error "type" for a StatusCode.
const char* error_type_for(StatusCode code);
// An ApiError from a Status (message kept, status/type mapped).
ApiError error_from_status(const Status& status, std::string param = {}, std::string code = {});
// An ApiError for an HTTP status the transport produced (404 route, 413 body, 431 ...).
ApiError error_for_http_status(int http_status, std::string_view message);

// Common errors, with OpenAI's wording where it has one.
ApiError invalid_type(std::string_view param, std::string_view expected);
ApiError missing_param(std::string_view param);
ApiError invalid_value(std::string_view param, std::string message, std::string code = "invalid_value");
ApiError model_not_found(std::string_view model);

// A value or an ApiError.
template <typename T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT: implicit by design
  bool ok() const { return std::holds_alternative<T>(v_); }
  const ApiError& error() const { return std::get<ApiError>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace ts::api
