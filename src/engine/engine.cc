#include "engine/engine.h"

#include "engine/engine_impl.h"

#include <atomic>

#include "core/log.h"
#include "core/thread_sched.h"

namespace ts::engine {

const char* tier_name(Tier t) { return t == Tier::kBatch ? "batch" : "interactive"; }

Result<Tier> parse_tier(std::string_view name) {
  if (name == "interactive") return Tier::kInteractive;
  if (name == "batch") return Tier::kBatch;
  return invalid_argument("unknown tier '" + std::string(name) + "' (interactive or batch)");
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "";
}

// ---------------------------------------------------------------- RequestHandle

RequestHandle::RequestHandle(std::string id, int32_t n, std::shared_ptr<detail::HandleState> state)
    : id_(std::move(id)), n_(n), state_(std::move(state)) {}

std::optional<Event> RequestHandle::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(state_->mu);
  if (!state_->cv.wait_for(l, timeout, [&] { return !state_->events.empty() || state_->done_taken; })) {
    return std::nullopt;
  }
  if (state_->events.empty()) return std::nullopt;
  Event ev = std::move(state_->events.front());
  state_->events.pop_front();
  if (ev.request_done) state_->done_taken = true;
  return ev;
}

std::vector<Event> RequestHandle::wait_all() {
  std::vector<Event> all;
  for (;;) {
    auto ev = next(std::chrono::hours(1));
    if (!ev) break;
    const bool last = ev->request_done;
    all.push_back(std::move(*ev));
    if (last) break;
  }
  return all;
}

void RequestHandle::cancel() {
  state_->cancel_requested.store(true);
  if (state_->waker) state_->waker->notify();
  std::shared_ptr<detail::Waker> l;
  {
    std::lock_guard<std::mutex> g(state_->mu);
    l = state_->listener;
  }
  if (l) l->notify();
}

void RequestHandle::set_listener(std::shared_ptr<detail::Waker> listener) {
  bool ready = false;
  {
    std::lock_guard<std::mutex> g(state_->mu);
    state_->listener = listener;
    ready = !state_->events.empty();
  }
  if (ready && listener) listener->notify();
}

bool RequestHandle::done() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->done;
}

// ---------------------------------------------------------------- Engine internals


Engine::Engine(model::Model& model, EngineOptions opts) : model_(model), opts_(std::move(opts)) {}

