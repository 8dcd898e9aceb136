// Golden shapes of OpenAI responses, chunks, errors, and the engine mapping.
#include "api/response_format.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/engine_mapping.h"
#include "api/error.h"

namespace ts::api {
namespace {

using json = nlohmann::json;

const ResponseMeta kMeta{.id = "cmpl-1", .created = 1700000000, .model = "stories"};

TEST(Format, CompletionGolden) {
  Choice c{.index = 0, .text = " there", .finish = FinishReason::kLength};
  std::string body = completion_body(kMeta, {c}, UsageInfo{.prompt_tokens = 3, .completion_tokens = 2, .cached_tokens = 1});
  EXPECT_EQ(body,
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
            R"("choices":[{"index":0,"text":" there","logprobs":null,"finish_reason":"length"}],)"
            R"("usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,)"
            R"("prompt_tokens_details":{"cached_tokens":1}}})");
}

TEST(Format, ChatCompletionGolden) {
  Choice c{.index = 0, .text = "Hi!", .finish = FinishReason::kStop};
  std::string body = chat_completion_body(
      ResponseMeta{.id = "chatcmpl-9", .created = 5, .model = "m"}, {c},
      UsageInfo{.prompt_tokens = 10, .completion_tokens = 2, .cached_tokens = 0});
  EXPECT_EQ(body,
            R"({"id":"chatcmpl-9","object":"chat.completion","created":5,"model":"m",)"
            R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hi!","refusal":null},)"
            R"("logprobs":null,"finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(Format, CompletionLogprobsLegacyShape) {
  Choice c{.index = 1, .text = "ab", .finish = FinishReason::kStop, .has_logprobs = true,
           .logprobs = {{.token = "a", .logprob = -0.5f, .top = {{"a", -0.5f}, {"b", -1.0f}}},
                        {.token = "b", .logprob = -0.25f, .top = {}}},
           .text_offset_base = 4};
  json j = json::parse(completion_body(kMeta, {c}, {}));
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.5, -0.25}));
  EXPECT_EQ(lp["top_logprobs"][0], json({{"a", -0.5}, {"b", -1.0}}));
  EXPECT_EQ(lp["top_logprobs"][1], json({{"b", -0.25}}));
  EXPECT_EQ(lp["text_offset"], json({4, 5}));
  EXPECT_EQ(j["choices"][0]["index"], 1);
}

TEST(Format, ChatLogprobsShapeWithBytes) {
  Choice c{.index = 0, .text = "\xc3\xa9", .finish = FinishReason::kStop, .has_logprobs = true,
           .logprobs = {{.token = "\xc3", .logprob = -0.1f, .top = {{"\xc3", -0.1f}, {"x", -3.0f}}},
                        {.token = "\xa9", .logprob = -0.2f, .top = {}}}};
  std::string body = chat_completion_body(kMeta, {c}, {});
  json j = json::parse(body);  // must be valid JSON even with partial-UTF-8 tokens
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "\xef\xbf\xbd");  // U+FFFD stands in for the partial byte
  EXPECT_EQ(content[0]["bytes"], json({0xc3}));
  EXPECT_NEAR(content[0]["logprob"].get<double>(), -0.1, 1e-6);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "x");
  EXPECT_EQ(content[0]["top_logprobs"][1]["bytes"], json({120}));
  EXPECT_EQ(content[1]["bytes"], json({0xa9}));
  EXPECT_TRUE(j["choices"][0]["logprobs"]["refusal"].is_null());
  EXPECT_EQ(j["choices"][0]["message"]["content"], "\xc3\xa9");
}

