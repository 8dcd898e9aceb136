// tokenserve contamination: n-gram overlap and MinHash near-duplicates between an eval suite
// and a corpus (tools/contamination.h).
#include <cstdio>
#include <fstream>

#include "cli/cli_util.h"
#include "tools/contamination.h"

namespace ts::cli {

int cmd_contamination(int argc, char** argv) {
  CLI::App app(
      "Check an eval suite against a corpus: word n-gram overlap and MinHash near-duplicates.\n"
      "Exit status: 0 done (contaminated or not), 1 error, 2 bad arguments or suite.",
      "contamination");
  std::string suite_dir, report, remove;
  std::vector<std::string> corpus;
  tools::ContaminationOptions o;
  app.add_option("--suite", suite_dir, "suite folder (layers of .jsonl cases)")->required();
  app.add_option("--corpus", corpus, "corpus files (.jsonl: one document a line; else blank-line paragraphs)")
      ->required()->expected(1, -1);
  app.add_option("--n", o.n, "word n-gram length (default 13)")->check(CLI::Range(1, 64));
  app.add_option("--max-overlap", o.max_overlap, "overlap share above which a case is contaminated (default 0: any)")
      ->check(CLI::Range(0.0, 0.999999));
  app.add_option("--jaccard", o.jaccard, "near-duplicate threshold on estimated Jaccard (default 0.5)")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--report", report, "write the per-case report as JSON here");
  app.add_option("--remove", remove, "write a cleaned suite (and REMOVED.json) into this new folder");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto suite = tools::load_suite(suite_dir);
  if (!suite.ok()) return fail("contamination", suite.status().message(), 2);
  auto rep = tools::check_contamination(*suite, corpus, o);
  if (!rep.ok()) return fail("contamination", rep.status().message());
  std::fputs(tools::contamination_table(*rep).c_str(), stdout);
  if (!report.empty()) {
    const std::string tmp = report + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary);
      f << tools::contamination_json(*rep);
      f.close();
      if (!f) {
        std::remove(tmp.c_str());
        return fail("contamination", "cannot write " + report);
      }
    }
    if (std::rename(tmp.c_str(), report.c_str()) != 0) {
      std::remove(tmp.c_str());
      return fail("contamination", "cannot write " + report);
    }
  }
  if (!remove.empty()) {
    Status st = tools::write_clean_suite(*suite, *rep, remove);
    if (!st.ok()) return fail("contamination", st.message());
    std::printf("cleaned suite written to %s (%lld cases removed, see REMOVED.json)\n", remove.c_str(),
                static_cast<long long>(rep->num_contaminated()));
  }
  return 0;
}

}  // namespace ts::cli
