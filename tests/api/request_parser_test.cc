#include "api/request_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ts::api {
namespace {

// ---- Completions: valid shapes ----

TEST(ParseCompletion, MinimalRequestGetsOpenAIDefaults) {
  auto r = parse_completion_request(R"({"model":"m","prompt":"Once upon"})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_FALSE(r->prompts[0].is_tokens);
  EXPECT_EQ(r->prompts[0].text, "Once upon");
  EXPECT_EQ(r->sampling.max_tokens, 16);  // OpenAI completions default
  EXPECT_EQ(r->sampling.temperature, 1.0);
  EXPECT_EQ(r->sampling.top_p, 1.0);
  EXPECT_EQ(r->sampling.n, 1);
  EXPECT_FALSE(r->logprobs.has_value());
  EXPECT_FALSE(r->echo);
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->include_usage);
  EXPECT_EQ(r->sampling.tier, engine::Tier::kInteractive);
}

TEST(ParseCompletion, PromptShapes) {
  auto strings = parse_completion_request(R"({"model":"m","prompt":["a","b"]})");
  ASSERT_TRUE(strings.ok());
  ASSERT_EQ(strings->prompts.size(), 2u);
  EXPECT_EQ(strings->prompts[1].text, "b");

  auto ids = parse_completion_request(R"({"model":"m","prompt":[1,2,3]})");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_TRUE(ids->prompts[0].is_tokens);
  EXPECT_EQ(ids->prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));

  auto nested = parse_completion_request(R"({"model":"m","prompt":[[1,2],[3]]})");
  ASSERT_TRUE(nested.ok());
  ASSERT_EQ(nested->prompts.size(), 2u);
  EXPECT_EQ(nested->prompts[1].tokens, (std::vector<int32_t>{3}));
}