TEST(Format, ChatStreamSequenceGolden) {
  ResponseMeta m{.id = "chatcmpl-2", .created = 7, .model = "m"};
  EXPECT_EQ(chat_role_chunk(m, 0, false),
            R"({"id":"chatcmpl-2","object":"chat.completion.chunk","created":7,"model":"m",)"
            R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
  Choice d{.index = 0, .text = "Hel"};
  EXPECT_EQ(chat_content_chunk(m, d, false),
            R"({"id":"chatcmpl-2","object":"chat.completion.chunk","created":7,"model":"m",)"
            R"("choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(chat_finish_chunk(m, 0, FinishReason::kStop, false),
            R"({"id":"chatcmpl-2","object":"chat.completion.chunk","created":7,"model":"m",)"
            R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]})");
  // include_usage: "usage": null on every chunk, then a usage chunk with no choices.
  json with_null = json::parse(chat_content_chunk(m, d, true));
  ASSERT_TRUE(with_null.contains("usage"));
  EXPECT_TRUE(with_null["usage"].is_null());
  EXPECT_EQ(usage_chunk(m, true, UsageInfo{.prompt_tokens = 4, .completion_tokens = 3, .cached_tokens = 0}),
            R"({"id":"chatcmpl-2","object":"chat.completion.chunk","created":7,"model":"m","choices":[],)"
            R"("usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(Format, CompletionChunkGolden) {
  Choice d{.index = 2, .text = "x", .finish = FinishReason::kLength};
  EXPECT_EQ(completion_chunk(kMeta, d, false),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
            R"("choices":[{"index":2,"text":"x","logprobs":null,"finish_reason":"length"}]})");
  json u = json::parse(usage_chunk(kMeta, false, {}));
  EXPECT_EQ(u["object"], "text_completion");
  EXPECT_TRUE(u["choices"].empty());
}

TEST(Format, SseFraming) {
  EXPECT_EQ(sse_event(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Format, ModelsTokenizeDetokenize) {
  ModelCard card{.id = "stories260K", .created = 1, .owned_by = "tokenserve", .max_model_len = 512};
  EXPECT_EQ(model_list_body({card}),
            R"({"object":"list","data":[{"id":"stories260K","object":"model","created":1,)"
            R"("owned_by":"tokenserve","max_model_len":512}]})");
  EXPECT_EQ(model_body(ModelCard{.id = "a", .created = 2}),
            R"({"id":"a","object":"model","created":2,"owned_by":"tokenserve"})");
  EXPECT_EQ(tokenize_body({1, 2, 3}, 512), R"({"tokens":[1,2,3],"count":3,"max_model_len":512})");
  EXPECT_EQ(detokenize_body("hi"), R"({"prompt":"hi","content":"hi"})");
}

TEST(Error, OpenAIErrorBody) {
  ApiError e = invalid_type("temperature", "a number");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.to_json(),
            R"({"error":{"message":"Invalid type for 'temperature': expected a number.",)"
            R"("type":"invalid_request_error","param":"temperature","code":"invalid_type"}})");
  ApiError nf = model_not_found("gpt-9");
  EXPECT_EQ(nf.http_status, 404);
  json j = json::parse(nf.to_json());
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  EXPECT_EQ(j["error"]["param"], "model");
  ApiError plain = error_for_http_status(413, "too big");
  json p = json::parse(plain.to_json());
  EXPECT_TRUE(p["error"]["param"].is_null());
  EXPECT_EQ(p["error"]["code"], "request_too_large");
  EXPECT_EQ(p["error"]["type"], "invalid_request_error");
}

TEST(Error, StatusMapping) {
  EXPECT_EQ(http_status_for(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(http_status_for(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(http_status_for(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(http_status_for(StatusCode::kNotFound), 404);
  EXPECT_EQ(http_status_for(StatusCode::kPayloadTooLarge), 413);
  EXPECT_EQ(http_status_for(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(http_status_for(StatusCode::kInternal), 500);
  EXPECT_EQ(http_status_for(StatusCode::kUnavailable), 503);
  ApiError e = error_from_status(unavailable("queue full"));
  EXPECT_EQ(e.http_status, 503);
  EXPECT_EQ(e.type, "server_error");
  EXPECT_EQ(e.code, "service_unavailable");
  EXPECT_EQ(e.message, "queue full");
  EXPECT_EQ(error_from_status(resource_exhausted("quota")).type, "rate_limit_error");
}

TEST(EngineMapping, CopiesEverySamplingField) {
  SamplingOptions s;
  s.temperature = 0.7;
  s.top_p = 0.8;
  s.top_k = 5;
  s.min_p = 0.1;
  s.repetition_penalty = 1.2;
  s.presence_penalty = 0.3;
  s.frequency_penalty = -0.4;
  s.logit_bias = {{3, -100.0f}};
  s.seed = -1;
  s.n = 2;
  s.stop = {"END"};
  s.ignore_eos = true;
  s.tier = engine::Tier::kBatch;
  engine::Request r = to_engine_request("req-1", {1, 2}, s, 9, true, 3);
  EXPECT_EQ(r.id, "req-1");
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.tier, engine::Tier::kBatch);
  const engine::SamplingParams& p = r.sampling;
  EXPECT_FLOAT_EQ(p.temperature, 0.7f);
  EXPECT_FLOAT_EQ(p.top_p, 0.8f);
  EXPECT_EQ(p.top_k, 5);
  EXPECT_FLOAT_EQ(p.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.3f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -0.4f);
  EXPECT_EQ(p.logit_bias, s.logit_bias);
  EXPECT_EQ(p.seed, std::optional<uint64_t>(~uint64_t{0}));
  EXPECT_EQ(p.max_tokens, 9);
  EXPECT_EQ(p.stop, s.stop);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.top_logprobs, 3);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(to_sampling_params(s, 1, false, 3).top_logprobs, 0);
  EXPECT_EQ(finish_from_engine(engine::FinishReason::kLength), FinishReason::kLength);
  EXPECT_EQ(finish_from_engine(engine::FinishReason::kStop), FinishReason::kStop);
  EXPECT_EQ(finish_from_engine(engine::FinishReason::kNone), FinishReason::kNull);
  UsageInfo u = usage_from_engine(engine::Usage{.prompt_tokens = 5, .completion_tokens = 6, .cached_tokens = 2});
  EXPECT_EQ(u.prompt_tokens, 5);
  EXPECT_EQ(u.completion_tokens, 6);
  EXPECT_EQ(u.cached_tokens, 2);
}

}  // namespace
}  // namespace ts::api
