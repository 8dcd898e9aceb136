// Constrained decoding through the real engine with real models: stories260K (SentencePiece,
// pretrained) and a random-weight Qwen2 with the real 152k byte-level BPE vocabulary. Whatever the
// model, every output must parse and validate, multi-byte characters included (split across
// byte tokens), under every sampling parameter, with n > 1 and under preemption.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "model/model.h"
#include "schema_check.h"
#include "structured/constraint.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::structured {
namespace {

using engine::FinishReason;
constexpr const char* kStories = "models/stories260K/stories260K-f32.gguf";
constexpr const char* kQwen = "golden/models/tiny-qwen2-q8_0.gguf";

model::Model* load_cached(const std::string& path) {
  static std::map<std::string, std::unique_ptr<model::Model>> models;
  auto it = models.find(path);
  if (it != models.end()) return it->second.get();
  auto m = model::Model::load(path);
  if (!m.ok()) {
    ADD_FAILURE() << "load " << path << ": " << m.status().to_string();
    return nullptr;
  }
  return (models[path] = std::move(m).value()).get();
}

struct Out {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
};

engine::EngineOptions opts() {
  engine::EngineOptions o;
  o.num_kv_blocks = 256;
  o.max_seqs = 16;
  o.max_batch_tokens = 128;
  o.num_threads = 1;
  o.seed = 7;
  o.max_model_len = 1024;
  return o;
}

std::shared_ptr<const Constraint> make(const model::Model& m, ConstraintKind kind, std::string source) {
  auto c = compile_cached({.kind = kind, .source = std::move(source)}, TokenIndex::for_tokenizer(m.tokenizer()));
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? c.value() : nullptr;
}

std::vector<Out> collect(engine::RequestHandle& h) {
  std::vector<Out> outs(static_cast<size_t>(h.num_choices()));
  for (const engine::Event& ev : h.wait_all()) {
    Out& o = outs.at(static_cast<size_t>(ev.index));
    o.text += ev.text;
    o.tokens.insert(o.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish != FinishReason::kNone) o.finish = ev.finish;
  }
  return outs;
}

engine::Request request(const model::Model& m, std::shared_ptr<const Constraint> c, int32_t max_tokens,
                        engine::SamplingParams sp = {}) {
  engine::Request r;
  r.prompt_tokens = m.tokenizer().encode("Once upon a time, the answer was", true, false);
  r.sampling = std::move(sp);
  r.sampling.max_tokens = max_tokens;
  r.constraint = std::move(c);
  return r;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

// A schema with every kind of keyword, bounded so that any model finishes it.
constexpr const char* kPersonSchema = R"({
  "type":"object",
  "properties":{
    "name":{"type":"string","minLength":1,"maxLength":10},
    "age":{"type":"integer","minimum":0,"maximum":120},
    "mood":{"enum":["happy","sad","日本語✓"]},
    "tags":{"type":"array","items":{"type":"string","maxLength":4},"minItems":1,"maxItems":3},
    "home":{"$ref":"#/$defs/place"},
    "born":{"type":"string","format":"date"},
    "id":{"type":"string","format":"uuid"},
    "note":{"anyOf":[{"type":"null"},{"type":"boolean"},{"type":"string","pattern":"[α-ω]{2,4}"}]},
    "score":{"type":"number","minimum":0}
  },
  "required":["name","age","mood","tags","home"],
  "additionalProperties":false,
  "$defs":{"place":{"type":"object","properties":{"city":{"type":"string","maxLength":8},"zip":{"type":"string","pattern":"[0-9]{5}"}},"required":["zip"],"additionalProperties":false}}
})";

// The same keywords in fewer tokens, for stories260K's 128-token context.
constexpr const char* kSmallSchema = R"({
  "type":"object",
  "properties":{
    "name":{"type":"string","minLength":1,"maxLength":3},
    "age":{"type":"integer","minimum":0,"maximum":120},
    "mood":{"enum":["sad","日本✓"]},
    "tags":{"type":"array","items":{"$ref":"#/$defs/tag"},"minItems":1,"maxItems":1}
  },
  "required":["name","age","mood","tags"],
  "additionalProperties":false,
  "$defs":{"tag":{"anyOf":[{"type":"null"},{"type":"string","pattern":"[a-z]{1,2}"}]}}
})";

class RandomModels : public ::testing::TestWithParam<const char*> {};

