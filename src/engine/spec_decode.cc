#include "engine/spec_decode.h"

#include <algorithm>
#include <cmath>
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

int32_t spec_draft_blocks(int32_t target_blocks, int32_t target_blocks_per_draft_block) {
  const int64_t per = std::max<int32_t>(1, target_blocks_per_draft_block);
  return static_cast<int32_t>((int64_t{target_blocks} + per - 1) / per);
}

int32_t spec_budget_blocks(size_t target_block_bytes, int32_t target_blocks_per_draft_block,
                           size_t draft_block_bytes, size_t budget_bytes) {
  const size_t per = static_cast<size_t>(std::max<int32_t>(1, target_blocks_per_draft_block));
  // One unit = `per` target blocks and one draft block; then add target blocks (each partial
  // unit needs its own draft block) while they fit.
  const size_t unit = per * target_block_bytes + draft_block_bytes;
  if (unit == 0) return 0;
  size_t n = (budget_bytes / unit) * per;
  size_t rest = budget_bytes - (n / per) * unit;
  if (rest >= target_block_bytes + draft_block_bytes) n += std::min(per - 1, (rest - draft_block_bytes) / target_block_bytes);
  return static_cast<int32_t>(std::min<size_t>(n, size_t{1} << 30));
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

namespace {
// Solves the 3x3 system a x = b by Gaussian elimination with partial pivoting; false if singular.
bool solve3(double a[3][3], double b[3], double x[3]) {
  for (int c = 0; c < 3; ++c) {
    int p = c;
    for (int r = c + 1; r < 3; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    if (!(std::fabs(a[p][c]) > 1e-12)) return false;
    std::swap(a[p], a[c]);
    std::swap(b[p], b[c]);
    for (int r = c + 1; r < 3; ++r) {
      const double f = a[r][c] / a[c][c];
      for (int k = c; k < 3; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (int c = 2; c >= 0; --c) {
    double v = b[c];
    for (int k = c + 1; k < 3; ++k) v -= a[c][k] * x[k];
    x[c] = v / a[c][c];
  }
  return true;
}
}  // namespace

void SpecCostModel::observe(int32_t real_tokens, int32_t draft_tokens, double ms) {
  constexpr double kDecay = 0.97;
  // A step that took far longer than predicted was most likely stalled by another process on a
  // shared machine: it counts, clipped, so one stall does not make drafts look expensive. The
  // bound prices each draft at least as an average token of the step (a drafted token is one more
  // row through the whole forward), so an underestimated draft price cannot clip away the very
  // steps that would correct it.
  if (ready_) {
    const double plain = std::max(1e-3, predict_ms(real_tokens, 0));
    const double per = std::max(per_draft_ms(), plain / std::max(1, real_tokens));
    ms = std::min(ms, 3.0 * (plain + per * draft_tokens));
  }
  const double x[3] = {1.0, static_cast<double>(real_tokens), static_cast<double>(draft_tokens)};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) xx_[i][j] = kDecay * xx_[i][j] + x[i] * x[j];
    xy_[i] = kDecay * xy_[i] + x[i] * ms;
  }
  const double n = xx_[0][0];
  const double var_d = xx_[2][2] / n - (xx_[2][0] / n) * (xx_[2][0] / n);
  // Ridge: a little pull of the slopes towards their current estimates (0 before the first fit)
  // keeps the fit defined while the batch size (real) or the drafts do not vary; a slope the
  // data support is barely moved, and one they no longer inform (a long run of steps without
  // drafts, once the plan stops drafting) keeps its last price instead of decaying to 0, which
  // would make drafts look free and start a burst of drafting that does not pay.
  double a[3][3], b[3], t[3];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) a[i][j] = xx_[i][j];
    b[i] = xy_[i];
  }
  constexpr double kRidge = 1e-3;
  for (int i = 1; i < 3; ++i) {
    a[i][i] += kRidge * n;
    b[i] += kRidge * n * theta_[i];
  }
  if (!solve3(a, b, t)) return;
  // Once priced, a negative slope is noise in the recent steps: the last estimates stand (a
  // price of 0 would make drafts look free and start a burst of drafting that does not pay).
  if (ready_ && (t[1] < 0 || t[2] < 0)) return;
  if (t[1] < 0 || t[2] < 0) {
    // A negative price is noise: refit with that slope at 0 (two unknowns left).
    const int drop = t[2] < 0 ? 2 : 1, keep = 3 - drop;
    const double det = a[0][0] * a[keep][keep] - a[0][keep] * a[keep][0];
    if (!(std::fabs(det) > 1e-12)) return;
    const double f = (b[0] * a[keep][keep] - a[0][keep] * b[keep]) / det;
    const double k = std::max(0.0, (a[0][0] * b[keep] - a[keep][0] * b[0]) / det);
    t[0] = f;
    t[keep] = k;
    t[drop] = 0;
  }
  if (var_d <= 0.1 && !ready_) return;       // drafts too alike (std < 0.3) to price one yet
  for (int i = 0; i < 3; ++i) theta_[i] = t[i];
  theta_[0] = std::max(0.0, theta_[0]);
  ready_ = true;
}

void spec_update(SpecAdaptState& st, int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  constexpr double kDecay = 0.9;
  st.accepted = kDecay * st.accepted + accepted;
  st.rejected = kDecay * st.rejected + (accepted < drafted ? 1 : 0);
}

SpecPlan spec_plan(const SpecStepCost& cost, std::span<const SpecCandidate> cands) {
  SpecPlan plan;
  plan.k.assign(cands.size(), 0);
  if (!(cost.plain_ms > 0) || cost.num_emitting <= 0) return plan;
  double e = cost.num_emitting, t = cost.plain_ms;
  plan.plain_tokens_per_ms = plan.tokens_per_ms = e / t;
  const double per = std::max(0.0, cost.per_draft_ms), pos = std::max(0.0, cost.draft_pos_ms);
  int32_t max_k = 0;
  for (const SpecCandidate& c : cands) max_k = std::max(max_k, c.max_k);
  // Depth by depth (a draft model runs one forward per depth for every sequence drafting that
  // deep): at depth j the sequences still drafting offer alpha^j each. The depth is opened with
  // the best of them, as many as raise the step's tokens per ms, and the rest stop there. Deeper
  // drafts are worth less, so the first depth that does not pay ends the plan.
  std::vector<size_t> live(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) live[i] = i;
  std::vector<double> value(cands.size(), 1.0);
  for (int32_t j = 1; j <= max_k && !live.empty(); ++j) {
    std::vector<size_t> offer;
    for (size_t i : live) {
      if (cands[i].max_k < j) continue;
      value[i] *= std::clamp(cands[i].alpha, 0.0, 1.0);
      offer.push_back(i);
    }
    auto price = [&](size_t i) { return per + (j == 1 ? std::max(0.0, cands[i].setup_ms) : 0.0); };
    std::stable_sort(offer.begin(), offer.end(),
                     [&](size_t a, size_t b) { return value[a] * price(b) > value[b] * price(a); });
    // Best prefix of the offer (best value per cost first): take drafts while each beats the
    // step's tokens per ms so far.
    double ee = e, tt = t + pos;
    size_t m = 0;
    while (m < offer.size() && value[offer[m]] * tt > ee * price(offer[m])) {
      ee += value[offer[m]];
      tt += price(offer[m]);
      ++m;
    }
    if (m == 0 || ee * t <= e * tt) break;  // this depth does not raise tokens per ms: stop
    e = ee;
    t = tt;
    live.clear();
    for (size_t r = 0; r < m; ++r) {
      plan.k[offer[r]] = j;
      live.push_back(offer[r]);
    }
  }
  plan.tokens_per_ms = e / t;
  if (plan.tokens_per_ms < cost.min_gain * plan.plain_tokens_per_ms) {
    std::fill(plan.k.begin(), plan.k.end(), 0);
    plan.tokens_per_ms = plan.plain_tokens_per_ms;
  }
  return plan;
}

bool spec_ceiling_pays(const SpecStepCost& cost, std::span<const SpecCandidate> cands) {
  std::vector<SpecCandidate> best(cands.begin(), cands.end());
  for (SpecCandidate& c : best) c.alpha = 1.0;
  const SpecPlan p = spec_plan(cost, best);
  return std::any_of(p.k.begin(), p.k.end(), [](int32_t k) { return k > 0; });
}

bool spec_probe_due(SpecAdaptState& st, bool planned) {
  if (planned) {
    st.idle_steps = 0;
    st.probe_interval = 8;
    return false;
  }
  if (++st.idle_steps < st.probe_interval) return false;
  st.idle_steps = 0;
  st.probe_interval = std::min(2 * st.probe_interval, 128);
  return true;
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
