#include "engine/kv_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ts::engine {

std::string format_bytes(int64_t bytes) {
  char buf[48];
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", b / static_cast<double>(int64_t{1} << 30));
  } else if (bytes >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / static_cast<double>(int64_t{1} << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof(buf), "%lld KiB", static_cast<long long>(bytes / 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

Result<KvBudget> default_kv_budget(const KvBudgetInputs& in) {
  if (in.kv_bytes_per_token <= 0 || in.kv_bytes_per_seq < 0 || in.max_seqs <= 0 || in.max_model_len <= 0) {
    return invalid_argument("KV budget: per-token bytes, max_seqs and max_model_len must be positive");
  }
  if (!(in.utilization > 0.0 && in.utilization <= 1.0)) {
    return invalid_argument("KV budget: utilization must be in (0, 1]");
  }
  const int64_t left = std::max<int64_t>(0, in.mem_available_bytes - std::max<int64_t>(0, in.weight_bytes));
  const double share = std::floor(in.utilization * static_cast<double>(left));
  // Tokens the engine can ever hold at once; saturate instead of overflowing.
  const double one_seq = in.kv_bytes_per_seq > 0
                            ? static_cast<double>(in.kv_bytes_per_seq)
                            : static_cast<double>(in.max_model_len) * static_cast<double>(in.kv_bytes_per_token);
  const double useful = static_cast<double>(in.max_seqs) * one_seq;
  const double ceiling = std::max(static_cast<double>(in.ceiling_bytes), one_seq);
  const double cap = std::min({useful, ceiling, static_cast<double>(std::numeric_limits<int64_t>::max() / 2)});
  KvBudget out;
  out.capped_by_use = cap < share;
  out.bytes = static_cast<int64_t>(std::min(share, cap));
  char util[16];
  std::snprintf(util, sizeof(util), "%.2g", in.utilization);
  out.explanation = std::string(util) + " x (MemAvailable " + format_bytes(in.mem_available_bytes) +
                    " - weights " + format_bytes(in.weight_bytes) + ") = " +
                    format_bytes(static_cast<int64_t>(share));
  if (out.capped_by_use && useful <= ceiling) {
    out.explanation += ", capped at " + std::to_string(in.max_seqs) + " sequences x " +
                       std::to_string(in.max_model_len) + " tokens = " + format_bytes(out.bytes);
  } else if (out.capped_by_use) {
    out.explanation += ", capped at " + format_bytes(out.bytes);
  }
  return out;
}

Result<int64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  size_t pos = 0;
  while (pos < meminfo.size()) {
    size_t end = meminfo.find('\n', pos);
    if (end == std::string_view::npos) end = meminfo.size();
    std::string_view line = meminfo.substr(pos, end - pos);
    if (line.starts_with(kKey)) {
      std::string rest(line.substr(kKey.size()));
      long long kb = -1;
      char unit[8] = {0};
      if (std::sscanf(rest.c_str(), " %lld %7s", &kb, unit) != 2 || kb < 0 || std::string_view(unit) != "kB") {
        return invalid_argument("cannot parse /proc/meminfo line '" + std::string(line) + "'");
      }
      return static_cast<int64_t>(kb) * 1024;
    }
    pos = end + 1;
  }
  return not_found("/proc/meminfo has no MemAvailable line");
}

}  // namespace ts::engine
