// Aggregation and output formats of a bench run: text, JSON, SVG (see bench.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tools/bench.h"

namespace ts::tools {

namespace {

using json = nlohmann::json;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

json summary_json(const Summary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"min", s.min}, {"max", s.max},
          {"p50", s.p50},     {"p95", s.p95},   {"p99", s.p99}};
}

// Smallest round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k) >= v; 1 when v <= 0.
double nice_ceil(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
    if (m * p >= v * (1 - 1e-9)) return m * p;
  return 10 * p;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o.push_back(c);
  }
  return o;
}

// One chart area of the SVG with linear axes from 0.
struct Panel {
  double x, y, w, h;  // pixel box of the plotting area
  double xmax, ymax;  // data range [0, xmax] x [0, ymax]
  double px(double v) const { return x + w * std::clamp(v / xmax, 0.0, 1.0); }
  double py(double v) const { return y + h - h * std::clamp(v / ymax, 0.0, 1.0); }

  void frame(std::string* svg, const std::string& title, const std::string& xlabel,
             const std::string& ylabel, const char* yfmt) const {
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#888'/>\n"
                  "<text x='%.1f' y='%.1f' font-size='14' font-weight='bold'>%s</text>\n"
                  "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%s</text>\n"
                  "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle' transform='rotate(-90 %.1f %.1f)'>%s</text>\n",
                  x, y, w, h, x, y - 8, esc(title).c_str(), x + w / 2, y + h + 34, esc(xlabel).c_str(),
                  x - 46, y + h / 2, x - 46, y + h / 2, esc(ylabel).c_str());
    *svg += buf;
    for (int i = 0; i <= 5; ++i) {
      const double xv = xmax * i / 5, yv = ymax * i / 5;
      std::snprintf(buf, sizeof(buf),
                    "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/>\n"
                    "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%s</text>\n"
                    "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/>\n"
                    "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end'>%s</text>\n",
                    px(xv), y, px(xv), y + h, px(xv), y + h + 14, fmt("%g", xv).c_str(), x, py(yv), x + w,
                    py(yv), x - 4, py(yv) + 3, fmt(yfmt, yv).c_str());
      *svg += buf;
    }
  }

  void line(std::string* svg, const std::vector<std::pair<double, double>>& pts, const char* color,
            const std::string& label, int legend_row) const {
    if (pts.empty()) return;
    std::string p;
    for (const auto& [a, b] : pts) p += fmt("%.1f,", px(a)) + fmt("%.1f ", py(b));
    *svg += "<polyline fill='none' stroke='" + std::string(color) + "' stroke-width='1.5' points='" + p + "'/>\n";
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='2'/>"
                  "<text x='%.1f' y='%.1f' font-size='11'>%s</text>\n",
                  x + w - 150, y + 14 + 16 * legend_row, x + w - 130, y + 14 + 16 * legend_row, color,
                  x + w - 125, y + 18 + 16 * legend_row, esc(label).c_str());
    *svg += buf;
  }
};

// Empirical CDF points (value, fraction <= value) of the values.
std::vector<std::pair<double, double>> cdf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<double, double>> pts;
  const size_t n = v.size();
  const size_t stride = std::max<size_t>(1, n / 400);  // keep the SVG small
  for (size_t i = 0; i < n; i += stride) pts.emplace_back(v[i], static_cast<double>(i + 1) / n);
  if (n && pts.back().second < 1) pts.emplace_back(v.back(), 1.0);
  return pts;
}

}  // namespace

