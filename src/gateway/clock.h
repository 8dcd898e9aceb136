// Wall-clock time for governance: an injectable Clock (fake in tests), UTC quota periods,
// RFC 3339 and duration parsing/formatting, and OpenAI's reset-duration strings ("6m0s").
// Everything here is UTC; there is no local time anywhere in governance.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ts::gateway {

using WallTime = std::chrono::system_clock::time_point;  // UTC wall time
using Millis = std::chrono::milliseconds;

// Source of the current time. Rate limiters, quotas and key expiry read time only from here.
// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual WallTime now() const = 0;
};

// The real system clock.
class SystemClock final : public Clock {
 public:
  WallTime now() const override { return std::chrono::system_clock::now(); }
};

// A clock that only moves when told to. Thread-safe (atomic millisecond counter).
class FakeClock final : public Clock {
 public:
  explicit FakeClock(WallTime start) : ms_(to_ms(start)) {}
  WallTime now() const override { return WallTime(Millis(ms_.load())); }
  void set(WallTime t) { ms_.store(to_ms(t)); }
  void advance(Millis d) { ms_.fetch_add(d.count()); }

 private:
  static int64_t to_ms(WallTime t) {
    return std::chrono::duration_cast<Millis>(t.time_since_epoch()).count();
  }
  std::atomic<int64_t> ms_;
};

int64_t to_unix_ms(WallTime t);
WallTime from_unix_ms(int64_t ms);

// Quota period: a UTC calendar day or a UTC calendar month.
enum class Period { kDay = 0, kMonth = 1 };
const char* period_name(Period p);  // "day" | "month"
// Start (inclusive) and end (exclusive) of the UTC period that contains `t`.
WallTime period_start(WallTime t, Period p);
WallTime period_end(WallTime t, Period p);

// "2026-11-30T06:00:00Z" (".123" milliseconds added only when non-zero).
std::string format_rfc3339(WallTime t);
// "2026-11-30" (UTC date of t).
std::string format_date(WallTime t);
// Accepts "YYYY-MM-DD" (midnight UTC), "YYYY-MM-DDTHH:MM:SS[.fff](Z|+hh:mm|-hh:mm)".
// kInvalidArgument naming the expected forms otherwise.
Result<WallTime> parse_rfc3339(std::string_view s);
// "30d", "12h", "15m", "45s", "500ms" -> duration. kInvalidArgument otherwise.
Result<Millis> parse_duration(std::string_view s);
// An absolute RFC 3339 time, or a duration from `now` ("30d").
Result<WallTime> parse_time_or_offset(std::string_view s, WallTime now);

// OpenAI / Go style: "20ms" under a second, otherwise whole seconds rounded up as
// "1s", "59s", "6m0s", "1h0m0s".
std::string format_reset(Millis d);

}  // namespace ts::gateway
