// Turns API prompts into token ids: completions' text or token prompts, and chat messages
// rendered through the model's own chat template (tokenizer.chat_template in the GGUF), or
// ChatML when the model has none or its template does not parse (logged once at start-up).
// A BOS token is never doubled: when the template already writes it, none is added.
// Immutable after create(); thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/error.h"
#include "api/types.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ts::server {

// Extra inputs of a chat rendering.
struct ChatRenderOptions {
  std::string tools_json;             // `tools` as JSON text, "" for none
  bool add_generation_prompt = true;
  std::string template_kwargs_json;   // chat_template_kwargs: an object whose keys become template
                                      // variables (e.g. enable_thinking); "" for none
  std::string reasoning_effort;       // the template's reasoning_effort variable; "" = unset
  std::string assistant_prefill;      // appended after the rendering (a forced call's opener)
};

class PromptBuilder {
 public:
  // `template_source`: the model's template; nullopt or unparsable -> ChatML fallback.
  // `tok` must outlive the builder.
  static PromptBuilder create(const tokenizer::Tokenizer& tok,
                              std::optional<std::string> template_source);

  // A text prompt is encoded (special tokens written in it are parsed, as llama.cpp and vLLM
  // do; BOS added when add_special and the vocabulary asks for it); a token prompt is checked
  // against the vocabulary. Errors name `param` (e.g. "prompt[1]").
  api::ApiResult<std::vector<int32_t>> text_prompt(const api::PromptInput& in, bool add_special,
                                                   const std::string& param) const;

  // Renders the conversation and encodes it. A template error (e.g. its raise_exception for
  // roles that do not alternate) is a 400 naming "messages".
  api::ApiResult<std::vector<int32_t>> chat_prompt(const std::vector<api::ChatMessage>& messages,
                                                   const std::string& tools_json,
                                                   bool add_generation_prompt) const;
  // The rendered text only (for tests and the template command).
  api::ApiResult<std::string> render_chat(const std::vector<api::ChatMessage>& messages,
                                          const std::string& tools_json,
                                          bool add_generation_prompt) const;

  // With all options. Assistant tool_calls reach the template with their arguments as an
  // object (what most templates `tojson`); a template that fails on that (DeepSeek's concatenates
  // them as text) is rendered again with the arguments as the client's strings.
  // `rendered` (optional) receives the rendered text.
  api::ApiResult<std::vector<int32_t>> chat_prompt(const std::vector<api::ChatMessage>& messages,
                                                   const ChatRenderOptions& opts,
                                                   std::string* rendered = nullptr) const;
  api::ApiResult<std::string> render_chat(const std::vector<api::ChatMessage>& messages,
                                          const ChatRenderOptions& opts) const;

  // The template source in use (the model's, or the ChatML fallback's); drives the tool-call
  // and reasoning format detection.
  const std::string& template_source() const { return source_; }
  bool using_fallback_template() const { return fallback_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tok_; }

 private:
  PromptBuilder(const tokenizer::Tokenizer& tok, std::shared_ptr<const chat::ChatTemplate> tmpl,
                bool fallback, std::string source)
      : tok_(&tok), tmpl_(std::move(tmpl)), fallback_(fallback), source_(std::move(source)),
        renders_tool_calls_(source_.find("tool_calls") != std::string::npos) {}
  std::vector<int32_t> encode_rendered(const std::string& text) const;
  api::ApiResult<std::string> render_once(const std::vector<api::ChatMessage>& messages,
                                          const ChatRenderOptions& opts, bool object_arguments,
                                          bool null_content) const;

  const tokenizer::Tokenizer* tok_;
  std::shared_ptr<const chat::ChatTemplate> tmpl_;
  bool fallback_ = false;
  std::string source_;
  bool renders_tool_calls_ = true;  // the template reads messages' tool_calls
};

}  // namespace ts::server
