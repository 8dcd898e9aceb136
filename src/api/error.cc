#include "api/error.h"

#include <nlohmann/json.hpp>

namespace ts::api {

using json = nlohmann::ordered_json;

std::string ApiError::to_json() const {
  json e = {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}};
  return json{{"error", std::move(e)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

int http_status_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kPayloadTooLarge: return 413;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kCancelled: return 499;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kDataLoss:
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

const char* error_type_for(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kPayloadTooLarge:
    case StatusCode::kUnimplemented: return "invalid_request_error";
    case StatusCode::kUnauthenticated: return "authentication_error";
    case StatusCode::kPermissionDenied: return "permission_error";
    case StatusCode::kResourceExhausted: return "rate_limit_error";
    default: return "server_error";
  }
}

ApiError error_from_status(const Status& status, std::string param, std::string code) {
  ApiError e;
  e.http_status = http_status_for(status.code());
  e.type = error_type_for(status.code());
  e.message = status.message();
  e.param = std::move(param);
  e.code = std::move(code);
  if (e.code.empty() && status.code() == StatusCode::kUnavailable) e.code = "service_unavailable";
  return e;
}

ApiError error_for_http_status(int http_status, std::string_view message) {
  ApiError e;
  e.http_status = http_status;
  e.message = std::string(message);
  if (http_status >= 500) {
    e.type = "server_error";
  } else if (http_status == 404) {
    e.code = "not_found";
  } else if (http_status == 405) {
    e.code = "method_not_allowed";
  } else if (http_status == 413) {
    e.code = "request_too_large";
  } else if (http_status == 431) {
    e.code = "headers_too_large";
  } else if (http_status == 408) {
    e.code = "request_timeout";
  }
  return e;
}

ApiError invalid_type(std::string_view param, std::string_view expected) {
  ApiError e;
  e.message = "Invalid type for '" + std::string(param) + "': expected " + std::string(expected) + ".";
  e.param = std::string(param);
  e.code = "invalid_type";
  return e;
}

ApiError missing_param(std::string_view param) {
  ApiError e;
  e.message = "Missing required parameter: '" + std::string(param) + "'.";
  e.param = std::string(param);
  e.code = "missing_required_parameter";
  return e;
}

ApiError invalid_value(std::string_view param, std::string message, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::string(param);
  e.code = std::move(code);
  return e;
}

ApiError model_not_found(std::string_view model) {
  ApiError e;
  e.http_status = 404;
  e.message = "The model '" + std::string(model) + "' does not exist or you do not have access to it.";
  e.param = "model";
  e.code = "model_not_found";
  return e;
}

}  // namespace ts::api
