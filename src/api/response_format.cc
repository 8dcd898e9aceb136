#include "api/response_format.h"

#include <nlohmann/json.hpp>

namespace ts::api {

using ojson = nlohmann::ordered_json;

const char* finish_reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::kNull: return nullptr;
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kContentFilter: return "content_filter";
  }
  return nullptr;
}

namespace {

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson finish_json(FinishReason r) {
  const char* t = finish_reason_text(r);
  return t ? ojson(t) : ojson(nullptr);
}

ojson usage_json(const UsageInfo& u) {
  return ojson{{"prompt_tokens", u.prompt_tokens},
               {"completion_tokens", u.completion_tokens},
               {"total_tokens", u.prompt_tokens + u.completion_tokens},
               {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

ojson chat_usage_json(const UsageInfo& u) {
  ojson j = usage_json(u);
  if (u.reasoning_tokens) j["completion_tokens_details"] = ojson{{"reasoning_tokens", *u.reasoning_tokens}};
  return j;
}

ojson chat_message_json(const Choice& c) {
  ojson m{{"role", "assistant"}};
  m["content"] = c.tool_calls.empty() || !c.text.empty() ? ojson(c.text) : ojson(nullptr);
  if (c.reasoning) m["reasoning_content"] = *c.reasoning;
  m["refusal"] = nullptr;
  if (!c.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const ToolCallOut& t : c.tool_calls)
      calls.push_back(ojson{{"id", t.id}, {"type", "function"},
                            {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

ojson bytes_json(std::string_view s) {
  ojson a = ojson::array();
  for (char c : s) a.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return a;
}

// Completions' legacy shape: parallel arrays.
ojson completion_logprobs_json(const Choice& c) {
  if (!c.has_logprobs) return nullptr;
  ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offs = ojson::array();
  int64_t off = c.text_offset_base;
  for (const TokenLogprobs& t : c.logprobs) {
    tokens.push_back(t.token);
    lps.push_back(t.logprob);
    ojson top = ojson::object();
    for (const TopLogprob& a : t.top) top[a.token] = a.logprob;
    if (t.top.empty()) top[t.token] = t.logprob;
    tops.push_back(std::move(top));
    offs.push_back(off);
    off += static_cast<int64_t>(t.token.size());
  }
  return ojson{{"tokens", std::move(tokens)},
               {"token_logprobs", std::move(lps)},
               {"top_logprobs", std::move(tops)},
               {"text_offset", std::move(offs)}};
}

// Chat's shape: one object per token with its alternatives.
ojson chat_logprobs_json(const Choice& c) {
  if (!c.has_logprobs) return nullptr;
  ojson content = ojson::array();
  for (const TokenLogprobs& t : c.logprobs) {
    ojson top = ojson::array();
    for (const TopLogprob& a : t.top)
      top.push_back(ojson{{"token", a.token}, {"logprob", a.logprob}, {"bytes", bytes_json(a.token)}});
    content.push_back(ojson{{"token", t.token},
                            {"logprob", t.logprob},
                            {"bytes", bytes_json(t.token)},
                            {"top_logprobs", std::move(top)}});
  }
  return ojson{{"content", std::move(content)}, {"refusal", nullptr}};
}

ojson envelope(const ResponseMeta& meta, const char* object) {
  return ojson{{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

ojson model_json(const ModelCard& m) {
  ojson j{{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", m.owned_by}};
  if (m.max_model_len > 0) j["max_model_len"] = m.max_model_len;
  return j;
}

}  // namespace

std::string completion_body(const ResponseMeta& meta, const std::vector<Choice>& choices,
                            const UsageInfo& usage) {
  ojson j = envelope(meta, "text_completion");
  ojson arr = ojson::array();
  for (const Choice& c : choices)
    arr.push_back(ojson{{"index", c.index},
                        {"text", c.text},
                        {"logprobs", completion_logprobs_json(c)},
                        {"finish_reason", finish_json(c.finish)}});
  j["choices"] = std::move(arr);
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string chat_completion_body(const ResponseMeta& meta, const std::vector<Choice>& choices,
                                 const UsageInfo& usage) {
  ojson j = envelope(meta, "chat.completion");
  ojson arr = ojson::array();
  for (const Choice& c : choices)
    arr.push_back(ojson{{"index", c.index},
                        {"message", chat_message_json(c)},
                        {"logprobs", chat_logprobs_json(c)},
                        {"finish_reason", finish_json(c.finish)}});
  j["choices"] = std::move(arr);
  j["usage"] = chat_usage_json(usage);
  return dump(j);
}

std::string completion_chunk(const ResponseMeta& meta, const Choice& delta, bool usage_field) {
  ojson j = envelope(meta, "text_completion");
  j["choices"] = ojson::array({ojson{{"index", delta.index},
                                     {"text", delta.text},
                                     {"logprobs", completion_logprobs_json(delta)},
                                     {"finish_reason", finish_json(delta.finish)}}});
  if (usage_field) j["usage"] = nullptr;
  return dump(j);
}

std::string chat_role_chunk(const ResponseMeta& meta, int32_t index, bool usage_field) {
  ojson j = envelope(meta, "chat.completion.chunk");
  j["choices"] = ojson::array({ojson{{"index", index},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
  if (usage_field) j["usage"] = nullptr;
  return dump(j);
}

std::string chat_content_chunk(const ResponseMeta& meta, const Choice& delta, bool usage_field) {
  ojson j = envelope(meta, "chat.completion.chunk");
  ojson d = ojson::object();
  if (!delta.text.empty() || !delta.reasoning || delta.reasoning->empty()) d["content"] = delta.text;
  if (delta.reasoning && !delta.reasoning->empty()) d["reasoning_content"] = *delta.reasoning;
  j["choices"] = ojson::array({ojson{{"index", delta.index},
                                     {"delta", std::move(d)},
                                     {"logprobs", chat_logprobs_json(delta)},
                                     {"finish_reason", nullptr}}});
  if (usage_field) j["usage"] = nullptr;
  return dump(j);
}

std::string chat_tool_call_chunk(const ResponseMeta& meta, int32_t index,
                                 const std::vector<ToolCallDelta>& calls, bool usage_field) {
  ojson j = envelope(meta, "chat.completion.chunk");
  ojson arr = ojson::array();
  for (const ToolCallDelta& c : calls) {
    ojson t{{"index", c.index}};
    if (!c.id.empty()) {
      t["id"] = c.id;
      t["type"] = "function";
      t["function"] = ojson{{"name", c.name}, {"arguments", c.arguments}};
    } else {
      t["function"] = ojson{{"arguments", c.arguments}};
    }
    arr.push_back(std::move(t));
  }
  j["choices"] = ojson::array({ojson{{"index", index},
                                     {"delta", {{"tool_calls", std::move(arr)}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
  if (usage_field) j["usage"] = nullptr;
  return dump(j);
}

std::string chat_finish_chunk(const ResponseMeta& meta, int32_t index, FinishReason finish,
                              bool usage_field) {
  ojson j = envelope(meta, "chat.completion.chunk");
  j["choices"] = ojson::array({ojson{{"index", index},
                                     {"delta", ojson::object()},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish_json(finish)}}});
  if (usage_field) j["usage"] = nullptr;
  return dump(j);
}

std::string usage_chunk(const ResponseMeta& meta, bool chat, const UsageInfo& usage) {
  ojson j = envelope(meta, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ojson::array();
  j["usage"] = chat ? chat_usage_json(usage) : usage_json(usage);
  return dump(j);
}

std::string sse_event(std::string_view json) {
  std::string s;
  s.reserve(json.size() + 8);
  s += "data: ";
  s += json;
  s += "\n\n";
  return s;
}

std::string model_list_body(const std::vector<ModelCard>& models) {
  ojson data = ojson::array();
  for (const ModelCard& m : models) data.push_back(model_json(m));
  return dump(ojson{{"object", "list"}, {"data", std::move(data)}});
}

std::string model_body(const ModelCard& model) { return dump(model_json(model)); }

std::string tokenize_body(const std::vector<int32_t>& tokens, int64_t max_model_len) {
  ojson j{{"tokens", tokens}, {"count", tokens.size()}};
  if (max_model_len > 0) j["max_model_len"] = max_model_len;
  return dump(j);
}

std::string detokenize_body(std::string_view text) {
  return dump(ojson{{"prompt", text}, {"content", text}});
}

}  // namespace ts::api