Result<std::unique_ptr<Engine>> Engine::create(model::Model& model, EngineOptions opts) {
  const auto& cfg = model.config();
  if (opts.block_size <= 0 || opts.max_seqs <= 0 || opts.max_batch_tokens <= 0) {
    return invalid_argument("block_size, max_seqs and max_batch_tokens must be positive");
  }
  for (const TierOptions* t : {&opts.interactive, &opts.batch}) {
    if (!(t->kv_share > 0.0f && t->kv_share <= 1.0f) || t->max_running <= 0 || t->max_queued <= 0) {
      return invalid_argument("tier limits: kv_share must be in (0, 1], max_running and max_queued positive");
    }
  }
  // Sliding-window layers keep only their window (KvLayout::windowed; one group, today's
  // layout, for models without them) unless the full-storage reference layout is asked for.
  model::KvLayout layout = opts.kv_window_only ? model::KvLayout::windowed(cfg) : model::KvLayout::full(cfg);
  const model::KvFootprint footprint = model::kv_footprint(layout, cfg, opts.kv_type, opts.block_size);
  int32_t num_blocks = opts.num_kv_blocks;
  if (num_blocks <= 0) {
    num_blocks = model::KvStorage::blocks_for_budget(cfg, opts.kv_type, opts.block_size, opts.kv_cache_bytes, layout);
    // --speculative draft: the draft model's KV (spec_draft_blocks beside the target's pool)
    // counts within the same budget.
    if (opts.spec.mode == SpecMode::kDraft && opts.spec.draft_model != nullptr) {
      num_blocks = spec_budget_blocks(model::KvStorage::bytes_per_block(cfg, opts.kv_type, opts.block_size, layout),
                                      std::max(1, footprint.num_full_groups),
                                      model::KvStorage::bytes_per_block(opts.spec.draft_model->config(), opts.kv_type,
                                                                        opts.block_size),
                                      opts.kv_cache_bytes);
    }
  }
  if (num_blocks <= 0) {
    return resource_exhausted("KV cache budget of " + std::to_string(opts.kv_cache_bytes) +
                              " bytes holds no block of " + std::to_string(opts.block_size) + " tokens");
  }
  TS_RETURN_IF_ERROR(validate_spec_options(opts.spec, model));
  const int32_t num_groups = layout.num_groups();
  TS_ASSIGN_OR_RETURN(auto storage,
                      model::KvStorage::create(cfg, opts.kv_type, opts.block_size, num_blocks, std::move(layout)));

  std::unique_ptr<Engine> e(new Engine(model, opts));
  e->max_model_len_ = cfg.n_ctx_train > 0 ? cfg.n_ctx_train : (1 << 20);
  if (opts.max_model_len > 0) e->max_model_len_ = std::min(e->max_model_len_, opts.max_model_len);
  // One sequence must always fit the pool alone: then admission never reserves up front (blocks
  // are allocated as a sequence grows) and a shortage is solved by preemption, never refusal.
  // With sliding-window groups a sequence's blocks grow only in the full-attention groups (a
  // prefill chunk of up to max_batch_tokens holds its window too while it runs).
  const int64_t pool_tokens = footprint.max_tokens_for_blocks(num_blocks, opts.max_batch_tokens);
  if (e->max_model_len_ > pool_tokens) {
    log::info("engine: max_model_len capped from " + std::to_string(e->max_model_len_) + " to " +
              std::to_string(pool_tokens) + " tokens: the KV cache (" + std::to_string(num_blocks) +
              " blocks of " + std::to_string(opts.block_size) +
              (num_groups > 1 ? " tokens shared by " + std::to_string(num_groups) + " KV groups" : std::string(" tokens")) +
              ") holds no longer sequence; raise --kv-cache-memory for the full context");
    e->max_model_len_ = static_cast<int32_t>(pool_tokens);
    e->kv_capped_ = true;
  }
  SchedulerOptions so;
  so.max_seqs = opts.max_seqs;
  so.max_batch_tokens = opts.max_batch_tokens;
  so.tiers[static_cast<int>(Tier::kInteractive)] = opts.interactive;
  so.tiers[static_cast<int>(Tier::kBatch)] = opts.batch;
  so.step_latency_fraction = std::max(0.0f, opts.step_latency_fraction);
  so.idle_step_latency_fraction = so.step_latency_fraction;
  so.first_token_pacing = opts.first_token_pacing;
  e->impl_ = std::make_unique<Impl>(opts.num_threads, std::move(storage), num_blocks, opts, so, cfg.n_vocab);
  auto& im = *e->impl_;
  im.model = &model;
  im.opts = opts;
  im.max_model_len = e->max_model_len_;
  im.logits.resize(static_cast<size_t>(opts.max_seqs) * cfg.n_vocab);
  // The model's activation buffers for a full step now, not on the first long prompt.
  model.reserve(opts.max_batch_tokens);
  if (opts.spec.mode == SpecMode::kDraft) {
    // As many blocks as the target's pool, so drafting never runs short before the target does;
    // sized from a budget, the pair fits it (spec_budget_blocks); with an exact num_kv_blocks
    // (tests) the draft's blocks come on top. With window-only KV the target's tokens are
    // bounded by its full-attention groups' blocks, so the draft needs fewer blocks.
    const int32_t draft_blocks = spec_draft_blocks(num_blocks, std::max(1, footprint.num_full_groups));
    TS_ASSIGN_OR_RETURN(im.draft, DraftRunner::create(*opts.spec.draft_model, opts.kv_type, opts.block_size, draft_blocks));
    log::info("engine: draft model KV " + std::to_string(im.draft->kv_bytes() >> 20) + " MiB (" +
              std::to_string(draft_blocks) + " blocks, " +
              (opts.num_kv_blocks > 0 ? "on top of the exact block count)" : "within the KV budget)"));
  }
  im.seed_state = opts.seed != 0 ? opts.seed : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  im.stats.kv_blocks_total = num_blocks;
  im.stats.block_size = opts.block_size;
  log::info("engine: " + std::to_string(num_blocks) + " KV blocks of " + std::to_string(opts.block_size) +
            " tokens (" + model::kv_type_name(opts.kv_type) + ", " +
            std::to_string(im.kv.total_bytes() >> 20) + " MiB" +
            (num_groups > 1 ? "; " + std::to_string(num_groups) + " KV groups of " +
                                  std::to_string(im.kv.layout().layers_per_group) + " layers, a sliding-window group holds at most " +
                                  std::to_string(footprint.swa_blocks_cap()) + " blocks of its window; " +
                                  std::to_string(footprint.full_bytes_per_token()) + " B/token + " +
                                  std::to_string(footprint.swa_bytes_cap()) +
                                  " B window per sequence"
                              : std::string()) +
            "), max_seqs " + std::to_string(opts.max_seqs) +
            ", max_batch_tokens " + std::to_string(opts.max_batch_tokens) + ", max_model_len " +
            std::to_string(e->max_model_len_));
  if (opts.start_thread) e->thread_ = std::thread([eng = e.get()] { eng->loop(); });
  return e;
}

