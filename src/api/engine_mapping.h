// Maps parsed API requests onto the engine's plain structs (and engine results back).
// The caller has tokenized the prompt and resolved max_tokens against the context.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/types.h"
#include "engine/request.h"

namespace ts::api {

// `max_tokens`: the resolved completion budget (>= 1). `logprobs`/`top_logprobs`: as each API
// asks (completions' logprobs=k gives logprobs=true, top_logprobs=k).
engine::SamplingParams to_sampling_params(const SamplingOptions& s, int32_t max_tokens,
                                          bool logprobs, int32_t top_logprobs);

engine::Request to_engine_request(std::string id, std::vector<int32_t> prompt_tokens,
                                  const SamplingOptions& s, int32_t max_tokens, bool logprobs,
                                  int32_t top_logprobs);

// kStop/kLength map over; kCancelled/kError (not OpenAI reasons) become kStop, the service
// reports errors separately; kNone is kNull.
FinishReason finish_from_engine(engine::FinishReason r);

UsageInfo usage_from_engine(const engine::Usage& u);

}  // namespace ts::api