TEST(ParseCompletion, AllParameters) {
  auto r = parse_completion_request(R"({
    "model":"m","prompt":"x","max_tokens":7,"temperature":0.5,"top_p":0.9,"n":3,
    "stop":["\n","END"],"seed":-42,"presence_penalty":0.5,"frequency_penalty":-1.5,
    "logit_bias":{"50256":-100,"7":2.5},"logprobs":2,"user":"u1","echo":true,
    "stream":true,"stream_options":{"include_usage":true},"top_k":40,"min_p":0.05,
    "repetition_penalty":1.1,"ignore_eos":true,"tier":"batch","best_of":3,"unknown_field":{"x":1}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const SamplingOptions& s = r->sampling;
  EXPECT_EQ(s.max_tokens, 7);
  EXPECT_DOUBLE_EQ(s.temperature, 0.5);
  EXPECT_DOUBLE_EQ(s.top_p, 0.9);
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(s.seed, -42);
  EXPECT_DOUBLE_EQ(s.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(s.frequency_penalty, -1.5);
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.logit_bias[0], (std::pair<int32_t, float>{7, 2.5f}));  // sorted by id
  EXPECT_EQ(s.logit_bias[1], (std::pair<int32_t, float>{50256, -100.0f}));
  EXPECT_EQ(r->logprobs, 2);
  EXPECT_EQ(r->user, "u1");
  EXPECT_TRUE(r->echo);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_DOUBLE_EQ(s.min_p, 0.05);
  EXPECT_DOUBLE_EQ(s.repetition_penalty, 1.1);
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(s.tier, engine::Tier::kBatch);
}

TEST(ParseCompletion, NullMeansDefaultAndStopStringForm) {
  auto r = parse_completion_request(
      R"({"model":"m","prompt":"x","max_tokens":null,"temperature":null,"stop":"###","top_k":-1,"n":2.0})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->sampling.max_tokens, 16);
  EXPECT_EQ(r->sampling.temperature, 1.0);
  EXPECT_EQ(r->sampling.stop, std::vector<std::string>{"###"});
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_EQ(r->sampling.n, 2);  // an integral float is accepted as an integer
}

// ---- Completions: every bad input names its parameter ----

struct BadCase {
  const char* name;
  const char* body;
  int status;
  const char* param;  // "" = null
  const char* code;   // "" = null
};

class CompletionErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(CompletionErrors, Rejected) {
  const BadCase& c = GetParam();
  auto r = parse_completion_request(c.body);
  ASSERT_FALSE(r.ok()) << c.name;
  EXPECT_EQ(r.error().http_status, c.status) << c.name << ": " << r.error().message;
  EXPECT_EQ(r.error().param, c.param) << c.name << ": " << r.error().message;
  EXPECT_EQ(r.error().code, c.code) << c.name << ": " << r.error().message;
  EXPECT_EQ(r.error().type, "invalid_request_error");
  EXPECT_FALSE(r.error().message.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Table, CompletionErrors,
    ::testing::Values(
        BadCase{"empty_body", "", 400, "", "invalid_json"},
        BadCase{"malformed", R"({"model":"m",)", 400, "", "invalid_json"},
        BadCase{"not_object", R"([1,2])", 400, "", "invalid_json"},
        BadCase{"trailing_garbage", R"({"model":"m","prompt":"x"} x)", 400, "", "invalid_json"},
        BadCase{"missing_model", R"({"prompt":"x"})", 400, "model", "missing_required_parameter"},
        BadCase{"model_not_string", R"({"model":5,"prompt":"x"})", 400, "model", "invalid_type"},
        BadCase{"empty_model", R"({"model":"","prompt":"x"})", 400, "model", "invalid_value"},
        BadCase{"missing_prompt", R"({"model":"m"})", 400, "prompt", "missing_required_parameter"},
        BadCase{"prompt_number", R"({"model":"m","prompt":5})", 400, "prompt", "invalid_type"},
        BadCase{"prompt_empty_array", R"({"model":"m","prompt":[]})", 400, "prompt", "empty_array"},
        BadCase{"prompt_mixed", R"({"model":"m","prompt":["a",1]})", 400, "prompt[1]", "invalid_type"},
        BadCase{"prompt_negative_id", R"({"model":"m","prompt":[1,-2]})", 400, "prompt[1]",
                "integer_below_min_value"},
        BadCase{"prompt_float_id", R"({"model":"m","prompt":[1,2.5]})", 400, "prompt[1]", "invalid_type"},
        BadCase{"prompt_empty_inner", R"({"model":"m","prompt":[[1],[]]})", 400, "prompt[1]", "empty_array"},
        BadCase{"max_tokens_zero", R"({"model":"m","prompt":"x","max_tokens":0})", 400, "max_tokens",
                "integer_below_min_value"},
        BadCase{"max_tokens_string", R"({"model":"m","prompt":"x","max_tokens":"5"})", 400, "max_tokens",
                "invalid_type"},
        BadCase{"max_tokens_huge", R"({"model":"m","prompt":"x","max_tokens":99999999999})", 400,
                "max_tokens", "integer_above_max_value"},
        BadCase{"temperature_high", R"({"model":"m","prompt":"x","temperature":2.5})", 400, "temperature",
                "decimal_above_max_value"},
        BadCase{"temperature_negative", R"({"model":"m","prompt":"x","temperature":-0.1})", 400,
                "temperature", "decimal_below_min_value"},
        BadCase{"temperature_string", R"({"model":"m","prompt":"x","temperature":"hot"})", 400,
                "temperature", "invalid_type"},
        BadCase{"top_p_zero", R"({"model":"m","prompt":"x","top_p":0})", 400, "top_p",
                "decimal_below_min_value"},
        BadCase{"top_p_high", R"({"model":"m","prompt":"x","top_p":1.01})", 400, "top_p",
                "decimal_above_max_value"},
        BadCase{"n_zero", R"({"model":"m","prompt":"x","n":0})", 400, "n", "integer_below_min_value"},
        BadCase{"n_bool", R"({"model":"m","prompt":"x","n":true})", 400, "n", "invalid_type"},
        BadCase{"too_many_choices", R"({"model":"m","prompt":["a","b","c"],"n":50})", 400, "n",
                "invalid_value"},
        BadCase{"stop_five", R"({"model":"m","prompt":"x","stop":["a","b","c","d","e"]})", 400, "stop",
                "array_above_max_length"},
        BadCase{"stop_number", R"({"model":"m","prompt":"x","stop":5})", 400, "stop", "invalid_type"},
        BadCase{"stop_item_number", R"({"model":"m","prompt":"x","stop":["a",5]})", 400, "stop[1]",
                "invalid_type"},
        BadCase{"seed_string", R"({"model":"m","prompt":"x","seed":"1"})", 400, "seed", "invalid_type"},
        BadCase{"presence_high", R"({"model":"m","prompt":"x","presence_penalty":2.1})", 400,
                "presence_penalty", "decimal_above_max_value"},
        BadCase{"frequency_low", R"({"model":"m","prompt":"x","frequency_penalty":-3})", 400,
                "frequency_penalty", "decimal_below_min_value"},
        BadCase{"logit_bias_array", R"({"model":"m","prompt":"x","logit_bias":[1]})", 400, "logit_bias",
                "invalid_type"},
        BadCase{"logit_bias_key", R"({"model":"m","prompt":"x","logit_bias":{"abc":1}})", 400, "logit_bias",
                "invalid_value"},
        BadCase{"logit_bias_range", R"({"model":"m","prompt":"x","logit_bias":{"5":101}})", 400,
                "logit_bias", "invalid_value"},
        BadCase{"logit_bias_value_type", R"({"model":"m","prompt":"x","logit_bias":{"5":"1"}})", 400,
                "logit_bias.5", "invalid_type"},
        BadCase{"logprobs_six", R"({"model":"m","prompt":"x","logprobs":6})", 400, "logprobs",
                "integer_above_max_value"},
        BadCase{"logprobs_bool", R"({"model":"m","prompt":"x","logprobs":true})", 400, "logprobs",
                "invalid_type"},
        BadCase{"echo_string", R"({"model":"m","prompt":"x","echo":"yes"})", 400, "echo", "invalid_type"},
        BadCase{"stream_options_without_stream",
                R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})", 400,
                "stream_options", "invalid_value"},
        BadCase{"include_usage_type",
                R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":1}})", 400,
                "stream_options.include_usage", "invalid_type"},
        BadCase{"user_number", R"({"model":"m","prompt":"x","user":1})", 400, "user", "invalid_type"},
        BadCase{"top_k_below", R"({"model":"m","prompt":"x","top_k":-2})", 400, "top_k",
                "integer_below_min_value"},
        BadCase{"min_p_high", R"({"model":"m","prompt":"x","min_p":1.5})", 400, "min_p",
                "decimal_above_max_value"},
        BadCase{"repetition_zero", R"({"model":"m","prompt":"x","repetition_penalty":0})", 400,
                "repetition_penalty", "decimal_below_min_value"},
        BadCase{"ignore_eos_type", R"({"model":"m","prompt":"x","ignore_eos":1})", 400, "ignore_eos",
                "invalid_type"},
        BadCase{"tier_unknown", R"({"model":"m","prompt":"x","tier":"gold"})", 400, "tier", "invalid_value"},
        BadCase{"suffix", R"({"model":"m","prompt":"x","suffix":"end"})", 400, "suffix",
                "unsupported_parameter"},
        BadCase{"best_of", R"({"model":"m","prompt":"x","best_of":3})", 400, "best_of",
                "unsupported_parameter"},
        BadCase{"invalid_utf8_prompt", "{\"model\":\"m\",\"prompt\":\"ab\xff\xfe\"}", 400, "prompt",
                "invalid_utf8"},
        BadCase{"invalid_utf8_nested_prompt", "{\"model\":\"m\",\"prompt\":[\"ok\",\"\xc3\"]}", 400,
                "prompt[1]", "invalid_utf8"},
        BadCase{"overlong_utf8_stop", "{\"model\":\"m\",\"prompt\":\"x\",\"stop\":\"\xc0\xaf\"}", 400, "stop",
                "invalid_utf8"},
        BadCase{"surrogate_utf8_user", "{\"model\":\"m\",\"prompt\":\"x\",\"user\":\"\xed\xa0\x80\"}", 400,
                "user", "invalid_utf8"},
        BadCase{"lone_surrogate_escape", R"({"model":"m","prompt":"\ud800"})", 400, "", "invalid_json"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

TEST(ParseCompletion, TooDeepNestingIsRejectedWithoutRecursing) {
  std::string body = R"({"model":"m","prompt":"x","extra":)" + std::string(100000, '[') +
                     std::string(100000, ']') + "}";
  auto r = parse_completion_request(body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "invalid_json");
  EXPECT_NE(r.error().message.find("nesting"), std::string::npos);
}

TEST(ParseCompletion, ErrorMessagesReadLikeOpenAI) {
  auto r = parse_completion_request(R"({"model":"m","prompt":"x","temperature":3})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead.");
  r = parse_completion_request(R"({"prompt":"x"})");
  EXPECT_EQ(r.error().message, "Missing required parameter: 'model'.");
}

// ---- Chat ----

TEST(ParseChat, MessagesWithPartsNamesAndToolCalls) {
  auto r = parse_chat_request(R"({
    "model":"m",
    "messages":[
      {"role":"system","content":"Be brief."},
      {"role":"user","name":"ann","content":[{"type":"text","text":"Hello"},{"type":"text","text":"there"}]},
      {"role":"assistant","content":null,
       "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"42"}
    ],
    "max_completion_tokens":12,"max_tokens":99,"logprobs":true,"top_logprobs":3,
    "tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"auto",
    "response_format":{"type":"text"}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "Be brief.");
  EXPECT_EQ(r->messages[1].name, "ann");
  EXPECT_EQ(r->messages[1].content, "Hello\nthere");
  EXPECT_FALSE(r->messages[2].content.has_value());
  ASSERT_EQ(r->messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r->messages[2].tool_calls[0].id, "call_1");
  EXPECT_EQ(r->messages[2].tool_calls[0].function_name, "f");
  EXPECT_EQ(r->messages[2].tool_calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(r->messages[3].tool_call_id, "call_1");
  EXPECT_EQ(r->sampling.max_tokens, 12);  // max_completion_tokens wins over max_tokens
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
  auto tools = nlohmann::json::parse(r->tools_json);
  EXPECT_EQ(tools[0]["function"]["name"], "f");
  EXPECT_EQ(r->tool_choice_json, "\"auto\"");
}

TEST(ParseChat, DefaultsLeaveMaxTokensUnsetAndLegacyMaxTokensWorks) {
  auto r = parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->sampling.max_tokens.has_value());
  EXPECT_FALSE(r->logprobs);
  EXPECT_TRUE(r->add_generation_prompt);
  r = parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sampling.max_tokens, 5);
}

class ChatErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(ChatErrors, Rejected) {
  const BadCase& c = GetParam();
  auto r = parse_chat_request(c.body);
  ASSERT_FALSE(r.ok()) << c.name;
  EXPECT_EQ(r.error().http_status, c.status) << c.name;
  EXPECT_EQ(r.error().param, c.param) << c.name << ": " << r.error().message;
  EXPECT_EQ(r.error().code, c.code) << c.name << ": " << r.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ChatErrors,
    ::testing::Values(
        BadCase{"missing_messages", R"({"model":"m"})", 400, "messages", "missing_required_parameter"},
        BadCase{"messages_object", R"({"model":"m","messages":{}})", 400, "messages", "invalid_type"},
        BadCase{"messages_empty", R"({"model":"m","messages":[]})", 400, "messages", "empty_array"},
        BadCase{"message_string", R"({"model":"m","messages":["hi"]})", 400, "messages[0]", "invalid_type"},
        BadCase{"missing_role", R"({"model":"m","messages":[{"content":"hi"}]})", 400, "messages[0].role",
                "missing_required_parameter"},
        BadCase{"bad_role", R"({"model":"m","messages":[{"role":"wizard","content":"hi"}]})", 400,
                "messages[0].role", "invalid_value"},
        BadCase{"missing_content", R"({"model":"m","messages":[{"role":"user"}]})", 400,
                "messages[0].content", "missing_required_parameter"},
        BadCase{"content_number", R"({"model":"m","messages":[{"role":"user","content":5}]})", 400,
                "messages[0].content", "invalid_type"},
        BadCase{"image_part",
                R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
                400, "messages[0].content[0].type", "unsupported_content_type"},
        BadCase{"part_without_text", R"({"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]})",
                400, "messages[0].content[0].text", "missing_required_parameter"},
        BadCase{"tool_without_id", R"({"model":"m","messages":[{"role":"tool","content":"x"}]})", 400,
                "messages[0].tool_call_id", "missing_required_parameter"},
        BadCase{"user_tool_calls",
                R"({"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]})", 400,
                "messages[0].tool_calls", "invalid_value"},
        BadCase{"tool_call_no_function",
                R"({"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[{"id":"a"}]}]})",
                400, "messages[0].tool_calls[0].function", "missing_required_parameter"},
        BadCase{"top_logprobs_without_logprobs",
                R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})", 400,
                "top_logprobs", "invalid_value"},
        BadCase{"top_logprobs_high",
                R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
                400, "top_logprobs", "integer_above_max_value"},
        BadCase{"logprobs_int", R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":1})",
                400, "logprobs", "invalid_type"},
        BadCase{"max_completion_tokens_zero",
                R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":0})", 400,
                "max_completion_tokens", "integer_below_min_value"},
        BadCase{"tools_object", R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":{}})", 400,
                "tools", "invalid_type"},
        BadCase{"response_format_unknown_type",
                R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}})",
                400, "response_format.type", "invalid_value"},
        BadCase{"json_schema_without_schema",
                R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a"}}})",
                400, "response_format.json_schema.schema", "missing_required_parameter"},
        BadCase{"json_schema_not_object",
                R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":"x"}})",
                400, "response_format.json_schema", "invalid_type"},
        BadCase{"grammar_missing",
                R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"grammar"}})",
                400, "response_format.grammar", "missing_required_parameter"},
        BadCase{"regex_not_string",
                R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"regex","regex":5}})",
                400, "response_format.regex", "invalid_type"},
        BadCase{"invalid_utf8_content",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", 400,
                "messages[0].content", "invalid_utf8"},
        BadCase{"invalid_utf8_part",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xf8\"}]}]}",
                400, "messages[0].content[0].text", "invalid_utf8"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

// ---- tokenize / detokenize ----

TEST(ParseTokenize, PromptOrContentAndAddSpecial) {
  auto a = parse_tokenize_request(R"({"prompt":"hello"})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->text, "hello");
  EXPECT_TRUE(a->add_special);
  auto b = parse_tokenize_request(R"({"content":"hi","add_special":false,"model":"m"})");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->text, "hi");
  EXPECT_FALSE(b->add_special);
  EXPECT_EQ(b->model, "m");
  auto c = parse_tokenize_request(R"({"prompt":"hi","add_special_tokens":false})");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->add_special);
  auto d = parse_tokenize_request(R"({"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->text.has_value());
  EXPECT_EQ(d->messages.size(), 1u);
  EXPECT_FALSE(d->add_special);  // the template adds special tokens itself
  auto e = parse_tokenize_request(R"({"add_special":true})");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().param, "prompt");
  auto f = parse_tokenize_request(R"({"prompt":3})");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code, "invalid_type");
}

