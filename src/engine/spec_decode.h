// Speculative decoding: options, the per-sequence adaptive controller, the draft/target
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
// Thread-safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"
#include "engine/sampler.h"
#include "engine/spec_ngram.h"

namespace ts::model { class Model; }
namespace ts::tokenizer { class Tokenizer; }

namespace ts::engine {

enum class SpecMode { kOff = 0, kNgram, kDraft };
const char* spec_mode_name(SpecMode m);            // "off" | "ngram" | "draft"
Result<SpecMode> parse_spec_mode(std::string_view name);  // kInvalidArgument on an unknown name

inline constexpr int32_t kMaxDraftTokens = 16;     // --draft-tokens upper bound

struct SpecOptions {
  SpecMode mode = SpecMode::kOff;
  int32_t draft_tokens = 4;          // K: drafted tokens per sequence and step at most (1..16)
  NgramOptions ngram;                // kNgram: lookup key lengths (--ngram-min/--ngram-max)
  model::Model* draft_model = nullptr;  // kDraft: the draft (outlives the engine; same vocabulary)
  // Hard global pause: no sequence drafts while more than this many sequences decode in the
  // step. (Below it, the step-cost model decides; see spec_next_k.)
  int32_t max_decode_seqs = 32;
  // Drafted tokens per step at most over all sequences (on top of the real tokens).
  int32_t max_step_draft_tokens = 64;
  // K from the measured step cost and each sequence's acceptance (spec_break_even). false:
  // drafts are treated as free, every eligible sequence drafts draft_tokens (deterministic step
  // counts for tests; the ceiling in benchmarks).
  bool cost_model = true;
};

// Checks options against the target model (and the draft model's vocabulary). Errors:
// kInvalidArgument (K or n-gram range out of bounds, kDraft without a draft model, vocabulary
// mismatch naming the first differing token).
Status validate_spec_options(const SpecOptions& o, const model::Model& target);

// Draft and target must tokenize identically: same size and the same piece for every id.
// Error (kInvalidArgument) names the first differing id and both pieces.
Status check_vocab_match(const tokenizer::Tokenizer& target, const tokenizer::Tokenizer& draft);

// Step cost as measured: time(step) ~ fixed + per_token * tokens, fitted by least squares with
// exponential forgetting over the engine's recent decode steps (forward time only; the token
// counts vary with the drafts).
class SpecCostModel {
 public:
  void observe(int32_t num_tokens, double ms);
  bool ready() const { return ready_; }     // enough spread in token counts to fit both terms
  double fixed_ms() const { return fixed_; }
  double per_token_ms() const { return per_token_; }

 private:
  double s0_ = 0, s1_ = 0, s2_ = 0, t1_ = 0, t2_ = 0;  // decayed sums of 1, n, n^2, t, n*t
  double fixed_ = 0, per_token_ = 0;
  bool ready_ = false;
};

// The break-even acceptance of one more drafted token. A drafted token adds per_token (+ the
// draft model's cost per token) to the step, and pays off when it is accepted with probability
// above that cost relative to the time one emitted token costs now, (fixed + per_token *
// real_tokens) / num_decodes. Small on a memory-bound step (fixed dominates), near or above 1
// on a compute-bound one (large batches): then nobody drafts. 0.4 while the model is not ready.
double spec_break_even(const SpecCostModel& m, double draft_ms_per_token, int32_t real_tokens,
                       int32_t num_decodes);

// Per-sequence adaptive K. alpha = the sequence's estimated probability that a drafted token is
// accepted given the previous one was (decayed counts, Laplace prior 1/2).
struct SpecAdaptState {
  double accepted = 0;               // decayed accepted drafted tokens
  double rejected = 0;               // decayed first rejections (one per round that had one)
  int32_t pause_steps = 0;           // steps left without drafting
  int32_t next_pause = 2;            // length of the next pause (doubles up to 128, then probes)
  double alpha() const { return (accepted + 1.0) / (accepted + rejected + 2.0); }
};
// K to draft this step: the largest k <= max_k with alpha^k > break_even (the k-th draft is
// accepted with probability alpha^k). 0 when even the first draft does not pay: then the
// sequence pauses (pauses double) and afterwards probes with one draft.
int32_t spec_next_k(SpecAdaptState& st, int32_t max_k, double break_even);
// After verification of `drafted` tokens of which the first `accepted` matched.
void spec_update(SpecAdaptState& st, int32_t drafted, int32_t accepted);

// Rejection sampling of one drafted token (Leviathan et al. / Chen et al.): p = target
// probabilities, q = the draft's probabilities it was drawn from (both [vocab], sum 1). Accepts
// with probability min(1, p[d]/q[d]); otherwise draws from norm(max(0, p - q)). Returns the
// emitted token; *accepted tells which case happened. The emitted token is distributed as p.
int32_t rejection_sample(std::span<const float> p, std::span<const float> q, int32_t draft, Rng& rng,
                         bool* accepted);

}  // namespace ts::engine
