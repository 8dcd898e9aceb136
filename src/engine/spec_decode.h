// Speculative decoding: options, the adaptive policy (step-cost model, plan, probes), the draft/target
// vocabulary check and the verification rule. The engine (engine.cc) drafts tokens before a
// step (spec_ngram.h or a draft model, spec_draft.h), verifies them in the same batched forward
// as every other sequence's decode and prefill chunk, and rolls back the KV of rejected tokens.
//
// Exactness. Verification samples the target's token at each drafted position with the
// sequence's own sampler and RNG, exactly as a non-speculative step would, and accepts the
// draft while the sampled token equals it; the first mismatch (or the position after the last
// draft) yields the target's own token. For greedy decoding this is token-identical to
// non-speculative output. For temperature > 0 it is rejection sampling with a deterministic
// proposal q = delta(draft): accept with min(1, p(d)/q(d)) = p(d), otherwise draw from the
// residual norm(max(0, p - q)) = p without d; both drafting modes propose deterministically
// (n-gram lookup, the draft model's argmax), so the output keeps the target distribution, and
// with a seed it is even the same tokens as without speculation (the RNG is drawn once per
// emitted token in both cases). rejection_sample() below is the general rule for a stochastic
// proposal q, unit-tested on a small vocabulary; the engine does not call it (its drafts are
// deterministic, where the rule reduces to the sample-and-compare above). A stochastic draft
// model would need it together with the sampler's processed distributions, not exposed today.
//
// Policy (never slower than not speculating, by construction of the decision; measured online).
// Every step the engine predicts the step's time without drafts and what each draft adds
// (SpecCostModel over whole decode steps; a draft model's forwards and catch-up priced apart),
// estimates each sequence's acceptance, and drafts only what raises expected emitted tokens per
// millisecond by a margin (spec_plan). Where drafts do not pay (low acceptance, a compute-bound
// batch, a draft model as costly as the target) the plan drafts nothing, and only rare one-token
// probes, capped to ~2% of decode time (SpecProbeBudget), keep the estimates fresh; where even
// drafts that are always accepted could not pay (spec_ceiling_pays), only price probes run,
// capped to ~0.5%. Times are the engine thread's CPU time, not wall time, so load from other
// processes on a shared machine skews the decisions less. What is not
// modelled: a step whose cost is not linear in its drafts (the fit is a line; stalls from other
// processes are clipped), and prefill tokens in the step are priced like decode tokens.
//
// Thread-safety: plain data and pure functions (SpecCostModel, SpecProbeBudget: single owner).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>
#include <string_view>

#include "core/status.h"
#include "engine/sampler.h"
#include "engine/spec_ngram.h"
#include "model/kv_storage.h"

namespace ts::model { class Model; }
namespace ts::tokenizer { class Tokenizer; }

