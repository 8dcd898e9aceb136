// tokenserve eval without a server: suite loading and its errors, scorers, the baseline
// comparison on crafted runs (regression, improvement, gaming flag), RUN.json and the report.
#include "tools/eval.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"
#include "tools/eval_export.h"
#include "tools/eval_scorers.h"

namespace ts::tools {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

EvalCase must_parse(const std::string& line) {
  auto c = parse_case(line, "layer", "f.jsonl:1");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : EvalCase{};
}

std::string parse_error(const std::string& line) {
  auto c = parse_case(line, "layer", "f.jsonl:7");
  EXPECT_FALSE(c.ok()) << line;
  return c.ok() ? "" : c.status().message();
}

TEST(EvalSuite, CaseErrorsNameLineAndField) {
  EXPECT_EQ(parse_error("{"), "f.jsonl:7: not valid JSON");
  EXPECT_NE(parse_error(R"({"prompt":"p","scorer":"exact","expected":"a"})").find("field 'id': missing"), std::string::npos);
  EXPECT_NE(parse_error(R"({"id":"a","scorer":"exact","expected":"a"})").find("exactly one of 'prompt' and 'messages'"), std::string::npos);
  EXPECT_NE(parse_error(R"({"id":"a","prompt":"p","messages":[],"scorer":"exact","expected":"a"})").find("exactly one"), std::string::npos);
  EXPECT_NE(parse_error(R"({"id":"a","prompt":"p","scorer":"fuzzy","expected":"a"})").find("f.jsonl:7: field 'scorer': unknown scorer \"fuzzy\""), std::string::npos);
  EXPECT_NE(parse_error(R"({"id":"a","prompt":"p","scorer":"regex","expected":"(unclosed"})").find("field 'expected': bad regex"), std::string::npos);
  EXPECT_NE(parse_error(R"({"id":"a","prompt":"p","scorer":"number","expected":"4"})").find("field 'expected': must be a number"), std::string::npos);
  EXPECT_NE(parse_error(R"({"id":"a","prompt":"p","scorer":"json_schema","expected":{"oneOf":[]}})").find("not supported"), std::string::npos);
  EXPECT_NE(parse_error(R"({"id":"a","prompt":"p","scorer":"exact","expected":"a","max_tokens":0})").find("field 'max_tokens'"), std::string::npos);
  EXPECT_NE(parse_error(R"({"id":"a","messages":[{"role":"user"}],"scorer":"exact","expected":"a"})").find("field 'messages[0]'"), std::string::npos);
  EXPECT_NE(parse_error(R"({"id":"a","prompt":"p","scorer":"choice","expected":"E","choices":["A","B"]})").find("one of 'choices'"), std::string::npos);
}

TEST(EvalSuite, LoadsLayersAndRejectsMalformedSuites) {
  fs::path d = testing::temp_dir();
  write(d / "benchmark" / "a.jsonl", "{\"id\":\"1\",\"prompt\":\"p\",\"scorer\":\"exact\",\"expected\":\"x\"}\n\n"
                                     "{\"id\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"scorer\":\"contains\",\"expected\":[\"a\",\"b\"],\"max_tokens\":5}\n");
  write(d / "adversarial" / "b.jsonl", "{\"id\":\"1\",\"prompt\":\"p\",\"scorer\":\"number\",\"expected\":3,\"tolerance\":0.5}\n");
  write(d / "empty" / "README.md", "no cases here\n");
  auto s = load_suite(d.string());
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->layers.size(), 2u);  // the folder without .jsonl files is not a layer
  EXPECT_EQ(s->layers[0].name, "adversarial");
  EXPECT_EQ(s->layers[1].cases.size(), 2u);
  EXPECT_EQ(s->layers[1].cases[1].id, "2");
  EXPECT_EQ(s->layers[1].cases[1].line, 3);
  EXPECT_TRUE(s->layers[1].cases[1].chat);
  EXPECT_EQ(s->layers[1].cases[1].max_tokens, 5);
  EXPECT_EQ(s->num_cases(), 3);

  write(d / "benchmark" / "c.jsonl", "{\"id\":\"1\",\"prompt\":\"q\",\"scorer\":\"exact\",\"expected\":\"y\"}\n");
  auto dup = load_suite(d.string());
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("c.jsonl:1: field 'id': duplicate id '1'"), std::string::npos);

