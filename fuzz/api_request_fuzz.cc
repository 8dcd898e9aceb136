// libFuzzer target over OpenAI request-body parsing: every input must give a request or an
// ApiError (never a crash, hang or exception), and an accepted request must satisfy the
// documented ranges; its error body must be valid JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "api/request_parser.h"

namespace {

void require(bool cond) {
  if (!cond) std::abort();
}

void check_sampling(const ts::api::SamplingOptions& s) {
  require(s.temperature >= 0 && s.temperature <= 2);
  require(s.top_p > 0 && s.top_p <= 1);
  require(s.n >= 1 && s.n <= ts::api::kMaxChoices);
  require(s.stop.size() <= 4);
  require(!s.max_tokens || *s.max_tokens >= 1);
  for (const auto& [id, bias] : s.logit_bias) require(id >= 0 && bias >= -100 && bias <= 100);
}

template <typename R>
void check_error(const R& r) {
  if (r.ok()) return;
  require(r.error().http_status >= 400 && r.error().http_status < 600);
  require(!r.error().message.empty());
  require(nlohmann::json::accept(r.error().to_json()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto c = ts::api::parse_completion_request(body);
  check_error(c);
  if (c.ok()) {
    require(!c->prompts.empty());
    require(ts::api::is_valid_utf8(c->model));
    for (const auto& p : c->prompts) require(p.is_tokens ? !p.tokens.empty() : ts::api::is_valid_utf8(p.text));
    check_sampling(c->sampling);
  }
  auto chat = ts::api::parse_chat_request(body);
  check_error(chat);
  if (chat.ok()) {
    require(!chat->messages.empty());
    for (const auto& m : chat->messages) require(!m.content || ts::api::is_valid_utf8(*m.content));
    check_sampling(chat->sampling);
    require(chat->top_logprobs >= 0 && chat->top_logprobs <= 20);
  }
  check_error(ts::api::parse_tokenize_request(body));
  check_error(ts::api::parse_detokenize_request(body));
  return 0;
}
