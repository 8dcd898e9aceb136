#include "obs/server_metrics.h"

#include <algorithm>
#include <chrono>

namespace ts::obs {
namespace {

// Latency buckets reach from a GPU's millisecond steps to a loaded CPU's minute-long prompts.
const std::vector<double> kTtftBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                          0.1,   0.25,   0.5,   0.75, 1.0,  2.5,  5.0,  7.5,
                                          10.0,  20.0,   40.0,  60.0};
const std::vector<double> kItlBuckets = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03,
                                         0.04,  0.05,   0.075, 0.1,  0.15,  0.2,  0.3,   0.4,
                                         0.5,   0.75,   1.0,   2.5,  5.0,   10.0};
const std::vector<double> kRequestBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                             0.5,   1.0,   2.5,  5.0,   10.0, 15.0, 20.0,
                                             30.0,  40.0,  50.0, 60.0,  120.0, 240.0, 480.0,
                                             960.0, 1920.0};
const std::vector<double> kTokenBuckets = {1,    2,    5,     10,    20,    50,    100,
                                           200,  500,  1000,  2000,  5000,  10000, 20000,
                                           50000, 100000, 200000};

std::string metric(std::string_view name) { return std::string(kMetricPrefix) + std::string(name); }

bool is_set(engine::TimePoint t) { return t != engine::TimePoint{}; }

double seconds(engine::TimePoint from, engine::TimePoint to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

int finish_rank(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kError: return 4;
    case engine::FinishReason::kCancelled: return 3;
    case engine::FinishReason::kLength: return 2;
    case engine::FinishReason::kStop: return 1;
    case engine::FinishReason::kNone: return 0;
  }
  return 0;
}

}  // namespace

void fill_from_engine(const engine::Event& done_event, engine::FinishReason finish,
                      RequestObservation* obs) {
  obs->prompt_tokens = done_event.usage.prompt_tokens;
  obs->completion_tokens = done_event.usage.completion_tokens;
  obs->cached_tokens = done_event.usage.cached_tokens;
  obs->arrival = done_event.timings.arrival;
  obs->scheduled = done_event.timings.scheduled;
  obs->first_token = done_event.timings.first_token;
  obs->finished = done_event.timings.finished;
  obs->num_preemptions = done_event.timings.num_preemptions;
  if (finish_rank(done_event.finish) > finish_rank(finish)) finish = done_event.finish;
  obs->finish_reason = finish == engine::FinishReason::kNone ? engine::FinishReason::kStop : finish;
}

