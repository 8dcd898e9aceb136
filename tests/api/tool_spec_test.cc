#include "api/tool_spec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/request_parser.h"

namespace ts::api {
namespace {

using json = nlohmann::json;

json weather_tool() {
  return json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
}

std::string chat_body(const json& extra) {
  json b = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b.dump();
}

TEST(ToolSpec, ParsesToolsAndDefaultsChoiceToAuto) {
  auto r = parse_chat_request(chat_body({{"tools", json::array({weather_tool()})}}));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->tools.size(), 1u);
  EXPECT_EQ(r->tools[0].name, "get_weather");
  EXPECT_EQ(json::parse(r->tools[0].parameters_json)["required"][0], "city");
  EXPECT_EQ(r->tool_choice.mode, ToolChoiceMode::kAuto);
  EXPECT_TRUE(r->parallel_tool_calls);
  auto none = parse_chat_request(chat_body(json::object()));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->tool_choice.mode, ToolChoiceMode::kNone);
}

TEST(ToolSpec, InvalidParameterSchemasAre400sNamingTheField) {
  struct Case { const char* params; const char* param; };
  for (const Case& c : {Case{R"({"type": "objekt"})", "tools[0].function.parameters.type"},
                        Case{R"({"type": "object", "properties": []})", "tools[0].function.parameters.properties"},
                        Case{R"({"type": "object", "properties": {"a": {"type": 5}}})",
                             "tools[0].function.parameters.properties.a.type"},
                        Case{R"({"type": "object", "required": [1]})", "tools[0].function.parameters.required"},
                        Case{R"({"type": "object", "properties": {"a": {"anyOf": []}}})",
                             "tools[0].function.parameters.properties.a.anyOf"},
                        Case{R"({"type": "object", "properties": {"a": {"type": "array", "items": 3}}})",
                             "tools[0].function.parameters.properties.a.items"},
                        Case{R"({"type": "object", "properties": {"a": {"maxLength": -1}}})",
                             "tools[0].function.parameters.properties.a.maxLength"},
                        Case{R"({"type": "string"})", "tools[0].function.parameters.type"},
                        Case{R"("not a schema")", "tools[0].function.parameters"}}) {
    json tool = weather_tool();
    tool["function"]["parameters"] = json::parse(c.params);
    auto r = parse_chat_request(chat_body({{"tools", json::array({tool})}}));
    ASSERT_FALSE(r.ok()) << c.params;
    EXPECT_EQ(r.error().http_status, 400);
    EXPECT_EQ(r.error().param, c.param) << r.error().message;
    EXPECT_NE(r.error().message.find("JSON Schema"), std::string::npos) << r.error().message;
  }
}

