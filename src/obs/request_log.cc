#include "obs/request_log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include "core/log.h"

namespace ts::obs {
namespace {

bool id_char(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '-': case '_': case '.': case ':': case '/': case '+': case '=': case '@':
      return true;
    default:
      return false;
  }
}

bool is_set(engine::TimePoint t) { return t != engine::TimePoint{}; }

nlohmann::json ms_between(engine::TimePoint a, engine::TimePoint b) {
  if (!is_set(a) || !is_set(b)) return nullptr;
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

bool is_valid_request_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdLength) return false;
  for (char c : id) {
    if (!id_char(c)) return false;
  }
  return true;
}

std::string generate_request_id() {
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  // Time first (see the header): 48 bits of Unix ms, then 80 random bits.
  const uint64_t ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  const uint64_t hi = (ms << 16) | (rng() & 0xffff), lo = rng();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(36, '0');
  id[0] = 'r', id[1] = 'e', id[2] = 'q', id[3] = '-';
  for (int i = 0; i < 16; ++i) {
    id[4 + i] = kHex[(hi >> (60 - 4 * i)) & 0xf];
    id[20 + i] = kHex[(lo >> (60 - 4 * i)) & 0xf];
  }
  return id;
}

std::string resolve_request_id(std::string_view incoming) {
  return is_valid_request_id(incoming) ? std::string(incoming) : generate_request_id();
}

nlohmann::json request_log_json(std::string_view request_id, const RequestObservation& obs) {
  nlohmann::json j;
  j["ts"] = log::utc_timestamp();
  j["event"] = "request";
  j["request_id"] = request_id;
  j["tenant"] = obs.tenant;
  j["app"] = obs.app;
  j["model"] = obs.model;
  j["tier"] = engine::tier_name(obs.tier);
  j["prompt_tokens"] = obs.prompt_tokens;
  j["cached_tokens"] = obs.cached_tokens;
  j["completion_tokens"] = obs.completion_tokens;
  j["total_tokens"] = obs.prompt_tokens + obs.completion_tokens;
  j["ttft_ms"] = ms_between(obs.arrival, obs.first_token);
  j["queue_ms"] = ms_between(obs.arrival, obs.scheduled);
  j["duration_ms"] = ms_between(obs.arrival, obs.finished);
  if (obs.completion_tokens > 1 && is_set(obs.first_token) && is_set(obs.finished)) {
    j["tpot_ms"] = std::chrono::duration<double, std::milli>(obs.finished - obs.first_token).count() /
                   static_cast<double>(obs.completion_tokens - 1);
  } else {
    j["tpot_ms"] = nullptr;
  }
  j["finish_reason"] = engine::finish_reason_name(obs.finish_reason);
  j["status"] = obs.http_status;
  j["preemptions"] = obs.num_preemptions;
  return j;
}

void log_request(std::string_view request_id, const RequestObservation& obs) {
  // Invalid UTF-8 in a tenant or app name must not throw out of a request handler.
  log::write_json_line(
      request_log_json(request_id, obs).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace ts::obs
