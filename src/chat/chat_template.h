// Chat templates: renders a model's Jinja chat template the way Hugging Face transformers does
// (jinja2 with trim_blocks and lstrip_blocks, loop controls, transformers' tojson,
// raise_exception and strftime_now), using our own interpreter (lexer/parser/interpreter in
// this folder).
//
// The context is a JSON object: `messages` (OpenAI-style list), `add_generation_prompt`,
// `bos_token`, `eos_token`, optional `tools`, and any extra kwargs (e.g. `enable_thinking`).
// Objects keep their key order when passed as nlohmann::ordered_json, which matters for
// templates that print tools with `tojson`; plain nlohmann::json sorts keys.
//
// Failures (all return a Status; nothing throws):
//   - syntax error: kInvalidArgument, "template syntax error at line L, column C: ...";
//   - the template's raise_exception(msg): kInvalidArgument with exactly `msg` as the message;
//   - other runtime errors (undefined attribute of undefined, type errors):
//     kInvalidArgument, "template error at line L, column C: ...";
//   - limits (output size, steps, recursion, memory): kResourceExhausted.
// A parsed ChatTemplate is immutable and may be rendered from many threads at once.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/ast.h"
#include "chat/interpreter.h"
#include "core/status.h"

namespace ts::chat {

struct RenderOptions {
  // What strftime_now() sees (local wall-clock fields); unset: the current local time.
  std::optional<std::tm> now;
  InterpreterLimits limits;
};

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(std::string_view source);

  Result<std::string> render(const nlohmann::ordered_json& context,
                             const RenderOptions& options = {}) const;
  Result<std::string> render(const nlohmann::json& context, const RenderOptions& options = {}) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  Result<std::string> render_value(const Value& context, const RenderOptions& options) const;

  std::shared_ptr<const Body> body_;
};

// Parses and renders in one call.
Result<std::string> render(const std::string& template_src, const nlohmann::ordered_json& context,
                           const RenderOptions& options = {});
Result<std::string> render(const std::string& template_src, const nlohmann::json& context,
                           const RenderOptions& options = {});

// transformers' ChatML fallback for models that ship no template.
std::string default_chatml_template();

// "YYYY-MM-DDTHH:MM:SS" (or "YYYY-MM-DD", or with a space instead of 'T') -> broken-down time
// with weekday and day of year filled in; nullopt when malformed or out of range.
std::optional<std::tm> parse_datetime(std::string_view text);

// Python's datetime.strftime for `format` at `now` (C locale).
std::string format_time(const std::tm& now, const std::string& format);

}  // namespace ts::chat
