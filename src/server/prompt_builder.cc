#include "server/prompt_builder.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "api/tool_parser.h"
#include "core/log.h"

namespace ts::server {

using ojson = nlohmann::ordered_json;

PromptBuilder PromptBuilder::create(const tokenizer::Tokenizer& tok,
                                    std::optional<std::string> template_source) {
  if (template_source && !template_source->empty()) {
    auto t = chat::ChatTemplate::parse(*template_source);
    if (t.ok())
      return PromptBuilder(tok, std::make_shared<const chat::ChatTemplate>(std::move(t).value()), false,
                           *template_source);
    log::warn("the model's chat template does not parse (" + t.status().message() +
              "); falling back to ChatML");
  } else {
    log::info("the model has no chat template; using ChatML");
  }
  auto chatml = chat::ChatTemplate::parse(chat::default_chatml_template());
  std::shared_ptr<const chat::ChatTemplate> tmpl;
  if (chatml.ok()) tmpl = std::make_shared<const chat::ChatTemplate>(std::move(chatml).value());
  return PromptBuilder(tok, std::move(tmpl), true, std::string(chat::default_chatml_template()));
}

api::ApiResult<std::vector<int32_t>> PromptBuilder::text_prompt(const api::PromptInput& in,
                                                                bool add_special,
                                                                const std::string& param) const {
  if (in.is_tokens) {
    int32_t n_vocab = tok_->n_vocab();
    for (size_t i = 0; i < in.tokens.size(); ++i) {
      if (in.tokens[i] >= n_vocab)
        return api::invalid_value(param, "Invalid '" + param + "': token id " + std::to_string(in.tokens[i]) +
                                             " at position " + std::to_string(i) +
                                             " is outside the vocabulary (size " + std::to_string(n_vocab) + ").");
    }
    return in.tokens;
  }
  std::vector<int32_t> ids = tok_->encode(in.text, add_special, /*parse_special=*/true);
  if (ids.empty())
    return api::invalid_value(param, "Invalid '" + param + "': the prompt is empty after tokenization.");
  return ids;
}

api::ApiResult<std::string> PromptBuilder::render_chat(const std::vector<api::ChatMessage>& messages,
                                                       const std::string& tools_json,
                                                       bool add_generation_prompt) const {
  ChatRenderOptions o;
  o.tools_json = tools_json;
  o.add_generation_prompt = add_generation_prompt;
  return render_chat(messages, o);
}

api::ApiResult<std::string> PromptBuilder::render_chat(const std::vector<api::ChatMessage>& messages,
                                                       const ChatRenderOptions& opts) const {
  auto out = render_once(messages, opts, /*object_arguments=*/true, /*null_content=*/true);
  bool has_calls = std::any_of(messages.begin(), messages.end(),
                               [](const api::ChatMessage& m) { return !m.tool_calls.empty(); });
  // Templates differ in what they expect of a tool-call message: arguments as an object or as
  // text, content null or "" (Qwen3's tests `'</think>' in content`). Try the others before
  // reporting the first error.
  for (int variant = 1; !out.ok() && has_calls && out.error().http_status == 400 && variant < 4; ++variant) {
    auto again = render_once(messages, opts, /*object_arguments=*/variant % 2 == 0, /*null_content=*/variant < 2);
    if (again.ok()) out = std::move(again);
  }
  if (out.ok() && !opts.assistant_prefill.empty()) out.value() += opts.assistant_prefill;
  return out;
}

api::ApiResult<std::string> PromptBuilder::render_once(const std::vector<api::ChatMessage>& messages,
                                                       const ChatRenderOptions& opts,
                                                       bool object_arguments, bool null_content) const {
  if (!tmpl_) {
    api::ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = "no chat template is available";
    return e;
  }
  ojson msgs = ojson::array();
  for (const api::ChatMessage& m : messages) {
    ojson j{{"role", m.role}};
    j["content"] = m.content ? ojson(*m.content) : null_content ? ojson(nullptr) : ojson("");
    if (!m.tool_calls.empty() && !renders_tool_calls_) {
      // The template ignores tool_calls (Granite 3.3's): write them into the content the way
      // the model writes them, so the next turn still shows what it called.
      std::vector<api::ParsedToolCall> calls;
      for (const api::ToolCall& c : m.tool_calls) calls.push_back(api::ParsedToolCall{c.function_name, c.arguments});
      std::string text = m.content ? *m.content : std::string();
      j["content"] = text + api::render_tool_calls(api::detect_tool_call_format(source_), calls);
    }
    if (!m.name.empty()) j["name"] = m.name;
    if (m.reasoning_content) {
      j["reasoning_content"] = *m.reasoning_content;  // Qwen3
      j["thinking"] = *m.reasoning_content;           // gpt-oss
    }
    if (!m.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const api::ToolCall& c : m.tool_calls) {
        // Templates commonly `tojson` the arguments: give them an object when they parse.
        ojson args = object_arguments ? ojson::parse(c.arguments, nullptr, false) : ojson(c.arguments);
        if (args.is_discarded()) args = c.arguments;
        calls.push_back(ojson{{"id", c.id}, {"type", c.type},
                              {"function", {{"name", c.function_name}, {"arguments", std::move(args)}}}});
      }
      j["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    msgs.push_back(std::move(j));
  }
  auto piece_or_empty = [this](int32_t id) { return id >= 0 ? tok_->piece(id) : std::string(); };
  ojson ctx = ojson::object();
  if (!opts.template_kwargs_json.empty()) {
    ojson kw = ojson::parse(opts.template_kwargs_json, nullptr, false);
    if (kw.is_object()) ctx = std::move(kw);
  }
  if (!opts.reasoning_effort.empty()) ctx["reasoning_effort"] = opts.reasoning_effort;
  ctx["messages"] = std::move(msgs);
  ctx["add_generation_prompt"] = opts.add_generation_prompt;
  ctx["bos_token"] = piece_or_empty(tok_->bos_id());
  ctx["eos_token"] = piece_or_empty(tok_->eos_id());
  if (!opts.tools_json.empty()) {
    ojson tools = ojson::parse(opts.tools_json, nullptr, false);
    if (!tools.is_discarded()) ctx["tools"] = std::move(tools);
  }
  auto out = tmpl_->render(ctx);
  if (!out.ok()) {
    api::ApiError e = api::error_from_status(out.status(), "messages");
    if (e.http_status == 400) e.message = "The chat template rejected the messages: " + e.message;
    return e;
  }
  return std::move(out).value();
}

std::vector<int32_t> PromptBuilder::encode_rendered(const std::string& text) const {
  std::vector<int32_t> ids = tok_->encode(text, /*add_special=*/true, /*parse_special=*/true);
  int32_t bos = tok_->bos_id();
  if (bos >= 0 && ids.size() >= 2 && ids[0] == bos && ids[1] == bos) ids.erase(ids.begin());
  return ids;
}

api::ApiResult<std::vector<int32_t>> PromptBuilder::chat_prompt(const std::vector<api::ChatMessage>& messages,
                                                                const std::string& tools_json,
                                                                bool add_generation_prompt) const {
  ChatRenderOptions o;
  o.tools_json = tools_json;
  o.add_generation_prompt = add_generation_prompt;
  return chat_prompt(messages, o);
}

api::ApiResult<std::vector<int32_t>> PromptBuilder::chat_prompt(const std::vector<api::ChatMessage>& messages,
                                                                const ChatRenderOptions& opts,
                                                                std::string* rendered) const {
  auto text = render_chat(messages, opts);
  if (!text.ok()) return text.error();
  if (rendered) *rendered = text.value();
  std::vector<int32_t> ids = encode_rendered(text.value());
  if (ids.empty()) return api::invalid_value("messages", "The conversation renders to an empty prompt.");
  return ids;
}

}  // namespace ts::server