Engine::~Engine() {
  if (impl_ == nullptr) return;
  impl_->accepting = false;
  impl_->stopping = true;
  impl_->waker->notify();
  if (thread_.joinable()) thread_.join();
  // Everything still queued or running ends as cancelled.
  auto& im = *impl_;
  {
    std::lock_guard<std::mutex> l(im.in_mu);
    for (auto& r : im.inbox) im.active.push_back(std::move(r));
    im.inbox.clear();
  }
  for (auto& r : im.active) {
    if (r->seqs.empty()) {  // never taken by the loop: end every choice here
      const int32_t n = r->req.sampling.n;
      r->timings.finished = Clock::now();
      for (int32_t i = 0; i < n; ++i) {
        Event ev;
        ev.index = i;
        ev.finish = FinishReason::kCancelled;
        ev.request_done = i + 1 == n;
        push_event(*r, std::move(ev));
      }
      continue;
    }
    for (auto& s : r->seqs) {
      if (s->finished) continue;
      s->finished = true;
      if (s->in_scheduler) im.sched.remove(&s->seq);
      ++r->num_finished;
      r->timings.finished = Clock::now();
      Event ev;
      ev.index = s->index;
      ev.finish = FinishReason::kCancelled;
      ev.request_done = r->num_finished == static_cast<int32_t>(r->seqs.size());
      push_event(*r, std::move(ev));
    }
  }
}

void Engine::stop_accepting() { impl_->accepting = false; }

bool Engine::idle() const { return impl_->num_active.load() == 0; }

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> l(impl_->stats_mu);
  return impl_->stats;
}

Result<std::shared_ptr<RequestHandle>> Engine::submit(Request req) {
  auto& im = *impl_;
  const auto& cfg = model_.config();
  const SamplingParams& p = req.sampling;
  if (!im.accepting) return unavailable("engine is not accepting requests (shutting down)");
  if (req.prompt_tokens.empty()) return invalid_argument("prompt is empty");
  for (int32_t t : req.prompt_tokens) {
    if (t < 0 || t >= cfg.n_vocab) {
      return invalid_argument("prompt token id " + std::to_string(t) + " out of range [0, " +
                              std::to_string(cfg.n_vocab) + ")");
    }
  }
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return invalid_argument("temperature must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return invalid_argument("top_p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return invalid_argument("min_p must be in [0, 1]");
  if (!(p.repetition_penalty > 0.0f)) return invalid_argument("repetition_penalty must be > 0");
  if (!std::isfinite(p.frequency_penalty) || !std::isfinite(p.presence_penalty)) {
    return invalid_argument("penalties must be finite");
  }
  if (p.max_tokens < 1) return invalid_argument("max_tokens must be >= 1");
  if (p.n < 1 || p.n > 128) return invalid_argument("n must be in [1, 128]");
  if (p.top_logprobs < 0 || p.top_logprobs > 20) return invalid_argument("top_logprobs must be in [0, 20]");
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= cfg.n_vocab) return invalid_argument("logit_bias token id " + std::to_string(id) + " out of range");
    if (!std::isfinite(bias)) return invalid_argument("logit_bias values must be finite");
  }
  if (req.constraint && req.constraint->index().n_vocab() != cfg.n_vocab) {
    return invalid_argument("the constraint was built for a vocabulary of " +
                            std::to_string(req.constraint->index().n_vocab()) + " tokens, the model has " +
                            std::to_string(cfg.n_vocab));
  }
  const int64_t prompt_len = static_cast<int64_t>(req.prompt_tokens.size());
  // max_model_len never exceeds what the KV pool holds for one sequence (see create()), so this
  // is the only size check: nothing is reserved here, blocks come as the sequence grows.
  if (prompt_len + p.max_tokens > max_model_len_) {
    const int64_t room = max_model_len_ - prompt_len;
    return invalid_argument(
        "prompt (" + std::to_string(prompt_len) + " tokens) + max_tokens (" + std::to_string(p.max_tokens) +
        ") exceeds the context length (" + std::to_string(max_model_len_) + " tokens" +
        (kv_capped_ ? ", capped by the KV cache size" : "") + "); " +
        (room >= 1 ? "max_tokens can be at most " + std::to_string(room) + " for this prompt"
                   : "at most " + std::to_string(max_model_len_ - 1) + " prompt tokens fit"));
  }
  const int ti = static_cast<int>(req.tier);
  const TierOptions& to = ti == 0 ? opts_.interactive : opts_.batch;
  if (im.queued[ti].fetch_add(1) >= to.max_queued) {
    im.queued[ti].fetch_sub(1);
    return unavailable(std::string("the ") + tier_name(req.tier) + " queue is full (" +
                       std::to_string(to.max_queued) + " waiting requests)");
  }

  auto r = std::make_unique<ReqState>();
  r->handle = std::make_shared<detail::HandleState>();
  r->handle->waker = im.waker;
  r->timings.arrival = Clock::now();
  r->usage.prompt_tokens = prompt_len;
  auto handle = std::make_shared<RequestHandle>(req.id, p.n, r->handle);
  r->req = std::move(req);
  im.num_active.fetch_add(1);
  {
    std::lock_guard<std::mutex> l(im.in_mu);
    im.inbox.push_back(std::move(r));
  }
  im.waker->notify();
  return handle;
}

