// Tool calls and reasoning through the whole OpenAI service over real sockets, with real
// vocabularies (llama.cpp's vocab-only GGUFs) and real chat templates, and the test-only
// ScriptedBackend in place of the forward pass (server/scripted_backend.h says what that covers).
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "support/wire_client.h"
#include "server/openai_service.h"
#include "server/scripted_backend.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::server {
namespace {

using json = nlohmann::json;

std::vector<json> sse_json(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    std::string d = body.substr(pos + 6, end - pos - 6);
    if (d != "[DONE]") out.push_back(json::parse(d));
    pos = end + 2;
  }
  return out;
}

class ToolService : public ::testing::Test {
 protected:
  // Skips when the shared data is absent.
  void start(const std::string& vocab, const std::string& tmpl, std::vector<ScriptedReply> script) {
    std::string vp = ::ts::testing::shared_path("models/llama.cpp-vocab/" + vocab);
    std::string tp = ::ts::testing::shared_path("chat-templates/" + tmpl);
    if (vp.empty() || tp.empty()) GTEST_SKIP() << "shared test data not found: " << vocab << ", " << tmpl;
    auto g = gguf::GgufFile::open(vp);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gguf_ = std::move(g).value();
    auto t = tokenizer::Tokenizer::from_gguf(*gguf_);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tok_ = std::move(t).value();
    backend_ = std::make_unique<ScriptedBackend>(*tok_, std::move(script), 1 << 16);
    ServiceOptions so{.model_id = "m"};
    service_ = std::make_unique<OpenAIService>(*backend_, PromptBuilder::create(*tok_, ::ts::testing::read_file(tp)), so);
    http::ServerOptions ho;
    ho.error_renderer = OpenAIService::error_renderer();
    http_ = std::make_unique<http::Server>(ho);
    service_->register_routes(*http_);
    ASSERT_TRUE(http_->start().ok());
    ASSERT_TRUE(client_.connect("127.0.0.1", http_->port()).ok());
  }
  void TearDown() override {
    if (http_) http_->stop();
    if (service_) service_->stop();
  }
  http::ClientResponse chat(json extra) {
    json b = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    auto r = client_.request("POST", "/v1/chat/completions", b.dump());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : http::ClientResponse{};
  }
  static json tools() {
    return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  }

  std::unique_ptr<gguf::GgufFile> gguf_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<ScriptedBackend> backend_;
  std::unique_ptr<OpenAIService> service_;
  std::unique_ptr<http::Server> http_;
  http::Client client_;
};

