// Tool calls, tool results and reasoning through every shared chat template (the real Jinja
// sources in ../shared/chat-templates), rendered by the PromptBuilder the server uses.
#include "server/prompt_builder.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/tool_parser.h"
#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::server {
namespace {

using json = nlohmann::json;

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

class TemplateRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string model = ::ts::testing::shared_path("models/stories260K/stories260K-f32.gguf");
    dir_ = ::ts::testing::shared_path("chat-templates/cases.json");
    if (model.empty() || dir_.empty()) GTEST_SKIP() << "shared test data not found (stories260K, chat-templates)";
    dir_ = dir_.substr(0, dir_.size() - std::string("/cases.json").size());
    auto g = gguf::GgufFile::open(model);
    ASSERT_TRUE(g.ok());
    gguf_ = std::move(g).value();
    auto t = tokenizer::Tokenizer::from_gguf(*gguf_);
    ASSERT_TRUE(t.ok());
    tok_ = std::move(t).value();
    cases_ = json::parse(::ts::testing::read_file(dir_ + "/cases.json"));
  }

  static std::vector<api::ChatMessage> conversation(bool with_call, bool with_result) {
    std::vector<api::ChatMessage> m;
    m.push_back({.role = "system", .content = "You are a helpful assistant."});
    m.push_back({.role = "user", .content = "What is the weather in Paris?"});
    if (with_call) {
      api::ChatMessage a{.role = "assistant", .content = std::nullopt};
      // 9 alphanumerics: Mistral's templates refuse other ids.
      a.tool_calls.push_back(api::ToolCall{.id = "a1B2c3D4e", .type = "function", .function_name = "get_weather",
                                           .arguments = R"({"city": "Paris"})"});
      m.push_back(std::move(a));
    }
    if (with_result)
      m.push_back({.role = "tool", .content = "18 C and sunny", .name = "get_weather", .tool_call_id = "a1B2c3D4e"});
    return m;
  }

  std::string dir_;
  std::unique_ptr<gguf::GgufFile> gguf_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  json cases_;
};

// What the template writes for the assistant's tool call is what the output parser of the
// template's detected family reads back, and the tool result reaches the next prompt.
TEST_F(TemplateRoundTrip, ToolCallsAndResultsRoundTripThroughEveryToolTemplate) {
  int tool_templates = 0;
  for (const auto& [name, meta] : cases_["templates"].items()) {
    SCOPED_TRACE(name);
    std::string source = ::ts::testing::read_file(dir_ + "/" + meta["file"].get<std::string>());
    PromptBuilder pb = PromptBuilder::create(*tok_, source);
    ASSERT_FALSE(pb.using_fallback_template());
    bool supports_tools = false;
    for (const auto& c : meta["cases"]) supports_tools |= c == "e_tools";
    // Tool-capable by the fixture's list, or by markers the template writes for calls.
    api::ToolCallFormat format = api::detect_tool_call_format(source);
    supports_tools |= source.find("tool_calls") != std::string::npos && source.find("tools") != std::string::npos;

    ChatRenderOptions before{.tools_json = kTools, .add_generation_prompt = true, .template_kwargs_json = "",
                             .reasoning_effort = "", .assistant_prefill = ""};
    ChatRenderOptions after = before;
    after.add_generation_prompt = false;
    auto prompt = pb.render_chat(conversation(false, false), before);
    auto with_call = pb.render_chat(conversation(true, false), after);
    auto with_result = pb.render_chat(conversation(true, true), before);
    if (!supports_tools) {
      // Templates without tools: a clear 400 from the template, or a rendering; never a crash.
      if (!with_result.ok()) {
        EXPECT_EQ(with_result.error().http_status, 400);
      }
      continue;
    }
    ++tool_templates;
    ASSERT_TRUE(prompt.ok()) << prompt.error().message;
    ASSERT_TRUE(with_call.ok()) << with_call.error().message;
    ASSERT_TRUE(with_result.ok()) << with_result.error().message;
    EXPECT_NE(with_result.value().find("18 C and sunny"), std::string::npos) << with_result.value();

    // The assistant's turn: what the call rendering adds after the common prefix.
    const std::string& a = prompt.value();
    const std::string& b = with_call.value();
    size_t common = 0;
    while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
    std::string turn = b.substr(common);
    api::OutputParserConfig cfg;
    cfg.tools = format;
    cfg.reasoning = api::detect_reasoning_format(source);
    if (format == api::ToolCallFormat::kHarmony) cfg.reasoning = api::ReasoningFormat::kHarmony;
    // End-of-turn tokens the template appends are not part of the model's output.
    for (const char* eot : {"<|eot_id|>", "<|im_end|>", "</s>", "<|end_of_text|>", "<｜end▁of▁sentence｜>",
                            "<|end|>", "<|return|>", "<|call|>"}) {
      size_t p = turn.rfind(eot);
      if (p != std::string::npos && api::parse_model_output(cfg, turn.substr(0, p), true).calls.size() == 1) {
        turn = turn.substr(0, p) + (std::string(eot) == "<|call|>" ? eot : "");
        break;
      }
    }
    api::ParsedOutput parsed = api::parse_model_output(cfg, turn, /*final=*/true);
    ASSERT_EQ(parsed.calls.size(), 1u) << api::tool_call_format_name(format) << " turn: [" << turn << "]";
    EXPECT_EQ(parsed.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(parsed.calls[0].arguments), json({{"city", "Paris"}}));
  }
  EXPECT_GE(tool_templates, 8);
}