void Engine::loop() {
  auto& im = *impl_;
  set_current_thread_name("ts-engine");
  if (im.opts.compute_sched_batch) {
    // run() calls this on every pool thread, the loop thread being index 0.
    std::atomic<int> failed{0};
    im.pool.run([&](int, int) {
      if (!set_current_thread_batch().ok()) failed.fetch_add(1);
    });
    if (failed.load() > 0) log::debug("engine compute threads keep the default scheduling policy");
  }
  while (!im.stopping) {
    bool busy = false;
    try {
      busy = step();
    } catch (const std::exception& e) {
      // Containment of last resort: the step's requests end with an error, the engine goes on.
      im.fail_all(std::string("engine step failed: ") + e.what());
      continue;
    }
    if (busy) continue;
    std::unique_lock<std::mutex> l(im.waker->mu);
    im.waker->cv.wait_for(l, std::chrono::milliseconds(50),
                          [&] { return im.waker->pending || im.stopping.load(); });
    im.waker->pending = false;
  }
}

bool Engine::step() { return impl_->step(); }

void Engine::Impl::take_inbox(TimePoint now) {
  std::vector<std::unique_ptr<ReqState>> fresh;
  {
    std::lock_guard<std::mutex> l(in_mu);
    fresh.swap(inbox);
  }
  const auto& tok = model->tokenizer();
  for (auto& r : fresh) {
    const SamplingParams& p = r->req.sampling;
    const int ti = static_cast<int>(r->req.tier);
    const int64_t order = next_request_order++;
    for (int32_t i = 0; i < p.n; ++i) {
      auto s = std::make_unique<SeqState>();
      s->req = r.get();
      s->index = i;
      Sequence& q = s->seq;
      q.id = next_seq_id++;
      q.request_order = order;
      q.tier = r->req.tier;
      q.priority = (ti == 0 ? opts.interactive : opts.batch).priority;
      q.cache_namespace = r->req.cache_namespace;
      q.tokens = r->req.prompt_tokens;
      // max_tokens may be the whole context (the default): reserve a modest tail only.
      q.tokens.reserve(r->req.prompt_tokens.size() + static_cast<size_t>(std::min(p.max_tokens, 1024)));
      q.num_prompt_tokens = static_cast<int32_t>(r->req.prompt_tokens.size());
      q.arrival = r->timings.arrival;
      const uint64_t base = p.seed ? *p.seed : (seed_state = seed_state * 6364136223846793005ull + 1442695040888963407ull);
      s->rng = Rng(choice_seed(base, i));
      s->decoder = std::make_unique<tokenizer::StreamDecoder>(tok);
      s->stop = std::make_unique<StopMatcher>(p.stop);
      if (r->req.constraint) s->constraint = std::make_unique<structured::ConstraintState>(r->req.constraint);
      by_seq[&s->seq] = s.get();
      r->seqs.push_back(std::move(s));
    }
    // Choice 0 computes the prompt; the others join once it is in KV (sharing its blocks).
    r->seqs[0]->in_scheduler = true;
    sched.add(&r->seqs[0]->seq);
    active.push_back(std::move(r));
  }
  (void)now;
}