TEST(ParseDetokenize, TokensRequiredAndNonNegative) {
  auto a = parse_detokenize_request(R"({"tokens":[1,2,3]})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{1, 2, 3}));
  auto empty = parse_detokenize_request(R"({"tokens":[]})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->tokens.empty());
  auto b = parse_detokenize_request(R"({})");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, "missing_required_parameter");
  auto c = parse_detokenize_request(R"({"tokens":[1,-1]})");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().param, "tokens[1]");
  auto d = parse_detokenize_request(R"({"tokens":"1 2"})");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, "invalid_type");
}

// ---- UTF-8 validator ----

TEST(Utf8, FindsFirstInvalidByte) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_EQ(find_invalid_utf8("ab\xff"), 2u);
  EXPECT_EQ(find_invalid_utf8("a\xc3"), 1u);              // truncated
  EXPECT_EQ(find_invalid_utf8("\xc0\x80"), 0u);           // overlong NUL
  EXPECT_EQ(find_invalid_utf8("\xe0\x80\x80"), 0u);       // overlong
  EXPECT_EQ(find_invalid_utf8("x\xed\xa0\x80"), 1u);      // surrogate
  EXPECT_EQ(find_invalid_utf8("\xf4\x90\x80\x80"), 0u);   // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("\xe2\x28\xa1"), 0u);       // bad continuation
}

}  // namespace
}  // namespace ts::api

