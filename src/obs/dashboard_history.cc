#include "obs/dashboard_history.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace ts::obs {

std::optional<double> percentile(std::vector<double>& values, double p) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, values.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

void DashboardHistory::Samples::add(double v, size_t cap) {
  ++seen;
  if (values.size() < cap) {
    values.push_back(v);
    return;
  }
  // Reservoir sampling (Algorithm R) with a cheap deterministic mix of the offer count.
  uint64_t x = static_cast<uint64_t>(seen) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  size_t j = static_cast<size_t>(x % static_cast<uint64_t>(seen));
  if (j < cap) values[j] = v;
}

DashboardHistory::DashboardHistory(DashboardHistoryOptions opts, WallTime start)
    : opts_(opts), start_(start) {
  TS_CHECK(opts_.bucket.count() > 0 && opts_.window >= opts_.bucket, "bad dashboard window");
  bucket_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(opts_.bucket).count();
  ring_.resize(static_cast<size_t>(opts_.window / opts_.bucket));
  start_id_ = bucket_id(start);
}

int64_t DashboardHistory::bucket_id(WallTime t) const {
  int64_t ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  return ms >= 0 ? ms / bucket_ms_ : (ms - bucket_ms_ + 1) / bucket_ms_;
}

DashboardHistory::Bucket& DashboardHistory::bucket_at(WallTime t) {
  int64_t id = bucket_id(t);
  int64_t n = static_cast<int64_t>(ring_.size());
  Bucket& b = ring_[static_cast<size_t>(((id % n) + n) % n)];
  if (b.id != id) {
    b = Bucket{};
    b.id = id;
  }
  return b;
}

const DashboardHistory::Bucket* DashboardHistory::find(int64_t id) const {
  int64_t n = static_cast<int64_t>(ring_.size());
  const Bucket& b = ring_[static_cast<size_t>(((id % n) + n) % n)];
  return b.id == id ? &b : nullptr;
}

void DashboardHistory::record_request(WallTime now, const HistoryRequest& r) {
  std::lock_guard lock(mu_);
  Bucket& b = bucket_at(now);
  TierBucket& t = b.tier[static_cast<size_t>(r.tier)];
  ++t.requests;
  t.prompt_tokens += r.prompt_tokens;
  t.output_tokens += r.completion_tokens;
  if (r.ttft_s) t.ttft.add(*r.ttft_s, opts_.max_samples);
  if (r.tpot_s) t.tpot.add(*r.tpot_s, opts_.max_samples);
  if (r.error) ++b.errors;
  std::pair<std::string, std::string> key{std::string(r.tenant), std::string(r.app)};
  if (b.usage.size() >= opts_.max_usage_keys && !b.usage.contains(key)) key = {"other", "other"};
  Usage& u = b.usage[key];
  u.prompt_tokens += r.prompt_tokens;
  u.completion_tokens += r.completion_tokens;
  ++u.requests;
}

void DashboardHistory::record_error(WallTime now) {
  std::lock_guard lock(mu_);
  ++bucket_at(now).errors;
}

void DashboardHistory::record_rate_limited(WallTime now) {
  std::lock_guard lock(mu_);
  ++bucket_at(now).rate_limited;
}

void DashboardHistory::record_quota_rejected(WallTime now) {
  std::lock_guard lock(mu_);
  ++bucket_at(now).quota_rejected;
}

void DashboardHistory::record_engine(WallTime now, const HistoryEngineSample& s) {
  std::lock_guard lock(mu_);
  Bucket& b = bucket_at(now);
  b.has_engine = true;
  b.engine = s;
  b.prefix_queries += s.prefix_queries_delta;
  b.prefix_hits += s.prefix_hits_delta;
  last_engine_ = s;
}

namespace {
nlohmann::json ms_or_null(const std::optional<double>& seconds) {
  if (!seconds) return nullptr;
  return *seconds * 1000.0;
}

nlohmann::json ratio_or_null(int64_t num, int64_t den) {
  if (den <= 0) return nullptr;
  return static_cast<double>(num) / static_cast<double>(den);
}
}  // namespace

