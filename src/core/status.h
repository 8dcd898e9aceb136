// Status and Result<T>: expected failures crossing module borders (CONVENTIONS.md).
// A Status carries a code that maps to an HTTP status and an OpenAI error type, and a
// human-readable message. Thread-safe as values (no shared state).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ts {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad user input -> 400
  kNotFound,            // unknown model / file -> 404
  kUnauthenticated,     // bad API key -> 401
  kPermissionDenied,    // key not allowed -> 403
  kResourceExhausted,   // rate limit / quota / KV full -> 429
  kPayloadTooLarge,     // body too large -> 413
  kUnavailable,         // queue full / draining -> 503
  kDataLoss,            // corrupt or truncated file
  kUnimplemented,       // feature or type this build does not handle
  kCancelled,           // request cancelled
  kDeadlineExceeded,    // request deadline passed
  kInternal,            // broken invariant surfaced as an error -> 500
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "code_name: message", for logs and CLI errors.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

// A value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                 // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {           // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ts

// Propagate a non-OK Status from an expression returning Status.
#define TS_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::ts::Status _ts_st = (expr);             \
    if (!_ts_st.ok()) return _ts_st;          \
  } while (0)

#define TS_CONCAT_INNER(a, b) a##b
#define TS_CONCAT(a, b) TS_CONCAT_INNER(a, b)
// `TS_ASSIGN_OR_RETURN(auto x, f());` : unwraps a Result or returns its Status.
#define TS_ASSIGN_OR_RETURN(lhs, expr) \
  TS_ASSIGN_OR_RETURN_IMPL(TS_CONCAT(_ts_res_, __LINE__), lhs, expr)
#define TS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
