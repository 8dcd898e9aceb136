// `tokenserve contamination`: how much of an eval suite a training (or any) corpus already
// contains. Text is normalized (lower case, every run of non-alphanumeric ASCII becomes one
// space; bytes >= 0x80 count as letters) and split into words.
//   n-gram overlap  share of a case's word n-grams (default n = 13, as in GPT-3's check) that
//                   occur anywhere in the corpus; a case shorter than n words is compared as
//                   one whole-text gram.
//   near duplicate  MinHash (128 permutations over word 3-gram shingles) with LSH banding
//                   (32 bands x 4 rows) finds corpus documents whose estimated Jaccard
//                   similarity to the case is at least `jaccard` (default 0.5).
// A case is contaminated when its overlap exceeds `max_overlap` (default 0: any shared n-gram)
// or it has a near duplicate. A case's text is its prompt or message contents plus its
// expected answer when that is a string. Corpus documents: one per line of a .jsonl file (its
// "text" field, else its "content" field, else the line), otherwise one per blank-line
// separated paragraph. Not thread-safe per Contamination object; functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "tools/eval_suite.h"

namespace ts::tools {

struct ContaminationOptions {
  int n = 13;                 // word n-gram length, >= 1
  double max_overlap = 0;     // overlap above this marks a case contaminated
  double jaccard = 0.5;       // near-duplicate threshold on estimated Jaccard, in (0, 1]
};

struct CaseContamination {
  std::string id, layer;
  std::string file;           // suite file and line of the case
  int64_t line = 0;
  double ngram_overlap = 0;   // in [0, 1]
  double max_jaccard = 0;     // best estimated Jaccard with a corpus document
  bool near_duplicate = false;
  std::string match;          // "corpus.txt:12" of the best near-duplicate or first overlap ("" none)
  bool contaminated = false;
  std::string reason;         // "13-gram overlap 0.42", "near duplicate (jaccard 0.81) of ..."
};

struct ContaminationReport {
  int n = 13;
  int64_t num_documents = 0;
  std::vector<std::string> corpus_files;
  std::vector<CaseContamination> cases;  // suite order
  int64_t num_contaminated() const;
};

// Normalized words of a text (exposed for tests).
std::vector<std::string> normalize_words(const std::string& text);

// Reads the corpus files and checks every case. Errors: kInvalidArgument for bad options,
// kNotFound / kInvalidArgument naming a corpus file that cannot be read.
Result<ContaminationReport> check_contamination(const EvalSuite& suite,
                                                const std::vector<std::string>& corpus_files,
                                                const ContaminationOptions& opts);

// {"n", "corpus", "documents", "contaminated", "cases": [{"id", "layer", "ngram_overlap",
// "near_duplicate", "max_jaccard", "match", "contaminated", "reason"}]}
std::string contamination_json(const ContaminationReport& r);
// A readable table (one row per case) and a total line.
std::string contamination_table(const ContaminationReport& r);

// Writes a copy of the suite without the contaminated cases into `out_dir` (which must not
// exist or be empty): same layer folders and file names, kept lines verbatim, plus
// REMOVED.json listing every removed case with file, line and reason. Written under a
// temporary sibling folder and renamed into place, so a failure leaves nothing behind.
Status write_clean_suite(const EvalSuite& suite, const ContaminationReport& r,
                         const std::string& out_dir);

}  // namespace ts::tools
