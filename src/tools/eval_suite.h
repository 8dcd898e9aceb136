// Evaluation suites for `tokenserve eval` and `tokenserve contamination`: a folder of layers
// (one sub-folder per scenario, e.g. benchmark/, recent-failures/, adversarial/), each holding
// JSON Lines files of cases:
//   {"id", "prompt" | "messages", "expected", "scorer", "max_tokens"?, "temperature"?,
//    "stop"?, "tolerance"?, "choices"?, "ignore_case"?, ...}
// Loading validates every case up front (scorer known, expected of the right type, regexes
// compile, ids unique per layer) so a run never starts on a malformed suite; errors name the
// file, the line and the field. Pure functions over files; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ts::tools {

enum class Scorer { kExact, kContains, kRegex, kJsonSchema, kNumber, kChoice };
const char* scorer_name(Scorer s);  // "exact" | "contains" | ...

struct EvalMessage {
  std::string role;
  std::string content;
};

// One case, validated. Fields the suite may add beyond these are kept in `raw`.
struct EvalCase {
  std::string id;                    // unique within its layer
  std::string layer;                 // sub-folder name
  std::string file;                  // path of the JSONL file it came from
  int64_t line = 0;                  // 1-based line number in `file`
  std::string raw_line;              // the line as written (kept verbatim by --remove)
  bool chat = false;                 // messages (chat endpoint) instead of prompt (completions)
  std::string prompt;                // when !chat
  std::vector<EvalMessage> messages; // when chat
  Scorer scorer = Scorer::kExact;
  nlohmann::json expected;           // string (exact/contains/regex/choice), array of strings
                                     // (contains: all must occur), number (number), object (json_schema)
  int64_t max_tokens = 64;           // "max_tokens", default 64
  double temperature = 0;            // "temperature", default 0 (greedy)
  nlohmann::json stop;               // "stop" passed through (null = none)
  double tolerance = 1e-6;           // number: |got - expected| <= tolerance
  bool ignore_case = false;          // exact/contains/regex/choice compare case-insensitively
  std::vector<std::string> choices;  // choice: allowed labels (default A..Z single letters)
  nlohmann::json raw;                // the whole parsed object
};

struct EvalLayer {
  std::string name;
  std::vector<EvalCase> cases;
};

struct EvalSuite {
  std::string dir;
  std::vector<EvalLayer> layers;  // sorted by name; every layer has at least one case
  int64_t num_cases() const;
};

// Loads and validates a suite. Errors: kNotFound (no such folder), kInvalidArgument with
// "FILE:LINE: field 'F': reason" for a malformed case, "FILE: ..." for unreadable files, or
// a suite-level reason (no layers, .jsonl files outside a layer).
Result<EvalSuite> load_suite(const std::string& dir);

// Parses and validates one case line (the loader's per-line step; exposed for tests).
// `where` prefixes error messages ("FILE:LINE").
Result<EvalCase> parse_case(const std::string& line, const std::string& layer,
                            const std::string& where);

// Text a case shows the model: the prompt, or the messages' contents joined by newlines.
std::string case_input_text(const EvalCase& c);

}  // namespace ts::tools
