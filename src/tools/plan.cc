#include "tools/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "model/model_config.h"
#include "tensor/dtype.h"
#include "tools/stats.h"

namespace ts::tools {

namespace {

using json = nlohmann::json;

std::string group(uint64_t v) {  // 262144000000 -> "262,144,000,000"
  std::string s = std::to_string(v), o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) o.push_back(',');
    o.push_back(s[i]);
  }
  return o;
}

}  // namespace

Result<ModelShape> model_shape_from_gguf(const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto file, gguf::GgufFile::open(path));
  TS_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::read_model_config(*file));
  ModelShape s;
  s.name = cfg.name.empty() ? cfg.arch : cfg.name;
  s.n_layer = cfg.n_layer;
  s.n_head_kv = cfg.n_head_kv;
  s.head_dim = cfg.head_dim;
  s.n_ctx_train = cfg.n_ctx_train;
  const model::WeightFootprint fp = model::weight_footprint(*file, cfg);
  s.weight_bytes = fp.resident;
  s.weight_source = "tensor bytes of " + path;
  s.n_expert = cfg.n_expert;
  s.n_expert_used = cfg.n_expert_used;
  s.active_weight_bytes = fp.active_per_token;
  s.n_swa_layers = cfg.num_swa_layers();
  s.sliding_window = cfg.sliding_window;
  return s;
}

Result<uint64_t> weight_bytes_for(double params, std::string_view weight_type) {
  auto dt = tensor::parse_dtype(weight_type);
  if (!dt) return invalid_argument("unknown weight type '" + std::string(weight_type) + "' (f32 f16 bf16 q8_0 q4_0 q4_k q6_k)");
  auto traits = tensor::type_traits(static_cast<uint32_t>(*dt));
  if (!traits) return invalid_argument("unknown weight type '" + std::string(weight_type) + "'");
  if (!(params > 0)) return invalid_argument("--params must be > 0");
  const double bytes = params * static_cast<double>(traits->type_size) / static_cast<double>(traits->block_size);
  return static_cast<uint64_t>(std::ceil(bytes));
}

uint64_t kv_bytes_per_token(int32_t n_layer, int32_t n_head_kv, int32_t head_dim, model::KvType type) {
  // The formula lives in the model code (KvStorage's layout); plan only supplies a shape.
  model::ModelConfig cfg;
  cfg.n_layer = n_layer;
  cfg.n_head_kv = n_head_kv;
  cfg.head_dim = head_dim;
  return model::kv_bytes_per_token(cfg, type);
}

Result<LengthDistribution> parse_lengths(std::string_view text) {
  std::vector<double> v;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view l = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    while (!l.empty() && std::isspace(static_cast<unsigned char>(l.back()))) l.remove_suffix(1);
    while (!l.empty() && std::isspace(static_cast<unsigned char>(l.front()))) l.remove_prefix(1);
    if (l.empty() || l.front() == '#') continue;
    const std::string where = "lengths line " + std::to_string(line_no) + ": ";
    json j = json::parse(l, nullptr, false);
    int64_t len = 0;
    if (!j.is_discarded() && j.is_number_integer()) {
      len = j.get<int64_t>();
    } else if (!j.is_discarded() && j.is_object()) {
      auto in = j.find("input_tokens"), out = j.find("output_tokens");
      if (in == j.end() || out == j.end() || !in->is_number_integer() || !out->is_number_integer())
        return invalid_argument(where + "expected {\"input_tokens\": N, \"output_tokens\": N}");
      len = in->get<int64_t>() + out->get<int64_t>();
    } else {
      return invalid_argument(where + "expected a whole number of tokens or a replay JSON object");
    }
    if (len < 1) return invalid_argument(where + "length must be >= 1");
    v.push_back(static_cast<double>(len));
  }
  if (v.empty()) return invalid_argument("lengths file has no lengths");
  Summary s = summarize(v);
  LengthDistribution d;
  d.count = s.count;
  d.p50 = static_cast<int64_t>(std::ceil(s.p50 - 1e-9));
  d.p95 = static_cast<int64_t>(std::ceil(s.p95 - 1e-9));
  d.p99 = static_cast<int64_t>(std::ceil(s.p99 - 1e-9));
  d.max = static_cast<int64_t>(s.max);
  return d;
}