// Llama 3's JSON call format, with the Llama 3.1 template (which tells the model to answer with
// {"name", "parameters"}) and the Llama 3 vocabulary. The reply starts with a control token that
// is not a marker of the format (Llama 3.0's id of what 3.1 calls <|python_tag|>): control tokens
// carry no text, and only the format's markers are spliced back, so it must not show up.
// (No shared vocabulary has a format marker as a control token, so the positive splice is only
// exercised by the parser tests on text.)
TEST_F(ToolService, Llama3JsonCallWithTheLlama3VocabAndTemplate) {
  start("ggml-vocab-llama-bpe.gguf", "meta-llama-Llama-3.1-8B-Instruct.jinja",
        {{R"(<|reserved_special_token_5|>{"name": "get_weather", "parameters": {"city": "Paris"}})", {"get_weather"}}});
  auto special = tok_->find_piece("<|reserved_special_token_5|>");
  ASSERT_TRUE(special.has_value());
  ASSERT_TRUE(tok_->is_control(*special));
  auto r = chat({{"tools", tools()}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << r.body;
  EXPECT_TRUE(m["content"].is_null()) << r.body;
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
}

TEST_F(ToolService, ToolChoiceNoneLeavesTheTextAlone) {
  start("ggml-vocab-qwen2.gguf", "Qwen-Qwen2.5-7B-Instruct.jinja",
        {{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", {}}});
  auto r = chat({{"tools", tools()}, {"tool_choice", "none"}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(j["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"), std::string::npos);
}

TEST_F(ToolService, StreamedToolCallDeltasHaveTheOpenAIShape) {
  start("ggml-vocab-qwen2.gguf", "Qwen-Qwen2.5-7B-Instruct.jinja",
        {{"On it.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", {}}});
  auto r = chat({{"tools", tools()}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<json> chunks = sse_json(r.body);
  ASSERT_GE(chunks.size(), 5u) << r.body;
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content, args, id, name, finish;
  int call_chunks = 0;
  for (const json& c : chunks) {
    if (c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    const json& d = ch["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const json& t : d["tool_calls"]) {
        ++call_chunks;
        EXPECT_EQ(t["index"], 0);
        if (t.contains("id")) {
          EXPECT_TRUE(id.empty()) << "the id comes once";
          id = t["id"];
          EXPECT_EQ(t["type"], "function");
          name = t["function"]["name"];
        }
        args += t["function"]["arguments"].get<std::string>();
      }
    }
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(content, "On it.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_GE(call_chunks, 2);
  EXPECT_EQ(json::parse(args), json({{"city", "Paris"}}));
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_GT(chunks.back()["usage"]["completion_tokens"].get<int>(), 10);
}

TEST_F(ToolService, Qwen3ReasoningIsSeparatedAndCounted) {
  std::string reply = "<think>\nThe user greets me. I greet back.\n</think>\n\nHello there!";
  start("ggml-vocab-qwen2.gguf", "Qwen-Qwen3-0.6B.jinja",
        {{reply, {}}, {reply, {}}, {"Hello there!", {"<think>\n\n</think>\n\n"}}});
  auto r = chat(json::object());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(m["content"], "Hello there!");
  EXPECT_EQ(m["reasoning_content"], "The user greets me. I greet back.");
  int64_t reasoning = j["usage"]["completion_tokens_details"]["reasoning_tokens"];
  int64_t completion = j["usage"]["completion_tokens"];
  std::vector<int32_t> think_ids = tok_->encode("<think>\nThe user greets me. I greet back.\n</think>", false, true);
  EXPECT_GE(reasoning, static_cast<int64_t>(think_ids.size())) << r.body;
  EXPECT_LT(reasoning, completion) << r.body;

  auto s = chat({{"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(s.status, 200) << s.body;
  std::string content, thinking;
  for (const json& c : sse_json(s.body)) {
    if (c["choices"].empty()) {
      EXPECT_EQ(c["usage"]["completion_tokens_details"]["reasoning_tokens"], reasoning);
      continue;
    }
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) thinking += d["reasoning_content"].get<std::string>();
  }
  EXPECT_EQ(content, "Hello there!");
  EXPECT_EQ(thinking, "The user greets me. I greet back.");

  // chat_template_kwargs reach the template (the script checks the prompt has the empty think).
  auto off = chat({{"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_EQ(off.status, 200) << off.body;
  EXPECT_EQ(json::parse(off.body)["choices"][0]["message"]["content"], "Hello there!");
  EXPECT_FALSE(json::parse(off.body)["choices"][0]["message"].contains("reasoning_content"));
}

// Each choice of n > 1 has its own parser and its own call ids.
TEST_F(ToolService, EveryChoiceIsParsedOnItsOwn) {
  start("ggml-vocab-qwen2.gguf", "Qwen-Qwen2.5-7B-Instruct.jinja",
        {{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", {}},
         {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>", {}}});
  auto r = chat({{"tools", tools()}, {"n", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_NE(j["choices"][0]["message"]["tool_calls"][0]["id"], j["choices"][1]["message"]["tool_calls"][0]["id"]);
  auto s = chat({{"tools", tools()}, {"n", 2}, {"stream", true}});
  ASSERT_EQ(s.status, 200) << s.body;
  std::map<int, std::string> args, finish;
  for (const json& c : sse_json(s.body)) {
    const json& ch = c["choices"][0];
    int i = ch["index"];
    if (ch["delta"].contains("tool_calls")) args[i] += ch["delta"]["tool_calls"][0]["function"]["arguments"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish[i] = ch["finish_reason"];
  }
  ASSERT_EQ(args.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(json::parse(args[i]), json({{"city", "Rome"}})) << i;
    EXPECT_EQ(finish[i], "tool_calls") << i;
  }
}

}  // namespace
}  // namespace ts::server