TEST_P(RandomModels, OutputParsesAndValidatesAgainstTheSchema) {
  TS_REQUIRE_SHARED(path, GetParam());
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  const bool small = m->config().n_ctx_train < 1024;
  const char* text = small ? kSmallSchema : kPersonSchema;
  auto c = make(*m, ConstraintKind::kJsonSchema, text);
  ASSERT_NE(c, nullptr);
  auto e = engine::Engine::create(*m, opts());
  ASSERT_TRUE(e.ok());
  engine::SamplingParams sp;
  sp.n = 3;
  sp.temperature = 1.0f;
  sp.seed = 11;
  auto h = (*e)->submit(request(*m, c, small ? 110 : 700, sp));
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  const auto schema = test::ojson::parse(text);
  for (const Out& o : collect(**h)) {
    ASSERT_EQ(o.finish, FinishReason::kStop) << "[" << o.text << "] tokens " << o.tokens.size();
    ASSERT_TRUE(valid_utf8(o.text)) << o.text;
    auto v = test::ojson::parse(o.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << o.text;
    EXPECT_EQ(test::validate(v, schema, schema), "") << o.text;
    // The value ended the sequence: no EOS token was needed after the closing brace.
    EXPECT_EQ(o.text.back(), '}');
  }
}

TEST_P(RandomModels, MultiByteCharactersAreBuiltFromSeveralTokens) {
  TS_REQUIRE_SHARED(path, GetParam());
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  // Greek letters and CJK: a small vocabulary has no such piece and must use byte tokens.
  auto c = make(*m, ConstraintKind::kRegex, "[α-ω]{3,6}(日本|中文)✓");
  auto e = engine::Engine::create(*m, opts());
  ASSERT_TRUE(e.ok());
  engine::SamplingParams sp;
  sp.n = 4;
  sp.seed = 5;
  auto h = (*e)->submit(request(*m, c, 60, sp));
  ASSERT_TRUE(h.ok());
  bool split_seen = false;
  for (const Out& o : collect(**h)) {
    ASSERT_EQ(o.finish, FinishReason::kStop) << o.text;
    ASSERT_TRUE(valid_utf8(o.text));
    // Decode code points and check the pattern by hand.
    std::vector<uint32_t> cps;
    for (size_t i = 0; i < o.text.size();) {
      const auto b = static_cast<unsigned char>(o.text[i]);
      const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
      uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
      for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(o.text[i + k]) & 0x3F);
      cps.push_back(cp);
      i += static_cast<size_t>(n);
    }
    ASSERT_GE(cps.size(), 6u) << o.text;
    const size_t greek = cps.size() - 3;
    EXPECT_GE(greek, 3u);
    EXPECT_LE(greek, 6u);
    for (size_t i = 0; i < greek; ++i) EXPECT_TRUE(cps[i] >= 0x3B1 && cps[i] <= 0x3C9) << o.text;
    const std::string tail = o.text.substr(o.text.size() - 9);
    EXPECT_TRUE(tail == "日本✓" || tail == "中文✓") << o.text;
    split_seen = split_seen || o.tokens.size() > cps.size();
  }
  if (std::string(GetParam()) == kStories) {
    EXPECT_TRUE(split_seen) << "512-token vocabulary: characters come from byte tokens";
  }
}

constexpr const char* kLlama3 = "golden/models/tiny-llama3-q8_0.gguf";

INSTANTIATE_TEST_SUITE_P(Vocabularies, RandomModels, ::testing::Values(kStories, kQwen, kLlama3),
                         [](const auto& info) {
                           const std::string p = info.param;
                           return p == kStories ? "SentencePiece" : p == kQwen ? "ByteLevelBpeQwen2" : "ByteLevelBpeLlama3";
                         });

TEST(ConstrainedEngine, EverySamplingParameterKeepsTheConstraint) {
  TS_REQUIRE_SHARED(path, kStories);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  auto c = make(*m, ConstraintKind::kGrammar, R"(
root ::= "[" item ("," item){0,4} "]"
item ::= "yes" | "no" | [0-9] [0-9]?
)");
  auto e = engine::Engine::create(*m, opts());
  ASSERT_TRUE(e.ok());
  const int32_t comma = m->tokenizer().encode(",", false, false).back();
  std::vector<engine::SamplingParams> variants(9);
  variants[0].temperature = 0.0f;                                         // greedy
  variants[1].top_k = 3;
  variants[2].top_p = 0.3f;
  variants[3].min_p = 0.5f;
  variants[4].repetition_penalty = 1.8f;
  variants[5].frequency_penalty = 2.0f;
  variants[5].presence_penalty = 2.0f;
  variants[6].logit_bias = {{comma, 100.0f}, {m->tokenizer().eos_id(), 100.0f}};  // pushes refused tokens
  variants[7].temperature = 1.9f;
  variants[7].top_k = 50;
  variants[7].top_p = 0.9f;
  variants[8].logprobs = true;
  variants[8].top_logprobs = 3;
  for (size_t i = 0; i < variants.size(); ++i) {
    variants[i].seed = 100 + i;
    variants[i].n = 2;
    auto h = (*e)->submit(request(*m, c, 60, variants[i]));
    ASSERT_TRUE(h.ok());
    for (const Out& o : collect(**h)) {
      ASSERT_EQ(o.finish, FinishReason::kStop) << "variant " << i << ": " << o.text;
      auto ast = parse_gbnf(R"(root ::= "[" item ("," item){0,4} "]"
item ::= "yes" | "no" | [0-9] [0-9]?)", {});
      auto g = lower(*ast, {});
      Runtime rt(*g, nullptr);
      const int32_t st = rt.run(rt.initial(), o.text);
      EXPECT_TRUE(st >= 0 && rt.accepting(st)) << "variant " << i << ": " << o.text;
    }
  }
}

