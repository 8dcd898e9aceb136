// Reads deploy/prometheus/alerts.yml and checks every rule expression against what the server
// exports: each metric name is a registered `tokenserve:` family (histograms through their
// _bucket/_sum/_count series), each label matcher and `by (...)` label exists on the metrics
// of that expression, and the rules the observability issue asks for are all there.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "obs/server_metrics.h"

namespace ts::obs {
namespace {

struct Rule {
  std::string alert;
  std::string expr;
};

size_t indent_of(const std::string& line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  return i;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = indent_of(s);
  return s.substr(i);
}

// A small YAML reader for the rule file's shape: `- alert: NAME` then `expr: ...` either inline
// or as a block scalar (| or >) of deeper-indented lines. Comments are skipped.
std::vector<Rule> read_rules(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<Rule> rules;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string t = trim(lines[i]);
    if (t.rfind("- alert:", 0) == 0) {
      rules.push_back({trim(t.substr(8)), ""});
    } else if (t.rfind("expr:", 0) == 0) {
      EXPECT_FALSE(rules.empty()) << "expr before any alert at line " << i + 1;
      if (rules.empty()) continue;
      std::string v = trim(t.substr(5));
      if (v == "|" || v == ">" || v == "|-" || v == ">-") {
        size_t base = indent_of(lines[i]);
        v.clear();
        while (i + 1 < lines.size() &&
               (trim(lines[i + 1]).empty() || indent_of(lines[i + 1]) > base)) {
          v += " " + trim(lines[++i]);
        }
      }
      rules.back().expr = trim(v);
    }
  }
  return rules;
}

bool ident_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// Metric selectors of a PromQL expression: (metric name, label names in its {...} matcher),
// plus the labels named in by/without/on/ignoring groupings. Identifiers followed by '(' are
// functions; keywords are skipped; anything else must be a metric.
struct Parsed {
  std::vector<std::pair<std::string, std::vector<std::string>>> selectors;
  std::vector<std::string> grouping_labels;
  std::vector<std::string> unknown;  // bare identifiers that are neither metric nor keyword
};

Parsed parse_expr(const std::string& e) {
  static const std::set<std::string> kKeywords = {"and", "or", "unless", "by", "without", "on",
                                                  "ignoring", "group_left", "group_right",
                                                  "bool", "offset", "Inf", "NaN", "inf", "nan"};
  // Aggregations may take their grouping before the parenthesis: sum by (le) (...).
  static const std::set<std::string> kAggregations = {
      "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
      "bottomk", "topk", "quantile"};
  Parsed p;
  size_t i = 0;
  while (i < e.size()) {
    char c = e[i];
    if (c == '"' || c == '\'') {  // string literal
      size_t j = e.find(c, i + 1);
      i = j == std::string::npos ? e.size() : j + 1;
      continue;
    }
    if (c == '[') {  // range: [5m]
      i = e.find(']', i);
      i = i == std::string::npos ? e.size() : i + 1;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && i + 1 < e.size() &&
                                                        std::isdigit(static_cast<unsigned char>(e[i + 1])))) {
      while (i < e.size() && (std::isalnum(static_cast<unsigned char>(e[i])) || e[i] == '.' ||
                              e[i] == '-' || e[i] == '+'))
        ++i;
      continue;
    }
    if (!ident_char(c, true)) {
      ++i;
      continue;
    }
    size_t start = i;
    while (i < e.size() && ident_char(e[i], false)) ++i;
    std::string id = e.substr(start, i - start);
    size_t k = i;
    while (k < e.size() && e[k] == ' ') ++k;
    if (id == "by" || id == "without" || id == "on" || id == "ignoring") {
      if (k < e.size() && e[k] == '(') {
        size_t close = e.find(')', k);
        std::stringstream labels(e.substr(k + 1, close - k - 1));
        for (std::string l; std::getline(labels, l, ',');) p.grouping_labels.push_back(trim(l));
        i = close + 1;
      }
      continue;
    }
    if (kKeywords.count(id) || kAggregations.count(id)) continue;
    if (k < e.size() && e[k] == '(') continue;  // function call
    std::vector<std::string> labels;
    if (k < e.size() && e[k] == '{') {
      size_t close = e.find('}', k);
      std::string m = e.substr(k + 1, close - k - 1);
      // label op "value", ...: take the identifier before each operator.
      size_t pos = 0;
      while (pos < m.size()) {
        while (pos < m.size() && (m[pos] == ' ' || m[pos] == ',')) ++pos;
        size_t ls = pos;
        while (pos < m.size() && ident_char(m[pos], pos == ls)) ++pos;
        if (pos > ls) labels.push_back(m.substr(ls, pos - ls));
        size_t q = m.find('"', pos);
        if (q == std::string::npos) break;
        size_t q2 = m.find('"', q + 1);
        pos = q2 == std::string::npos ? m.size() : q2 + 1;
      }
      i = close + 1;
    }
    if (id.rfind("tokenserve:", 0) == 0) p.selectors.emplace_back(id, labels);
    else p.unknown.push_back(id);
  }
  return p;
}