namespace ts::api {
namespace {

TEST(ParseResponseFormat, AllTypesOnBothEndpoints) {
  auto j = parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"x"}],
    "response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,
      "schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}}}})");
  ASSERT_TRUE(j.ok()) << j.error().message;
  EXPECT_EQ(j->response_format.type, ResponseFormat::Type::kJsonSchema);
  EXPECT_EQ(j->response_format.name, "p");
  EXPECT_TRUE(j->response_format.strict);
  // Property order is kept (z before a), as the client wrote it.
  EXPECT_EQ(j->response_format.source, R"({"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}})");
  auto o = parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->response_format.type, ResponseFormat::Type::kJsonObject);
  auto g = parse_completion_request(R"({"model":"m","prompt":"x","response_format":{"type":"grammar","grammar":"root ::= \"a\""}})");
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->response_format.type, ResponseFormat::Type::kGrammar);
  EXPECT_EQ(g->response_format.source, "root ::= \"a\"");
  auto r = parse_completion_request(R"({"model":"m","prompt":"x","response_format":{"type":"regex","regex":"[0-9]+"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->response_format.type, ResponseFormat::Type::kRegex);
  EXPECT_EQ(r->response_format.source, "[0-9]+");
  auto t = parse_completion_request(R"({"model":"m","prompt":"x","response_format":{"type":"text"}})");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->response_format.type, ResponseFormat::Type::kText);
}

}  // namespace
}  // namespace ts::api
