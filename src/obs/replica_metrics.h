// The replica side of the Gateway API Inference Extension model-server contract (SCALEOUT.md
// §6.1): the series a stock endpoint picker (EPP) and KEDA read that ServerMetrics does not
// already carry, and the `vllm:` compatibility twin.
//
// Pure text functions over the Prometheus exposition format; thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ts::obs {

// `tokenserve:cache_config_info{block_size="16",num_gpu_blocks="<n>"} 1` with HELP/TYPE gauge.
// `num_blocks` is the total number of KV blocks (CPU or GPU); the EPP's prefix scorer uses both
// labels to size its index.
std::string cache_config_info_text(int32_t block_size, int64_t num_blocks);

// Returns `text` followed by a copy of every `tokenserve:` family (its # HELP, # TYPE and
// sample lines) renamed under `vllm:` (e.g. `vllm:num_requests_waiting`), so stock EPPs,
// dashboards and KEDA examples work unchanged. Lines of other families are not duplicated.
// Values are identical because both copies come from the same rendering.
std::string with_vllm_twin(std::string_view text);

}  // namespace ts::obs
