#include "cli/cli_util.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/log.h"
#include "tensor/matrix.h"

namespace ts::cli {

int parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tokenserve %s: %s (see --help)\n", app.get_name().c_str(), e.what());
    return 2;
  }
  return -1;
}

std::optional<uint64_t> parse_bytes(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  double v = 0;
  try {
    v = std::stod(s.substr(0, i));
  } catch (...) {
    return std::nullopt;
  }
  std::string unit;
  for (size_t k = i; k < s.size(); ++k) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(s[k])));
  double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else return std::nullopt;
  double bytes = v * mult;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

int apply_isa(const char* cmd, const std::string& flag) {
  std::string name = flag;
  std::string source = "--isa";
  if (name.empty()) {
    const char* env = std::getenv("TOKENSERVE_ISA");
    if (env != nullptr && *env != '\0') {
      name = env;
      source = "TOKENSERVE_ISA";
    }
  }
  auto choice = tensor::resolve_isa(name);
  if (!choice.ok()) return fail(cmd, source + ": " + choice.status().message(), 2);
  if (!choice->warning.empty()) log::warn(choice->warning);
  tensor::set_isa(choice->isa);
  return -1;
}

int fail(const char* cmd, const std::string& message, int code) {
  std::fprintf(stderr, "tokenserve %s: %s\n", cmd, message.c_str());
  return code;
}

void add_io_rt_max_wakeups(CLI::App& app, int64_t* max_wakeups) {
  *max_wakeups = 250;
  app.add_option("--io-rt-max-wakeups", *max_wakeups,
                 "with --io-rt-priority: wake-ups per 250 ms over which an io thread is demoted to normal scheduling "
                 "(default 250; 0 = no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
}

}  // namespace ts::cli
