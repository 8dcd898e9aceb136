// Speculative decoding inside the engine step: proposing drafts (n-gram lookup or the draft
// model), verifying them against the target's logits, and rolling back rejected tokens.
#include <time.h>

#include "engine/engine_impl.h"

namespace ts::engine {

namespace {
// The engine thread's CPU time in ms. The thread spins (and yields) while the pool's workers
// finish, so an undisturbed step's CPU time is its wall time, while the time other processes
// hold this thread's core is left out; threads outside the engine (HTTP) are not counted.
// (Wall time filtered to undisturbed steps was tried: under a load of ~5 on 2 cores nearly
// every step is disturbed, the fit starves and speculation stays in its exploration.)
double spec_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}
}  // namespace

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
  spec_step_cpu0 = spec_cpu_ms();
  spec_step_wall0 = Clock::now();
  spec_draft_ms = 0;
  spec_probe_step = false;
  spec_price_probe = false;
  spec_plain_ms = 0;
  spec_step_drafts = 0;
  // Real work first: every running sequence's pending tokens and the blocks they need.
  int32_t real_tokens = 0, num_decodes = 0, real_blocks = 0;
  for (Sequence* q : sched.running()) {
    const int32_t pending = q->num_tokens() - q->num_computed_tokens;
    real_tokens += pending;
    real_blocks += kvm.num_blocks_needed(*q, pending);
    if (pending == 1) ++num_decodes;
  }
  // Hard global pause (a large batch is compute-bound whatever the measurements say).
  if (num_decodes == 0 || num_decodes > so.max_decode_seqs) return;
  if (step_cost.ready()) spec_plain_ms = step_cost.predict_ms(real_tokens, 0);
  int32_t token_budget = std::min(opts.max_batch_tokens - real_tokens, so.max_step_draft_tokens);
  int32_t free_blocks = blocks.num_free() - real_blocks;
  if (token_budget <= 0 || free_blocks < 0) return;

  // Candidates: decoding sequences that may draft, each with its cap (K; never past max_tokens
  // or the context: the token after the last draft is the bonus). n-gram proposals are free, so
  // they are looked up first and cap the plan with their length.
  std::vector<SeqState*> cand_seqs;
  std::vector<SpecCandidate> cands;
  for (Sequence* q : sched.running()) {
    if (q->num_tokens() - q->num_computed_tokens != 1) continue;
    SeqState& s = *by_seq.at(q);
    const SamplingParams& p = s.req->req.sampling;
    if (s.finished || !s.req->req.speculative) continue;
    int32_t cap = std::min({so.draft_tokens, p.max_tokens - q->num_output_tokens() - 1,
                            max_model_len - q->num_tokens() - 1});
    if (cap <= 0) continue;
    if (!draft) {
      cap = ngram_propose(q->tokens, so.ngram, cap, s.drafts);
      if (cap == 0) continue;  // no match: nothing to verify, nothing learnt
    }
    cand_seqs.push_back(&s);
    cands.push_back({.alpha = s.spec.alpha(), .max_k = cap});
  }
  if (cands.empty()) return;

  // The draft model's prices: per drafted position (one draft forward) and per token it must
  // catch up on first, measured once it has run (draft_cost); before, a prior from the weights
  // it streams relative to the target's (a decode step reads every weight).
  double pos_ms = 0;
  if (draft) {
    const double ratio = static_cast<double>(opts.spec.draft_model->weight_bytes()) /
                         static_cast<double>(std::max<size_t>(1, model->weight_bytes()));
    const double plain = spec_plain_ms > 0 ? spec_plain_ms : spec_last_plain_ms;
    double tok_ms = ratio * plain / num_decodes;
    pos_ms = ratio * plain;
    if (draft_cost.ready()) {
      pos_ms = draft_cost.fixed_ms() + draft_cost.per_token_ms();
      tok_ms = draft_cost.per_draft_ms();
    }
    for (size_t i = 0; i < cands.size(); ++i) {
      // The catch-up is an investment: once caught up, a drafting sequence only feeds the draft
      // its 1 + accepted new tokens a step. Its price is spread over the next kSetupSteps
      // steps (or the request's remaining ones, if fewer).
      constexpr int32_t kSetupSteps = 8;
      const Sequence& q = cand_seqs[i]->seq;
      const int32_t left = cand_seqs[i]->req->req.sampling.max_tokens - q.num_output_tokens();
      const int32_t horizon = std::clamp(left / std::max(1, cands[i].max_k), 1, kSetupSteps);
      cands[i].setup_ms = tok_ms * (draft->num_behind(q.id, q.num_tokens()) - 1) / horizon;
    }
  }
  std::vector<int32_t> ks(cands.size(), 0);
  if (!so.cost_model) {
    for (size_t i = 0; i < cands.size(); ++i) ks[i] = cands[i].max_k;
  } else if (!step_cost.ready()) {
    // Until steps with and without drafts have been timed, one-token drafts every other step
    // give the fit its spread; a draft model only when even perfect drafts that cost nothing
    // to verify could pay for its forwards (a draft as large as the target never can).
    bool explore = ++spec_explore_steps % 2 == 0;
    if (explore && draft) {
      std::vector<SpecCandidate> best = cands;
      for (SpecCandidate& b : best) b = {.alpha = 0.95, .max_k = 2, .setup_ms = b.setup_ms};
      const SpecPlan p = spec_plan({.plain_ms = spec_last_plain_ms, .per_draft_ms = 0, .draft_pos_ms = pos_ms,
                                    .num_emitting = num_decodes},
                                   best);
      explore = std::any_of(p.k.begin(), p.k.end(), [](int32_t k) { return k > 0; });
    }
    if (explore)
      for (size_t i = 0; i < cands.size(); ++i) ks[i] = 1;
  } else {
    const SpecStepCost cost{.plain_ms = spec_plain_ms,
                            .per_draft_ms = step_cost.per_draft_ms(),
                            .draft_pos_ms = pos_ms,
                            .num_emitting = num_decodes};
    const SpecPlan plan = spec_plan(cost, cands);
    ks = plan.k;
    bool planned = false;
    for (int32_t k : ks) planned = planned || k > 0;
    // Where drafts could not pay even if all were accepted (a compute-bound step), a probe can
    // only re-measure the price: at most one a step, from the smaller budget.
    const bool could_pay = planned || spec_ceiling_pays(cost, cands);
    for (size_t i = 0; i < cands.size(); ++i) {
      // A probe where the plan drafts nothing at all, within the probing budget.
      const double probe_ms = step_cost.per_draft_ms() + (draft ? pos_ms + cands[i].setup_ms : 0.0);
      if (!spec_probe_due(cand_seqs[i]->spec, ks[i] > 0) || planned) continue;
      if (could_pay ? probe_budget.allow(probe_ms) : !spec_price_probe && price_probe_budget.allow(probe_ms)) {
        ks[i] = 1;
        spec_probe_step = true;
        spec_price_probe = !could_pay;
      }
    }
  }

  if (draft) {
    std::vector<DraftQuery> queries;
    std::vector<SeqState*> asked;
    int32_t depth = 0, behind = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      cand_seqs[i]->drafts.clear();
      if (ks[i] <= 0) continue;
      SeqState* s = cand_seqs[i];
      behind += draft->num_behind(s->seq.id, s->seq.num_tokens()) - 1;
      queries.push_back({.seq_id = s->seq.id, .tokens = s->seq.tokens, .k = ks[i], .out = &s->drafts});
      asked.push_back(s);
      depth = std::max(depth, ks[i]);
    }
    if (queries.empty()) return;
    const double d0 = spec_cpu_ms();
    const Status st = draft->propose(queries, &pool);
    spec_draft_ms = spec_cpu_ms() - d0;
    // One draft forward per drafted position; the first also catches the draft KV up.
    draft_cost.observe(depth, behind, spec_draft_ms);
    if (!st.ok()) {
      log::error("engine: draft model forward failed (" + st.to_string() + "); not speculating this step");
      for (SeqState* s : asked) s->drafts.clear();
    }
  } else {
    for (size_t i = 0; i < cands.size(); ++i) {
      std::vector<int32_t>& d = cand_seqs[i]->drafts;
      d.resize(static_cast<size_t>(std::min<int32_t>(ks[i], static_cast<int32_t>(d.size()))));
    }
  }
  for (SeqState* s : cand_seqs) {
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

void Engine::Impl::spec_observe_step(int64_t forward_tokens) {
  const int64_t num_drafts = spec_step_drafts;
  const double total = spec_cpu_ms() - spec_step_cpu0;
  // A reading this thread could not have spent (a clock fault) is dropped.
  const double wall = std::chrono::duration<double, std::milli>(Clock::now() - spec_step_wall0).count();
  if (!(total >= 0) || total > 1.05 * wall + 0.05) return;
  const double ms = total - spec_draft_ms;
  if (ms > 0) step_cost.observe(static_cast<int32_t>(forward_tokens - num_drafts), static_cast<int32_t>(num_drafts), ms);
  probe_budget.earn(total);
  price_probe_budget.earn(total);
  if (num_drafts == 0 && spec_draft_ms == 0) spec_last_plain_ms = total;
  // A probe's price: what the step took beyond the plain step it replaced (draft model included).
  if (spec_probe_step && spec_plain_ms > 0) (spec_price_probe ? price_probe_budget : probe_budget).spend(total - spec_plain_ms);
}

int32_t Engine::Impl::verify_drafts(SeqState& s, const ScheduledSeq& sc, const float* rows, int32_t V,
                                    TimePoint now) {
  Sequence& q = s.seq;
  const int32_t c = q.num_computed_tokens;  // position of the last verified token
  const int32_t n = sc.num_tokens;          // rows: that token and the first n - 1 drafts
  std::vector<int32_t> d(q.tokens.end() - q.num_draft_tokens, q.tokens.end());
  spec_step_drafts += n - 1;
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