void Engine::Impl::finish_seq(SeqState& s, FinishReason reason, Status error, std::string text,
                              std::vector<int32_t> ids, std::vector<LogprobEntry> lps) {
  ReqState& r = *s.req;
  s.finished = true;
  if (s.in_scheduler) sched.remove(&s.seq);
  s.in_scheduler = false;
  if (draft) draft->forget(s.seq.id);
  ++r.num_finished;
  Event ev;
  ev.index = s.index;
  ev.text = std::move(text);
  ev.token_ids = std::move(ids);
  ev.logprobs = std::move(lps);
  ev.finish = reason;
  ev.error = std::move(error);
  if (r.num_finished == static_cast<int32_t>(r.seqs.size())) {
    r.done = true;
    r.timings.finished = Clock::now();
    ev.request_done = true;
    {
      std::lock_guard<std::mutex> l(stats_mu);
      ++stats.requests_finished;
    }
    if (r.counted_queued) {
      queued[static_cast<int>(r.req.tier)].fetch_sub(1);
      r.counted_queued = false;
    }
  }
  push_event(r, std::move(ev));
}

void Engine::Impl::check_cancellations(TimePoint now) {
  for (auto& r : active) {
    if (r->done) continue;
    const bool cancelled = r->handle->cancel_requested.load();
    const bool expired = !cancelled && r->req.deadline && now > *r->req.deadline;
    if (!cancelled && !expired) continue;
    for (auto& s : r->seqs) {
      if (s->finished) continue;
      if (cancelled) {
        finish_seq(*s, FinishReason::kCancelled, Status(), {}, {}, {});
      } else {
        finish_seq(*s, FinishReason::kError, Status(StatusCode::kDeadlineExceeded, "request deadline passed"),
                   {}, {}, {});
      }
    }
  }
}

void Engine::Impl::on_logits(SeqState& s, const float* row, TimePoint now) {
  ReqState& r = *s.req;
  const SamplingParams& p = r.req.sampling;
  const auto& tok = model->tokenizer();
  Sequence& q = s.seq;
  const int32_t V = model->config().n_vocab;
  LogprobEntry lp;
  std::span<const int32_t> prompt(q.tokens.data(), static_cast<size_t>(q.num_prompt_tokens));
  std::span<const int32_t> output(q.tokens.data() + q.num_prompt_tokens, static_cast<size_t>(q.num_output_tokens()));
  std::span<const uint64_t> allowed;
  if (s.constraint) {
    allowed = s.constraint->mask();
    if (std::all_of(allowed.begin(), allowed.end(), [](uint64_t w) { return w == 0; })) {
      // No token of this vocabulary can continue the constrained text: end with what we have.
      finish_seq(s, FinishReason::kLength, Status(), s.stop->push(s.decoder->finish()) + s.stop->flush(), {}, {});
      return;
    }
  }
  int32_t token = -1;
  if (current_pre != nullptr) {
    token = current_pre->token;
    lp = std::move(current_pre->lp);
  } else {
    token = sampler.sample(std::span<const float>(row, static_cast<size_t>(V)), p, prompt, output, s.rng,
                           p.logprobs ? &lp : nullptr, allowed);
  }
  if (s.constraint) {
    if (Status st = s.constraint->accept(token); !st.ok()) {
      log::error("engine: constrained sampling produced a refused token: " + st.to_string());
      finish_seq(s, FinishReason::kError, Status(StatusCode::kInternal, st.message()), {}, {}, {});
      return;
    }
  }
  q.tokens.push_back(token);
  ++r.usage.completion_tokens;
  if (r.timings.first_token == TimePoint{}) r.timings.first_token = now;

  std::vector<int32_t> ids{token};
  std::vector<LogprobEntry> lps;
  if (p.logprobs) lps.push_back(std::move(lp));
  std::string text;
  FinishReason reason = FinishReason::kNone;
  // Under a constraint EOG is only sampled once the text is complete, and then it ends the choice.
  const bool eog = (!p.ignore_eos || s.constraint) && tok.is_eog(token);
  const bool stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  if (eog || stop_id) {
    reason = FinishReason::kStop;
  } else {
    if (!tok.is_control(token)) text = s.stop->push(s.decoder->push(token));
    if (s.stop->stopped() || (s.constraint && s.constraint->is_complete())) {
      reason = FinishReason::kStop;
    } else if (q.num_output_tokens() >= p.max_tokens || q.num_tokens() >= max_model_len) {
      reason = FinishReason::kLength;
    }
  }
  if (reason == FinishReason::kNone) {
    Event ev;
    ev.index = s.index;
    ev.text = std::move(text);
    ev.token_ids = std::move(ids);
    ev.logprobs = std::move(lps);
    push_event(r, std::move(ev));
    return;
  }
  if (!s.stop->stopped()) {
    // Flush what the decoder and the stop matcher hold; a stop string may still complete.
    text += s.stop->push(s.decoder->finish());
    if (s.stop->stopped()) reason = FinishReason::kStop;
    text += s.stop->flush();
  }
  finish_seq(s, reason, Status(), std::move(text), std::move(ids), std::move(lps));
}

