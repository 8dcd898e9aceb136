// response_format through the real server in process (stories260K, the engine loop, the OpenAI
// service, the HTTP server on 127.0.0.1:0 and a real HTTP client).
#ifdef TS_WITH_SERVER
#include <gtest/gtest.h>

// GCC 12 reports a false maybe-uninitialized inside <regex> in sanitizer builds.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "support/wire_client.h"
#include "http/server.h"
#include "model/model.h"
#include "schema_check.h"
#include "server/openai_service.h"
#include "test_util.h"

namespace ts::server {
namespace {

using json = nlohmann::json;

class StructuredServer : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path = ::ts::testing::shared_path("models/stories260K/stories260K-f32.gguf");
    if (path.empty()) GTEST_SKIP() << "shared test data not found: stories260K-f32.gguf";
    auto m = model::Model::load(path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    engine::EngineOptions eo;
    eo.num_kv_blocks = 256;
    eo.num_threads = 1;
    eo.seed = 1;
    auto e = engine::Engine::create(*model_, eo);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value();
    backend_ = std::make_unique<EngineBackend>(*engine_);
    service_ = std::make_unique<OpenAIService>(
        *backend_, PromptBuilder::create(model_->tokenizer(), model_->gguf().get_string("tokenizer.chat_template")),
        ServiceOptions{.model_id = "stories260K"});
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
  http::ClientResponse post(const std::string& path, const json& body) {
    auto r = client_.request("POST", path, body.dump());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : http::ClientResponse{};
  }
  static json chat(json response_format, int max_tokens = 75) {
    return json{{"model", "stories260K"},
                {"messages", json::array({json{{"role", "user"}, {"content", "Tell me about Lily"}}})},
                {"max_tokens", max_tokens},
                {"seed", 4},
                {"response_format", std::move(response_format)}};
  }

  std::unique_ptr<model::Model> model_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<EngineBackend> backend_;
  std::unique_ptr<OpenAIService> service_;
  std::unique_ptr<http::Server> http_;
  http::Client client_;
};

TEST_F(StructuredServer, ChatJsonSchemaValidatesAndStops) {
  const json schema = json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":4},"age":{"type":"integer","minimum":1,"maximum":9},
      "pet":{"enum":["cat","dog"]}},"required":["name","age","pet"],"additionalProperties":false})");
  json body = chat({{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", schema}}}});
  body["n"] = 2;
  auto r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 2u);
  const auto os = structured::test::ojson::parse(schema.dump());
  for (const auto& c : j["choices"]) {
    EXPECT_EQ(c["finish_reason"], "stop");
    const std::string content = c["message"]["content"];
    auto v = structured::test::ojson::parse(content, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << content;
    EXPECT_EQ(structured::test::validate(v, os, os), "") << content;
  }
}

TEST_F(StructuredServer, StreamedJsonObjectAndCompletionsRegexAndGrammar) {
  json body = chat({{"type", "json_object"}}, 75);
  body["stream"] = true;
  auto r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  std::string content, finish;
  size_t pos = 0;
  while ((pos = r.body.find("data: ", pos)) != std::string::npos) {
    const size_t end = r.body.find("\n\n", pos);
    const std::string data = r.body.substr(pos + 6, end - pos - 6);
    pos = end + 2;
    if (data == "[DONE]") break;
    json ch = json::parse(data);
    if (ch["choices"].empty()) continue;
    const json& c0 = ch["choices"][0];
    if (c0["delta"].contains("content")) content += c0["delta"]["content"].get<std::string>();
    if (!c0["finish_reason"].is_null()) finish = c0["finish_reason"];
  }
  ASSERT_FALSE(finish.empty());
  if (finish == "stop") {
    json v = json::parse(content, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << content;
    EXPECT_TRUE(v.is_object());
  } else {
    EXPECT_EQ(finish, "length");
    EXPECT_EQ(content.find_first_not_of(" \t\n"), content.find('{')) << content;
  }

  auto rc = post("/v1/completions", json{{"model", "stories260K"}, {"prompt", "Once upon a time"}, {"max_tokens", 40},
                                         {"response_format", {{"type", "regex"}, {"regex", "(red|blue) [a-z]{2,8}\\."}}}});
  ASSERT_EQ(rc.status, 200) << rc.body;
  json jc = json::parse(rc.body);
  EXPECT_EQ(jc["choices"][0]["finish_reason"], "stop");
  const std::string text = jc["choices"][0]["text"];
  EXPECT_TRUE(std::regex_match(text, std::regex("(red|blue) [a-z]{2,8}\\."))) << text;

  auto rg = post("/v1/chat/completions", chat({{"type", "grammar"}, {"grammar", "root ::= (\"yes\" | \"no\") \"!\"{1,3}"}}));
  ASSERT_EQ(rg.status, 200) << rg.body;
  const std::string g = json::parse(rg.body)["choices"][0]["message"]["content"];
  EXPECT_TRUE(std::regex_match(g, std::regex("(yes|no)!{1,3}"))) << g;
}

TEST_F(StructuredServer, LengthFinishKeepsWhatWasProduced) {
  auto r = post("/v1/completions", json{{"model", "stories260K"}, {"prompt", "Once"}, {"max_tokens", 2},
                                        {"response_format", {{"type", "regex"}, {"regex", "qqqqqqqqqqqqqqqqqqqq"}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const std::string text = j["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.find_first_not_of('q'), std::string::npos) << text;
}

TEST_F(StructuredServer, InvalidConstraintsAre400s) {
  struct Bad { json rf; const char* needle; };
  const Bad cases[] = {
      {{{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"type", "array"}, {"uniqueItems", true}}}}}}, "uniqueItems"},
      {{{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"format", "hostname"}}}}}}, "hostname"},
      {{{"type", "grammar"}, {"grammar", "root ::= \"a\" undefined-rule"}}, "undefined-rule"},
      {{{"type", "grammar"}, {"grammar", "root ::= root \"a\""}}, "left recursion"},
      {{{"type", "grammar"}, {"grammar", "root ::= [a-z]{1,99999}"}}, "limit"},
      {{{"type", "regex"}, {"regex", "(a|b"}}, "regex"},
      {{{"type", "regex"}, {"regex", "(a)\\1"}}, "back-references"},
      {{{"type", "xml"}}, "'xml'"},
  };
  for (const Bad& b : cases) {
    auto r = post("/v1/chat/completions", chat(b.rf));
    ASSERT_EQ(r.status, 400) << b.rf.dump() << " -> " << r.body;
    json e = json::parse(r.body)["error"];
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_NE(e["message"].get<std::string>().find(b.needle), std::string::npos) << e.dump();
    EXPECT_TRUE(e["param"] == "response_format" || e["param"] == "response_format.type") << e.dump();
  }
  // The same on /v1/completions.
  auto r = post("/v1/completions", json{{"model", "stories260K"}, {"prompt", "x"},
                                        {"response_format", {{"type", "regex"}, {"regex", "[z-a]"}}}});
  EXPECT_EQ(r.status, 400) << r.body;
}

}  // namespace
}  // namespace ts::server
#endif  // TS_WITH_SERVER
