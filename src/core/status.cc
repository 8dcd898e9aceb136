#include "core/status.h"

namespace ts {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kUnauthenticated: return "unauthenticated";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kPayloadTooLarge: return "payload_too_large";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDataLoss: return "data_loss";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace ts
