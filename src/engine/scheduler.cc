#include "engine/scheduler.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/check.h"

namespace ts::engine {

void StepCostModel::observe(int32_t prefill_tokens, int32_t decode_seqs, std::chrono::duration<double> took) {
  const double t = std::max(0.0, took.count());
  if (prefill_tokens <= 0 && decode_seqs <= 0) return;
  auto ewma = [this](double& acc, double x) { acc = acc > 0.0 ? acc + alpha_ * (x - acc) : x; };
  ++num_observed_;
  if (prefill_tokens <= 0) {
    if (!decode_only_seen_ && per_decode_ > 0.0) per_decode_ = 0.0;  // drop the even-split guess
    decode_only_seen_ = true;
    ewma(per_decode_, t / decode_seqs);
    return;
  }
  if (!decode_only_seen_) {
    // No decode-only step yet: split the time evenly over the step's tokens.
    const double each = t / static_cast<double>(prefill_tokens + decode_seqs);
    ewma(per_token_, each);
    if (decode_seqs > 0) ewma(per_decode_, each);
    return;
  }
  const double rest = std::max(0.0, t - decode_seqs * per_decode_);
  // A floor keeps a noisy step (decodes slower than usual) from teaching a prefill cost of 0.
  ewma(per_token_, std::max(rest / prefill_tokens, 1e-3 * per_decode_));
}

void SchedulerOutput::shape(int32_t* prefill_tokens, int32_t* decode_seqs) const {
  *prefill_tokens = 0;
  *decode_seqs = 0;
  for (const ScheduledSeq& s : scheduled) {
    if (s.num_tokens == 1) ++*decode_seqs;
    else *prefill_tokens += s.num_tokens;
  }
}

Scheduler::Scheduler(SchedulerOptions opts, KvCacheManager& kv)
    : opts_(opts), kv_(kv), cost_(opts.cost_ewma_alpha) {
  TS_CHECK(opts_.max_seqs > 0 && opts_.max_batch_tokens > 0, "scheduler limits must be positive");
}

void Scheduler::add(Sequence* seq) {
  TS_CHECK(seq->block_table.empty() && seq->num_computed_tokens == 0,
           "a waiting sequence must not hold blocks");
  seq->status = SeqStatus::kWaiting;
  waiting_[static_cast<int>(seq->tier)].push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  if (it != running_.end()) running_.erase(it);
  auto& q = waiting_[static_cast<int>(seq->tier)];
  auto wit = std::find(q.begin(), q.end(), seq);
  if (wit != q.end()) q.erase(wit);
  kv_.free(*seq);
  seq->status = SeqStatus::kFinished;
}

int32_t Scheduler::num_running(Tier t) const {
  return static_cast<int32_t>(
      std::count_if(running_.begin(), running_.end(), [t](const Sequence* s) { return s->tier == t; }));
}

bool Scheduler::has_work() const {
  if (!running_.empty()) return true;
  for (const auto& q : waiting_) {
    if (!q.empty()) return true;
  }
  return false;
}

int32_t Scheduler::tier_blocks(Tier t) const {
  int32_t n = 0;
  for (const Sequence* s : running_) {
    if (s->tier == t) n += kv_.num_held_blocks(*s);
  }
  return n;
}

void Scheduler::insert_running(Sequence* seq) {
  auto before = [](const Sequence* a, const Sequence* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->admit_order < b->admit_order;
  };
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, before), seq);
}

void Scheduler::preempt(Sequence* victim, SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.scheduled) {
    TS_CHECK(s.seq != victim, "preempting a sequence already scheduled this step");
  }
  auto it = std::find(running_.begin(), running_.end(), victim);
  TS_CHECK(it != running_.end(), "preempting a sequence that is not running");
  running_.erase(it);
  kv_.free(*victim);
  victim->status = SeqStatus::kWaiting;
  ++victim->num_preemptions;
  waiting_[static_cast<int>(victim->tier)].push_front(victim);
  out.preempted.push_back(victim);
}

bool Scheduler::decode_over_cap(const SchedulerOutput& out, double cap_seconds) const {
  if (!cost_.ready()) return false;
  int32_t prefill = 0, decodes = 0;
  out.shape(&prefill, &decodes);
  return cost_.predict(prefill, decodes + 1) > cap_seconds;
}

int32_t Scheduler::prefill_allowance(const SchedulerOutput& out, double cap_seconds,
                                     int32_t lower_prefill_used, bool protect_busy) const {
  if (cap_seconds <= 0.0) return INT32_MAX;
  if (!cost_.ready()) {
    // Nothing measured yet (the first steps after start): a probe-sized chunk, not a step of
    // unknown length while a latency target is at stake.
    return std::max(0, opts_.cold_start_prefill_tokens - lower_prefill_used);
  }
  int32_t prefill = 0, decodes = 0;
  out.shape(&prefill, &decodes);
  const double left = cap_seconds - cost_.predict(prefill, decodes);
  const double per = cost_.per_prefill_token();
  int64_t n = left > 0.0 && per > 0.0 ? static_cast<int64_t>(std::floor(left / per)) : 0;
  // The floor against starvation holds only while the protecting tier has nobody waiting and
  // admits nobody: waiting higher-tier requests leave nothing over, as for admission.
  if (!protect_busy) n = std::max<int64_t>(n, opts_.min_lower_prefill_tokens - lower_prefill_used);
  return static_cast<int32_t>(std::clamp<int64_t>(n, 0, INT32_MAX));
}

