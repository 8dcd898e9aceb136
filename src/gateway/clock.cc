#include "gateway/clock.h"

#include <charconv>
#include <cstdio>

namespace ts::gateway {

using namespace std::chrono;

int64_t to_unix_ms(WallTime t) { return duration_cast<Millis>(t.time_since_epoch()).count(); }
WallTime from_unix_ms(int64_t ms) { return WallTime(Millis(ms)); }

const char* period_name(Period p) { return p == Period::kDay ? "day" : "month"; }

WallTime period_start(WallTime t, Period p) {
  sys_days day = floor<days>(t);
  if (p == Period::kDay) return WallTime(day);
  year_month_day ymd(day);
  return WallTime(sys_days(ymd.year() / ymd.month() / 1));
}

WallTime period_end(WallTime t, Period p) {
  sys_days day = floor<days>(t);
  if (p == Period::kDay) return WallTime(day + days(1));
  year_month_day ymd(day);
  year_month next = ymd.year() / ymd.month() + months(1);
  return WallTime(sys_days(next / 1));
}

std::string format_date(WallTime t) {
  year_month_day ymd(floor<days>(t));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02u", int(ymd.year()), unsigned(ymd.month()),
                unsigned(ymd.day()));
  return buf;
}

std::string format_rfc3339(WallTime t) {
  sys_days day = floor<days>(t);
  auto ms_in_day = duration_cast<Millis>(t - day).count();
  int64_t secs = ms_in_day / 1000, ms = ms_in_day % 1000;
  char buf[64];
  int n = std::snprintf(buf, sizeof(buf), "%sT%02d:%02d:%02d", format_date(t).c_str(),
                        int(secs / 3600), int(secs / 60 % 60), int(secs % 60));
  if (ms) n += std::snprintf(buf + n, sizeof(buf) - n, ".%03d", int(ms));
  std::snprintf(buf + n, sizeof(buf) - n, "Z");
  return buf;
}

namespace {

bool read_int(std::string_view s, size_t pos, size_t len, int* out) {
  if (pos + len > s.size()) return false;
  for (size_t i = pos; i < pos + len; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  std::from_chars(s.data() + pos, s.data() + pos + len, *out);
  return true;
}

}  // namespace

Result<WallTime> parse_rfc3339(std::string_view s) {
  auto bad = [&] {
    return invalid_argument("bad time '" + std::string(s) +
                            "': expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ");
  };
  int y, mo, d;
  if (!read_int(s, 0, 4, &y) || s.size() < 10 || s[4] != '-' || !read_int(s, 5, 2, &mo) ||
      s[7] != '-' || !read_int(s, 8, 2, &d))
    return bad();
  year_month_day ymd{year(y), month(unsigned(mo)), day(unsigned(d))};
  if (!ymd.ok()) return bad();
  WallTime t{sys_days(ymd)};
  if (s.size() == 10) return t;
  int hh, mm, ss;
  if ((s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !read_int(s, 11, 2, &hh) ||
      s.size() < 19 || s[13] != ':' || !read_int(s, 14, 2, &mm) || s[16] != ':' ||
      !read_int(s, 17, 2, &ss) || hh > 23 || mm > 59 || ss > 60)
    return bad();
  t += hours(hh) + minutes(mm) + seconds(ss);
  size_t pos = 19;
  if (pos < s.size() && s[pos] == '.') {
    size_t start = ++pos;
    int64_t ms = 0, digits = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      if (digits < 3) { ms = ms * 10 + (s[pos] - '0'); ++digits; }
      ++pos;
    }
    if (pos == start) return bad();
    while (digits++ < 3) ms *= 10;
    t += Millis(ms);
  }
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z') && pos + 1 == s.size()) return t;
  int oh, om;
  if (pos + 6 == s.size() && (s[pos] == '+' || s[pos] == '-') && read_int(s, pos + 1, 2, &oh) &&
      s[pos + 3] == ':' && read_int(s, pos + 4, 2, &om)) {
    auto off = hours(oh) + minutes(om);
    return s[pos] == '+' ? t - off : t + off;
  }
  return bad();
}

Result<Millis> parse_duration(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  std::string_view unit = s.substr(i);
  int64_t n = 0;
  if (i == 0 || i > 12 || std::from_chars(s.data(), s.data() + i, n).ec != std::errc())
    return invalid_argument("bad duration '" + std::string(s) + "': expected e.g. 30d, 12h, 15m, 45s");
  if (unit == "ms") return Millis(n);
  if (unit == "s") return Millis(n * 1000);
  if (unit == "m") return Millis(n * 60'000);
  if (unit == "h") return Millis(n * 3'600'000);
  if (unit == "d") return Millis(n * 86'400'000);
  return invalid_argument("bad duration '" + std::string(s) + "': expected e.g. 30d, 12h, 15m, 45s");
}

Result<WallTime> parse_time_or_offset(std::string_view s, WallTime now) {
  auto d = parse_duration(s);
  if (d.ok()) return now + *d;
  auto t = parse_rfc3339(s);
  if (t.ok()) return *t;
  return invalid_argument("bad time '" + std::string(s) +
                          "': expected RFC 3339 (2027-01-01T00:00:00Z) or a duration (30d)");
}

std::string format_reset(Millis d) {
  if (d.count() <= 0) return "0s";
  if (d < seconds(1)) return std::to_string(d.count()) + "ms";
  int64_t s = (d.count() + 999) / 1000;
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h" + std::to_string(s / 60 % 60) + "m" +
         std::to_string(s % 60) + "s";
}

}  // namespace ts::gateway
