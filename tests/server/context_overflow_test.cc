// The pure parts of context_overflow: policy parsing and its errors, window planning,
// token truncation, the chat drop order, prompt frames.
#include "server/context_overflow.h"

#include <gtest/gtest.h>

#include "gateway/config.h"

namespace ts::server {
namespace {

TEST(ContextOverflow, ParsesPolicies) {
  EXPECT_EQ(parse_context_overflow(R"({"prompt":"x"})")->mode, OverflowMode::kError);
  EXPECT_EQ(parse_context_overflow(R"({"context_overflow":null})")->mode, OverflowMode::kError);
  EXPECT_EQ(parse_context_overflow(R"({"context_overflow":"truncate_left"})")->mode, OverflowMode::kTruncateLeft);
  EXPECT_EQ(parse_context_overflow(R"({"context_overflow":"truncate_middle"})")->mode, OverflowMode::kTruncateMiddle);
  auto s = parse_context_overflow(R"({"context_overflow":{"mode":"segment","window":64,"overlap":8,"map_prompt":"M {text}","map_max_tokens":5}})");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->mode, OverflowMode::kSegment);
  EXPECT_EQ(s->window, 64);
  EXPECT_EQ(s->overlap, 8);
  EXPECT_EQ(s->map_prompt, "M {text}");
  EXPECT_EQ(*s->map_max_tokens, 5);
  auto err = [](const char* body) {
    auto r = parse_context_overflow(body);
    EXPECT_FALSE(r.ok()) << body;
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(err(R"({"context_overflow":"shrink"})").find("unknown 'context_overflow' mode"), std::string::npos);
  EXPECT_NE(err(R"({"context_overflow":{"mode":"segment","window":8,"overlap":8}})").find("smaller than the window"), std::string::npos);
  EXPECT_NE(err(R"({"context_overflow":{"mode":"segment","window":0}})").find("window' must be >= 1"), std::string::npos);
  EXPECT_NE(err(R"({"context_overflow":{"mode":"segment","overlap":1}})").find("window' is required"), std::string::npos);
  EXPECT_NE(err(R"({"context_overflow":{"mode":"segment","window":8,"overlap":-1}})").find(">= 0"), std::string::npos);
  EXPECT_NE(err(R"({"context_overflow":{"mode":"segment","window":8,"map_prompt":""}})").find("map_prompt"), std::string::npos);
  EXPECT_NE(err(R"({"context_overflow":"segment"})").find("needs {"), std::string::npos);
  EXPECT_FALSE(parse_context_overflow(R"({"context_overflow":3})").ok());
}

TEST(ContextOverflow, PlansWindows) {
  auto w = plan_windows(100, 40, 10);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 3u);  // [0,40) [30,70) [60,100)
  EXPECT_EQ((*w)[1].start, 30);
  EXPECT_EQ((*w)[2].end, 100);
  for (size_t i = 1; i < w->size(); ++i) EXPECT_EQ((*w)[i - 1].end - (*w)[i].start, 10);  // shared tokens
  EXPECT_EQ(plan_windows(10, 40, 10)->size(), 1u);
  EXPECT_EQ(plan_windows(101, 40, 10)->size(), 4u);
  EXPECT_EQ(plan_windows(101, 40, 10)->back().end, 101);
  EXPECT_FALSE(plan_windows(10, 4, 4).ok());
  EXPECT_FALSE(plan_windows(0, 4, 1).ok());
}

TEST(ContextOverflow, TruncatesTokens) {
  std::vector<int32_t> base;
  for (int i = 0; i < 20; ++i) base.push_back(i);
  auto left = base;
  EXPECT_EQ(truncate_tokens(&left, 8, OverflowMode::kTruncateLeft, 1), 12);
  EXPECT_EQ(left, (std::vector<int32_t>{0, 13, 14, 15, 16, 17, 18, 19}));  // BOS kept, latest kept
  auto mid = base;
  EXPECT_EQ(truncate_tokens(&mid, 9, OverflowMode::kTruncateMiddle, 1), 11);
  EXPECT_EQ(mid, (std::vector<int32_t>{0, 1, 2, 3, 4, 16, 17, 18, 19}));  // head and tail kept
  auto fits = base;
  EXPECT_EQ(truncate_tokens(&fits, 20, OverflowMode::kTruncateLeft, 1), 0);
  EXPECT_EQ(fits, base);
}

TEST(ContextOverflow, ChatDropOrderKeepsSystemAndLatest) {
  std::vector<api::ChatMessage> m = {{.role = "system"}, {.role = "user"}, {.role = "assistant"}, {.role = "user"},
                                     {.role = "assistant"}, {.role = "user"}};
  EXPECT_EQ(chat_drop_order(m, OverflowMode::kTruncateLeft), (std::vector<size_t>{1, 2, 3, 4}));
  auto middle = chat_drop_order(m, OverflowMode::kTruncateMiddle);
  ASSERT_EQ(middle.size(), 4u);
  EXPECT_EQ(middle.front(), 3u);  // nearest the middle of {2, 3, 4}
  EXPECT_EQ(middle.back(), 1u);   // the first turn goes last
  EXPECT_TRUE(chat_drop_order({{.role = "system"}, {.role = "user"}}, OverflowMode::kTruncateLeft).empty());
}

TEST(ContextOverflow, FramesAndEvents) {
  PromptFrame f = map_frame("Summarize: {text} Done.");
  EXPECT_EQ(f.prefix, "Summarize: ");
  EXPECT_EQ(f.suffix, " Done.");
  EXPECT_EQ(reduce_frame("Combine").prefix, "Combine\n\n");
  EXPECT_FALSE(map_frame("").prefix.empty());
  SegmentUsage s{.index = 2, .window = {80, 128}, .prompt_tokens = 52, .completion_tokens = 4};
  const std::string e = progress_event(s, 9);
  EXPECT_EQ(e.rfind("event: context_overflow.progress\ndata: {", 0), 0u);
  auto j = nlohmann::json::parse(e.substr(e.find('{')));
  EXPECT_EQ(j["segment"], 2);
  EXPECT_EQ(j["num_segments"], 9);
  EXPECT_EQ(j["window"][1], 128);
  auto u = segments_usage_json({s}, {.prompt_tokens = 10, .completion_tokens = 3});
  EXPECT_EQ(u["segments"][0]["prompt_tokens"], 52);
  EXPECT_EQ(u["reduce"]["completion_tokens"], 3);
}

TEST(ContextOverflow, TenantAndAppDefaultsFromTheConfig) {
  auto c = gateway::parse_config(
      "[tenants.acme]\ncontext_overflow = \"truncate_left\"\n[tenants.acme.apps.rag]\ncontext_overflow = \"truncate_middle\"\n"
      "[tenants.acme.apps.bot]\nrpm = 5\n",
      "gov.toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(gateway::context_overflow_default(*c, "acme", "rag"), "truncate_middle");
  EXPECT_EQ(gateway::context_overflow_default(*c, "acme", "bot"), "truncate_left");
  EXPECT_EQ(gateway::context_overflow_default(*c, "globex", "bot"), "");
  auto bad = gateway::parse_config("[tenants.acme]\ncontext_overflow = \"segment\"\n", "gov.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gov.toml:2: context_overflow must be"), std::string::npos);
  // The request's field wins over a default; an absent one is marked as such.
  EXPECT_FALSE(parse_context_overflow("{}")->from_request);
  EXPECT_TRUE(parse_context_overflow(R"({"context_overflow":"error"})")->from_request);
}

}  // namespace
}  // namespace ts::server