  EXPECT_EQ(load_suite((d / "nope").string()).status().code(), StatusCode::kNotFound);
  fs::path flat = testing::temp_dir();
  write(flat / "cases.jsonl", "{}\n");
  EXPECT_NE(load_suite(flat.string()).status().message().find("inside a layer sub-folder"), std::string::npos);
  fs::path none = testing::temp_dir();
  EXPECT_NE(load_suite(none.string()).status().message().find("no layers"), std::string::npos);
}

TEST(EvalScorers, EachScorer) {
  auto score = [](const std::string& line, const std::string& out) { return score_output(must_parse(line), out).score; };
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"exact","expected":"Paris"})", "  Paris\n"), 1);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"exact","expected":"Paris"})", "paris"), 0);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"exact","expected":"Paris","ignore_case":true})", "paris"), 1);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"contains","expected":["red","ball"]})", "a red ball"), 1);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"contains","expected":["red","ball"]})", "a red box"), 0);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"regex","expected":"^\\d{3}-\\d{4}$"})", "555-1234"), 1);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"regex","expected":"^\\d{3}-\\d{4}$"})", "call 555-1234"), 0);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"number","expected":1234})", "It is 1,234 apples"), 1);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"number","expected":3.14,"tolerance":0.01})", "about 3.141"), 1);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"number","expected":-2})", "x = -2.5"), 0);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"number","expected":2})", "two"), 0);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"choice","expected":"B"})", "The answer is B."), 1);
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"choice","expected":"B"})", "Both are fine, C"), 0);  // "B" in "Both" is no label
  EXPECT_EQ(score(R"({"id":1,"prompt":"p","scorer":"choice","expected":"yes","choices":["yes","no"]})", "no, yes"), 0);
  const std::string schema = R"({"id":1,"prompt":"p","scorer":"json_schema","expected":{"type":"object","required":["name","age"],"additionalProperties":false,"properties":{"name":{"type":"string","minLength":1},"age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"enum":["a","b"]}}}}})";
  EXPECT_EQ(score(schema, R"({"name":"Ann","age":3})"), 1);
  EXPECT_EQ(score(schema, "Here:\n```json\n{\"name\":\"Ann\",\"age\":3,\"tags\":[\"a\"]}\n```"), 1);
  EXPECT_EQ(score(schema, R"({"name":"Ann","age":-1})"), 0);
  EXPECT_EQ(score(schema, R"({"name":"Ann"})"), 0);
  EXPECT_EQ(score(schema, R"({"name":"Ann","age":3,"x":1})"), 0);
  EXPECT_EQ(score(schema, R"({"name":"Ann","age":3,"tags":["c"]})"), 0);
  EXPECT_EQ(score(schema, "no json"), 0);
  EXPECT_EQ(score_output(must_parse(schema), R"({"name":"Ann"})").reason, "$: missing required property 'age'");
}

CaseResult res(const std::string& layer, const std::string& id, double score, int64_t tokens = 10,
               double rep = 0) {
  CaseResult r;
  r.layer = layer;
  r.id = id;
  r.score = score;
  r.completion_tokens = tokens;
  r.repetition = rep;
  r.output = "out " + id;
  return r;
}

EvalRun make_run(std::vector<CaseResult> cases) {
  EvalRun run;
  run.model = "m";
  run.cases = std::move(cases);
  run.layers = summarize_layers(run.cases, &run.overall);
  return run;
}