TEST_F(TemplateRoundTrip, TemplateKwargsAndReasoningEffortReachTheTemplate) {
  auto render = [&](const std::string& file, ChatRenderOptions o) {
    PromptBuilder pb = PromptBuilder::create(*tok_, ::ts::testing::read_file(dir_ + "/" + file));
    auto r = pb.render_chat(conversation(false, false), o);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r.value() : std::string();
  };
  ChatRenderOptions o;
  std::string thinking = render("Qwen-Qwen3-0.6B.jinja", o);
  o.template_kwargs_json = R"({"enable_thinking": false})";
  std::string not_thinking = render("Qwen-Qwen3-0.6B.jinja", o);
  EXPECT_EQ(not_thinking, thinking + "<think>\n\n</think>\n\n");
  EXPECT_FALSE(api::prompt_opens_reasoning(not_thinking));

  ChatRenderOptions effort;
  effort.reasoning_effort = "high";
  EXPECT_NE(render("openai-gpt-oss-120b.jinja", effort).find("Reasoning: high"), std::string::npos);
  EXPECT_NE(render("openai-gpt-oss-120b.jinja", ChatRenderOptions{}).find("Reasoning: medium"), std::string::npos);

  // DeepSeek-R1's generation prompt opens the reasoning.
  EXPECT_TRUE(api::prompt_opens_reasoning(render("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", ChatRenderOptions{})));

  // Earlier reasoning of the assistant reaches Qwen3's template for the last turn.
  PromptBuilder qwen = PromptBuilder::create(*tok_, ::ts::testing::read_file(dir_ + "/Qwen-Qwen3-0.6B.jinja"));
  auto msgs = conversation(false, false);
  api::ChatMessage a{.role = "assistant", .content = "Sunny."};
  a.reasoning_content = "I recall it is sunny.";
  msgs.push_back(a);
  ChatRenderOptions no_gen;
  no_gen.add_generation_prompt = false;
  auto r = qwen.render_chat(msgs, no_gen);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r.value().find("<think>\nI recall it is sunny.\n</think>\n\nSunny."), std::string::npos) << r.value();

  // The forced call's opener ends the prompt.
  ChatRenderOptions prefill;
  prefill.assistant_prefill = "<tool_call>\n";
  std::string p = render("Qwen-Qwen2.5-7B-Instruct.jinja", prefill);
  EXPECT_TRUE(p.ends_with("<|im_start|>assistant\n<tool_call>\n")) << p;
}

}  // namespace
}  // namespace ts::server
