// Admission of new TCP connections: a cap on open connections in total (--max-connections) and
// per client address (--max-connections-per-client), so that one client (or a flood) cannot
// take every socket and the memory behind them. A refused connection gets one short
// `503 Service Unavailable` + `Retry-After` + `Connection: close` and is closed at once.
// 0 means no cap. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ts::http {

enum class ConnVerdict { kAccepted, kTooManyTotal, kTooManyFromClient };

class ConnectionLimiter {
 public:
  ConnectionLimiter(size_t max_total, size_t max_per_client)
      : max_total_(max_total), max_per_client_(max_per_client) {}
  // Counts the connection when accepted; a refused one is not counted (do not release it).
  ConnVerdict try_acquire(const std::string& client);
  void release(const std::string& client);
  size_t num_open() const;
  uint64_t num_refused() const;

 private:
  const size_t max_total_, max_per_client_;
  mutable std::mutex mu_;
  size_t total_ = 0;
  uint64_t refused_ = 0;
  std::unordered_map<std::string, size_t> per_client_;
};

// The full HTTP/1.1 bytes of the refusal for `verdict` (body rendered by the caller).
std::string connection_refusal(const std::string& content_type, const std::string& body);
// Message for a refusal, e.g. "too many connections from 10.0.0.1 (limit 64)".
std::string connection_refusal_message(ConnVerdict verdict, const std::string& client,
                                       size_t max_total, size_t max_per_client);

}  // namespace ts::http