TEST(EvalCompare, RegressionImprovementAndGamingFlag) {
  std::vector<CaseResult> b, c;
  for (int i = 0; i < 10; ++i) {
    const std::string id = std::to_string(i);
    // "bench": 9/10 -> 2/10, a regression concentrated in one layer.
    b.push_back(res("bench", id, i < 9 ? 1 : 0));
    c.push_back(res("bench", id, i < 2 ? 1 : 0));
    // "steady": unchanged.
    b.push_back(res("steady", id, i % 2));
    c.push_back(res("steady", id, i % 2));
    // "gamed": 3/10 -> 10/10 while outputs get 3x longer and repetitive.
    b.push_back(res("gamed", id, i < 3 ? 1 : 0, 10, 0.0));
    c.push_back(res("gamed", id, 1, 30, 0.4));
  }
  c.push_back(res("steady", "only-in-candidate", 0));
  c.push_back(res("fresh", "1", 1));
  EvalRun base = make_run(b), cand = make_run(c);
  // The overall score barely moves, hiding the per-layer story.
  EXPECT_NEAR(cand.overall.score - base.overall.score, 0.0, 0.05);
  Comparison cmp = compare_runs(base, cand, CompareOptions{});
  ASSERT_EQ(cmp.regressed, std::vector<std::string>{"bench"});
  ASSERT_EQ(cmp.flagged, std::vector<std::string>{"gamed"});
  std::map<std::string, LayerComparison> by;
  for (const auto& l : cmp.layers) by[l.layer] = l;
  EXPECT_EQ(by["bench"].test.n, 10);
  EXPECT_EQ(by["bench"].test.base_only, 7);
  EXPECT_NEAR(by["bench"].delta, -0.7, 1e-12);
  EXPECT_LT(by["bench"].test.p_value, 0.05);
  EXPECT_EQ(by["steady"].verdict, "no_change");
  EXPECT_EQ(by["steady"].test.n, 10);  // the unpaired case is left out
  EXPECT_EQ(by["gamed"].verdict, "improvement");
  EXPECT_EQ(by["gamed"].flags, (std::vector<std::string>{"score_up_length_jump", "score_up_repetition_jump"}));
  EXPECT_EQ(by["fresh"].verdict, "new");

  // A drop that is large but rests on too few cases is not called a regression.
  EvalRun small_b = make_run({res("l", "1", 1), res("l", "2", 1), res("l", "3", 1)});
  EvalRun small_c = make_run({res("l", "1", 0), res("l", "2", 0), res("l", "3", 1)});
  Comparison small = compare_runs(small_b, small_c, CompareOptions{});
  EXPECT_TRUE(small.regressed.empty());
  EXPECT_EQ(small.layers[0].verdict, "no_change");
}

TEST(EvalRunJson, RoundTripAndReport) {
  EvalRun run = make_run({res("bench", "a", 1, 12), res("bench", "b", 0, 20), res("adv", "c", 1, 5)});
  run.cases[1].reason = "missing \"x\"";
  auto j = nlohmann::json::parse(run_json(run, nullptr));
  EXPECT_EQ(j["layers"]["bench"]["n"], 2);
  EXPECT_DOUBLE_EQ(j["layers"]["bench"]["score"].get<double>(), 0.5);
  EXPECT_EQ(j["layers"]["bench"]["ci"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["layers"]["bench"]["output_tokens"]["max"].get<double>(), 20);
  EXPECT_EQ(j["cases"][1]["reason"], "missing \"x\"");
  auto back = parse_run_json(run_json(run, nullptr));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->cases.size(), 3u);
  EXPECT_DOUBLE_EQ(back->layers["bench"].score, 0.5);
  EXPECT_FALSE(parse_run_json("[]").ok());
  EXPECT_NE(parse_run_json(R"({"cases":[{"id":"a","layer":"l","score":2}]})").status().message().find("cases[0]"), std::string::npos);
  EXPECT_NE(parse_run_json(R"({"cases":[{"id":"a","layer":"l","score":1,"output":7}]})").status().message().find("wrong type"),
            std::string::npos);

  fs::path d = testing::temp_dir();
  Comparison cmp = compare_runs(run, run, CompareOptions{});
  cmp.baseline_path = "old.json";
  ASSERT_TRUE(write_eval_outputs((d / "RUN.json").string(), run, &cmp).ok());
  for (const char* f : {"RUN.json", "RUN.md", "RUN.scores.svg", "RUN.lengths.svg"}) EXPECT_TRUE(fs::exists(d / f)) << f;
  const std::string md = testing::read_file((d / "RUN.md").string());
  EXPECT_NE(md.find("| bench | 2 | 0.500 |"), std::string::npos) << md;
  EXPECT_NE(md.find("![scores](RUN.scores.svg)"), std::string::npos);
  EXPECT_NE(md.find("missing \"x\""), std::string::npos);
  EXPECT_NE(testing::read_file((d / "RUN.scores.svg").string()).find("<rect"), std::string::npos);
  // A folder that does not exist: an error and no stray temporary files.
  EXPECT_FALSE(write_eval_outputs((d / "no" / "RUN.json").string(), run, nullptr).ok());
}

