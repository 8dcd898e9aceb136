// Golden test: every real chat template in ../shared/chat-templates rendered with every
// conversation cases.json assigns to it, compared byte for byte with the reference renderings
// made by Python jinja2 under transformers' settings (README there). `.error.txt` files hold the
// exact raise_exception message. Templates whose expected files are held back must still render.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "test_util.h"

namespace ts::chat {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct Fixture {
  std::string dir;
  ojson cases;
};

Fixture load(const std::string& dir) {
  Fixture f;
  f.dir = dir;
  f.cases = ojson::parse(ts::testing::read_file(dir + "/cases.json"));
  return f;
}

ojson context_for(const ojson& tmpl, const ojson& c) {
  ojson ctx = ojson::object();
  ctx["messages"] = c["messages"];
  ctx["add_generation_prompt"] = c["add_generation_prompt"];
  ctx["bos_token"] = tmpl["bos_token"];
  ctx["eos_token"] = tmpl["eos_token"];
  if (c.contains("tools")) ctx["tools"] = c["tools"];
  return ctx;
}

RenderOptions fixed_now(const ojson& cases) {
  RenderOptions o;
  o.now = parse_datetime(cases.value("fixed_now", std::string("2024-07-26T00:00:00")));
  return o;
}

TEST(ChatTemplateFixtures, EveryTemplateAndConversationMatchesReference) {
  TS_REQUIRE_SHARED(dir, "chat-templates/cases.json");
  Fixture f = load(fs::path(dir).parent_path().string());
  RenderOptions options = fixed_now(f.cases);
  ASSERT_TRUE(options.now.has_value());

  int compared = 0, errors_compared = 0, rendered_only = 0;
  std::set<std::string> seen_expected;
  for (const auto& [name, tmpl] : f.cases["templates"].items()) {
    std::string source = ts::testing::read_file(f.dir + "/" + tmpl["file"].get<std::string>());
    auto parsed = ChatTemplate::parse(source);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().to_string();
    for (const auto& case_id : tmpl["cases"]) {
      const std::string id = case_id.get<std::string>();
      SCOPED_TRACE(name + " / " + id);
      auto out = parsed->render(context_for(tmpl, f.cases["cases"][id]), options);
      std::string ok_path = f.dir + "/expected/" + name + "." + id + ".txt";
      std::string err_path = f.dir + "/expected/" + name + "." + id + ".error.txt";
      if (fs::exists(ok_path)) {
        seen_expected.insert(ok_path);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        EXPECT_EQ(*out, ts::testing::read_file(ok_path));
        ++compared;
      } else if (fs::exists(err_path)) {
        seen_expected.insert(err_path);
        ASSERT_FALSE(out.ok()) << "expected an error, got: " << *out;
        EXPECT_EQ(out.status().message(), ts::testing::read_file(err_path));
        EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
        ++errors_compared;
      } else {
        EXPECT_TRUE(tmpl.value("expected_held_back", false)) << "no expected file for a case";
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        EXPECT_FALSE(out->empty());
        ++rendered_only;
      }
    }
  }
  // Every expected file in the folder was used (none silently skipped).
  for (const auto& entry : fs::directory_iterator(f.dir + "/expected")) {
    EXPECT_TRUE(seen_expected.count(entry.path().string())) << "unused expected file " << entry.path();
  }
  EXPECT_GE(compared + errors_compared, 46);
  EXPECT_GE(errors_compared, 2);
  EXPECT_GE(rendered_only, 19);
}

// Named fixtures for the model families the server must handle; each also pins a few facts of
// the format so that a regression names the family that broke.
class NamedTemplate : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(NamedTemplate, RendersReferenceForHelloAndMultiturn) {
  TS_REQUIRE_SHARED(dir, "chat-templates/cases.json");
  Fixture f = load(fs::path(dir).parent_path().string());
  const auto [name, must_contain] = GetParam();
  ASSERT_TRUE(f.cases["templates"].contains(name)) << name;
  const ojson& tmpl = f.cases["templates"][name];
  std::string source = ts::testing::read_file(f.dir + "/" + tmpl["file"].get<std::string>());
  for (const char* id : {"a_hello", "c_multiturn_no_gen"}) {
    auto out = render(source, context_for(tmpl, f.cases["cases"][id]), fixed_now(f.cases));
    ASSERT_TRUE(out.ok()) << name << "/" << id << ": " << out.status().to_string();
    EXPECT_EQ(*out, ts::testing::read_file(f.dir + "/expected/" + name + "." + id + ".txt"));
    if (std::string(id) == "a_hello") {
      EXPECT_NE(out->find(must_contain), std::string::npos) << *out;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, NamedTemplate,
    ::testing::Values(std::make_pair("own-llama-2-chat", "[INST] Hello! [/INST]"),
                      std::make_pair("meta-llama-Llama-3.1-8B-Instruct", "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"),
                      std::make_pair("meta-llama-Llama-3.2-3B-Instruct", "Today Date: 26 Jul 2024"),
                      std::make_pair("mistralai-Mistral-Nemo-Instruct-2407", "[INST]Hello![/INST]"),
                      std::make_pair("Qwen-Qwen2.5-7B-Instruct", "<|im_start|>user\nHello!<|im_end|>\n"),
                      std::make_pair("microsoft-Phi-3.5-mini-instruct", "<|user|>\nHello!<|end|>\n"),
                      std::make_pair("google-gemma-2-2b-it", "<start_of_turn>user\nHello!<end_of_turn>\n"),
                      std::make_pair("HuggingFaceTB-SmolLM3-3B", "<|im_start|>user\nHello!<|im_end|>\n")),
    [](const auto& info) {
      std::string n = info.param.first;
      for (char& c : n) {
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return n;
    });

TEST(ChatTemplateFixtures, GemmaRejectsSystemRoleWithTemplateMessage) {
  TS_REQUIRE_SHARED(path, "chat-templates/google-gemma-2-2b-it.jinja");
  ojson ctx = {{"messages", {{{"role", "system"}, {"content", "x"}}, {{"role", "user"}, {"content", "y"}}}},
               {"add_generation_prompt", true},
               {"bos_token", "<bos>"},
               {"eos_token", "<eos>"}};
  auto out = render(ts::testing::read_file(path), ctx);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "System role not supported");
}

TEST(ChatTemplateFixtures, Llama2RejectsBrokenAlternation) {
  TS_REQUIRE_SHARED(path, "chat-templates/own-llama-2-chat.jinja");
  ojson ctx = {{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}}},
               {"add_generation_prompt", true},
               {"bos_token", "<s>"},
               {"eos_token", "</s>"}};
  auto out = render(ts::testing::read_file(path), ctx);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "Llama 2 chat format: after an optional system message, roles must alternate "
            "user/assistant/user/...");
}

TEST(ChatTemplateFixtures, HermesToolUseFailsWhenToolsIsNone) {
  // transformers passes tools=None; this template iterates tools and so fails (README).
  TS_REQUIRE_SHARED(path, "chat-templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja");
  ojson ctx = {{"messages", {{{"role", "user"}, {"content", "a"}}}},
               {"add_generation_prompt", true},
               {"bos_token", "<|begin_of_text|>"},
               {"eos_token", "<|im_end|>"},
               {"tools", nullptr}};
  auto out = render(ts::testing::read_file(path), ctx);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("'NoneType' object is not iterable"), std::string::npos)
      << out.status().message();
}

}  // namespace
}  // namespace ts::chat
