#include "gateway/report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

namespace ts::gateway {

Result<ReportFormat> parse_report_format(std::string_view name) {
  if (name == "table") return ReportFormat::kTable;
  if (name == "csv") return ReportFormat::kCsv;
  if (name == "json") return ReportFormat::kJson;
  return invalid_argument("unknown format '" + std::string(name) + "': expected table, csv or json");
}

namespace {

void add_to(ReportRow& into, const ReportRow& r) {
  into.num_requests += r.num_requests;
  into.prompt_tokens += r.prompt_tokens;
  into.cached_tokens += r.cached_tokens;
  into.completion_tokens += r.completion_tokens;
  into.total_tokens += r.total_tokens;
  into.cost_pico += r.cost_pico;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

Result<Report> build_report(LedgerStore& ledger, GroupBy by, const LedgerFilter& filter,
                            const std::map<std::string, Price>& prices) {
  TS_ASSIGN_OR_RETURN(auto groups, ledger.aggregate(by, filter));
  Report rep;
  rep.by = by;
  rep.priced = !prices.empty();
  rep.totals.group = "total";
  std::set<std::string> unpriced;
  for (const UsageGroupRow& g : groups) {
    if (rep.rows.empty() || rep.rows.back().group != g.group) {
      rep.rows.emplace_back();
      rep.rows.back().group = g.group;
    }
    ReportRow part;
    part.num_requests = g.num_requests;
    part.prompt_tokens = g.prompt_tokens;
    part.cached_tokens = g.cached_tokens;
    part.completion_tokens = g.completion_tokens;
    part.total_tokens = g.prompt_tokens + g.completion_tokens;
    auto price = prices.find(g.model);
    if (price != prices.end())
      part.cost_pico = cost_pico(price->second, g.prompt_tokens, g.cached_tokens, g.completion_tokens);
    else
      unpriced.insert(g.model);
    add_to(rep.rows.back(), part);
  }
  for (const ReportRow& r : rep.rows) add_to(rep.totals, r);
  if (rep.priced) rep.unpriced_models.assign(unpriced.begin(), unpriced.end());
  return rep;
}

std::string format_report(const Report& rep, ReportFormat format) {
  const char* by = group_by_name(rep.by);
  if (format == ReportFormat::kJson) {
    nlohmann::ordered_json j;
    j["by"] = by;
    auto row_json = [&](const ReportRow& r) {
      nlohmann::ordered_json o;
      o[by] = r.group;
      o["requests"] = r.num_requests;
      o["prompt_tokens"] = r.prompt_tokens;
      o["cached_tokens"] = r.cached_tokens;
      o["completion_tokens"] = r.completion_tokens;
      o["total_tokens"] = r.total_tokens;
      if (rep.priced) o["cost"] = format_money(r.cost_pico);
      return o;
    };
    j["rows"] = nlohmann::ordered_json::array();
    for (const ReportRow& r : rep.rows) j["rows"].push_back(row_json(r));
    auto t = row_json(rep.totals);
    t.erase(by);
    j["totals"] = t;
    if (!rep.unpriced_models.empty()) j["unpriced_models"] = rep.unpriced_models;
    return j.dump(2) + "\n";
  }
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> head = {by, "requests", "prompt_tokens", "cached_tokens",
                                   "completion_tokens", "total_tokens"};
  if (rep.priced) head.push_back("cost");
  cells.push_back(head);
  auto add = [&](const ReportRow& r) {
    std::vector<std::string> c = {r.group, std::to_string(r.num_requests),
                                  std::to_string(r.prompt_tokens), std::to_string(r.cached_tokens),
                                  std::to_string(r.completion_tokens), std::to_string(r.total_tokens)};
    if (rep.priced) c.push_back(format_money(r.cost_pico));
    cells.push_back(std::move(c));
  };
  for (const ReportRow& r : rep.rows) add(r);
  add(rep.totals);
  std::string out;
  if (format == ReportFormat::kCsv) {
    for (const auto& row : cells) {
      for (size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + csv_field(row[i]);
      out += "\n";
    }
    return out;
  }
  std::vector<size_t> width(head.size(), 0);
  for (const auto& row : cells)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t i = 0; i < row.size(); ++i) {
      std::string pad(width[i] - row[i].size(), ' ');
      s += (i ? "  " : "") + (i == 0 ? row[i] + pad : pad + row[i]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  size_t total_width = 0;
  for (size_t w : width) total_width += w;
  total_width += 2 * (width.size() - 1);
  for (size_t r = 0; r < cells.size(); ++r) {
    if (r == cells.size() - 1 || r == 1) out += std::string(total_width, '-') + "\n";
    out += line(cells[r]);
  }
  if (!rep.unpriced_models.empty()) {
    out += "(no price configured for:";
    for (const auto& m : rep.unpriced_models) out += " " + m;
    out += ")\n";
  }
  return out;
}

Result<int64_t> export_replay(LedgerStore& ledger, const LedgerFilter& filter, std::ostream& out) {
  TS_ASSIGN_OR_RETURN(auto rows, ledger.rows(filter));
  if (rows.empty()) return int64_t{0};
  int64_t t0 = to_unix_ms(rows.front().time);
  for (const UsageRecord& r : rows) {
    char arrival[32];
    int64_t ms = to_unix_ms(r.time) - t0;
    std::snprintf(arrival, sizeof(arrival), "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
    out << "{\"arrival_s\": " << arrival << ", \"input_tokens\": " << r.prompt_tokens
        << ", \"output_tokens\": " << r.completion_tokens << ", \"tier\": \""
        << engine::tier_name(r.tier) << "\"}\n";
  }
  return int64_t(rows.size());
}

}  // namespace ts::gateway
