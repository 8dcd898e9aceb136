// Speculative decoding inside the engine step: proposing drafts (n-gram lookup or the draft
// model), verifying them against the target's logits, and rolling back rejected tokens.
#include "engine/engine_impl.h"

namespace ts::engine {

void Engine::Impl::strip_drafts(SeqState& s) {
  Sequence& q = s.seq;
  q.tokens.resize(q.tokens.size() - static_cast<size_t>(q.num_draft_tokens));
  q.num_draft_tokens = 0;
  s.drafts.clear();
}

void Engine::Impl::drop_unverified_drafts() {
  for (SeqState* s : drafted) {
    if (s->seq.num_draft_tokens == 0) continue;
    strip_drafts(*s);
    if (draft) draft->rollback(s->seq.id, s->seq.num_computed_tokens);
  }
  drafted.clear();
}

void Engine::Impl::propose_drafts() {
  const SpecOptions& so = opts.spec;
  drafted.clear();
  // Real work first: every running sequence's pending tokens and the blocks they need.
  int32_t real_tokens = 0, num_decodes = 0, real_blocks = 0;
  for (Sequence* q : sched.running()) {
    const int32_t pending = q->num_tokens() - q->num_computed_tokens;
    real_tokens += pending;
    real_blocks += kvm.num_blocks_needed(*q, pending);
    if (pending == 1) ++num_decodes;
  }
  // Compute-bound step (many decodes): verification would cost real compute, so nobody drafts.
  if (num_decodes == 0 || num_decodes > so.max_decode_seqs) return;
  const double break_even =
      so.cost_model ? spec_break_even(step_cost, draft ? draft_ms_per_token : 0.0, real_tokens, num_decodes) : 0.0;
  int32_t token_budget = std::min(opts.max_batch_tokens - real_tokens, so.max_step_draft_tokens);
  int32_t free_blocks = blocks.num_free() - real_blocks;
  if (token_budget <= 0 || free_blocks < 0) return;

  std::vector<std::pair<SeqState*, int32_t>> cands;  // (sequence, K wanted)
  for (Sequence* q : sched.running()) {
    if (q->num_tokens() - q->num_computed_tokens != 1) continue;
    SeqState& s = *by_seq.at(q);
    const SamplingParams& p = s.req->req.sampling;
    if (s.finished || !s.req->req.speculative) continue;
    int32_t k = spec_next_k(s.spec, so.draft_tokens, break_even);
    // Never draft past max_tokens or the context: the token after the last draft is the bonus.
    k = std::min({k, p.max_tokens - q->num_output_tokens() - 1, max_model_len - q->num_tokens() - 1});
    if (k <= 0) continue;
    cands.emplace_back(&s, k);
  }
  if (cands.empty()) return;
  if (draft) {
    std::vector<DraftQuery> queries;
    queries.reserve(cands.size());
    for (auto& [s, k] : cands) {
      queries.push_back({.seq_id = s->seq.id, .tokens = s->seq.tokens, .k = k, .out = &s->drafts});
    }
    const auto d0 = Clock::now();
    const Status st = draft->propose(queries, &pool);
    int64_t n_drafted = 0;
    for (auto& [s, k] : cands) n_drafted += static_cast<int64_t>(s->drafts.size());
    if (n_drafted > 0) {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - d0).count() / n_drafted;
      draft_ms_per_token = draft_ms_per_token == 0 ? ms : 0.9 * draft_ms_per_token + 0.1 * ms;
    }
    if (!st.ok()) {
      log::error("engine: draft model forward failed (" + st.to_string() + "); not speculating this step");
      for (auto& [s, k] : cands) s->drafts.clear();
    }
  } else {
    for (auto& [s, k] : cands) ngram_propose(s->seq.tokens, so.ngram, k, s->drafts);
  }
  for (auto& [s, k] : cands) {
    Sequence& q = s->seq;
    int32_t m = std::min<int32_t>(static_cast<int32_t>(s->drafts.size()), token_budget);
    // Drafts never cost another sequence its blocks (no preemption caused by speculation).
    while (m > 0 && kvm.num_blocks_needed(q, 1 + m) - kvm.num_blocks_needed(q, 1) > free_blocks) --m;
    s->drafts.resize(static_cast<size_t>(std::max(m, 0)));
    if (m == 0) continue;
    free_blocks -= kvm.num_blocks_needed(q, 1 + m) - kvm.num_blocks_needed(q, 1);
    token_budget -= m;
    q.tokens.insert(q.tokens.end(), s->drafts.begin(), s->drafts.end());
    q.num_draft_tokens = m;
    drafted.push_back(s);
  }
}

int32_t Engine::Impl::verify_drafts(SeqState& s, const ScheduledSeq& sc, const float* rows, int32_t V,
                                    TimePoint now) {
  Sequence& q = s.seq;
  const int32_t c = q.num_computed_tokens;  // position of the last verified token
  const int32_t n = sc.num_tokens;          // rows: that token and the first n - 1 drafts
  std::vector<int32_t> d(q.tokens.end() - q.num_draft_tokens, q.tokens.end());
  strip_drafts(s);
  int32_t accepted = 0, emitted = 0;
  for (int32_t i = 0; i < n; ++i) {
    sample_guarded(s, rows + static_cast<size_t>(i) * V, V, now);
    ++emitted;  // rows sampled, as the plain path counts them (a finishing token included)
    if (s.finished) break;
    if (i == n - 1 || q.tokens.back() != d[static_cast<size_t>(i)]) break;
    ++accepted;
  }
  if (!s.finished) {
    // KV is valid for the verified token and the accepted drafts; the rest is rolled back.
    q.num_computed_tokens = c + 1 + accepted;
    kvm.truncate_to_computed(q);
    kvm.commit_computed(q);
    if (draft) draft->rollback(q.id, q.num_computed_tokens);
  }
  spec_update(s.spec, n - 1, accepted);
  if (n > 1) {
    std::lock_guard<std::mutex> l(stats_mu);
    ++stats.spec_num_drafts;
    stats.spec_num_draft_tokens += n - 1;
    stats.spec_num_accepted_tokens += accepted;
    for (int32_t i = 0; i < accepted && i < kMaxDraftTokens; ++i) ++stats.spec_accepted_by_pos[i];
  }
  return emitted;
}

}  // namespace ts::engine
