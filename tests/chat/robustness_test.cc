// Malformed and hostile templates: every failure is a Status with a position, never a crash, a
// hang or an unbounded allocation.
#include <chrono>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/lexer.h"
#include "chat/parser.h"

namespace ts::chat {
namespace {

using ojson = nlohmann::ordered_json;

Status render_status(const std::string& src, const RenderOptions& options = {}) {
  auto out = render(src, ojson::object(), options);
  return out.ok() ? Status() : out.status();
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(ChatRobustness, SyntaxErrorsCarryLineAndColumn) {
  struct Case {
    const char* source;
    const char* message;
  };
  const Case cases[] = {
      {"hello\n  {{ 1 + }}", "template syntax error at line 2, column 10: unexpected end of print statement"},
      {"{% if true %}abc", "template syntax error at line 1, column 17: Unexpected end of template. Jinja was "
                           "looking for the following tags: 'elif' or 'else' or 'endif'. The innermost block "
                           "that needs to be closed is 'if'."},
      {"a\nb {% endfor %}", "template syntax error at line 2, column 6: Encountered unknown tag 'endfor'."},
      {"{{ 'open }}", "template syntax error at line 1, column 4: unexpected end of string literal"},
      {"{{ (1 }}", "template syntax error at line 1, column 7: unexpected '}', expected ')'"},
      {"{# never closed", "template syntax error at line 1, column 1: Missing end of comment tag"},
      {"{{ 1 ? 2 }}", "template syntax error at line 1, column 6: unexpected char '?'"},
      {"{% for x in %}{% endfor %}", "template syntax error at line 1, column 13: unexpected end of statement block"},
      {"{% break %}", "template syntax error at line 1, column 4: 'break' outside of a loop"},
      {"{% set %}", "template syntax error at line 1, column 8: expected a name, got end of statement block"},
      {"{{ x", "template syntax error at line 1, column 1: Unexpected end of template: missing '}}'"},
  };
  for (const auto& c : cases) {
    Status st = render_status(c.source);
    ASSERT_FALSE(st.ok()) << c.source;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.source;
    EXPECT_EQ(st.message(), c.message) << c.source;
  }
}

TEST(ChatRobustness, RuntimeErrorsCarryThePositionOfTheFailingExpression) {
  Status st = render_status("line one\n{% for i in [1] %}\n  {{ i.x.y }}\n{% endfor %}");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "template error at line 3, column 9: 'int object' has no attribute 'x'");
}

TEST(ChatRobustness, DeepNestingIsRefusedAtParseTime) {
  for (const std::string& src : {"{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}",
                                 repeat("{% if true %}", 5000),
                                 "{{ " + repeat("-", 5000) + "1 }}",
                                 "{{ " + repeat("not ", 5000) + "x }}",
                                 "{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}",
                                 "{{ 1" + repeat(" + 1", 50000) + " }}",
                                 "{{ x" + repeat(".a", 50000) + " }}",
                                 "{{ x" + repeat("|trim", 50000) + " }}"}) {
    Status st = render_status(src);
    ASSERT_FALSE(st.ok()) << src.substr(0, 40);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find("template syntax error at line 1"), std::string::npos) << st.message();
  }
}

TEST(ChatRobustness, UnboundedRecursionHitsTheDepthLimit) {
  Status st = render_status("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("recursion deeper than"), std::string::npos) << st.message();
}

TEST(ChatRobustness, ExponentialWorkHitsTheStepLimitQuickly) {
  // A smaller step budget than the default keeps this quick under sanitizers.
  RenderOptions options;
  options.limits.max_steps = 200'000;
  auto start = std::chrono::steady_clock::now();
  Status st = render_status(
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
      options);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("evaluation steps"), std::string::npos) << st.message();
  st = render_status(
      "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", options);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(ChatRobustness, HugeValuesAndOutputAreRefused) {
  const char* hostile[] = {
      "{{ 'a' * 1000000000 }}",
      "{{ range(1000000000) | length }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{% set xs = [] %}{% for i in range(2000000) %}{% set _ = xs.append(i) %}{% endfor %}",
      "{{ [1] * 100000000 }}",
  };
  for (const char* src : hostile) {
    Status st = render_status(src);
    ASSERT_FALSE(st.ok()) << src;
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << src << ": " << st.message();
  }
  RenderOptions small;
  small.limits.max_output_bytes = 1000;
  Status st = render_status("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", small);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("output exceeds 1000 bytes"), std::string::npos) << st.message();
}

TEST(ChatRobustness, ReferenceCyclesAndExponentialValuesAreRefused) {
  Status st = render_status("{% set xs = [] %}{% set _ = xs.append(xs) %}{{ xs }}");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot append a list to itself"), std::string::npos) << st.message();
  st = render_status("{% set ns = namespace() %}{% set ns.me = [ns] %}");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("namespace inside itself"), std::string::npos) << st.message();
  // Each step doubles the printed size while sharing the sub-lists.
  st = render_status(
      "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}"
      "{{ ns.x }}");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.message();
  st = render_status(
      "{% macro f(n, x) %}{% if n == 0 %}{{ x | tojson }}{% else %}{{ f(n - 1, [x, x]) }}{% endif %}"
      "{% endmacro %}{{ f(50, [1]) }}");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.message();
}

