#include "cli/spec_flags.h"

namespace ts::cli {

void SpecFlags::add(CLI::App& app) {
  app.add_option("--speculative", mode,
                 "speculative decoding: off (default), ngram (prompt lookup) or draft (--draft-model)")
      ->check(CLI::IsMember({"off", "ngram", "draft"}));
  app.add_option("--draft-model", draft_model, "draft model GGUF for --speculative draft (same vocabulary)");
  app.add_option("--draft-tokens", draft_tokens, "tokens drafted per sequence and step at most; the cost model drafts fewer where they do not pay (default 8)")
      ->check(CLI::Range(1, static_cast<int>(engine::kMaxDraftTokens)));
  app.add_option("--ngram-min", ngram_min, "shortest n-gram looked up for --speculative ngram (default 1)")
      ->check(CLI::Range(1, 64));
  app.add_option("--ngram-max", ngram_max, "longest n-gram looked up for --speculative ngram (default 4)")
      ->check(CLI::Range(1, 64));
  app.add_option("--spec-max-decode-seqs", max_decode_seqs,
                 "speculation pauses while more sequences than this decode in a step (default 8)")
      ->check(CLI::Range(1, 1 << 20));
}

Status SpecFlags::apply(engine::EngineOptions& eo, std::unique_ptr<model::Model>& draft) const {
  TS_ASSIGN_OR_RETURN(auto m, engine::parse_spec_mode(mode));
  if (m != engine::SpecMode::kDraft && !draft_model.empty()) {
    return invalid_argument("--draft-model needs --speculative draft");
  }
  if (ngram_min > ngram_max) return invalid_argument("--ngram-min must be <= --ngram-max");
  eo.spec.mode = m;
  eo.spec.draft_tokens = draft_tokens;
  eo.spec.ngram.ngram_min = ngram_min;
  eo.spec.ngram.ngram_max = ngram_max;
  eo.spec.max_decode_seqs = max_decode_seqs;
  if (m == engine::SpecMode::kDraft) {
    if (draft_model.empty()) return invalid_argument("--speculative draft needs --draft-model FILE");
    auto d = model::Model::load(draft_model);
    if (!d.ok()) return Status(d.status().code(), "cannot load draft model " + draft_model + ": " + d.status().message());
    draft = std::move(d).value();
    eo.spec.draft_model = draft.get();
  }
  return Status();
}

}  // namespace ts::cli
