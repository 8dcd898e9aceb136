// tokenserve contamination on a corpus with planted verbatim overlaps and near-duplicates.
#include "tools/contamination.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace ts::tools {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string line(const std::string& id, const std::string& prompt, const std::string& expected) {
  return nlohmann::json{{"id", id}, {"prompt", prompt}, {"scorer", "contains"}, {"expected", expected}}.dump() + "\n";
}

const char* kClean =
    "A farmer counts seventeen sheep in the morning and twelve more arrive at noon; how many sheep graze now";
const char* kVerbatim =
    "The committee postponed the annual lighthouse festival because the northern harbour froze solid in late March";
const char* kNear =
    "Marie walked her old grey dog along the river every evening and they always stopped at the bakery for bread";

struct Fixture {
  fs::path dir, suite, corpus_txt, corpus_jsonl;
};

Fixture make_fixture() {
  Fixture f;
  f.dir = testing::temp_dir();
  f.suite = f.dir / "suite";
  write(f.suite / "benchmark" / "cases.jsonl",
        line("clean", kClean, "29") + line("verbatim", kVerbatim, "festival") + line("near", kNear, "bakery"));
  write(f.suite / "recent" / "cases.jsonl", line("short", "Name a colour", "red"));
  // Plain text: the verbatim case inside a longer paragraph, unrelated paragraphs around it.
  f.corpus_txt = f.dir / "web.txt";
  write(f.corpus_txt, std::string("Completely unrelated prose about databases and indexes.\n\n") +
                          "News: " + kVerbatim + ", organisers said on Tuesday.\n\n"
                          "More text about gardening in spring.\n");
  // JSONL: a near-duplicate of `near` (two words changed, punctuation and case differ).
  f.corpus_jsonl = f.dir / "docs.jsonl";
  write(f.corpus_jsonl,
        "{\"text\": \"Nothing to see here, just a sentence about trains leaving the station.\"}\n"
        "{\"text\": \"MARIE walked her old grey dog along the river every single evening, and they always stopped at the bakery for cake!\"}\n");
  return f;
}

TEST(Contamination, NormalizeWords) {
  EXPECT_EQ(normalize_words("Hello, WORLD!  It's 3pm"),
            (std::vector<std::string>{"hello", "world", "it", "s", "3pm"}));
  EXPECT_EQ(normalize_words("Café au lait").size(), 3u);  // UTF-8 bytes stay in words
}

TEST(Contamination, FindsPlantedOverlapsAndNearDuplicates) {
  Fixture f = make_fixture();
  auto suite = load_suite(f.suite.string());
  ASSERT_TRUE(suite.ok()) << suite.status().message();
  auto rep = check_contamination(*suite, {f.corpus_txt.string(), f.corpus_jsonl.string()}, ContaminationOptions{});
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  EXPECT_EQ(rep->num_documents, 5);
  std::map<std::string, CaseContamination> by;
  for (const auto& c : rep->cases) by[c.id] = c;
  EXPECT_FALSE(by["clean"].contaminated);
  EXPECT_EQ(by["clean"].ngram_overlap, 0);
  EXPECT_LT(by["clean"].max_jaccard, 0.2);

  EXPECT_TRUE(by["verbatim"].contaminated);
  EXPECT_GT(by["verbatim"].ngram_overlap, 0.5);   // the prompt's 13-grams; "festival" answer is in too
  EXPECT_EQ(by["verbatim"].match, f.corpus_txt.string() + ":3");

  // The edited copy shares no 13-gram ("every single evening" and "cake" break every run of 13
  // words), so only MinHash catches it.
  EXPECT_EQ(by["near"].ngram_overlap, 0);
  EXPECT_TRUE(by["near"].near_duplicate);
  EXPECT_TRUE(by["near"].contaminated);
  EXPECT_GT(by["near"].max_jaccard, 0.5);
  EXPECT_EQ(by["near"].match, f.corpus_jsonl.string() + ":2");
  EXPECT_NE(by["near"].reason.find("near duplicate"), std::string::npos);

  EXPECT_FALSE(by["short"].contaminated);
  EXPECT_EQ(rep->num_contaminated(), 2);

  // With a loose n-gram threshold the verbatim case still counts; the clean one never does.
  auto loose = check_contamination(*suite, {f.corpus_txt.string()}, ContaminationOptions{.n = 13, .max_overlap = 0.9});
  ASSERT_TRUE(loose.ok());
  for (const auto& c : loose->cases) {
    if (c.id == "clean") {
      EXPECT_FALSE(c.contaminated);
    }
  }

  const auto j = nlohmann::json::parse(contamination_json(*rep));
  EXPECT_EQ(j["contaminated"], 2);
  EXPECT_EQ(j["cases"][1]["id"], "verbatim");
  EXPECT_EQ(j["cases"][1]["contaminated"], true);
  EXPECT_NE(contamination_table(*rep).find("2 of 4 cases contaminated"), std::string::npos);
}

TEST(Contamination, RemoveWritesCleanSuiteAndRecord) {
  Fixture f = make_fixture();
  auto suite = load_suite(f.suite.string());
  ASSERT_TRUE(suite.ok());
  auto rep = check_contamination(*suite, {f.corpus_txt.string(), f.corpus_jsonl.string()}, ContaminationOptions{});
  ASSERT_TRUE(rep.ok());
  const fs::path out = f.dir / "clean";
  ASSERT_TRUE(write_clean_suite(*suite, *rep, out.string()).ok());
  auto cleaned = load_suite(out.string());
  ASSERT_TRUE(cleaned.ok()) << cleaned.status().message();
  EXPECT_EQ(cleaned->num_cases(), 2);
  EXPECT_EQ(cleaned->layers[0].cases[0].id, "clean");
  const auto rec = nlohmann::json::parse(testing::read_file((out / "REMOVED.json").string()));
  ASSERT_EQ(rec["removed"].size(), 2u);
  EXPECT_EQ(rec["removed"][0]["id"], "verbatim");
  EXPECT_EQ(rec["removed"][0]["line"], 2);
  EXPECT_FALSE(rec["removed"][1]["reason"].get<std::string>().empty());
  // A second run into the same (now non-empty) folder is refused and changes nothing.
  auto again = write_clean_suite(*suite, *rep, out.string());
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(load_suite(out.string())->num_cases(), 2);
  for (const auto& e : fs::directory_iterator(f.dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(Contamination, BadInput) {
  Fixture f = make_fixture();
  auto suite = load_suite(f.suite.string());
  ASSERT_TRUE(suite.ok());
  auto missing = check_contamination(*suite, {(f.dir / "nope.txt").string()}, ContaminationOptions{});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.txt"), std::string::npos);
  EXPECT_FALSE(check_contamination(*suite, {f.dir.string()}, ContaminationOptions{}).ok());  // a folder
  EXPECT_FALSE(check_contamination(*suite, {}, ContaminationOptions{}).ok());
  EXPECT_FALSE(check_contamination(*suite, {f.corpus_txt.string()}, ContaminationOptions{.n = 0}).ok());
  EXPECT_FALSE(check_contamination(*suite, {f.corpus_txt.string()}, ContaminationOptions{.jaccard = 0}).ok());
}

}  // namespace
}  // namespace ts::tools