bool Scheduler::paced(const Pacing& pc, const SchedulerOutput& out, Tier t, int32_t n, int32_t remaining,
                       int32_t behind) const {
  const int32_t k = pc.completing[static_cast<int>(t)];
  if (!opts_.first_token_pacing || k == 0) return false;
  if (n < remaining) return true;  // a partial chunk: only delays the k first tokens
  if (!cost_.ready()) return false;
  int32_t decodes_next = 0;  // every sequence sampling in this step decodes in the next
  for (const ScheduledSeq& s : out.scheduled) decodes_next += s.wants_logits ? 1 : 0;
  const double join = static_cast<double>(k) * n * cost_.per_prefill_token();
  const double wait = static_cast<double>(1 + behind) * std::max(1, decodes_next) * cost_.per_decode();
  return join > wait;
}

bool Scheduler::try_admit(Sequence* seq, int32_t& budget, int32_t max_tokens, SchedulerOutput& out, Pacing& pc,
                          int32_t behind) {
  const Tier t = seq->tier;
  const TierOptions& to = opts_.tiers[static_cast<int>(t)];
  if (max_tokens <= 0) return false;
  if (num_running(t) >= to.max_running) return false;
  if (static_cast<int32_t>(running_.size()) >= opts_.max_seqs) {
    // Pacing decided before preempting anyone for the seat, on the whole uncached prompt: a
    // prompt it lets in here is let in below too (a cached prefix only shortens the chunk).
    const int32_t uncached = seq->num_tokens() - seq->num_computed_tokens;
    if (paced(pc, out, t, std::min({uncached, budget, max_tokens}), uncached, behind)) return false;
  }
  while (static_cast<int32_t>(running_.size()) >= opts_.max_seqs) {
    Sequence* victim = pick_victim(seq->priority - 1);
    if (victim == nullptr) return false;
    preempt(victim, out);
  }
  const int32_t cached = kv_.acquire_cached_prefix(*seq);
  const int32_t remaining = seq->num_tokens() - seq->num_computed_tokens;
  const int32_t n = std::min({remaining, budget, max_tokens});
  TS_CHECK(n > 0, "admitting a sequence with nothing to compute");
  if (paced(pc, out, t, n, remaining, behind)) {
    kv_.free(*seq);
    seq->num_cached_tokens = 0;
    return false;
  }
  const int32_t total = kv_.pool().num_blocks();
  const int32_t limit = std::max<int32_t>(1, static_cast<int32_t>(std::floor(to.kv_share * total)));
  const int32_t held = tier_blocks(t);
  if (held > 0 && held + kv_.num_held_blocks(*seq) + kv_.num_blocks_needed(*seq, n) > limit) {
    kv_.free(*seq);
    seq->num_cached_tokens = 0;
    return false;
  }
  while (!kv_.allocate_slots(*seq, n)) {
    Sequence* victim = pick_victim(seq->priority - 1);
    if (victim == nullptr) {
      kv_.free(*seq);
      seq->num_cached_tokens = 0;
      return false;
    }
    preempt(victim, out);
  }
  auto& q = waiting_[static_cast<int>(t)];
  TS_CHECK(!q.empty() && q.front() == seq, "admitting a sequence that is not first in line");
  q.pop_front();
  seq->status = SeqStatus::kRunning;
  seq->last_scheduled_step = step_;
  seq->admit_order = next_admit_order_++;
  ++seq->num_admissions;
  insert_running(seq);
  out.admitted.push_back(seq);
  out.num_prefix_query_tokens += seq->num_tokens();
  out.num_prefix_hit_tokens += cached;
  out.scheduled.push_back({seq, n, seq->num_computed_tokens + n == seq->num_tokens()});
  out.num_tokens += n;
  budget -= n;
  if (n == remaining) ++pc.completing[static_cast<int>(t)];
  return true;
}

Sequence* Scheduler::pick_victim(int32_t max_priority) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if ((*it)->last_scheduled_step != step_ && (*it)->priority <= max_priority) return *it;
  }
  return nullptr;
}

