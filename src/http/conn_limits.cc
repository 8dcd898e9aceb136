#include "http/conn_limits.h"

namespace ts::http {

ConnVerdict ConnectionLimiter::try_acquire(const std::string& client) {
  std::lock_guard lock(mu_);
  if (max_total_ > 0 && total_ >= max_total_) {
    ++refused_;
    return ConnVerdict::kTooManyTotal;
  }
  size_t& n = per_client_[client];
  if (max_per_client_ > 0 && n >= max_per_client_) {
    ++refused_;
    return ConnVerdict::kTooManyFromClient;
  }
  ++n;
  ++total_;
  return ConnVerdict::kAccepted;
}

void ConnectionLimiter::release(const std::string& client) {
  std::lock_guard lock(mu_);
  auto it = per_client_.find(client);
  if (it == per_client_.end()) return;
  if (--it->second == 0) per_client_.erase(it);
  --total_;
}

size_t ConnectionLimiter::num_open() const {
  std::lock_guard lock(mu_);
  return total_;
}

uint64_t ConnectionLimiter::num_refused() const {
  std::lock_guard lock(mu_);
  return refused_;
}

std::string connection_refusal(const std::string& content_type, const std::string& body) {
  return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: " + content_type +
         "\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

std::string connection_refusal_message(ConnVerdict verdict, const std::string& client, size_t max_total,
                                       size_t max_per_client) {
  if (verdict == ConnVerdict::kTooManyFromClient)
    return "Too many connections from " + client + " (limit " + std::to_string(max_per_client) +
           " per client); close idle connections or retry later.";
  return "The server has too many open connections (limit " + std::to_string(max_total) +
         "); please retry shortly.";
}

}  // namespace ts::http