BenchReport summarize_records(std::vector<RequestRecord> records, double elapsed_s,
                              std::optional<double> slo_ttft_ms, std::optional<double> slo_tpot_ms) {
  BenchReport r;
  std::sort(records.begin(), records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  r.elapsed_s = elapsed_s;
  r.slo_ttft_ms = slo_ttft_ms;
  r.slo_tpot_ms = slo_tpot_ms;
  std::vector<double> ttft, tpot, itl, e2e, ptok, otok;
  r.num_sent = static_cast<int64_t>(records.size());
  for (const RequestRecord& q : records) {
    if (q.cancelled) {
      ++r.num_cancelled;
      continue;
    }
    if (!q.ok) {
      ++r.num_errors;
      ++r.errors[q.error.empty() ? "unknown" : q.error];
      continue;
    }
    ++r.num_ok;
    if (q.usage_reported) ++r.num_usage_reported;
    r.total_prompt_tokens += q.prompt_tokens;
    r.total_output_tokens += q.output_tokens;
    ttft.push_back(q.ttft_ms);
    if (q.output_tokens > 1) tpot.push_back(q.tpot_ms);
    itl.insert(itl.end(), q.itl_ms.begin(), q.itl_ms.end());
    e2e.push_back(q.e2e_ms);
    ptok.push_back(static_cast<double>(q.prompt_tokens));
    otok.push_back(static_cast<double>(q.output_tokens));
    const bool good = (!slo_ttft_ms || q.ttft_ms <= *slo_ttft_ms) && (!slo_tpot_ms || q.tpot_ms <= *slo_tpot_ms);
    if (good) ++r.num_good;
  }
  r.ttft_ms = summarize(std::move(ttft));
  r.tpot_ms = summarize(std::move(tpot));
  r.itl_ms = summarize(std::move(itl));
  r.e2e_ms = summarize(std::move(e2e));
  r.prompt_tokens = summarize(std::move(ptok));
  r.output_tokens = summarize(std::move(otok));
  if (elapsed_s > 0) {
    r.req_per_s = static_cast<double>(r.num_ok) / elapsed_s;
    r.output_tok_per_s = static_cast<double>(r.total_output_tokens) / elapsed_s;
    r.total_tok_per_s = static_cast<double>(r.total_output_tokens + r.total_prompt_tokens) / elapsed_s;
    r.goodput_rate = static_cast<double>(r.num_good) / elapsed_s;
  }
  const int64_t finished = r.num_ok + r.num_errors;
  if (finished > 0) r.goodput_share = static_cast<double>(r.num_good) / static_cast<double>(finished);
  r.records = std::move(records);
  return r;
}

std::string format_report(const BenchReport& r) {
  std::string o;
  char buf[512];
  auto row = [&](const char* name, const Summary& s, const char* unit) {
    std::snprintf(buf, sizeof(buf), "  %-14s %10.2f %10.2f %10.2f %10.2f %10.2f  %s\n", name, s.mean, s.p50,
                  s.p95, s.p99, s.max, unit);
    o += buf;
  };
  o += "tokenserve bench: " + r.url + "  model " + r.model + (r.interrupted ? "  (INTERRUPTED: partial report)" : "") + "\n";
  o += "  scenario       " + r.scenario + "\n";
  o += "  mode           " + r.mode + "\n";
  std::snprintf(buf, sizeof(buf), "  requests       %lld ok, %lld errors, %lld cancelled (%lld sent) in %.2f s\n",
                static_cast<long long>(r.num_ok), static_cast<long long>(r.num_errors),
                static_cast<long long>(r.num_cancelled), static_cast<long long>(r.num_sent), r.elapsed_s);
  o += buf;
  std::snprintf(buf, sizeof(buf), "  throughput     %.2f req/s, %.1f output tok/s, %.1f total tok/s\n", r.req_per_s,
                r.output_tok_per_s, r.total_tok_per_s);
  o += buf;
  std::snprintf(buf, sizeof(buf), "  tokens         %lld prompt, %lld output (usage from the server on %lld of %lld; prompts %s)\n",
                static_cast<long long>(r.total_prompt_tokens), static_cast<long long>(r.total_output_tokens),
                static_cast<long long>(r.num_usage_reported), static_cast<long long>(r.num_ok),
                r.prompts_exact ? "sized with /tokenize" : "approximate");
  o += buf;
  std::snprintf(buf, sizeof(buf), "  %-14s %10s %10s %10s %10s %10s\n", "", "mean", "p50", "p95", "p99", "max");
  o += buf;
  row("TTFT", r.ttft_ms, "ms");
  row("TPOT", r.tpot_ms, "ms");
  row("ITL", r.itl_ms, "ms");
  row("E2E", r.e2e_ms, "ms");
  row("prompt tok", r.prompt_tokens, "tokens");
  row("output tok", r.output_tokens, "tokens");
  if (!r.errors.empty()) {
    o += "  errors        ";
    for (const auto& [k, n] : r.errors) o += " " + k + ": " + std::to_string(n);
    o += "\n";
    for (const RequestRecord& q : r.records)
      if (!q.ok && !q.cancelled && !q.error_message.empty()) {
        o += "  first error    " + q.error + ": " + q.error_message.substr(0, 160) + "\n";
        break;
      }
  }
  std::string slo;
  if (r.slo_ttft_ms) slo += "TTFT <= " + fmt("%g", *r.slo_ttft_ms) + " ms";
  if (r.slo_tpot_ms) slo += std::string(slo.empty() ? "" : ", ") + "TPOT <= " + fmt("%g", *r.slo_tpot_ms) + " ms";
  std::snprintf(buf, sizeof(buf), "  goodput        %lld of %lld (%.1f%%), %.2f req/s%s%s%s\n",
                static_cast<long long>(r.num_good), static_cast<long long>(r.num_ok + r.num_errors),
                100 * r.goodput_share, r.goodput_rate, slo.empty() ? "" : " meeting ", slo.c_str(),
                slo.empty() ? " (no SLO given: every successful request counts)" : "");
  o += buf;
  return o;
}

std::string report_json(const BenchReport& r) {
  json j;
  j["url"] = r.url;
  j["model"] = r.model;
  j["scenario"] = r.scenario;
  j["mode"] = r.mode;
  j["interrupted"] = r.interrupted;
  j["prompts_exact"] = r.prompts_exact;
  j["elapsed_s"] = r.elapsed_s;
  j["requests"] = {{"sent", r.num_sent}, {"ok", r.num_ok}, {"errors", r.num_errors}, {"cancelled", r.num_cancelled},
                   {"usage_reported", r.num_usage_reported}};
  j["tokens"] = {{"prompt", r.total_prompt_tokens}, {"output", r.total_output_tokens}};
  j["throughput"] = {{"requests_per_s", r.req_per_s}, {"output_tokens_per_s", r.output_tok_per_s},
                     {"total_tokens_per_s", r.total_tok_per_s}};
  j["ttft_ms"] = summary_json(r.ttft_ms);
  j["tpot_ms"] = summary_json(r.tpot_ms);
  j["itl_ms"] = summary_json(r.itl_ms);
  j["e2e_ms"] = summary_json(r.e2e_ms);
  j["prompt_tokens"] = summary_json(r.prompt_tokens);
  j["output_tokens"] = summary_json(r.output_tokens);
  j["errors"] = r.errors;
  j["goodput"] = {{"good", r.num_good}, {"share", r.goodput_share}, {"requests_per_s", r.goodput_rate},
                  {"slo_ttft_ms", r.slo_ttft_ms ? json(*r.slo_ttft_ms) : json()},
                  {"slo_tpot_ms", r.slo_tpot_ms ? json(*r.slo_tpot_ms) : json()}};
  json reqs = json::array();
  for (const RequestRecord& q : r.records) {
    json e = {{"index", q.index},          {"ok", q.ok},
              {"cancelled", q.cancelled},  {"status", q.http_status},
              {"scheduled_s", q.scheduled_s}, {"start_s", q.start_s},
              {"end_s", q.end_s},          {"ttft_ms", q.ttft_ms},
              {"tpot_ms", q.tpot_ms},      {"e2e_ms", q.e2e_ms},
              {"itl_ms", q.itl_ms},        {"prompt_tokens", q.prompt_tokens},
              {"output_tokens", q.output_tokens}, {"usage_reported", q.usage_reported},
              {"target_input_tokens", q.target_input_tokens}, {"target_output_tokens", q.target_output_tokens}};
    if (!q.tier.empty()) e["tier"] = q.tier;
    if (!q.error.empty()) e["error"] = q.error;
    if (!q.error_message.empty()) e["error_message"] = q.error_message;
    reqs.push_back(std::move(e));
  }
  j["per_request"] = std::move(reqs);
  return j.dump(2) + "\n";
}

std::string report_svg(const BenchReport& r) {
  constexpr double kW = 1000, kH = 760;
  std::string svg = fmt("<svg xmlns='http://www.w3.org/2000/svg' width='%g' ", kW) + fmt("height='%g' ", kH) +
                    "font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  svg += "<text x='20' y='24' font-size='15'>" + esc("tokenserve bench: " + r.scenario + "; " + r.mode) + "</text>\n";
  svg += "<text x='20' y='42' font-size='12'>" +
         esc(fmt("%.2f req/s, ", r.req_per_s) + fmt("%.1f output tok/s, ", r.output_tok_per_s) +
             std::to_string(r.num_ok) + " ok, " + std::to_string(r.num_errors) + " errors" +
             (r.interrupted ? " (interrupted)" : "")) +
         "</text>\n";

  std::vector<double> ttft, tpot, itl;
  for (const RequestRecord& q : r.records) {
    if (!q.ok) continue;
    ttft.push_back(q.ttft_ms);
    if (q.output_tokens > 1) tpot.push_back(q.tpot_ms);
    itl.insert(itl.end(), q.itl_ms.begin(), q.itl_ms.end());
  }
  // Axes stop at 1.5 x P99 so one outlier does not squash the curve; the tail shows as the
  // curve ending below 1.
  Panel a{70, 80, 380, 250, nice_ceil(std::min(r.ttft_ms.max, 1.5 * r.ttft_ms.p99)), 1};
  a.frame(&svg, "TTFT distribution (CDF)", "time to first token (ms)", "fraction of requests", "%.1f");
  a.line(&svg, cdf(ttft), "#1f77b4", "TTFT", 0);
  // TPOT and ITL share an axis.
  const double tmax = nice_ceil(std::min(std::max(r.tpot_ms.max, r.itl_ms.max), 1.5 * std::max(r.tpot_ms.p99, r.itl_ms.p99)));
  Panel b{580, 80, 380, 250, tmax, 1};
  b.frame(&svg, "TPOT and ITL distributions (CDF)", "ms per output token", "fraction", "%.1f");
  b.line(&svg, cdf(tpot), "#d62728", "TPOT (per request)", 0);
  b.line(&svg, cdf(itl), "#2ca02c", "ITL (per chunk)", 1);

  // Throughput over time: output tokens per bucket from chunk arrival times (each chunk
  // weighted so a request's chunks add up to its output tokens), and completed requests.
  const double span = std::max(r.elapsed_s, 1e-3);
  const int num_buckets = std::clamp(static_cast<int>(span / 0.25), 5, 60);  // >= 0.25 s each
  const double bucket = span / num_buckets;
  std::vector<double> tok(num_buckets, 0), done(num_buckets, 0);
  for (const RequestRecord& q : r.records) {
    if (!q.ok) continue;
    const double per_chunk = q.chunk_s.empty() ? 0 : static_cast<double>(q.output_tokens) / q.chunk_s.size();
    for (double t : q.chunk_s) tok[std::min(num_buckets - 1, static_cast<int>(t / bucket))] += per_chunk;
    done[std::min(num_buckets - 1, static_cast<int>(q.end_s / bucket))] += 1;
  }
  double tmax_rate = 0, dmax_rate = 0;
  for (int i = 0; i < num_buckets; ++i) {
    tmax_rate = std::max(tmax_rate, tok[i] / bucket);
    dmax_rate = std::max(dmax_rate, done[i] / bucket);
  }
  Panel c{70, 420, 890, 270, nice_ceil(span), nice_ceil(tmax_rate)};
  c.frame(&svg, "Throughput over time", "seconds since start", "output tokens/s", "%.0f");
  std::vector<std::pair<double, double>> tok_pts, done_pts;
  const double dscale = dmax_rate > 0 ? c.ymax / nice_ceil(dmax_rate) : 1;
  for (int i = 0; i < num_buckets; ++i) {
    tok_pts.emplace_back((i + 0.5) * bucket, tok[i] / bucket);
    done_pts.emplace_back((i + 0.5) * bucket, done[i] / bucket * dscale);
  }
  c.line(&svg, tok_pts, "#1f77b4", "output tok/s", 0);
  c.line(&svg, done_pts, "#ff7f0e", "req/s (scaled: top = " + fmt("%g", nice_ceil(dmax_rate)) + ")", 1);
  svg += "</svg>\n";
  return svg;
}

}  // namespace ts::tools
