// libFuzzer target over chat templates: a GGUF file's tokenizer.chat_template is untrusted input
// (any downloaded model carries one), so every byte string must parse into a template or a
// kInvalidArgument syntax error, and rendering a parsed one against a fixed OpenAI-style context
// must return text or a documented error (kInvalidArgument for template/runtime errors,
// kResourceExhausted for the interpreter's limits) — never crash, hang, throw or exceed the
// limits. The limits are tightened so that one input costs milliseconds, not seconds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace {

void require(bool cond) {
  if (!cond) std::abort();
}

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Hi <b>there</b> {{ not a tag }}"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "c1",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21.5}"},
      {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view src(reinterpret_cast<const char*>(data), size);
  auto parsed = ts::chat::ChatTemplate::parse(src);
  if (!parsed.ok()) {
    require(parsed.status().code() == ts::StatusCode::kInvalidArgument);
    require(!parsed.status().message().empty());
    return 0;
  }
  ts::chat::RenderOptions opts;
  opts.now = std::tm{};
  opts.limits.max_output_bytes = 1 << 20;
  opts.limits.max_steps = 200'000;
  opts.limits.max_value_bytes = 8 << 20;
  opts.limits.max_list_items = 1 << 16;
  auto out = parsed.value().render(context(), opts);
  if (out.ok()) {
    require(static_cast<int64_t>(out.value().size()) <= opts.limits.max_output_bytes);
  } else {
    const auto code = out.status().code();
    require(code == ts::StatusCode::kInvalidArgument || code == ts::StatusCode::kResourceExhausted);
    require(!out.status().message().empty());
  }
  return 0;
}
