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
// proposal q (unit-tested on a small vocabulary); the engine uses its point-mass case.
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
  // Global pause when the step is compute-bound: no sequence drafts while more than this many
  // sequences decode in the step (verifying drafts then costs real compute, not just bandwidth).
  int32_t max_decode_seqs = 8;
  // Drafted tokens per step at most over all sequences (on top of the real tokens).
  int32_t max_step_draft_tokens = 64;
  // Per-sequence pause: when a sequence's acceptance (exponential average) falls below this, it
  // stops drafting for a while (pauses double while acceptance stays low, up to 64 steps).
  float min_acceptance = 0.25f;
};

// Checks options against the target model (and the draft model's vocabulary). Errors:
// kInvalidArgument (K or n-gram range out of bounds, kDraft without a draft model, vocabulary
// mismatch naming the first differing token).
Status validate_spec_options(const SpecOptions& o, const model::Model& target);

// Draft and target must tokenize identically: same size and the same piece for every id.
// Error (kInvalidArgument) names the first differing id and both pieces.
Status check_vocab_match(const tokenizer::Tokenizer& target, const tokenizer::Tokenizer& draft);

// Per-sequence adaptive K.
struct SpecAdaptState {
  int32_t k = 0;                     // tokens to draft next time (0 = not initialised)
  double acceptance = 1.0;           // exponential average of accepted / drafted
  int32_t pause_steps = 0;           // steps left without drafting
  int32_t next_pause = 1;            // length of the next pause (doubles, capped)
};
// K to draft this step (0 = pause); counts down a pause.
int32_t spec_next_k(SpecAdaptState& st, const SpecOptions& o);
// After verification of `drafted` tokens of which the first `accepted` matched: all accepted
// grows K by one (up to the maximum); otherwise K becomes accepted + 1; low average acceptance
// starts a pause.
void spec_update(SpecAdaptState& st, int32_t drafted, int32_t accepted, const SpecOptions& o);

// Rejection sampling of one drafted token (Leviathan et al. / Chen et al.): p = target
// probabilities, q = the draft's probabilities it was drawn from (both [vocab], sum 1). Accepts
// with probability min(1, p[d]/q[d]); otherwise draws from norm(max(0, p - q)). Returns the
// emitted token; *accepted tells which case happened. The emitted token is distributed as p.
int32_t rejection_sample(std::span<const float> p, std::span<const float> q, int32_t draft, Rng& rng,
                         bool* accepted);

}  // namespace ts::engine