namespace ts::engine {

enum class SpecMode { kOff = 0, kNgram, kDraft };
const char* spec_mode_name(SpecMode m);            // "off" | "ngram" | "draft"
Result<SpecMode> parse_spec_mode(std::string_view name);  // kInvalidArgument on an unknown name

inline constexpr int32_t kMaxDraftTokens = 16;     // --draft-tokens upper bound

struct SpecOptions {
  SpecMode mode = SpecMode::kOff;
  int32_t draft_tokens = 8;          // K: drafted tokens per sequence and step at most (1..16)
  NgramOptions ngram;                // kNgram: lookup key lengths (--ngram-min/--ngram-max)
  model::Model* draft_model = nullptr;  // kDraft: the draft (outlives the engine; same vocabulary)
  // Hard global pause: no sequence drafts while more than this many sequences decode in the
  // step. (Below it, the step-cost model decides; see spec_plan.)
  int32_t max_decode_seqs = 32;
  // Drafted tokens per step at most over all sequences (on top of the real tokens).
  int32_t max_step_draft_tokens = 64;
  // Drafts from the measured step cost and each sequence's acceptance (spec_plan). false:
  // drafts are treated as free, every eligible sequence drafts draft_tokens (deterministic step
  // counts for tests; the ceiling in benchmarks).
  bool cost_model = true;
};

// Checks options against the target model (and the draft model's vocabulary). Errors:
// kInvalidArgument (K or n-gram range out of bounds, kDraft without a draft model, vocabulary
// mismatch naming the first differing token).
Status validate_spec_options(const SpecOptions& o, const model::Model& target);

// KV blocks of the target's pool when a draft model runs beside it, both out of one budget.
// The draft keeps one block of its own for every `target_blocks_per_draft_block` target blocks
// (1 with the full layout; the number of full-attention KV groups with window-only KV, since a
// sequence's tokens are bounded by those groups' blocks): the largest N with
// N * target_block_bytes + ceil(N / per) * draft_block_bytes <= budget_bytes. 0 when not even
// one pair fits.
int32_t spec_budget_blocks(size_t target_block_bytes, int32_t target_blocks_per_draft_block,
                           size_t draft_block_bytes, size_t budget_bytes);
// Draft blocks for a target pool of `target_blocks` (ceil(target_blocks / per)).
int32_t spec_draft_blocks(int32_t target_blocks, int32_t target_blocks_per_draft_block);

// Draft and target must tokenize identically: same size and the same piece for every id.
// Error (kInvalidArgument) names the first differing id and both pieces.
Status check_vocab_match(const tokenizer::Tokenizer& target, const tokenizer::Tokenizer& draft);

// Step cost as measured online: time(step) ~ fixed + per_token * real + per_draft * drafts,
// where `real` are the step's own tokens (one per decoding sequence) and `drafts` the drafted
// tokens it verifies, fitted by ridge least squares with exponential forgetting over the
// engine's recent decode steps. A drafted token gets its own price (it is not assumed to cost
// what a decode token of another sequence does: it adds a query row to its sequence's
// attention, a logit row, sampling and verification). The engine feeds it whole decode steps
// (scheduling, the forward, sampling and verification, host bookkeeping; the draft model's own
// time is measured apart).
class SpecCostModel {
 public:
  void observe(int32_t real_tokens, int32_t draft_tokens, double ms);
  // Enough spread in draft counts to price a draft (and a fit to predict with).
  bool ready() const { return ready_; }
  double fixed_ms() const { return theta_[0]; }
  double per_token_ms() const { return theta_[1]; }
  double per_draft_ms() const { return theta_[2]; }
  double predict_ms(int32_t real_tokens, int32_t draft_tokens = 0) const {
    return theta_[0] + theta_[1] * real_tokens + theta_[2] * draft_tokens;
  }