// A fault while processing one sequence (an exception from sampling or detokenization, or
// non-finite logits) ends that sequence with an error; the rest of the batch goes on.
void Engine::Impl::sample_guarded(SeqState& s, const float* row, int32_t V, TimePoint now) {
  const Fault fault = injected_fault(s.req->req);
  std::vector<float> poisoned;
  try {
    if (fault == Fault::kAllocFailure) throw std::bad_alloc();
    if (fault == Fault::kTokenizerError) throw std::runtime_error("injected tokenizer error");
    if (fault == Fault::kNanLogits) {
      poisoned.assign(row, row + V);
      poisoned[static_cast<size_t>(V) / 2] = std::nanf("");
      row = poisoned.data();
    }
    // Presampled rows were checked; otherwise a vectorized scan first, the index only for the log.
    const bool finite = current_pre != nullptr || all_finite(row, static_cast<size_t>(V));
    for (int32_t i = finite ? V : 0; i < V; ++i) {
      if (!std::isfinite(row[i])) {
        log::error("engine: request " + s.req->req.id + ": non-finite logits (token " + std::to_string(i) +
                   "); ending the request");
        finish_seq(s, FinishReason::kError,
                   internal_error("the model produced non-finite logits for this request"), {}, {}, {});
        return;
      }
    }
    on_logits(s, row, now);
  } catch (const std::exception& e) {
    log::error("engine: request " + s.req->req.id + " failed: " + e.what() + "; ending the request");
    if (!s.finished)
      finish_seq(s, FinishReason::kError,
                 internal_error(std::string("internal error while processing the request: ") + e.what()), {}, {},
                 {});
  }
}

void Engine::Impl::presample(const SchedulerOutput& out, int32_t V) {
  presampled.clear();
  if (pool.num_threads() < 2) return;
  std::vector<SampleRow> rows;
  std::vector<size_t> at;  // logits row of each entry of rows
  size_t row = 0;
  for (const ScheduledSeq& sc : out.scheduled) {
    SeqState& s = *by_seq.at(sc.seq);
    if (s.seq.num_draft_tokens > 0) {
      // A drafting sequence has a row per scheduled position and is sampled by verify_drafts
      // alone (its generator must not be drawn here).
      row += static_cast<size_t>(sc.num_tokens);
      continue;
    }
    if (!sc.wants_logits) continue;
    if (!s.finished && !s.constraint && injected_fault(s.req->req) == Fault::kNone) {
      const Sequence& q = s.seq;
      rows.push_back({.logits = logits.data() + row * static_cast<size_t>(V),
                      .params = &s.req->req.sampling,
                      .prompt = std::span<const int32_t>(q.tokens.data(), static_cast<size_t>(q.num_prompt_tokens)),
                      .output = std::span<const int32_t>(q.tokens.data() + q.num_prompt_tokens,
                                                         static_cast<size_t>(q.num_output_tokens())),
                      .rng = &s.rng});
      at.push_back(row);
    }
    ++row;
  }
  if (rows.size() < 2) return;
  if (!batch_sampler) batch_sampler = std::make_unique<BatchSampler>(V);
  batch_sampler->sample(pool, rows);
  presampled.resize(row);
  for (size_t i = 0; i < rows.size(); ++i) presampled[at[i]] = std::move(rows[i]);
}

void Engine::Impl::fail_all(const std::string& why) {
  log::error("engine: " + why + "; ending the requests in flight");
  for (auto& r : active) {
    if (r->done) continue;
    for (auto& s : r->seqs)
      if (!s->finished) finish_seq(*s, FinishReason::kError, internal_error(why), {}, {}, {});
  }
  sweep_done();
}

