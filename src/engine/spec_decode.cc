#include "engine/spec_decode.h"

#include <algorithm>
#include <string>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ts::engine {

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::kNgram: return "ngram";
    case SpecMode::kDraft: return "draft";
    case SpecMode::kOff: break;
  }
  return "off";
}

Result<SpecMode> parse_spec_mode(std::string_view name) {
  if (name == "off") return SpecMode::kOff;
  if (name == "ngram") return SpecMode::kNgram;
  if (name == "draft") return SpecMode::kDraft;
  return invalid_argument("unknown --speculative mode '" + std::string(name) + "' (off, ngram or draft)");
}

Status check_vocab_match(const tokenizer::Tokenizer& target, const tokenizer::Tokenizer& draft) {
  const int32_t nt = target.n_vocab(), nd = draft.n_vocab();
  const int32_t n = std::min(nt, nd);
  for (int32_t i = 0; i < n; ++i) {
    if (target.piece(i) != draft.piece(i)) {
      return invalid_argument("draft model vocabulary differs from the target's at token " + std::to_string(i) +
                              ": target '" + target.piece(i) + "', draft '" + draft.piece(i) + "'");
    }
  }
  if (nt != nd) {
    return invalid_argument("draft model vocabulary has " + std::to_string(nd) + " tokens, the target " +
                            std::to_string(nt) + "; first differing token is " + std::to_string(n) + " (" +
                            (nt > n ? "target '" + target.piece(n) + "', draft has none"
                                    : "draft '" + draft.piece(n) + "', target has none") +
                            ")");
  }
  if (target.bos_id() != draft.bos_id() || target.eos_id() != draft.eos_id()) {
    return invalid_argument("draft model's BOS/EOS ids differ from the target's");
  }
  return Status();
}

Status validate_spec_options(const SpecOptions& o, const model::Model& target) {
  if (o.mode == SpecMode::kOff) return Status();
  if (o.draft_tokens < 1 || o.draft_tokens > kMaxDraftTokens) {
    return invalid_argument("--draft-tokens must be in [1, " + std::to_string(kMaxDraftTokens) + "]");
  }
  if (o.max_decode_seqs < 1 || o.max_step_draft_tokens < 1) {
    return invalid_argument("speculative limits must be positive");
  }
  if (o.mode == SpecMode::kNgram) {
    if (o.ngram.ngram_min < 1 || o.ngram.ngram_max < o.ngram.ngram_min || o.ngram.ngram_max > 64) {
      return invalid_argument("--ngram-min/--ngram-max must satisfy 1 <= min <= max <= 64");
    }
  }
  if (o.mode == SpecMode::kDraft) {
    if (o.draft_model == nullptr) return invalid_argument("--speculative draft needs --draft-model FILE");
    TS_RETURN_IF_ERROR(check_vocab_match(target.tokenizer(), o.draft_model->tokenizer()));
  }
  return Status();
}

void SpecCostModel::observe(int32_t num_tokens, double ms) {
  constexpr double kDecay = 0.97;
  const double n = num_tokens;
  s0_ = kDecay * s0_ + 1;
  s1_ = kDecay * s1_ + n;
  s2_ = kDecay * s2_ + n * n;
  t1_ = kDecay * t1_ + ms;
  t2_ = kDecay * t2_ + n * ms;
  const double var = s0_ * s2_ - s1_ * s1_;  // s0^2 * variance of n
  if (var <= 0.25 * s0_ * s0_) return;       // token counts too alike to separate the terms
  per_token_ = std::max(0.0, (s0_ * t2_ - s1_ * t1_) / var);
  fixed_ = std::max(0.0, (t1_ - per_token_ * s1_) / s0_);
  ready_ = true;
}

double spec_break_even(const SpecCostModel& m, double draft_ms_per_token, int32_t real_tokens,
                       int32_t num_decodes) {
  // Until the step cost is known, a cautious threshold: one-token probing drafts at the prior
  // acceptance of 1/2, growing as they are accepted.
  if (!m.ready() || num_decodes <= 0) return 0.4;
  const double per_emitted = (m.fixed_ms() + m.per_token_ms() * real_tokens) / num_decodes;
  if (!(per_emitted > 0)) return 1.0;
  return (m.per_token_ms() + std::max(0.0, draft_ms_per_token)) / per_emitted;
}

int32_t spec_next_k(SpecAdaptState& st, int32_t max_k, double break_even) {
  if (st.pause_steps > 0) {
    --st.pause_steps;
    return st.pause_steps == 0 ? 1 : 0;  // the last paused step probes with one draft
  }
  const double a = st.alpha();
  int32_t k = 0;
  for (double p = a; k < max_k && p > break_even; p *= a) ++k;
  if (k == 0) {
    st.pause_steps = st.next_pause;
    st.next_pause = std::min(st.next_pause * 2, 128);
  } else {
    st.next_pause = 2;
  }
  return k;
}

void spec_update(SpecAdaptState& st, int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  constexpr double kDecay = 0.8;
  st.accepted = kDecay * st.accepted + accepted;
  st.rejected = kDecay * st.rejected + (accepted < drafted ? 1 : 0);
}

int32_t rejection_sample(std::span<const float> p, std::span<const float> q, int32_t draft, Rng& rng,
                         bool* accepted) {
  const size_t d = static_cast<size_t>(draft);
  const double pd = p[d], qd = q[d];
  if (qd > 0 && rng.uniform() * qd < pd) {  // u < p/q, i.e. accept with min(1, p/q)
    if (accepted) *accepted = true;
    return draft;
  }
  if (accepted) *accepted = false;
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += std::max(0.0, static_cast<double>(p[i]) - q[i]);
  if (!(total > 0)) return draft;  // p == q: rejection has probability 0; unreachable in exact arithmetic
  double u = rng.uniform() * total;
  int32_t last = draft;
  for (size_t i = 0; i < p.size(); ++i) {
    const double r = std::max(0.0, static_cast<double>(p[i]) - q[i]);
    if (r <= 0) continue;
    last = static_cast<int32_t>(i);
    if (u < r) return last;
    u -= r;
  }
  return last;
}

}  // namespace ts::engine
