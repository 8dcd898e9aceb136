#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ts::log {
namespace {
std::atomic<Level> g_level{Level::kInfo};
std::atomic<Format> g_format{Format::kText};
std::mutex g_mu;

const char* level_name(Level l) {
  switch (l) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
    case Level::kOff: return "off";
  }
  return "?";
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}
}  // namespace

std::string utc_timestamp() {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

void set_level(Level level) { g_level = level; }
void set_format(Format format) { g_format = format; }
Level level() { return g_level; }

bool parse_level(std::string_view name, Level* out) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError, Level::kOff}) {
    if (name == level_name(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

void write(Level level, std::string_view message) {
  if (level < g_level.load(std::memory_order_relaxed) || level == Level::kOff) return;
  std::string line;
  if (g_format == Format::kJson) {
    line = "{\"ts\":\"" + utc_timestamp() + "\",\"level\":\"" + level_name(level) + "\",\"msg\":\"" +
           json_escape(message) + "\"}\n";
  } else {
    line = utc_timestamp() + " " + level_name(level) + " " + std::string(message) + "\n";
  }
  std::lock_guard<std::mutex> lock(g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void write_json_line(std::string_view json_object) {
  std::string line(json_object);
  line += '\n';
  std::lock_guard<std::mutex> lock(g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ts::log