Result<PlanResult> compute_plan(const PlanOptions& o) {
  const ModelShape& m = o.model;
  if (m.n_layer <= 0 || m.n_head_kv <= 0 || m.head_dim <= 0)
    return invalid_argument("layers, KV heads and head dim must be > 0");
  if (o.memory_bytes == 0) return invalid_argument("--memory must be > 0");
  if (!(o.headroom >= 0 && o.headroom < 1)) return invalid_argument("--headroom must be in [0, 1)");
  if (o.block_size <= 0) return invalid_argument("block size must be > 0");
  const LengthDistribution& L = o.lengths;
  if (L.p50 <= 0 || L.p95 <= 0 || L.p99 <= 0) return invalid_argument("P50, P95 and P99 lengths must be > 0");
  if (!(L.p50 <= L.p95 && L.p95 <= L.p99)) return invalid_argument("lengths must satisfy P50 <= P95 <= P99");

  PlanResult r;
  r.options = o;
  r.kv_bytes_per_token = kv_bytes_per_token(m.n_layer, m.n_head_kv, m.head_dim, o.kv_type);
  const std::string dims = "2 x " + std::to_string(m.n_layer) + " layers x " + std::to_string(m.n_head_kv) +
                           " KV heads x ";
  switch (o.kv_type) {
    case model::KvType::kF32: r.kv_formula = dims + std::to_string(m.head_dim) + " head dim x 4 B (f32)"; break;
    case model::KvType::kF16: r.kv_formula = dims + std::to_string(m.head_dim) + " head dim x 2 B (f16)"; break;
    case model::KvType::kQ8_0:
      r.kv_formula = dims + "(" + std::to_string(m.head_dim) + " head dim x 1 B + 4 B scale) (q8_0)";
      r.notes.push_back("q8_0 KV stores head_dim int8 values plus one f32 scale per token per head for K and V; "
                        "the scales are counted");
      break;
  }

  if (m.n_expert > 0) {
    r.notes.push_back("MoE: " + std::to_string(m.n_expert) + " experts, " + std::to_string(m.n_expert_used) +
                      " used per token: all " + format_bytes(m.weight_bytes) + " of weights stay resident; one token reads " +
                      format_bytes(m.active_weight_bytes));
  }
  // Per-request KV from the model code's storage layout (sliding-window layers window-only).
  const model::KvFootprint fp = model::kv_footprint(m.n_layer, m.n_swa_layers, m.sliding_window, m.n_head_kv,
                                                    m.head_dim, o.kv_type, o.block_size);
  r.kv_full_bytes_per_token = fp.full_bytes_per_token();
  r.kv_window_bytes_per_seq = fp.swa_bytes_cap();
  if (m.n_swa_layers > 0 && m.sliding_window > 0) {
    r.notes.push_back(std::to_string(m.n_swa_layers) + " of " + std::to_string(m.n_layer) +
                      " layers use a sliding window of " + std::to_string(m.sliding_window) +
                      " tokens and keep only their window: a request holds " + group(r.kv_full_bytes_per_token) +
                      " B per token (full-attention layers) + at most " + format_bytes(r.kv_window_bytes_per_seq) +
                      " of window (" + std::to_string(fp.num_swa_groups) + " sliding-window groups x " +
                      std::to_string(fp.swa_blocks_cap()) + " blocks); KV per token above counts every layer, "
                      "for contexts shorter than the window");
  }

  r.usable_bytes = static_cast<uint64_t>(std::floor(static_cast<double>(o.memory_bytes) * (1 - o.headroom)));
  r.kv_budget_bytes = static_cast<int64_t>(r.usable_bytes) - static_cast<int64_t>(m.weight_bytes);
  const int64_t budget = std::max<int64_t>(0, r.kv_budget_bytes);
  if (r.kv_budget_bytes <= 0)
    r.warnings.push_back("weights (" + format_bytes(m.weight_bytes) + ") leave no KV memory in " +
                         format_bytes(r.usable_bytes) + " usable: nothing can be served");

  const std::pair<const char*, int64_t> pcts[] = {{"P50", L.p50}, {"P95", L.p95}, {"P99", L.p99}};
  for (const auto& [label, ctx] : pcts) {
    PlanPercentile p;
    p.label = label;
    p.context_tokens = ctx;
    p.peak_bytes = fp.bytes_for_tokens(ctx);
    p.max_seqs = p.peak_bytes ? budget / static_cast<int64_t>(p.peak_bytes) : 0;
    r.percentiles.push_back(p);
  }
  const PlanPercentile &p50 = r.percentiles[0], &p95 = r.percentiles[1], &p99 = r.percentiles[2];

  r.rec_kv_cache_memory = static_cast<uint64_t>(budget) / (1ull << 20) * (1ull << 20);
  // The paged cache holds only the tokens a sequence has, so the median context sets the seat
  // count; when a long-tail mix outgrows the KV, the scheduler preempts (batch first).
  r.rec_max_seqs = p50.max_seqs;
  r.interactive_max_running = r.rec_max_seqs;
  r.interactive_kv_share = 1.0;
  r.batch_kv_share = 0.75;  // leave a quarter of KV for interactive arrivals
  r.batch_max_running = r.rec_max_seqs > 0 ? std::max<int64_t>(1, r.rec_max_seqs * 3 / 4) : 0;

  if (r.kv_budget_bytes > 0 && p99.max_seqs == 0)
    r.warnings.push_back("a P99 request (" + std::to_string(p99.context_tokens) + " tokens, " +
                         format_bytes(p99.peak_bytes) + " KV) cannot fit at all in the KV budget of " +
                         format_bytes(budget));
  if (m.n_ctx_train > 0 && L.p99 > m.n_ctx_train)
    r.warnings.push_back("P99 context " + std::to_string(L.p99) + " exceeds the model's trained context " +
                         std::to_string(m.n_ctx_train));
  if (o.concurrency > 0) {
    const double need = static_cast<double>(m.weight_bytes) + static_cast<double>(o.concurrency) * p95.peak_bytes;
    r.memory_for_concurrency = static_cast<uint64_t>(std::ceil(need / (1 - o.headroom)));
    const std::string c = "--concurrency " + std::to_string(o.concurrency);
    if (o.concurrency > p50.max_seqs)
      r.warnings.push_back(c + " does not fit even at P50 contexts (" + std::to_string(p50.max_seqs) +
                           " fit); P95 contexts need " + format_bytes(r.memory_for_concurrency) + " of memory");
    else if (o.concurrency > p95.max_seqs)
      r.warnings.push_back(c + " fits at P50 but not at P95 contexts (" + std::to_string(p95.max_seqs) +
                           " fit): expect queueing or preemption; P95 needs " +
                           format_bytes(r.memory_for_concurrency));
    else if (o.concurrency > p99.max_seqs)
      r.notes.push_back(c + " fits at P95 contexts; at P99 only " + std::to_string(p99.max_seqs) + " fit");
    else
      r.notes.push_back(c + " fits even at P99 contexts");
  }
  return r;
}