SchedulerOutput Scheduler::schedule(TimePoint now) {
  ++step_;
  SchedulerOutput out;
  int32_t budget = opts_.max_batch_tokens;

  int order[kNumTiers];
  for (int i = 0; i < kNumTiers; ++i) order[i] = i;
  std::stable_sort(order, order + kNumTiers, [this](int a, int b) {
    return opts_.tiers[a].priority > opts_.tiers[b].priority;
  });

  int gate_priority = INT_MIN;  // tiers below this priority admit nothing this step
  // Latency cut: set by a tier with a target, applies to the tiers after it (lower priority).
  double cap = 0.0;
  int32_t cap_priority = INT_MIN;    // the protecting tier's priority
  int32_t lower_prefill = 0;         // prefill tokens given to cut tiers this step
  bool protect_waiting = false;      // the protecting tier still has requests waiting
  bool protect_admitted = false;     // it admitted a request this step (a first-token step)
  Pacing pacing;
  for (int ti : order) {
    const Tier tier = static_cast<Tier>(ti);
    const TierOptions& to = opts_.tiers[ti];
    const bool cut = cap > 0.0 && to.priority < cap_priority;
    if (cut) out.step_cap_seconds = cap;

    // 1. Running sequences of this tier: decodes first (a long prefill never stalls them),
    //    then prefill chunks; oldest admission first within each.
    std::vector<Sequence*> cands;
    for (Sequence* s : running_) {
      if (s->tier == tier) cands.push_back(s);
    }
    // Tokens a sequence still has to compute besides its draft: 1 for a decode, more for a prompt.
    auto to_compute = [](const Sequence* s) { return s->num_tokens() - s->num_draft_tokens - s->num_computed_tokens; };
    auto is_prompt = [&](const Sequence* s) { return to_compute(s) > 1; };
    std::stable_partition(cands.begin(), cands.end(), [&](const Sequence* s) { return to_compute(s) == 1; });
    auto& q = waiting_[ti];
    // Running prompts not yet considered this step (first-token pacing's "behind").
    int32_t prompts_left = static_cast<int32_t>(std::count_if(cands.begin(), cands.end(), is_prompt));
    for (Sequence* s : cands) {
      const bool prompt = is_prompt(s);
      if (prompt) --prompts_left;
      if (budget == 0) break;
      if (s->status != SeqStatus::kRunning) continue;  // preempted earlier in this step
      const int32_t remaining = s->num_tokens() - s->num_computed_tokens;
      int32_t n = std::min(remaining, budget);
      const bool prefill_chunk = n > 1;
      if (cut && prefill_chunk) n = std::min(n, prefill_allowance(out, cap, lower_prefill, protect_waiting || protect_admitted));
      if (cut && !prefill_chunk && protect_admitted && decode_over_cap(out, cap)) continue;
      if (n <= 0) continue;
      if (prompt && paced(pacing, out, tier, n, remaining, prompts_left + static_cast<int32_t>(q.size()))) continue;
      bool ok = true;
      while (!kv_.allocate_slots(*s, n)) {
        Sequence* victim = pick_victim(s->priority);
        if (victim == nullptr) victim = s;
        preempt(victim, out);
        if (victim == s) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      s->last_scheduled_step = step_;
      out.scheduled.push_back({s, n, s->num_computed_tokens + n == s->num_tokens()});
      out.num_tokens += n;
      budget -= n;
      if (cut && prefill_chunk) lower_prefill += n;
      if (prompt && n == remaining) ++pacing.completing[ti];
    }

    // 2. Admission, unless this tier (or a higher one) just lost sequences to preemption or a
    //    higher tier has a request waiting past its latency target.
    bool skip = to.priority < gate_priority;
    for (const Sequence* p : out.preempted) {
      if (p->priority >= to.priority) skip = true;
    }
    if (!skip) {
      while (!q.empty() && budget > 0) {
        const int32_t before = out.num_tokens;
        const int32_t cap_tokens = cut ? prefill_allowance(out, cap, lower_prefill, protect_waiting || protect_admitted) : INT32_MAX;
        if (!try_admit(q.front(), budget, cap_tokens, out, pacing, static_cast<int32_t>(q.size()) - 1)) break;
        if (cut) lower_prefill += out.num_tokens - before;
      }
    }
    if (!q.empty() && to.latency_target.count() > 0 && now - q.front()->arrival > to.latency_target) {
      gate_priority = std::max(gate_priority, to.priority);
    }
    if (to.latency_target.count() > 0) {
      // This tier protects the ones below it from long steps.
      bool active = !q.empty();
      for (const Sequence* r : running_) active = active || r->tier == tier;
      const float frac = active ? opts_.step_latency_fraction : opts_.idle_step_latency_fraction;
      const double c = frac * std::chrono::duration<double>(to.latency_target).count();
      if (c > 0.0 && (cap == 0.0 || c < cap)) {
        cap = c;
        cap_priority = std::max(cap_priority, to.priority);
      }
      if (c > 0.0) {
        protect_waiting = protect_waiting || !q.empty();
        for (const Sequence* a : out.admitted) protect_admitted = protect_admitted || a->tier == tier;
      }
    }
  }
  return out;
}

}  // namespace ts::engine
