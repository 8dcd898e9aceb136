// Speculative-decoding flags shared by `serve` and `generate`:
//   --speculative off|ngram|draft  --draft-tokens K  --ngram-min N  --ngram-max N
//   --draft-model FILE  --spec-max-decode-seqs N
// apply() loads the draft model (kept in `draft`, which must outlive the engine) and fills
// EngineOptions::spec; the engine checks the vocabulary when it is created.
#pragma once

#include <memory>
#include <string>

#include "cli/cli_util.h"
#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"

namespace ts::cli {

struct SpecFlags {
  std::string mode = "off";
  std::string draft_model;
  int draft_tokens = 8;
  int ngram_min = 1;
  int ngram_max = 4;
  int max_decode_seqs = 8;

  void add(CLI::App& app);
  // Errors: kInvalidArgument (bad mode / combination), the draft model's load error.
  Status apply(engine::EngineOptions& eo, std::unique_ptr<model::Model>& draft) const;
};

}  // namespace ts::cli