TEST(EvalExport, FailedLedgerRequestsWithoutBodiesBecomeAPendingLayer) {
  std::vector<LedgerRequest> reqs = {
      {.request_id = "ok", .http_status = 200, .finish_reason = "stop"},
      {.request_id = "e500", .http_status = 500, .finish_reason = "error"},
      {.request_id = "engine", .http_status = 200, .finish_reason = "error", .prompt_id = "greet", .prompt_version = 2},
      {.request_id = "cut", .http_status = 200, .finish_reason = "length"},
  };
  fs::path d = fs::path(testing::temp_dir()) / "suite";
  auto n = export_failed_requests(reqs, d.string());
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(n->cases, 0);
  EXPECT_EQ(n->metadata_only, 3);  // failed + flagged (length); "ok" is neither
  std::ifstream f(d / "ledger-failures" / "PENDING.ndjson");
  std::string l1, l2, l3, l4;
  std::getline(f, l1), std::getline(f, l2), std::getline(f, l3);
  EXPECT_FALSE(std::getline(f, l4));
  EXPECT_EQ(nlohmann::json::parse(l1)["request_id"], "e500");
  EXPECT_NE(nlohmann::json::parse(l1)["reason"].get<std::string>().find("log_bodies"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(l2)["prompt"]["version"], 2);
  EXPECT_EQ(nlohmann::json::parse(l3)["finish_reason"], "length");
  EXPECT_FALSE(fs::exists(d / "ledger-failures" / "cases.jsonl"));
  // Not runnable cases: the suite loader finds no layer with cases there.
  EXPECT_FALSE(load_suite(d.string()).ok());
  // A second export never overwrites the first.
  EXPECT_FALSE(export_failed_requests(reqs, d.string()).ok());
}

// Logged bodies become cases `load_suite` accepts, with the request's sampling and a scorer
// from its response_format; bodies eval cannot express stay metadata with a reason.
TEST(EvalExport, LoggedBodiesBecomeRunnableCases) {
  const std::string schema = R"({"type":"object","required":["answer"]})";
  std::vector<LedgerRequest> reqs = {
      {.request_id = "chat-err", .tenant = "acme", .http_status = 500, .finish_reason = "error",
       .request_body = R"({"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":12,"temperature":0,"stream":true})",
       .output_text = "partial"},
      {.request_id = "cmpl-cut", .http_status = 200, .finish_reason = "length",
       .request_body = R"({"prompt":"Once upon","max_tokens":4,"stop":["\n"]})", .output_text = "a time"},
      {.request_id = "json", .http_status = 200, .finish_reason = "error",
       .request_body = R"({"messages":[{"role":"user","content":"json"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" + schema + "}}}"},
      {.request_id = "parts", .http_status = 400, .finish_reason = "error",
       .request_body = R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]})"},
      {.request_id = "fine", .http_status = 200, .finish_reason = "stop", .request_body = R"({"prompt":"x"})"},
  };
  fs::path d = fs::path(testing::temp_dir()) / "suite";
  auto n = export_failed_requests(reqs, d.string());
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(n->cases, 3);
  EXPECT_EQ(n->metadata_only, 1);
  auto suite = load_suite(d.string());
  ASSERT_TRUE(suite.ok()) << suite.status().message();
  ASSERT_EQ(suite->layers.size(), 1u);
  const EvalLayer& l = suite->layers[0];
  EXPECT_EQ(l.name, "ledger-failures");
  ASSERT_EQ(l.cases.size(), 3u);
  EXPECT_EQ(l.cases[0].id, "chat-err");
  EXPECT_TRUE(l.cases[0].chat);
  ASSERT_EQ(l.cases[0].messages.size(), 2u);
  EXPECT_EQ(l.cases[0].messages[1].content, "hi");
  EXPECT_EQ(l.cases[0].max_tokens, 12);
  EXPECT_EQ(l.cases[0].scorer, Scorer::kRegex);
  EXPECT_EQ(l.cases[0].raw["ledger"]["recorded_output"], "partial");
  EXPECT_EQ(l.cases[0].raw["ledger"]["tenant"], "acme");
  EXPECT_FALSE(l.cases[1].chat);
  EXPECT_EQ(l.cases[1].prompt, "Once upon");
  EXPECT_EQ(l.cases[1].max_tokens, 4);
  EXPECT_EQ(l.cases[2].scorer, Scorer::kJsonSchema);
  EXPECT_EQ(l.cases[2].expected, nlohmann::json::parse(schema));
  std::ifstream f(d / "ledger-failures" / "PENDING.ndjson");
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  EXPECT_EQ(nlohmann::json::parse(line)["request_id"], "parts");
  EXPECT_NE(nlohmann::json::parse(line)["reason"].get<std::string>().find("messages"), std::string::npos);
}

}  // namespace
}  // namespace ts::tools
