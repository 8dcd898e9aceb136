// Minimal leveled logger to stderr. Thread-safe (one write per line).
// Format: text ("2026-11-30T06:00:00.123Z INFO message") or JSON lines, set once at start-up.
#pragma once
#include <string>
#include <string_view>

namespace ts::log {

enum class Level { kDebug = 0, kInfo, kWarn, kError, kOff };
enum class Format { kText, kJson };

void set_level(Level level);
void set_format(Format format);
Level level();
// Parses "debug|info|warn|error|off"; returns false on an unknown name.
bool parse_level(std::string_view name, Level* out);

void write(Level level, std::string_view message);
inline void debug(std::string_view m) { write(Level::kDebug, m); }
inline void info(std::string_view m) { write(Level::kInfo, m); }
inline void warn(std::string_view m) { write(Level::kWarn, m); }
inline void error(std::string_view m) { write(Level::kError, m); }

// Current UTC time as "2026-11-30T06:00:00.123Z" (the timestamp of every log line).
std::string utc_timestamp();

// Writes one pre-built JSON object as its own line (structured request logs), whatever the format.
void write_json_line(std::string_view json_object);

}  // namespace ts::log