TEST(ToolSpec, BadToolsAndToolChoicesAre400s) {
  json dup = json::array({weather_tool(), weather_tool()});
  auto r = parse_chat_request(chat_body({{"tools", dup}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().param, "tools[1].function.name");
  json bad_name = weather_tool();
  bad_name["function"]["name"] = "get weather!";
  EXPECT_EQ(parse_chat_request(chat_body({{"tools", json::array({bad_name})}})).error().param, "tools[0].function.name");
  json no_fn = {{"type", "function"}};
  EXPECT_EQ(parse_chat_request(chat_body({{"tools", json::array({no_fn})}})).error().param, "tools[0].function");
  json retrieval = {{"type", "retrieval"}, {"function", weather_tool()["function"]}};
  EXPECT_EQ(parse_chat_request(chat_body({{"tools", json::array({retrieval})}})).error().param, "tools[0].type");

  json tools = json::array({weather_tool()});
  auto unknown = parse_chat_request(
      chat_body({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().param, "tool_choice");
  EXPECT_NE(unknown.error().message.find("get_time"), std::string::npos);
  EXPECT_FALSE(parse_chat_request(chat_body({{"tools", tools}, {"tool_choice", "always"}})).ok());
  EXPECT_FALSE(parse_chat_request(chat_body({{"tool_choice", "required"}})).ok());
  EXPECT_FALSE(parse_chat_request(chat_body({{"tools", tools}, {"tool_choice", 3}})).ok());
  EXPECT_FALSE(parse_chat_request(chat_body({{"tools", tools}, {"parallel_tool_calls", "yes"}})).ok());

  auto named = parse_chat_request(
      chat_body({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                 {"parallel_tool_calls", false}}));
  ASSERT_TRUE(named.ok()) << named.error().message;
  EXPECT_EQ(named->tool_choice.mode, ToolChoiceMode::kNamed);
  EXPECT_EQ(named->tool_choice.name, "get_weather");
  EXPECT_FALSE(named->parallel_tool_calls);
}

TEST(ToolSpec, TemplateKwargsAndReasoningEffort) {
  auto r = parse_chat_request(chat_body({{"chat_template_kwargs", {{"enable_thinking", false}}},
                                         {"reasoning_effort", "high"}}));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(json::parse(r->chat_template_kwargs_json)["enable_thinking"], false);
  EXPECT_EQ(r->reasoning_effort, "high");
  EXPECT_EQ(parse_chat_request(chat_body({{"reasoning_effort", "max"}})).error().param, "reasoning_effort");
  EXPECT_EQ(parse_chat_request(chat_body({{"chat_template_kwargs", "x"}})).error().param, "chat_template_kwargs");
  EXPECT_EQ(parse_chat_request(chat_body({{"chat_template_kwargs", {{"messages", 1}}}})).error().param,
            "chat_template_kwargs.messages");
}

TEST(ToolSpec, AssistantReasoningContentIsKept) {
  json b = {{"model", "m"},
            {"messages", json::array({{{"role", "user"}, {"content", "hi"}},
                                      {{"role", "assistant"}, {"content", "4"}, {"reasoning_content", "2+2"}}})}};
  auto r = parse_chat_request(b.dump());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->messages[1].reasoning_content.has_value());
  EXPECT_EQ(*r->messages[1].reasoning_content, "2+2");
}

TEST(ToolSpec, ForcedCallPlansPerFormat) {
  std::vector<ToolSpec> tools = {
      {"get_weather", "", R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"},
      {"get_time", "", "{}"}};
  ToolChoice named{ToolChoiceMode::kNamed, "get_weather"};
  ToolChoice required{ToolChoiceMode::kRequired, ""};
  EXPECT_FALSE(forced_call_plan(ToolCallFormat::kHermes, tools, ToolChoice{ToolChoiceMode::kAuto, ""}, true));

  auto h = forced_call_plan(ToolCallFormat::kHermes, tools, named, true);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->prefill, "<tool_call>\n");
  json s = json::parse(h->schema);
  EXPECT_EQ(s["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(s["properties"]["arguments"]["required"][0], "city");

  json any = json::parse(forced_call_plan(ToolCallFormat::kHermes, tools, required, true)->schema);
  ASSERT_EQ(any["anyOf"].size(), 2u);
  EXPECT_EQ(any["anyOf"][1]["properties"]["name"]["const"], "get_time");

  json llama = json::parse(forced_call_plan(ToolCallFormat::kLlama3, tools, named, true)->schema);
  EXPECT_TRUE(llama["properties"].contains("parameters"));

  auto m = forced_call_plan(ToolCallFormat::kMistral, tools, required, /*parallel=*/false);
  EXPECT_EQ(m->prefill, "[TOOL_CALLS]");
  json ms = json::parse(m->schema);
  EXPECT_EQ(ms["type"], "array");
  EXPECT_EQ(ms["maxItems"], 1);

  auto g = forced_call_plan(ToolCallFormat::kHarmony, tools, named, true);
  EXPECT_EQ(g->prefill, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
  EXPECT_EQ(json::parse(g->schema)["required"][0], "city");
  EXPECT_EQ(forced_call_plan(ToolCallFormat::kHarmony, tools, required, true)->schema, "");

  // The prefill plus a schema-valid completion parses back into the forced call.
  OutputParserConfig c;
  c.tools = ToolCallFormat::kHermes;
  auto p = parse_model_output(c, h->prefill + R"({"name": "get_weather", "arguments": {"city": "Oslo"}})", true);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  c.tools = ToolCallFormat::kHarmony;
  p = parse_model_output(c, g->prefill + R"({"city": "Oslo"})", true);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo"})");
}

}  // namespace
}  // namespace ts::api