// Exported series name -> its labels, from the server's registry.
std::map<std::string, std::set<std::string>> exported_series() {
  ServerMetrics metrics(ServerMetricsOptions{.model = "m"});
  std::map<std::string, std::set<std::string>> out;
  for (const auto& f : metrics.registry().families()) {
    std::set<std::string> labels(f.labels.begin(), f.labels.end());
    if (f.type == MetricType::kHistogram) {
      auto with_le = labels;
      with_le.insert("le");
      out[f.name + "_bucket"] = with_le;
      out[f.name + "_sum"] = labels;
      out[f.name + "_count"] = labels;
    } else {
      out[f.name] = labels;
    }
  }
  return out;
}

std::string alerts_path() { return std::string(TS_SOURCE_DIR) + "/deploy/prometheus/alerts.yml"; }

TEST(AlertRules, EveryExpressionUsesExportedMetricsAndLabels) {
  auto rules = read_rules(alerts_path());
  ASSERT_GE(rules.size(), 6u) << "could not read rules from " << alerts_path();
  auto exported = exported_series();
  for (const auto& r : rules) {
    SCOPED_TRACE(r.alert);
    ASSERT_FALSE(r.expr.empty());
    Parsed p = parse_expr(r.expr);
    EXPECT_FALSE(p.selectors.empty()) << "no tokenserve metric in: " << r.expr;
    EXPECT_TRUE(p.unknown.empty()) << "not an exported metric: " << p.unknown.front();
    std::set<std::string> expr_labels = {"le"};
    for (const auto& [name, labels] : p.selectors) {
      auto it = exported.find(name);
      ASSERT_NE(it, exported.end()) << "metric not exported: " << name;
      expr_labels.insert(it->second.begin(), it->second.end());
      for (const auto& l : labels) {
        EXPECT_TRUE(it->second.count(l)) << name << " has no label " << l;
      }
    }
    for (const auto& l : p.grouping_labels) {
      EXPECT_TRUE(expr_labels.count(l)) << "grouping by a label no metric has: " << l;
    }
  }
}

TEST(AlertRules, CoverWhatOperatorsNeed) {
  auto rules = read_rules(alerts_path());
  auto uses = [&](const std::string& needle) {
    for (const auto& r : rules) {
      if (r.expr.find(needle) != std::string::npos) return true;
    }
    return false;
  };
  // TTFT P95 over each tier's target.
  for (int t = 0; t < engine::kNumTiers; ++t) {
    std::string tier = engine::tier_name(static_cast<engine::Tier>(t));
    EXPECT_TRUE(uses("time_to_first_token_seconds_bucket{tier=\"" + tier + "\"}")) << tier;
  }
  EXPECT_TRUE(uses("histogram_quantile(0.95"));
  EXPECT_TRUE(uses("tokenserve:request_errors_total"));
  EXPECT_TRUE(uses("tokenserve:kv_cache_usage_perc"));
  EXPECT_TRUE(uses("deriv(tokenserve:num_requests_waiting"));
  EXPECT_TRUE(uses("deriv(tokenserve:ledger_spool_depth"));
}

TEST(AlertRules, CheckerCatchesUnknownNames) {
  // The checker itself must fail on a misspelt or foreign metric.
  Parsed p = parse_expr("rate(tokenserve:time_to_first_token_bucket{tier=\"x\"}[5m]) > 1 and vllm_up");
  ASSERT_EQ(p.selectors.size(), 1u);
  EXPECT_EQ(exported_series().count(p.selectors[0].first), 0u);
  ASSERT_EQ(p.unknown.size(), 1u);
  EXPECT_EQ(p.unknown[0], "vllm_up");
  Parsed q = parse_expr("sum by (tenant) (tokenserve:rate_limited_total{code=~\"5..\"})");
  ASSERT_EQ(q.selectors.size(), 1u);
  EXPECT_EQ(q.selectors[0].second, std::vector<std::string>{"code"});
  EXPECT_EQ(q.grouping_labels, std::vector<std::string>{"tenant"});
}

}  // namespace
}  // namespace ts::obs