ServerMetrics::ServerMetrics(ServerMetricsOptions opts)
    : opts_(std::move(opts)), history_(opts_.history, now()) {
  Registry& r = registry_;
  const std::vector<std::string> mt = {"model", "tier"};
  ttft_ = &r.histogram(metric("time_to_first_token_seconds"),
                       "Time from arrival to the first generated token.", kTtftBuckets, mt);
  itl_ = &r.histogram(metric("inter_token_latency_seconds"),
                      "Gap between consecutive generated tokens.", kItlBuckets, mt);
  tpot_ = &r.histogram(metric("time_per_output_token_seconds"),
                       "Mean time per output token after the first, per request.", kItlBuckets, mt);
  e2e_ = &r.histogram(metric("e2e_request_latency_seconds"),
                      "Time from arrival to the last token.", kRequestBuckets, mt);
  queue_ = &r.histogram(metric("request_queue_time_seconds"),
                        "Time from arrival until first scheduled.", kRequestBuckets, mt);
  prefill_ = &r.histogram(metric("request_prefill_time_seconds"),
                          "Time from first scheduled to the first token.", kRequestBuckets, mt);
  decode_ = &r.histogram(metric("request_decode_time_seconds"),
                         "Time from the first token to the last.", kRequestBuckets, mt);
  prompt_len_ = &r.histogram(metric("request_prompt_tokens"), "Prompt tokens per request.",
                             kTokenBuckets, mt);
  gen_len_ = &r.histogram(metric("request_generation_tokens"),
                          "Generated tokens per request (all choices).", kTokenBuckets, mt);
  running_ = &r.gauge(metric("num_requests_running"), "Sequences running in the engine.", mt);
  waiting_ = &r.gauge(metric("num_requests_waiting"), "Requests waiting to be scheduled.", mt);
  kv_usage_ = &r.gauge(metric("kv_cache_usage_perc"),
                       "Fraction of KV cache blocks in use (1 = full).", {"model"});
  spool_ = &r.gauge(metric("ledger_spool_depth"),
                    "Usage records waiting in the ledger spool to be written.");
  const std::vector<std::string> mtt = {"model", "tier", "tenant"};
  prompt_tokens_ = &r.counter(metric("prompt_tokens_total"), "Prompt tokens processed.", mtt);
  cached_tokens_ = &r.counter(metric("cached_prompt_tokens_total"),
                              "Prompt tokens served from the prefix cache.", mtt);
  generation_tokens_ = &r.counter(metric("generation_tokens_total"), "Tokens generated.", mtt);
  success_ = &r.counter(metric("request_success_total"),
                        "Requests finished by the engine, by finish reason.",
                        {"model", "tier", "finished_reason"});
  errors_ = &r.counter(metric("request_errors_total"), "Requests answered with an HTTP error.",
                       {"code"});
  preemptions_ = &r.counter(metric("num_preemptions_total"), "Sequences preempted.", {"model"});
  prefix_queries_ = &r.counter(metric("prefix_cache_queries_total"),
                               "Prompt tokens looked up in the prefix cache.", {"model"});
  prefix_hits_ = &r.counter(metric("prefix_cache_hits_total"),
                            "Prompt tokens found in the prefix cache.", {"model"});
  rate_limited_ = &r.counter(metric("rate_limited_total"),
                             "Requests refused by a rate limit (429).", {"tenant"});
  quota_rejected_ = &r.counter(metric("quota_rejected_total"),
                               "Requests refused because a token quota is spent (429).",
                               {"tenant"});
  spec_drafts_ = &r.counter(metric("spec_decode_num_drafts_total"),
                            "Speculative draft verifications (one per speculating sequence and step).", {"model"});
  spec_draft_tokens_ = &r.counter(metric("spec_decode_num_draft_tokens_total"),
                                  "Drafted tokens verified by the target model.", {"model"});
  spec_accepted_tokens_ = &r.counter(metric("spec_decode_num_accepted_tokens_total"),
                                     "Drafted tokens accepted.", {"model"});
  spec_accepted_by_pos_ = &r.counter(metric("spec_decode_num_accepted_tokens_per_pos_total"),
                                     "Drafted tokens accepted, by position in the draft (0 = first).",
                                     {"model", "position"});
  // Engine-side series exist from the start so dashboards and alerts see zeros, not gaps.
  for (int i = 0; i < engine::kNumTiers; ++i) {
    const char* tier = engine::tier_name(static_cast<engine::Tier>(i));
    running_->with({opts_.model, tier});
    waiting_->with({opts_.model, tier});
  }
  kv_usage_->with({opts_.model});
  preemptions_->with({opts_.model});
  prefix_queries_->with({opts_.model});
  prefix_hits_->with({opts_.model});
  spec_drafts_->with({opts_.model});
  spec_draft_tokens_->with({opts_.model});
  spec_accepted_tokens_->with({opts_.model});
}

std::string ServerMetrics::bound_tenant(std::string_view tenant) {
  if (tenant.empty()) return "anonymous";
  {
    std::shared_lock lock(tenants_mu_);
    if (tenants_.find(tenant) != tenants_.end()) return std::string(tenant);
    if (tenants_.size() >= opts_.max_tenants) return "other";
  }
  std::unique_lock lock(tenants_mu_);
  if (tenants_.find(tenant) != tenants_.end()) return std::string(tenant);
  if (tenants_.size() >= opts_.max_tenants) return "other";
  tenants_.emplace(tenant);
  return std::string(tenant);
}