TEST(ChatRobustness, DeeplyNestedContextIsRefused) {
  std::string deep = repeat("[", 2000) + repeat("]", 2000);
  auto out = render(std::string("{{ x }}"), ojson{{"x", ojson::parse(deep)}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatRobustness, IntegerOverflowIsAnErrorNotUndefinedBehaviour) {
  for (const char* src : {"{{ 9223372036854775807 + 1 }}", "{{ (-9223372036854775807 - 1) // -1 }}",
                          "{{ 2 ** 100 }}", "{{ 3037000500 * 3037000500 }}", "{{ 1 // 0 }}", "{{ 1 % 0 }}",
                          "{{ 1 / 0 }}", "{{ 99999999999999999999 }}"}) {
    Status st = render_status(src);
    EXPECT_FALSE(st.ok()) << src;
  }
}

TEST(ChatRobustness, GarbageInputNeverCrashes) {
  // A deterministic byte soup built from template punctuation; every prefix must parse or fail
  // cleanly.
  const std::string alphabet = "{}%#-+()[]'\"\\|.,:=<>!~*/ \nabxy0129ifforendsetmacro";
  uint32_t state = 12345;
  for (int round = 0; round < 2000; ++round) {
    std::string src;
    int len = static_cast<int>(state % 40);
    for (int i = 0; i < len; ++i) {
      state = state * 1103515245u + 12345u;
      src += alphabet[(state >> 16) % alphabet.size()];
    }
    state = state * 1103515245u + 12345u;
    auto out = render(src, ojson::object());
    if (!out.ok()) {
      EXPECT_FALSE(out.status().message().empty()) << src;
    }
  }
}

TEST(ChatRobustness, LexerAppliesTrimAndLstripBlocks) {
  auto toks = tokenize("  {% if x %}\n  a\n  {% endif %}\n");
  // Text tokens after whitespace control: only "  a\n" survives between the tags.
  std::string text;
  for (const auto& t : toks) {
    if (t.type == TokenType::kText) text += "[" + t.text + "]";
  }
  EXPECT_EQ(text, "[  a\n]");
  LexerOptions raw_opts;
  raw_opts.trim_blocks = false;
  raw_opts.lstrip_blocks = false;
  raw_opts.keep_trailing_newline = true;
  text.clear();
  for (const auto& t : tokenize("  {% if x %}\n  a\n  {% endif %}\n", raw_opts)) {
    if (t.type == TokenType::kText) text += "[" + t.text + "]";
  }
  EXPECT_EQ(text, "[  ][\n  a\n  ][\n]");
}

TEST(ChatRobustness, ParserReportsUnknownFilterAtRenderTime) {
  Status st = render_status("{{ 'x' | nosuchfilter }}");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "template error at line 1, column 10: No filter named 'nosuchfilter'.");
}

}  // namespace
}  // namespace ts::chat
