// Tool-call and reasoning parsing per template family. The model outputs are written in each
// family's documented output format (the way the models' chat templates render an assistant
// turn with tool calls, which is what they are trained to emit); they were not recorded from
// running the models here (no model downloads). Every case is checked whole (final parse) and
// streamed in several chunkings (1 byte, 3 bytes, at every marker), and the streamed deltas must
// add up to exactly the whole-text result.
#include "api/tool_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ts::api {
namespace {

using json = nlohmann::json;

const std::string kDsCallsBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>";
const std::string kDsCallsEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>";
const std::string kDsCallBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>";
const std::string kDsCallEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>";
const std::string kDsSep = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>";

struct Expected {
  std::string content;
  std::string reasoning;
  std::vector<std::pair<std::string, json>> calls;  // name, arguments
};

OutputParserConfig cfg(ToolCallFormat t, ReasoningFormat r = ReasoningFormat::kNone, bool starts_in = false) {
  OutputParserConfig c;
  c.tools = t;
  c.reasoning = r;
  c.starts_in_reasoning = starts_in;
  return c;
}

void expect_parsed(const ParsedOutput& p, const Expected& e) {
  EXPECT_EQ(p.content, e.content);
  EXPECT_EQ(p.reasoning, e.reasoning);
  ASSERT_EQ(p.calls.size(), e.calls.size());
  for (size_t i = 0; i < e.calls.size(); ++i) {
    EXPECT_EQ(p.calls[i].name, e.calls[i].first);
    EXPECT_EQ(json::parse(p.calls[i].arguments), e.calls[i].second) << p.calls[i].arguments;
  }
}

// Streams `text` in pieces of `step` bytes (0 = split at every '<', '[' and '{'), and rebuilds
// the message as an OpenAI client would from the deltas.
ParsedOutput stream(const OutputParserConfig& c, const std::string& text, size_t step) {
  OutputStreamParser p(c);
  ParsedOutput out;
  auto take = [&](const OutputDelta& d) {
    out.content += d.content;
    out.reasoning += d.reasoning;
    for (const ToolCallDelta& t : d.calls) {
      ASSERT_LE(static_cast<size_t>(t.index), out.calls.size());
      if (static_cast<size_t>(t.index) == out.calls.size()) {
        ASSERT_FALSE(t.id.empty()) << "a call's first delta carries its id";
        ASSERT_FALSE(t.name.empty());
        out.calls.push_back(ParsedToolCall{t.name, ""});
      }
      out.calls[static_cast<size_t>(t.index)].arguments += t.arguments;
    }
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t n = step;
    if (step == 0) {
      size_t next = text.find_first_of("<[{", pos + 1);
      n = (next == std::string::npos ? text.size() : next) - pos;
    }
    take(p.push(std::string_view(text).substr(pos, n)));
    pos += n;
  }
  take(p.finish());
  EXPECT_EQ(p.call_ids().size(), out.calls.size());
  return out;
}

void check(const OutputParserConfig& c, const std::string& text, const Expected& e) {
  SCOPED_TRACE(text);
  expect_parsed(parse_model_output(c, text, /*final=*/true), e);
  for (size_t step : {size_t{1}, size_t{3}, size_t{0}}) {
    SCOPED_TRACE("stream step " + std::to_string(step));
    expect_parsed(stream(c, text, step), e);
  }
}

const json kParis = {{"city", "Paris"}};

TEST(ToolParser, HermesQwenSingleAndParallelCallsWithContent) {
  auto c = cfg(ToolCallFormat::kHermes);
  check(c, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        {"", "", {{"get_weather", kParis}}});
  check(c,
        "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n</tool_call>",
        {"Let me check both.", "", {{"get_weather", kParis}, {"get_time", {{"tz", "Europe/Paris"}}}}});
  // No call: plain content, with '<' and braces that are not a call.
  check(c, "Use a <b>bold</b> {brace} here.", {"Use a <b>bold</b> {brace} here.", "", {}});
  // A call cut off by the end of the output is still read when its JSON is complete.
  check(c, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
        {"", "", {{"get_weather", kParis}}});
}

TEST(ToolParser, HermesInvalidCallStaysContent) {
  auto c = cfg(ToolCallFormat::kHermes);
  std::string bad = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
  expect_parsed(parse_model_output(c, bad, /*final=*/true), {bad, "", {}});
  // Streamed, the call was opened (and its valid argument prefix sent) before the error showed:
  // it stays as sent and its raw text also comes as content (documented in tool_parser.h).
  // When the error arrives in the same piece as the arguments' start, nothing was opened.
  expect_parsed(stream(c, bad, 0), {bad, "", {}});
  for (size_t step : {size_t{1}, size_t{3}}) {
    ParsedOutput s = stream(c, bad, step);
    EXPECT_EQ(s.content, bad);
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(s.calls[0].arguments, "{\"city\":");
  }
  std::string noname = "<tool_call>{\"arguments\": {}}</tool_call>";
  check(c, noname, {noname, "", {}});
  // Arguments as a JSON string holding an object are accepted (some fine-tunes emit them).
  check(c, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", {"", "", {{"f", {{"a", 1}}}}});
}

// Streams `text` byte by byte; returns the argument text of call 0 sent before `until` is
// fully pushed, and checks that all fragments concatenate to the non-streamed arguments.
std::string args_sent_before(const OutputParserConfig& c, const std::string& text, const std::string& until) {
  ParsedOutput whole = parse_model_output(c, text, /*final=*/true);
  EXPECT_FALSE(whole.calls.empty());
  OutputStreamParser p(c);
  std::string args, before;
  size_t cut = text.find(until);
  EXPECT_NE(cut, std::string::npos);
  for (size_t i = 0; i < text.size(); ++i) {
    for (const ToolCallDelta& t : p.push(text.substr(i, 1)).calls) {
      if (t.index == 0) args += t.arguments;
    }
    if (i + 1 == cut + until.size()) before = args;
  }
  for (const ToolCallDelta& t : p.finish().calls) {
    if (t.index == 0) args += t.arguments;
  }
  if (!whole.calls.empty()) {
    EXPECT_EQ(args, whole.calls[0].arguments) << "streamed concatenation";
  }
  return before;
}

TEST(ToolParser, ArgumentsStreamAsTheModelWritesThem) {
  // Hermes: key order kept, whitespace dropped, escapes and numbers canonical, multi-byte
  // characters and \u escapes (a surrogate pair) never split.
  std::string h = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"caf\u00e9 \\u00e9\\ud83d\\ude00 \\/x\\n\", "
                  "\"a\": [1.50, -2, 1e2, true, null], \"z\": {}}}\n</tool_call>";
  auto hc = cfg(ToolCallFormat::kHermes);
  EXPECT_EQ(args_sent_before(hc, h, "\"caf"), "{\"q\":\"caf");
  EXPECT_EQ(args_sent_before(hc, h, "1.50, -2"), "{\"q\":\"caf\u00e9 \u00e9\U0001F600 /x\\n\",\"a\":[1.5,");
  EXPECT_EQ(parse_model_output(hc, h, true).calls[0].arguments,
            "{\"q\":\"caf\u00e9 \u00e9\U0001F600 /x\\n\",\"a\":[1.5,-2,100.0,true,null],\"z\":{}}");
  // A number is sent once it ends (it could still grow), a literal once complete.
  EXPECT_EQ(args_sent_before(hc, h, "[1.5"), "{\"q\":\"caf\u00e9 \u00e9\U0001F600 /x\\n\",\"a\":[");
  // Other families.
  EXPECT_EQ(args_sent_before(cfg(ToolCallFormat::kMistral), "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "\"Par"),
            "{\"city\":\"Par");
  EXPECT_EQ(args_sent_before(cfg(ToolCallFormat::kMistral),
                             "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"k\": \"vv\"}}, {\"name\": \"g\", \"arguments\": {}}]", "\"v"),
            "{\"k\":\"v");
  EXPECT_EQ(args_sent_before(cfg(ToolCallFormat::kGranite), "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"k\": 12}}]", "12}"),
            "{\"k\":12}");
  std::string ds = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C><\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81"
                   "begin\xEF\xBD\x9C>function<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>f\n```json\n{\"k\": \"abc\"}\n```<\xEF\xBD\x9Ctool\xE2\x96\x81"
                   "call\xE2\x96\x81" "end\xEF\xBD\x9C><\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>";
  EXPECT_EQ(args_sent_before(cfg(ToolCallFormat::kDeepSeek), ds, "\"ab"), "{\"k\":\"ab");
  EXPECT_EQ(args_sent_before(cfg(ToolCallFormat::kHarmony),
                             "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"k\": [\"x\", 3]}<|call|>", "\"x\""),
            "{\"k\":[\"x\"");
  // Arguments written as a JSON string come whole once the call is complete.
  EXPECT_EQ(args_sent_before(hc, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "1}\""), "");
}

TEST(ToolParser, Qwen3ThinkingThenToolCall) {
  auto c = cfg(ToolCallFormat::kHermes, ReasoningFormat::kThink);
  check(c,
        "<think>\nThe user wants the weather in Paris. I should call get_weather.\n</think>\n\n"
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        {"", "The user wants the weather in Paris. I should call get_weather.", {{"get_weather", kParis}}});
  check(c, "<think>\nEasy.\n</think>\n\nIt is 4.", {"It is 4.", "Easy.", {}});
  // enable_thinking=false: the template wrote the empty think block; the output is the answer.
  check(c, "It is 4.", {"It is 4.", "", {}});
}

TEST(ToolParser, DeepSeekR1ReasoningOpenedByThePrompt) {
  auto c = cfg(ToolCallFormat::kDeepSeek, ReasoningFormat::kThink, /*starts_in=*/true);
  check(c, "Okay, 2+2 is 4.\n</think>\n\nThe answer is 4.", {"The answer is 4.", "Okay, 2+2 is 4.", {}});
  // Output cut before </think>: everything is reasoning.
  check(c, "Still thinking about", {"", "Still thinking about", {}});
  check(c,
        "I need the weather tool.\n</think>\n\n" + kDsCallsBegin + kDsCallBegin + "function" + kDsSep +
            "get_weather\n```json\n{\"city\": \"Paris\"}\n```" + kDsCallEnd + kDsCallsEnd,
        {"", "I need the weather tool.", {{"get_weather", kParis}}});
}

TEST(ToolParser, DeepSeekV3AndV31Calls) {
  auto c = cfg(ToolCallFormat::kDeepSeek);
  check(c,
        "Checking." + kDsCallsBegin + kDsCallBegin + "function" + kDsSep + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" +
            kDsCallEnd + "\n" + kDsCallBegin + "function" + kDsSep + "get_time\n```json\n{}\n```" + kDsCallEnd + kDsCallsEnd,
        {"Checking.", "", {{"get_weather", kParis}, {"get_time", json::object()}}});
  check(c, kDsCallsBegin + kDsCallBegin + "get_weather" + kDsSep + "{\"city\": \"Paris\"}" + kDsCallEnd + kDsCallsEnd,
        {"", "", {{"get_weather", kParis}}});
}

TEST(ToolParser, Llama3JsonPythonTagAndBuiltins) {
  auto c = cfg(ToolCallFormat::kLlama3);
  check(c, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", {"", "", {{"get_weather", kParis}}});
  check(c, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {}}",
        {"", "", {{"get_weather", kParis}, {"get_time", json::object()}}});
  check(c, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        {"", "", {{"get_weather", kParis}}});
  check(c, "<|python_tag|>brave_search.call(query=\"weather in Paris\")",
        {"", "", {{"brave_search", {{"query", "weather in Paris"}}}}});
  // A JSON answer that is not a call stays content.
  check(c, "{\"answer\": 4}", {"{\"answer\": 4}", "", {}});
  check(c, "The answer is 4.", {"The answer is 4.", "", {}});
}

TEST(ToolParser, MistralNemoListAndDevstralArgsForm) {
  auto c = cfg(ToolCallFormat::kMistral);
  check(c,
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"}, "
        "{\"name\": \"get_time\", \"arguments\": {}}]",
        {"", "", {{"get_weather", kParis}, {"get_time", json::object()}}});
  check(c, "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
        {"Sure.", "", {{"get_weather", kParis}, {"get_time", json::object()}}});
  check(c, "[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{\"city\": \"Paris\"}", {"", "", {{"get_weather", kParis}}});
  check(c, "No tools needed [really].", {"No tools needed [really].", "", {}});
}

TEST(ToolParser, GraniteToolCallList) {
  auto c = cfg(ToolCallFormat::kGranite, ReasoningFormat::kThink);
  check(c, "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
        {"", "", {{"get_weather", kParis}}});
  check(c, "<think>Need weather.</think><|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
        {"", "Need weather.", {{"get_weather", kParis}}});
}

TEST(ToolParser, HarmonyChannels) {
  auto c = cfg(ToolCallFormat::kHarmony, ReasoningFormat::kHarmony);
  check(c,
        "<|channel|>analysis<|message|>User asks weather. Use tool.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
        {"", "User asks weather. Use tool.", {{"get_weather", kParis}}});
  check(c,
        "<|channel|>analysis<|message|>Simple math.<|end|><|start|>assistant<|channel|>final<|message|>2+2 = 4.<|return|>",
        {"2+2 = 4.", "Simple math.", {}});
  // Recipient before the channel, as gpt-oss also writes it.
  check(c, "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json"
           "<|message|>{\"city\": \"Paris\"}<|call|>",
        {"", "x", {{"get_weather", kParis}}});
  // Without tools the call is not parsed and its text is not shown as content either.
  auto no_tools = cfg(ToolCallFormat::kNone, ReasoningFormat::kHarmony);
  check(no_tools, "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
        {"Hi!", "think", {}});
}

TEST(ToolParser, StreamingHoldsBackPartialMarkersAndStreamsArguments) {
  OutputStreamParser p(cfg(ToolCallFormat::kHermes));
  OutputDelta d = p.push("Hello <tool");
  EXPECT_EQ(d.content, "Hello");  // "<tool" could start <tool_call>; the space waits too
  d = p.push("_call>\n{\"name\": \"f\", \"argu");
  EXPECT_TRUE(d.empty());
  d = p.push("ments\": {\"x\": [1, ");  // the header as soon as the name is known, then fragments
  ASSERT_EQ(d.calls.size(), 2u);
  EXPECT_EQ(d.calls[0].index, 0);
  EXPECT_EQ(d.calls[0].name, "f");
  EXPECT_EQ(d.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(d.calls[0].id.size(), 29u);
  EXPECT_EQ(d.calls[1].arguments, "{\"x\":[1,");
  d = p.push("2]}}\n</tool_call>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].index, 0);
  EXPECT_TRUE(d.calls[0].id.empty());
  EXPECT_EQ(d.calls[0].arguments, "2]}");
  EXPECT_TRUE(p.answer_started());
  EXPECT_TRUE(p.finish().empty());
}

TEST(ToolParser, ReasoningStreamsBeforeTheAnswer) {
  OutputStreamParser p(cfg(ToolCallFormat::kNone, ReasoningFormat::kThink));
  EXPECT_TRUE(p.push("<thi").empty());
  OutputDelta d = p.push("nk>\nStep one");
  EXPECT_EQ(d.reasoning, "Step one");
  EXPECT_FALSE(p.answer_started());
  d = p.push(".\n</thi");
  EXPECT_EQ(d.reasoning, ".");
  d = p.push("nk>\n\nDone");
  EXPECT_EQ(d.content, "Done");
  EXPECT_TRUE(p.answer_started());
}

TEST(ToolParser, DetectsFormatsFromTheSharedTemplatesMarkers) {
  EXPECT_EQ(detect_tool_call_format("{{ '<tool_call>\\n' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{- '[TOOL_CALLS][' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(detect_tool_call_format("{{- '<|python_tag|>' }}"), ToolCallFormat::kLlama3);
  EXPECT_EQ(detect_tool_call_format("'<|tool_call|>'"), ToolCallFormat::kGranite);
  EXPECT_EQ(detect_tool_call_format(kDsCallsBegin), ToolCallFormat::kDeepSeek);
  EXPECT_EQ(detect_tool_call_format("<|channel|>final<|message|>"), ToolCallFormat::kHarmony);
  EXPECT_EQ(detect_tool_call_format("{{ message.content }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_reasoning_format("split('</think>')"), ReasoningFormat::kThink);
  EXPECT_EQ(detect_reasoning_format("{{ message.content }}"), ReasoningFormat::kNone);
  EXPECT_EQ(parse_tool_call_format("qwen"), ToolCallFormat::kHermes);
  EXPECT_EQ(parse_tool_call_format("gpt-oss"), ToolCallFormat::kHarmony);
  EXPECT_FALSE(parse_tool_call_format("llama2").has_value());
  EXPECT_TRUE(prompt_opens_reasoning("<｜Assistant｜><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>\n\n</think>\n\n"));
  EXPECT_EQ(new_tool_call_id(ToolCallFormat::kMistral).size(), 9u);
}

}  // namespace
}  // namespace ts::api
