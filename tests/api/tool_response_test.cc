// Response shapes of tool calls and reasoning (OpenAI's chat.completion and chunk objects).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/response_format.h"

namespace ts::api {
namespace {

using json = nlohmann::json;
const ResponseMeta kMeta{.id = "chatcmpl-1", .created = 7, .model = "m"};

TEST(ToolResponse, MessageWithToolCallsHasNullContentAndReasoning) {
  Choice c{.index = 0, .text = "", .reasoning = std::string("think"),
           .tool_calls = {ToolCallOut{.id = "call_1", .name = "f", .arguments = "{\"a\":1}"}},
           .finish = FinishReason::kToolCalls};
  UsageInfo u{.prompt_tokens = 3, .completion_tokens = 9, .cached_tokens = 0, .reasoning_tokens = 4};
  json j = json::parse(chat_completion_body(kMeta, {c}, u));
  const json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning_content"], "think");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0], json::parse(R"({"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], 4);
  // Without reasoning: no reasoning_content and no completion_tokens_details; content kept.
  Choice plain{.index = 0, .text = "hi", .finish = FinishReason::kStop};
  json p = json::parse(chat_completion_body(kMeta, {plain}, UsageInfo{}));
  EXPECT_EQ(p["choices"][0]["message"]["content"], "hi");
  EXPECT_FALSE(p["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_FALSE(p["choices"][0]["message"].contains("tool_calls"));
  EXPECT_FALSE(p["usage"].contains("completion_tokens_details"));
}

TEST(ToolResponse, ToolCallAndReasoningChunks) {
  json head = json::parse(chat_tool_call_chunk(kMeta, 1, {ToolCallDelta{.index = 0, .id = "call_1", .name = "f", .arguments = ""}}, false));
  EXPECT_EQ(head["object"], "chat.completion.chunk");
  EXPECT_EQ(head["choices"][0]["index"], 1);
  EXPECT_EQ(head["choices"][0]["delta"]["tool_calls"][0],
            json::parse(R"({"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}})"));
  json args = json::parse(chat_tool_call_chunk(kMeta, 1, {ToolCallDelta{.index = 0, .id = "", .name = "", .arguments = "{}"}}, true));
  EXPECT_EQ(args["choices"][0]["delta"]["tool_calls"][0], json::parse(R"({"index":0,"function":{"arguments":"{}"}})"));
  EXPECT_TRUE(args["usage"].is_null());
  Choice r{.index = 0, .text = "", .reasoning = std::string("hmm")};
  json rc = json::parse(chat_content_chunk(kMeta, r, false));
  EXPECT_EQ(rc["choices"][0]["delta"], json({{"reasoning_content", "hmm"}}));
}

}  // namespace
}  // namespace ts::api