void Engine::Impl::sweep_done() {
  for (auto it = active.begin(); it != active.end();) {
    if ((*it)->done) {
      for (auto& s : (*it)->seqs) by_seq.erase(&s->seq);
      it = active.erase(it);
      num_active.fetch_sub(1);
    } else {
      ++it;
    }
  }
}

void Engine::Impl::publish_stats(double step_ms) {
  std::lock_guard<std::mutex> l(stats_mu);
  stats.num_running = sched.num_running();
  int32_t inbox_n[kNumTiers] = {0, 0};
  {
    std::lock_guard<std::mutex> l2(in_mu);
    for (const auto& r : inbox) ++inbox_n[static_cast<int>(r->req.tier)];
  }
  for (int t = 0; t < kNumTiers; ++t) {
    stats.num_waiting[t] = sched.num_waiting(static_cast<Tier>(t)) + inbox_n[t];
    stats.num_running_tier[t] = sched.num_running(static_cast<Tier>(t));
  }
  stats.kv_blocks_used = blocks.num_used();
  stats.kv_blocks_cached = blocks.num_cached_free();
  if (step_ms >= 0) stats.last_step_ms = step_ms;
}

bool Engine::Impl::step() {
  const TimePoint now = Clock::now();
  take_inbox(now);
  check_cancellations(now);
  if (opts.spec.mode != SpecMode::kOff) propose_drafts();
  SchedulerOutput out = sched.schedule(now);
  for (Sequence* q : out.preempted) {  // recomputed later from verified tokens only
    if (q->num_draft_tokens > 0) strip_drafts(*by_seq.at(q));
    if (draft) draft->forget(q->id);
  }
  if (out.empty()) {
    drop_unverified_drafts();
    sweep_done();
    publish_stats(-1);
    return false;
  }

  int64_t prefill = 0;
  for (Sequence* q : out.admitted) {
    ReqState& r = *by_seq.at(q)->req;
    if (r.timings.scheduled == TimePoint{}) r.timings.scheduled = now;
    if (by_seq.at(q)->index == 0 && q->num_admissions == 1) {
      r.usage.cached_tokens = q->num_cached_tokens;
      std::lock_guard<std::mutex> l(stats_mu);
      stats.prompt_tokens_total += q->num_prompt_tokens;
      if (r.counted_queued) {
        queued[static_cast<int>(r.req.tier)].fetch_sub(1);
        r.counted_queued = false;
      }
    }
  }
  for (Sequence* q : out.preempted) ++by_seq.at(q)->req->timings.num_preemptions;

  // One forward over the flattened tokens of every scheduled sequence.
  batch_tokens.clear();
  slices.clear();
  group_tables.clear();
  const int32_t num_groups = kvm.num_groups();
  if (num_groups > 1) {  // every group's table, before any span into group_tables is taken
    for (const ScheduledSeq& sc : out.scheduled) {
      for (int32_t g = 0; g < num_groups; ++g) group_tables.emplace_back(KvCacheManager::table(*sc.seq, g));
    }
  }
  int32_t num_rows = 0;
  for (const ScheduledSeq& sc : out.scheduled) {
    Sequence& q = *sc.seq;
    const int32_t start = q.num_computed_tokens;
    batch_tokens.insert(batch_tokens.end(), q.tokens.begin() + start, q.tokens.begin() + start + sc.num_tokens);
    // A drafting sequence wants a row for every scheduled position (the last verified token and
    // its drafts); the scheduler may have given it fewer tokens than it holds (the rest is dropped).
    const int32_t rows = q.num_draft_tokens > 0 ? sc.num_tokens : (sc.wants_logits ? 1 : 0);
    slices.push_back({.num_tokens = sc.num_tokens,
                      .start_pos = start,
                      .block_table = std::span<const int32_t>(q.block_table),
                      .num_logits = rows,
                      .group_tables = num_groups > 1 ? std::span<const std::span<const int32_t>>(group_tables).subspan(
                                                           slices.size() * static_cast<size_t>(num_groups),
                                                           static_cast<size_t>(num_groups))
                                                     : std::span<const std::span<const int32_t>>()});
    num_rows += rows;
    prefill += std::max(0, std::min(start + sc.num_tokens, q.num_prompt_tokens) - start);
  }
  const auto t0 = Clock::now();
  // Constrained choices: the next mask depends only on tokens already sampled, so it is computed
  // on a helper thread while the forward pass runs (on_logits then finds it ready).
  std::vector<structured::ConstraintState*> masks_to_prefetch;
  for (const ScheduledSeq& sc : out.scheduled) {
    SeqState& s = *by_seq.at(sc.seq);
    if (sc.wants_logits && s.constraint && !s.finished) masks_to_prefetch.push_back(s.constraint.get());
  }
  std::future<void> prefetched;
  if (!masks_to_prefetch.empty()) {
    try {
      prefetched = std::async(std::launch::async, [&masks_to_prefetch] {
        for (structured::ConstraintState* c : masks_to_prefetch) (void)c->mask();
      });
    } catch (const std::system_error&) {
      // No thread available: on_logits computes the masks itself.
    }
  }
  const int32_t V = model->config().n_vocab;
  if (logits.size() < static_cast<size_t>(num_rows) * V) logits.resize(static_cast<size_t>(num_rows) * V);
  model::ForwardBatch batch{.tokens = batch_tokens, .seqs = slices};
  Status st;
  try {
    st = model->forward(batch, kv, logits.data(), &pool);
  } catch (const std::exception& e) {  // e.g. bad_alloc: ends this batch's requests, not the process
    st = internal_error(std::string("forward pass failed: ") + e.what());
  }
  if (prefetched.valid()) prefetched.wait();
  if (!st.ok()) {
    log::error("engine: forward failed: " + st.to_string());
    drop_unverified_drafts();
    for (const ScheduledSeq& sc : out.scheduled) {
      SeqState& s = *by_seq.at(sc.seq);
      if (!s.finished) finish_seq(s, FinishReason::kError, st, {}, {}, {});
    }
    sweep_done();
    publish_stats(-1);
    return true;
  }

  const TimePoint after_forward = Clock::now();  // tokens exist from here on (TTFT, ITL)
  presample(out, V);
  int32_t row = 0;
  int64_t sampled = 0;
  std::vector<ReqState*> release;
  for (const ScheduledSeq& sc : out.scheduled) {
    SeqState& s = *by_seq.at(sc.seq);
    Sequence& q = s.seq;
    if (q.num_draft_tokens > 0) {
      sampled += verify_drafts(s, sc, logits.data() + static_cast<size_t>(row) * V, V, after_forward);
      row += sc.num_tokens;
      continue;
    }
    q.num_computed_tokens += sc.num_tokens;
    kvm.commit_computed(q);
    if (s.index == 0 && !s.req->siblings_released && q.num_computed_tokens >= q.num_prompt_tokens) {
      release.push_back(s.req);
    }
    if (sc.wants_logits) {
      current_pre = static_cast<size_t>(row) < presampled.size() && presampled[static_cast<size_t>(row)].ready
                        ? &presampled[static_cast<size_t>(row)]
                        : nullptr;
      sample_guarded(s, logits.data() + static_cast<size_t>(row) * V, V, after_forward);
      current_pre = nullptr;
      ++row;
      ++sampled;
    }
  }
  TS_CHECK(row == num_rows, "logit rows mismatch");
  drop_unverified_drafts();  // drafted but not scheduled this step
  for (ReqState* r : release) {
    r->siblings_released = true;
    for (size_t i = 1; i < r->seqs.size(); ++i) {
      SeqState& s = *r->seqs[i];
      if (s.finished) continue;
      s.in_scheduler = true;
      sched.add(&s.seq);
    }
  }
  sweep_done();
  const auto took = Clock::now() - t0;
  const double ms = std::chrono::duration<double, std::milli>(took).count();
  {  // the scheduler learns this host's and model's step cost (latency-driven chunk sizes)
    int32_t shape_prefill = 0, shape_decodes = 0;
    out.shape(&shape_prefill, &shape_decodes);
    sched.cost_model().observe(shape_prefill, shape_decodes, took);
  }
  {
    std::lock_guard<std::mutex> l(stats_mu);
    ++stats.num_steps;
    stats.prefix_queries += out.num_prefix_query_tokens;
    stats.prefix_hits += out.num_prefix_hit_tokens;
    stats.num_preemptions += static_cast<int64_t>(out.preempted.size());
    stats.prefill_tokens_total += prefill;
    stats.generation_tokens_total += sampled;
  }
  // Decode steps only: prefill tokens cost less each (batched matmuls, shorter contexts) and
  // would make drafted tokens look cheaper than they are.
  if (opts.spec.mode != SpecMode::kOff && prefill == 0) spec_observe_step(static_cast<int64_t>(batch_tokens.size()));
  publish_stats(ms);
  return true;
}

// ---------------------------------------------------------------- speculative decoding

}  // namespace ts::engine
