// Markdown report and SVG charts of an eval run (declared in tools/eval.h).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tools/eval.h"

namespace ts::tools {

namespace {

std::string esc_xml(const std::string& s) {
  std::string r;
  for (char ch : s) {
    switch (ch) {
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '&': r += "&amp;"; break;
      case '"': r += "&quot;"; break;
      default: r += ch;
    }
  }
  return r;
}

// Markdown table cells: no pipes or newlines.
std::string cell(const std::string& s, size_t max = 80) {
  std::string r;
  for (char ch : s) {
    if (ch == '|') r += "\\|";
    else if (ch == '\n' || ch == '\r') r += ' ';
    else r += ch;
  }
  if (r.size() > max) r = r.substr(0, max) + "…";
  return r;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

const LayerComparison* find_cmp(const Comparison* cmp, const std::string& layer) {
  if (!cmp) return nullptr;
  for (const auto& l : cmp->layers)
    if (l.layer == layer) return &l;
  return nullptr;
}

}  // namespace

std::string eval_markdown(const EvalRun& run, const Comparison* cmp, const std::string& stem) {
  std::ostringstream o;
  o << "# Eval report\n\n";
  o << "- model: `" << run.model << "` at " << run.url << "\n";
  o << "- suite: `" << run.suite << "`, " << run.cases.size() << " cases, " << run.layers.size()
    << " layers\n";
  o << "- created: " << run.created << "\n";
  if (cmp) o << "- baseline: `" << cmp->baseline_path << "`\n";
  o << "\n";
  if (cmp && !cmp->regressed.empty()) {
    o << "**Regression** in:";
    for (const auto& r : cmp->regressed) o << " `" << r << "`";
    o << "\n\n";
  }
  if (cmp && !cmp->flagged.empty()) {
    o << "**Flagged** (score up while output length or repetition jumped; check the scorer is not "
         "being gamed):";
    for (const auto& r : cmp->flagged) o << " `" << r << "`";
    o << "\n\n";
  }
  o << "## Layers\n\n";
  o << "| layer | n | score | 95% CI | errors | tokens p50 | tokens p95 | repetition |";
  if (cmp) o << " baseline | delta | p | verdict | flags |";
  o << "\n|---|---|---|---|---|---|---|---|";
  if (cmp) o << "---|---|---|---|---|";
  o << "\n";
  for (const auto& [name, l] : run.layers) {
    o << "| " << cell(name) << " | " << l.n << " | " << fmt("%.3f", l.score) << " | ["
      << fmt("%.3f", l.ci.low) << ", " << fmt("%.3f", l.ci.high) << "] | " << l.errors << " | "
      << fmt("%.0f", l.output_tokens.p50) << " | " << fmt("%.0f", l.output_tokens.p95) << " | "
      << fmt("%.3f", l.repetition) << " |";
    if (cmp) {
      const LayerComparison* lc = find_cmp(cmp, name);
      if (lc && lc->in_baseline) {
        o << " " << fmt("%.3f", lc->base_score) << " | " << fmt("%+.3f", lc->delta) << " | "
          << fmt("%.4f", lc->test.p_value) << " | " << lc->verdict << " | ";
        for (size_t i = 0; i < lc->flags.size(); ++i) o << (i ? ", " : "") << lc->flags[i];
        o << " |";
      } else {
        o << " – | – | – | new | |";
      }
    }
    o << "\n";
  }
  o << "\n![scores](" << stem << ".scores.svg)\n\n![output lengths](" << stem << ".lengths.svg)\n\n";
  o << "## Failed cases\n\n| layer | id | reason | output |\n|---|---|---|---|\n";
  int shown = 0;
  for (const auto& c : run.cases) {
    if (c.score >= 1) continue;
    if (++shown > 200) {
      o << "| … | | more in RUN.json | |\n";
      break;
    }
    o << "| " << cell(c.layer) << " | " << cell(c.id) << " | "
      << cell(c.error.empty() ? c.reason : c.error) << " | " << cell(c.output) << " |\n";
  }
  if (shown == 0) o << "| | | none | |\n";
  return o.str();
}

std::string eval_scores_svg(const EvalRun& run, const Comparison* cmp) {
  // One bar per layer (score), a whisker for the 95% interval, a tick for the baseline score.
  const int n = static_cast<int>(run.layers.size());
  const int bar = 48, gap = 32, left = 50, top = 30, h = 240;
  const int width = left + n * (bar + gap) + gap, height = top + h + 60;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<text x=\"" << left << "\" y=\"18\" font-size=\"13\">score per layer (95% CI"
    << (cmp ? "; black tick = baseline" : "") << ")</text>\n";
  for (int t = 0; t <= 4; ++t) {
    const double y = top + h - h * t / 4.0;
    o << "<line x1=\"" << left << "\" x2=\"" << width - 10 << "\" y1=\"" << y << "\" y2=\"" << y
      << "\" stroke=\"#ddd\"/><text x=\"" << left - 6 << "\" y=\"" << y + 4
      << "\" text-anchor=\"end\">" << fmt("%.2f", t / 4.0) << "</text>\n";
  }
  int i = 0;
  for (const auto& [name, l] : run.layers) {
    const double x = left + gap + i * (bar + gap);
    const LayerComparison* lc = find_cmp(cmp, name);
    const char* colour = lc && lc->verdict == "regression"    ? "#d9534f"
                         : lc && lc->verdict == "improvement" ? "#5cb85c"
                                                              : "#4a78c2";
    const double y = top + h * (1 - l.score);
    o << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << bar << "\" height=\""
      << top + h - y << "\" fill=\"" << colour << "\"><title>" << esc_xml(name) << ": "
      << fmt("%.3f", l.score) << "</title></rect>\n";
    const double ylo = top + h * (1 - l.ci.low), yhi = top + h * (1 - l.ci.high);
    const double cx = x + bar / 2.0;
    o << "<line x1=\"" << cx << "\" x2=\"" << cx << "\" y1=\"" << ylo << "\" y2=\"" << yhi
      << "\" stroke=\"#333\"/><line x1=\"" << cx - 6 << "\" x2=\"" << cx + 6 << "\" y1=\"" << ylo
      << "\" y2=\"" << ylo << "\" stroke=\"#333\"/><line x1=\"" << cx - 6 << "\" x2=\"" << cx + 6
      << "\" y1=\"" << yhi << "\" y2=\"" << yhi << "\" stroke=\"#333\"/>\n";
    if (lc && lc->in_baseline) {
      const double yb = top + h * (1 - lc->base_score);
      o << "<line x1=\"" << x - 4 << "\" x2=\"" << x + bar + 4 << "\" y1=\"" << yb << "\" y2=\""
        << yb << "\" stroke=\"#000\" stroke-width=\"3\"/>\n";
    }
    o << "<text x=\"" << cx << "\" y=\"" << top + h + 16 << "\" text-anchor=\"middle\">"
      << esc_xml(name.size() > 14 ? name.substr(0, 13) + "…" : name) << "</text>\n";
    ++i;
  }
  o << "</svg>\n";
  return o.str();
}

std::string eval_lengths_svg(const EvalRun& run) {
  // Per layer: min..max line, p50..p95 box, mean dot, over completion tokens.
  const int n = static_cast<int>(run.layers.size());
  const int col = 80, left = 50, top = 30, h = 240;
  const int width = left + n * col + 20, height = top + h + 60;
  double max_v = 1;
  for (const auto& [_, l] : run.layers) max_v = std::max(max_v, l.output_tokens.max);
  auto ypos = [&](double v) { return top + h * (1 - v / max_v); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<text x=\"" << left << "\" y=\"18\" font-size=\"13\">output tokens per layer (min-max, "
       "p50-p95 box, mean dot)</text>\n";
  for (int t = 0; t <= 4; ++t) {
    const double v = max_v * t / 4.0;
    o << "<line x1=\"" << left << "\" x2=\"" << width - 10 << "\" y1=\"" << ypos(v) << "\" y2=\""
      << ypos(v) << "\" stroke=\"#ddd\"/><text x=\"" << left - 6 << "\" y=\"" << ypos(v) + 4
      << "\" text-anchor=\"end\">" << fmt("%.0f", v) << "</text>\n";
  }
  int i = 0;
  for (const auto& [name, l] : run.layers) {
    const double cx = left + col * i + col / 2.0;
    const Summary& s = l.output_tokens;
    o << "<line x1=\"" << cx << "\" x2=\"" << cx << "\" y1=\"" << ypos(s.min) << "\" y2=\""
      << ypos(s.max) << "\" stroke=\"#555\"/>\n";
    o << "<rect x=\"" << cx - 14 << "\" y=\"" << ypos(s.p95) << "\" width=\"28\" height=\""
      << std::max(1.0, ypos(s.p50) - ypos(s.p95)) << "\" fill=\"#9bc0e8\" stroke=\"#4a78c2\"/>\n";
    o << "<circle cx=\"" << cx << "\" cy=\"" << ypos(s.mean) << "\" r=\"3\" fill=\"#000\"/>\n";
    o << "<text x=\"" << cx << "\" y=\"" << top + h + 16 << "\" text-anchor=\"middle\">"
      << esc_xml(name.size() > 12 ? name.substr(0, 11) + "…" : name) << "</text>\n";
    ++i;
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace ts::tools