TEST(ConstrainedEngine, EosOnlyWhenCompleteAndLengthWhenUnsatisfiable) {
  TS_REQUIRE_SHARED(path, kStories);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  auto e = engine::Engine::create(*m, opts());
  ASSERT_TRUE(e.ok());
  // Digits then optional more: EOS is allowed after the first digit; whatever ends it, the text
  // is 1..30 digits and the finish is stop.
  auto digits = make(*m, ConstraintKind::kRegex, "[0-9]{1,30}");
  engine::SamplingParams sp;
  sp.n = 4;
  sp.seed = 3;
  auto h = (*e)->submit(request(*m, digits, 100, sp));
  ASSERT_TRUE(h.ok());
  for (const Out& o : collect(**h)) {
    EXPECT_EQ(o.finish, FinishReason::kStop);
    EXPECT_GE(o.text.size(), 1u);
    EXPECT_LE(o.text.size(), 30u);
    EXPECT_EQ(o.text.find_first_not_of("0123456789"), std::string::npos) << o.text;
  }
  // A long literal cannot fit in 3 tokens of a vocabulary without such pieces: `length`, with
  // a prefix of it as the text.
  const std::string lit = "zqxzqxzqxzqxzqxzqx";
  auto longlit = make(*m, ConstraintKind::kGrammar, "root ::= \"" + lit + "\"");
  auto h2 = (*e)->submit(request(*m, longlit, 3));
  ASSERT_TRUE(h2.ok());
  Out o = collect(**h2)[0];
  EXPECT_EQ(o.finish, FinishReason::kLength);
  EXPECT_FALSE(o.text.empty());
  EXPECT_EQ(lit.rfind(o.text, 0), 0u) << o.text;
}

TEST(ConstrainedEngine, PreemptedSequencesStayValid) {
  TS_REQUIRE_SHARED(path, kStories);
  model::Model* m = load_cached(path);
  ASSERT_NE(m, nullptr);
  engine::EngineOptions o = opts();
  o.num_kv_blocks = 12;  // 192 token slots for 6 requests of ~100 tokens each: preemption
  o.block_size = 16;
  auto e = engine::Engine::create(*m, o);
  ASSERT_TRUE(e.ok());
  auto c = make(*m, ConstraintKind::kRegex, "[a-z]{90}");
  std::vector<std::shared_ptr<engine::RequestHandle>> hs;
  for (int i = 0; i < 6; ++i) {
    engine::SamplingParams sp;
    sp.seed = 40 + i;
    auto h = (*e)->submit(request(*m, c, 95, sp));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    hs.push_back(*h);
  }
  for (auto& h : hs) {
    Out out = collect(*h)[0];
    EXPECT_EQ(out.finish, FinishReason::kStop) << out.text;
    EXPECT_EQ(out.text.size(), 90u) << out.text;
    EXPECT_EQ(out.text.find_first_not_of("abcdefghijklmnopqrstuvwxyz"), std::string::npos) << out.text;
  }
  EXPECT_GT((*e)->stats().num_preemptions, 0);
}

TEST(ConstrainedEngine, MismatchedVocabularyIsRefusedAtSubmit) {
  TS_REQUIRE_SHARED(path, kStories);
  TS_REQUIRE_SHARED(qpath, kQwen);
  model::Model* m = load_cached(path);
  model::Model* q = load_cached(qpath);
  ASSERT_TRUE(m && q);
  auto c = make(*q, ConstraintKind::kJsonObject, "");
  auto e = engine::Engine::create(*m, opts());
  ASSERT_TRUE(e.ok());
  auto h = (*e)->submit(request(*m, c, 10));
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace ts::structured