void ServerMetrics::on_request_finished(const RequestObservation& obs) {
  const std::string tenant = bound_tenant(obs.tenant);
  const char* tier = engine::tier_name(obs.tier);
  const std::string_view mt[] = {obs.model, tier};
  const std::string_view mtt[] = {obs.model, tier, tenant};

  prompt_tokens_->with(mtt).inc(obs.prompt_tokens);
  cached_tokens_->with(mtt).inc(obs.cached_tokens);
  generation_tokens_->with(mtt).inc(obs.completion_tokens);
  const std::string_view reason[] = {obs.model, tier,
                                     engine::finish_reason_name(obs.finish_reason)};
  success_->with(reason).inc();
  prompt_len_->with(mt).observe(static_cast<double>(obs.prompt_tokens));
  gen_len_->with(mt).observe(static_cast<double>(obs.completion_tokens));

  HistoryRequest h{.tier = obs.tier,
                   .prompt_tokens = obs.prompt_tokens,
                   .completion_tokens = obs.completion_tokens,
                   .tenant = tenant,
                   .app = obs.app.empty() ? std::string_view("-") : std::string_view(obs.app),
                   .error = obs.http_status >= 400};
  if (is_set(obs.arrival) && is_set(obs.finished)) {
    e2e_->with(mt).observe(seconds(obs.arrival, obs.finished));
  }
  if (is_set(obs.arrival) && is_set(obs.scheduled)) {
    queue_->with(mt).observe(seconds(obs.arrival, obs.scheduled));
  }
  if (is_set(obs.first_token)) {
    if (is_set(obs.arrival)) {
      double ttft = seconds(obs.arrival, obs.first_token);
      ttft_->with(mt).observe(ttft);
      h.ttft_s = ttft;
    }
    if (is_set(obs.scheduled)) prefill_->with(mt).observe(seconds(obs.scheduled, obs.first_token));
    if (is_set(obs.finished)) {
      double decode = seconds(obs.first_token, obs.finished);
      decode_->with(mt).observe(decode);
      if (obs.completion_tokens > 1) {
        double tpot = decode / static_cast<double>(obs.completion_tokens - 1);
        tpot_->with(mt).observe(tpot);
        h.tpot_s = tpot;
      }
      if (!obs.inter_token_gaps.empty()) {
        Histogram& itl = itl_->with(mt);
        for (auto gap : obs.inter_token_gaps) itl.observe(std::max(0.0, gap.count()));
      }
    }
  }
  if (obs.http_status >= 400) errors_->with({std::to_string(obs.http_status)}).inc();
  history_.record_request(now(), h);
}

void ServerMetrics::on_error(int http_status) {
  // Status codes outside HTTP's range would be unbounded label values.
  int code = http_status >= 100 && http_status <= 599 ? http_status : 500;
  errors_->with({std::to_string(code)}).inc();
  history_.record_error(now());
}

void ServerMetrics::on_rate_limited(std::string_view tenant) {
  rate_limited_->with({bound_tenant(tenant)}).inc();
  errors_->with({"429"}).inc();
  WallTime t = now();
  history_.record_rate_limited(t);
  history_.record_error(t);
}

void ServerMetrics::on_quota_rejected(std::string_view tenant) {
  quota_rejected_->with({bound_tenant(tenant)}).inc();
  errors_->with({"429"}).inc();
  WallTime t = now();
  history_.record_quota_rejected(t);
  history_.record_error(t);
}

