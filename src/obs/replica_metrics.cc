#include "obs/replica_metrics.h"

namespace ts::obs {

std::string cache_config_info_text(int32_t block_size, int64_t num_blocks) {
  std::string m =
      "# HELP tokenserve:cache_config_info KV cache configuration (value is always 1).\n"
      "# TYPE tokenserve:cache_config_info gauge\n";
  m += "tokenserve:cache_config_info{block_size=\"" + std::to_string(block_size) + "\",num_gpu_blocks=\"" +
       std::to_string(num_blocks) + "\"} 1\n";
  return m;
}

std::string with_vllm_twin(std::string_view text) {
  constexpr std::string_view kOurs = "tokenserve:";
  constexpr std::string_view kTheirs = "vllm:";
  std::string twin;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    size_t name_at = std::string_view::npos;
    if (line.starts_with(kOurs)) {
      name_at = 0;
    } else if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
      if (line.substr(7).starts_with(kOurs)) name_at = 7;
    }
    if (name_at == std::string_view::npos) continue;
    twin.append(line.substr(0, name_at));
    twin.append(kTheirs);
    twin.append(line.substr(name_at + kOurs.size()));
    twin.push_back('\n');
  }
  std::string out(text);
  if (!out.empty() && out.back() != '\n') out.push_back('\n');
  out += twin;
  return out;
}

}  // namespace ts::obs