 private:
  double xx_[3][3] = {};             // decayed sums of x x^T, x = (1, real, drafts)
  double xy_[3] = {};                // decayed sums of x * ms
  double theta_[3] = {};             // (fixed, per_token, per_draft)
  bool ready_ = false;
};

// Per-sequence acceptance and probing. alpha = the estimated probability that a drafted token
// is accepted given the previous one was (counts decayed by 0.9 a round, prior 1/2 worth one
// draft: with nothing accepted it falls to ~0.05, so a cheap draft that is never right stops).
struct SpecAdaptState {
  double accepted = 0;               // decayed accepted drafted tokens
  double rejected = 0;               // decayed first rejections (one per round that had one)
  int32_t idle_steps = 0;            // decode steps since this sequence last drafted
  int32_t probe_interval = 8;        // idle steps before a one-token probe (doubles to 128)
  double alpha() const { return (accepted + 0.5) / (accepted + rejected + 1.0); }
};
// After verification of `drafted` tokens of which the first `accepted` matched.
void spec_update(SpecAdaptState& st, int32_t drafted, int32_t accepted);

// One speculation candidate of a step: a decoding sequence that may draft.
struct SpecCandidate {
  double alpha = 0.5;                // its acceptance estimate (SpecAdaptState::alpha)
  int32_t max_k = 0;                 // drafts it can take at most (K, the proposal's length, limits)
  double setup_ms = 0;               // paid once if it drafts at all (draft model: catching its KV
                                     // up over the tokens it has not seen yet)
};

// What a step costs, predicted from measurements (all times in ms).
struct SpecStepCost {
  double plain_ms = 0;               // the step without any draft (SpecCostModel::predict_ms)
  double per_draft_ms = 0;           // verification's added time per drafted token
  double draft_pos_ms = 0;           // draft model: one more drafted position (one draft forward
                                     // over the batch; shared by every sequence drafting that deep)
  int32_t num_emitting = 0;          // tokens the plain step emits (its decoding sequences)
  double min_gain = 1.1;             // drafts must promise at least this speed-up (the fit's error
                                     // on a noisy machine; marginal gains are not worth the risk)
};

// The plan: drafts per candidate that maximize expected emitted tokens per unit of step time.
// The j-th draft of a sequence with acceptance alpha is worth alpha^j expected tokens (it emits
// one more token only when all j drafts are accepted) and costs per_draft_ms (+ draft_pos_ms
// when no other sequence drafts that deep yet; + the candidate's setup_ms for its first). Drafts are taken best first while each one
// beats the step's current tokens per ms; the plan is kept only when its predicted
// tokens per ms beat the plain step's by min_gain, otherwise every k is 0. This is the pause:
// per sequence when its acceptance is low (its drafts are worth too little), globally when the
// step is compute-bound (per_draft_ms is large next to plain_ms / num_emitting).
struct SpecPlan {
  std::vector<int32_t> k;            // [candidates] drafts to take (0 = none)
  double plain_tokens_per_ms = 0;    // predicted, without drafts
  double tokens_per_ms = 0;          // predicted, with the plan (== plain when nobody drafts)
};
SpecPlan spec_plan(const SpecStepCost& cost, std::span<const SpecCandidate> cands);

// The plan's ceiling: whether any draft could pay this step if every drafted token were
// certain to be accepted (alpha = 1 for every candidate, same caps and prices). When it cannot,
// drafts do not pay whatever the acceptance, so probing for acceptance is pointless; the engine
// then only re-measures the price now and then (a price probe, on a smaller budget).
bool spec_ceiling_pays(const SpecStepCost& cost, std::span<const SpecCandidate> cands);

// Probing: a sequence that has not drafted for probe_interval decode steps gets a one-token
// probe (the plan cannot learn about acceptance or a changed step cost from steps without
// drafts). Call once per decode step of the sequence with whether it drafts this step (after
// the plan); returns true when this step should carry a probe instead. Intervals double (8 ..
// 128) while probes are the only drafts, and reset to 8 once the plan drafts by itself.
bool spec_probe_due(SpecAdaptState& st, bool planned);

// Caps what probing may cost: probes earn `share` of every decode step's time as credit and
// spend their measured extra time (a probe in draft mode first catches the draft model's KV up,
// which can cost far more than the probe's own token). A probe is allowed once the credit covers
// its predicted cost, so over a run probes cost at most about `share` of the decode time.
class SpecProbeBudget {
 public:
  explicit SpecProbeBudget(double share = 0.02) : share_(share) {}
  void earn(double step_ms) { credit_ = std::min(credit_ + share_ * std::max(0.0, step_ms), kMaxCreditMs); }
  void spend(double extra_ms) { credit_ -= std::max(0.0, extra_ms); }
  bool allow(double predicted_ms = 0) const { return credit_ >= std::max(0.0, predicted_ms); }
  double credit_ms() const { return credit_; }

 private:
  static constexpr double kMaxCreditMs = 50;  // idle periods do not bank a burst of probes
  double share_;
  double credit_ = 0;
};

// Rejection sampling of one drafted token (Leviathan et al. / Chen et al.): p = target
// probabilities, q = the draft's probabilities it was drawn from (both [vocab], sum 1). Accepts
// with probability min(1, p[d]/q[d]); otherwise draws from norm(max(0, p - q)). Returns the
// emitted token; *accepted tells which case happened. The emitted token is distributed as p.
int32_t rejection_sample(std::span<const float> p, std::span<const float> q, int32_t draft, Rng& rng,
                         bool* accepted);

}  // namespace ts::engine
