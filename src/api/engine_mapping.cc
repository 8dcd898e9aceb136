#include "api/engine_mapping.h"

namespace ts::api {

engine::SamplingParams to_sampling_params(const SamplingOptions& s, int32_t max_tokens,
                                          bool logprobs, int32_t top_logprobs) {
  engine::SamplingParams p;
  p.temperature = static_cast<float>(s.temperature);
  p.top_k = s.top_k;
  p.top_p = static_cast<float>(s.top_p);
  p.min_p = static_cast<float>(s.min_p);
  p.repetition_penalty = static_cast<float>(s.repetition_penalty);
  p.frequency_penalty = static_cast<float>(s.frequency_penalty);
  p.presence_penalty = static_cast<float>(s.presence_penalty);
  p.logit_bias = s.logit_bias;
  if (s.seed) p.seed = static_cast<uint64_t>(*s.seed);
  p.max_tokens = max_tokens;
  p.stop = s.stop;
  p.ignore_eos = s.ignore_eos;
  p.logprobs = logprobs;
  p.top_logprobs = logprobs ? top_logprobs : 0;
  p.n = s.n;
  return p;
}

engine::Request to_engine_request(std::string id, std::vector<int32_t> prompt_tokens,
                                  const SamplingOptions& s, int32_t max_tokens, bool logprobs,
                                  int32_t top_logprobs) {
  engine::Request r;
  r.id = std::move(id);
  r.prompt_tokens = std::move(prompt_tokens);
  r.sampling = to_sampling_params(s, max_tokens, logprobs, top_logprobs);
  r.tier = s.tier;
  r.speculative = s.speculative;
  return r;
}

FinishReason finish_from_engine(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kNone: return FinishReason::kNull;
    case engine::FinishReason::kLength: return FinishReason::kLength;
    case engine::FinishReason::kStop:
    case engine::FinishReason::kCancelled:
    case engine::FinishReason::kError: return FinishReason::kStop;
  }
  return FinishReason::kNull;
}

UsageInfo usage_from_engine(const engine::Usage& u) {
  return UsageInfo{.prompt_tokens = u.prompt_tokens,
                   .completion_tokens = u.completion_tokens,
                   .cached_tokens = u.cached_tokens};
}

}  // namespace ts::api