void ServerMetrics::sample_engine(const engine::EngineStats& s) {
  HistoryEngineSample h;
  for (int i = 0; i < engine::kNumTiers; ++i) {
    const char* tier = engine::tier_name(static_cast<engine::Tier>(i));
    running_->with({opts_.model, tier}).set(s.num_running_tier[i]);
    waiting_->with({opts_.model, tier}).set(s.num_waiting[i]);
    h.running[static_cast<size_t>(i)] = s.num_running_tier[i];
    h.waiting[static_cast<size_t>(i)] = s.num_waiting[i];
  }
  h.kv_usage = s.kv_blocks_total > 0
                   ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total)
                   : 0.0;
  kv_usage_->with({opts_.model}).set(h.kv_usage);
  preemptions_->with({opts_.model}).advance_to(s.num_preemptions);
  prefix_queries_->with({opts_.model}).advance_to(s.prefix_queries);
  prefix_hits_->with({opts_.model}).advance_to(s.prefix_hits);
  spec_drafts_->with({opts_.model}).advance_to(s.spec_num_drafts);
  spec_draft_tokens_->with({opts_.model}).advance_to(s.spec_num_draft_tokens);
  spec_accepted_tokens_->with({opts_.model}).advance_to(s.spec_num_accepted_tokens);
  for (int32_t i = 0; i < engine::kMaxDraftTokens; ++i) {
    if (s.spec_accepted_by_pos[i] == 0) continue;  // series appear once a position accepted a token
    spec_accepted_by_pos_->with({opts_.model, std::to_string(i)}).advance_to(s.spec_accepted_by_pos[i]);
  }
  {
    std::lock_guard lock(engine_mu_);
    // The first sample only sets the baseline: its totals predate the history.
    if (last_prefix_queries_ >= 0 && s.prefix_queries >= last_prefix_queries_) {
      h.prefix_queries_delta = s.prefix_queries - last_prefix_queries_;
      h.prefix_hits_delta = std::max<int64_t>(0, s.prefix_hits - last_prefix_hits_);
    }
    last_prefix_queries_ = s.prefix_queries;
    last_prefix_hits_ = s.prefix_hits;
  }
  history_.record_engine(now(), h);
}

void ServerMetrics::set_ledger_spool_depth(int64_t depth) {
  spool_->with({}).set(static_cast<double>(depth));
}

nlohmann::json ServerMetrics::dashboard_json() const {
  using nlohmann::json;
  WallTime t = now();
  json j = history_.to_json(t);
  j["model"] = opts_.model;
  j["generated_at_ms"] =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  json tiers = json::array();
  json running, waiting;
  double run_total = 0, wait_total = 0;
  for (int i = 0; i < engine::kNumTiers; ++i) {
    const char* tier = engine::tier_name(static_cast<engine::Tier>(i));
    tiers.push_back(tier);
    double r = 0, w = 0;
    running_->for_each([&](const auto& v, const Gauge& g) { if (v[1] == tier) r += g.value(); });
    waiting_->for_each([&](const auto& v, const Gauge& g) { if (v[1] == tier) w += g.value(); });
    running[tier] = r;
    waiting[tier] = w;
    run_total += r;
    wait_total += w;
  }
  running["total"] = run_total;
  waiting["total"] = wait_total;
  j["tiers"] = std::move(tiers);
  j["current"]["running"] = std::move(running);
  j["current"]["waiting"] = std::move(waiting);
  double kv = 0;
  kv_usage_->for_each([&](const auto&, const Gauge& g) { kv = std::max(kv, g.value()); });
  j["current"]["kv_cache_usage"] = kv;

  auto sum = [](const CounterFamily* f) {
    int64_t total = 0;
    f->for_each([&](const auto&, const Counter& c) { total += c.value(); });
    return total;
  };
  double spool = 0;
  spool_->for_each([&](const auto&, const Gauge& g) { spool = g.value(); });
  j["totals"] = json{{"requests", sum(success_)},
                     {"prompt_tokens", sum(prompt_tokens_)},
                     {"cached_prompt_tokens", sum(cached_tokens_)},
                     {"generation_tokens", sum(generation_tokens_)},
                     {"errors", sum(errors_)},
                     {"rate_limited", sum(rate_limited_)},
                     {"quota_rejected", sum(quota_rejected_)},
                     {"preemptions", sum(preemptions_)},
                     {"prefix_cache_queries", sum(prefix_queries_)},
                     {"prefix_cache_hits", sum(prefix_hits_)},
                     {"ledger_spool_depth", spool},
                     {"spec_draft_tokens", sum(spec_draft_tokens_)},
                     {"spec_accepted_tokens", sum(spec_accepted_tokens_)},
                     {"spec_acceptance_rate", sum(spec_draft_tokens_) > 0
                                                  ? static_cast<double>(sum(spec_accepted_tokens_)) /
                                                        static_cast<double>(sum(spec_draft_tokens_))
                                                  : 0.0}};
  return j;
}

std::string ServerMetrics::dashboard_json_text() const {
  return dashboard_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ts::obs