std::string format_bytes(uint64_t b) {
  char buf[64];
  const double d = static_cast<double>(b);
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof(buf), "%.2f GiB", d / (1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof(buf), "%.1f MiB", d / (1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof(buf), "%.1f KiB", d / (1ull << 10));
  else std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string format_plan(const PlanResult& r) {
  const PlanOptions& o = r.options;
  const ModelShape& m = o.model;
  std::string s;
  char buf[512];
  s += "tokenserve plan" + (m.name.empty() ? std::string() : ": " + m.name) + "\n";
  s += "  KV per token     " + group(r.kv_bytes_per_token) + " B" +
       (r.kv_bytes_per_token >= 1024 ? " (" + format_bytes(r.kv_bytes_per_token) + ")" : "") + " = " +
       r.kv_formula + "\n";
  s += "  weights          " + format_bytes(m.weight_bytes) +
       (m.weight_source.empty() ? "" : " (" + m.weight_source + ")") + "\n";
  std::snprintf(buf, sizeof(buf), "  memory           %s, headroom %.0f%% -> usable %s, KV budget %s%s\n",
                format_bytes(o.memory_bytes).c_str(), 100 * o.headroom, format_bytes(r.usable_bytes).c_str(),
                r.kv_budget_bytes > 0 ? format_bytes(static_cast<uint64_t>(r.kv_budget_bytes)).c_str() : "none",
                r.kv_budget_bytes > 0 ? "" : " (weights do not fit)");
  s += buf;
  if (o.lengths.count > 0) {
    std::snprintf(buf, sizeof(buf), "  lengths          %lld requests, max %lld tokens\n",
                  static_cast<long long>(o.lengths.count), static_cast<long long>(o.lengths.max));
    s += buf;
  }
  std::snprintf(buf, sizeof(buf), "\n  %-10s %12s %16s %14s\n", "percentile", "context", "KV per request",
                "seqs that fit");
  s += buf;
  for (const PlanPercentile& p : r.percentiles) {
    std::snprintf(buf, sizeof(buf), "  %-10s %12lld %16s %14lld\n", p.label.c_str(),
                  static_cast<long long>(p.context_tokens), format_bytes(p.peak_bytes).c_str(),
                  static_cast<long long>(p.max_seqs));
    s += buf;
  }
  std::snprintf(buf, sizeof(buf), "  (KV paged in blocks of %d tokens; per-request peaks round up to whole blocks)\n\n",
                o.block_size);
  s += buf;
  std::snprintf(buf, sizeof(buf), "  recommended      --kv-cache-memory %lluMiB --max-seqs %lld\n",
                static_cast<unsigned long long>(r.rec_kv_cache_memory >> 20),
                static_cast<long long>(r.rec_max_seqs));
  s += buf;
  std::snprintf(buf, sizeof(buf),
                "  tiers            interactive: max-running %lld, kv-share %.2f; batch: max-running %lld, kv-share %.2f\n",
                static_cast<long long>(r.interactive_max_running), r.interactive_kv_share,
                static_cast<long long>(r.batch_max_running), r.batch_kv_share);
  s += buf;
  for (const std::string& n : r.notes) s += "  note: " + n + "\n";
  for (const std::string& w : r.warnings) s += "  WARNING: " + w + "\n";
  return s;
}

std::string plan_json(const PlanResult& r) {
  const PlanOptions& o = r.options;
  json pct = json::array();
  for (const PlanPercentile& p : r.percentiles)
    pct.push_back({{"label", p.label}, {"context_tokens", p.context_tokens}, {"kv_bytes", p.peak_bytes},
                   {"max_seqs", p.max_seqs}});
  json j = {
      {"model",
       {{"name", o.model.name}, {"layers", o.model.n_layer}, {"kv_heads", o.model.n_head_kv},
        {"head_dim", o.model.head_dim}, {"n_ctx_train", o.model.n_ctx_train},
        {"weight_bytes", o.model.weight_bytes}, {"weight_source", o.model.weight_source},
        {"n_expert", o.model.n_expert}, {"n_expert_used", o.model.n_expert_used},
        {"active_weight_bytes", o.model.active_weight_bytes}, {"sliding_window_layers", o.model.n_swa_layers},
        {"sliding_window", o.model.sliding_window}}},
      {"kv_type", model::kv_type_name(o.kv_type)},
      {"kv_bytes_per_token", r.kv_bytes_per_token},
      {"kv_full_attention_bytes_per_token", r.kv_full_bytes_per_token},
      {"kv_window_bytes_per_seq", r.kv_window_bytes_per_seq},
      {"kv_formula", r.kv_formula},
      {"block_size", o.block_size},
      {"memory_bytes", o.memory_bytes},
      {"headroom", o.headroom},
      {"usable_bytes", r.usable_bytes},
      {"kv_budget_bytes", r.kv_budget_bytes},
      {"lengths", {{"count", o.lengths.count}, {"p50", o.lengths.p50}, {"p95", o.lengths.p95},
                   {"p99", o.lengths.p99}, {"max", o.lengths.max}}},
      {"percentiles", pct},
      {"recommended",
       {{"kv_cache_memory_bytes", r.rec_kv_cache_memory}, {"max_seqs", r.rec_max_seqs},
        {"tiers",
         {{"interactive", {{"max_running", r.interactive_max_running}, {"kv_share", r.interactive_kv_share}}},
          {"batch", {{"max_running", r.batch_max_running}, {"kv_share", r.batch_kv_share}}}}}}},
      {"notes", r.notes},
      {"warnings", r.warnings},
  };
  if (o.concurrency > 0)
    j["concurrency"] = {{"requested", o.concurrency}, {"memory_needed_at_p95_bytes", r.memory_for_concurrency}};
  return j.dump(2) + "\n";
}

}  // namespace ts::tools