nlohmann::json DashboardHistory::to_json(WallTime now) const {
  using nlohmann::json;
  std::lock_guard lock(mu_);
  const int64_t n = static_cast<int64_t>(ring_.size());
  const int64_t end_id = bucket_id(now);
  const int64_t first_id = std::max(start_id_, end_id - n + 1);
  const double bucket_s = static_cast<double>(bucket_ms_) / 1000.0;

  // Tenants drawn as their own series: the biggest users over the whole window.
  std::map<std::string, int64_t> tenant_total;
  std::map<std::pair<std::string, std::string>, Usage> usage_total;
  for (int64_t id = first_id; id <= end_id; ++id) {
    if (const Bucket* b = find(id)) {
      for (const auto& [key, u] : b->usage) {
        tenant_total[key.first] += u.prompt_tokens + u.completion_tokens;
        Usage& t = usage_total[key];
        t.prompt_tokens += u.prompt_tokens;
        t.completion_tokens += u.completion_tokens;
        t.requests += u.requests;
      }
    }
  }
  std::vector<std::pair<std::string, int64_t>> tenants(tenant_total.begin(), tenant_total.end());
  std::sort(tenants.begin(), tenants.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::vector<std::string> drawn;
  for (const auto& [name, total] : tenants) {
    if (drawn.size() >= opts_.max_tenant_series) break;
    drawn.push_back(name);
  }
  bool has_other_tenants = tenants.size() > drawn.size();

  json series;
  json t = json::array(), out_tps = json::array(), prompt_tps = json::array(),
       requests = json::array(), kv = json::array(), hit = json::array(),
       errors = json::array(), limited = json::array(), quota = json::array();
  json ttft50, ttft95, tpot50, running, waiting;
  json tenant_series = json::object();
  for (const auto& name : drawn) tenant_series[name] = json::array();
  if (has_other_tenants) tenant_series["other"] = json::array();
  for (int i = 0; i < engine::kNumTiers; ++i) {
    const char* tier = engine::tier_name(static_cast<engine::Tier>(i));
    ttft50[tier] = ttft95[tier] = tpot50[tier] = running[tier] = waiting[tier] = json::array();
  }

  for (int64_t id = first_id; id <= end_id; ++id) {
    const Bucket* b = find(id);
    t.push_back(id * bucket_ms_);
    int64_t out_tokens = 0, in_tokens = 0, reqs = 0;
    for (int i = 0; i < engine::kNumTiers; ++i) {
      const char* tier = engine::tier_name(static_cast<engine::Tier>(i));
      std::vector<double> ttft, tpot;
      if (b) {
        const TierBucket& tb = b->tier[static_cast<size_t>(i)];
        ttft = tb.ttft.values;
        tpot = tb.tpot.values;
        out_tokens += tb.output_tokens;
        in_tokens += tb.prompt_tokens;
        reqs += tb.requests;
      }
      ttft50[tier].push_back(ms_or_null(percentile(ttft, 50)));
      ttft95[tier].push_back(ms_or_null(percentile(ttft, 95)));
      tpot50[tier].push_back(ms_or_null(percentile(tpot, 50)));
      bool eng = b && b->has_engine;
      running[tier].push_back(eng ? json(b->engine.running[static_cast<size_t>(i)]) : json(nullptr));
      waiting[tier].push_back(eng ? json(b->engine.waiting[static_cast<size_t>(i)]) : json(nullptr));
    }
    out_tps.push_back(static_cast<double>(out_tokens) / bucket_s);
    prompt_tps.push_back(static_cast<double>(in_tokens) / bucket_s);
    requests.push_back(reqs);
    kv.push_back(b && b->has_engine ? json(b->engine.kv_usage) : json(nullptr));
    hit.push_back(b ? ratio_or_null(b->prefix_hits, b->prefix_queries) : json(nullptr));
    errors.push_back(b ? b->errors : 0);
    limited.push_back(b ? b->rate_limited : 0);
    quota.push_back(b ? b->quota_rejected : 0);
    std::map<std::string, int64_t> per_tenant;
    if (b) {
      for (const auto& [key, u] : b->usage) {
        bool own = std::find(drawn.begin(), drawn.end(), key.first) != drawn.end();
        per_tenant[own ? key.first : "other"] += u.prompt_tokens + u.completion_tokens;
      }
    }
    for (auto& [name, arr] : tenant_series.items()) arr.push_back(per_tenant[name]);
  }
  series["t"] = std::move(t);
  series["ttft_p50_ms"] = std::move(ttft50);
  series["ttft_p95_ms"] = std::move(ttft95);
  series["tpot_p50_ms"] = std::move(tpot50);
  series["output_tokens_per_s"] = std::move(out_tps);
  series["prompt_tokens_per_s"] = std::move(prompt_tps);
  series["requests"] = std::move(requests);
  series["running"] = std::move(running);
  series["waiting"] = std::move(waiting);
  series["kv_cache_usage"] = std::move(kv);
  series["prefix_hit_rate"] = std::move(hit);
  series["errors"] = std::move(errors);
  series["rate_limited"] = std::move(limited);
  series["quota_rejected"] = std::move(quota);
  series["tokens_by_tenant"] = std::move(tenant_series);

  // Current values: the last current_window (or since start when shorter).
  const int64_t cur_buckets = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::milliseconds>(opts_.current_window).count() /
             bucket_ms_);
  const int64_t cur_first = std::max(first_id, end_id - cur_buckets + 1);
  json current;
  int64_t cur_out = 0, cur_req = 0, cur_err = 0, cur_lim = 0, cur_q = 0, cur_pq = 0, cur_ph = 0;
  for (int i = 0; i < engine::kNumTiers; ++i) {
    const char* tier = engine::tier_name(static_cast<engine::Tier>(i));
    std::vector<double> ttft, tpot;
    for (int64_t id = cur_first; id <= end_id; ++id) {
      if (const Bucket* b = find(id)) {
        const TierBucket& tb = b->tier[static_cast<size_t>(i)];
        ttft.insert(ttft.end(), tb.ttft.values.begin(), tb.ttft.values.end());
        tpot.insert(tpot.end(), tb.tpot.values.begin(), tb.tpot.values.end());
        cur_out += tb.output_tokens;
        cur_req += tb.requests;
      }
    }
    current["ttft_p50_ms"][tier] = ms_or_null(percentile(ttft, 50));
    current["ttft_p95_ms"][tier] = ms_or_null(percentile(ttft, 95));
    current["tpot_p50_ms"][tier] = ms_or_null(percentile(tpot, 50));
    current["requests"][tier] = 0;
  }
  for (int64_t id = cur_first; id <= end_id; ++id) {
    if (const Bucket* b = find(id)) {
      cur_err += b->errors;
      cur_lim += b->rate_limited;
      cur_q += b->quota_rejected;
      cur_pq += b->prefix_queries;
      cur_ph += b->prefix_hits;
      for (int i = 0; i < engine::kNumTiers; ++i) {
        const char* tier = engine::tier_name(static_cast<engine::Tier>(i));
        current["requests"][tier] =
            current["requests"][tier].get<int64_t>() + b->tier[static_cast<size_t>(i)].requests;
      }
    }
  }
  // Rates divide by the time actually covered: the window, or less just after start.
  double covered_ms = static_cast<double>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now - WallTime(std::chrono::milliseconds(cur_first * bucket_ms_))).count());
  double since_start_ms = static_cast<double>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now - start_).count());
  covered_ms = std::max(1000.0, std::min(covered_ms, std::max(since_start_ms, 1000.0)));
  current["window_seconds"] = covered_ms / 1000.0;
  current["output_tokens_per_s"] = static_cast<double>(cur_out) / (covered_ms / 1000.0);
  current["requests_total"] = cur_req;
  current["errors"] = cur_err;
  current["rate_limited"] = cur_lim;
  current["quota_rejected"] = cur_q;
  current["prefix_hit_rate"] = ratio_or_null(cur_ph, cur_pq);

  json usage = json::array();
  std::vector<std::pair<std::pair<std::string, std::string>, Usage>> rows(usage_total.begin(),
                                                                          usage_total.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    int64_t ta = a.second.prompt_tokens + a.second.completion_tokens;
    int64_t tb = b.second.prompt_tokens + b.second.completion_tokens;
    return ta != tb ? ta > tb : a.first < b.first;
  });
  for (const auto& [key, u] : rows) {
    usage.push_back({{"tenant", key.first},
                     {"app", key.second},
                     {"prompt_tokens", u.prompt_tokens},
                     {"completion_tokens", u.completion_tokens},
                     {"total_tokens", u.prompt_tokens + u.completion_tokens},
                     {"requests", u.requests}});
  }

  return json{{"bucket_seconds", bucket_s},
              {"window_seconds", static_cast<double>(opts_.window.count())},
              {"current_window_seconds", static_cast<double>(opts_.current_window.count())},
              {"series", std::move(series)},
              {"current", std::move(current)},
              {"usage", std::move(usage)}};
}

}  // namespace ts::obs
