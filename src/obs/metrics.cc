#include "obs/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace ts::obs {

const char* metric_type_name(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

namespace {
// HELP text escapes only backslash and newline.
std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}
}  // namespace

// --- Counter / Histogram ---------------------------------------------------------------------

void Counter::advance_to(int64_t total) {
  int64_t cur = value_.load(std::memory_order_relaxed);
  while (total > cur && !value_.compare_exchange_weak(cur, total, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::span<const double> bounds)
    : bounds_(bounds.begin(), bounds.end()),
      counts_(new std::atomic<int64_t>[bounds.size() + 1]) {
  for (size_t i = 1; i < bounds_.size(); ++i) {
    TS_CHECK(bounds_[i] > bounds_[i - 1], "histogram bounds must increase strictly");
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v, int64_t n) {
  if (n <= 0 || std::isnan(v)) return;
  // First bound >= v: Prometheus buckets are "less than or equal".
  size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(n, std::memory_order_relaxed);
  sum_.fetch_add(v * static_cast<double>(n), std::memory_order_relaxed);
}

int64_t Histogram::count() const {
  int64_t c = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) c += counts_[i].load(std::memory_order_relaxed);
  return c;
}

double Histogram::quantile(double q) const {
  std::vector<int64_t> counts(bounds_.size() + 1);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = counts_[i].load(std::memory_order_relaxed);
  return bucket_quantile(bounds_, counts, q);
}

double bucket_quantile(std::span<const double> bounds, std::span<const int64_t> counts, double q) {
  TS_CHECK(counts.size() == bounds.size() + 1, "one count per bound plus +Inf");
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if (total == 0) return std::numeric_limits<double>::quiet_NaN();
  q = std::clamp(q, 0.0, 1.0);
  double rank = q * static_cast<double>(total);
  int64_t cum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    int64_t prev = cum;
    cum += counts[i];
    if (static_cast<double>(cum) >= rank && counts[i] > 0) {
      if (i == bounds.size()) return bounds.empty() ? 0.0 : bounds.back();
      double lo = i == 0 ? std::min(0.0, bounds[0]) : bounds[i - 1];
      double hi = bounds[i];
      double frac = (rank - static_cast<double>(prev)) / static_cast<double>(counts[i]);
      return lo + (hi - lo) * frac;
    }
  }
  return bounds.empty() ? 0.0 : bounds.back();
}

// --- Families --------------------------------------------------------------------------------

FamilyBase::FamilyBase(std::string name, std::string help, MetricType type,
                       std::vector<std::string> label_names, size_t max_series)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      max_series_(std::max<size_t>(max_series, 1)) {}

std::string FamilyBase::label_text(const std::vector<std::string>& values,
                                   std::string_view extra) const {
  if (label_names_.empty() && extra.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < label_names_.size(); ++i) {
    if (i) out += ',';
    out += label_names_[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  if (!extra.empty()) {
    if (!label_names_.empty()) out += ',';
    out += extra;
  }
  out += '}';
  return out;
}

template <typename M>
M* Family<M>::make() {
  if constexpr (std::is_same_v<M, Histogram>) {
    return &storage_.emplace_back(bounds_);
  } else {
    return &storage_.emplace_back();
  }
}

template <typename M>
M& Family<M>::with(std::span<const std::string_view> values) {
  TS_CHECK(values.size() == label_names_.size(), "label value count must match label names");
  {
    std::shared_lock lock(mu_);
    auto it = index_.find(values);
    if (it != index_.end()) return *it->second;
  }
  std::vector<std::string> key(values.begin(), values.end());
  std::unique_lock lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) return *it->second;
  if (index_.size() >= max_series_) {
    // Bounded cardinality: every further label set shares one overflow series.
    key.assign(label_names_.size(), std::string(kOverflowLabel));
    it = index_.find(key);
    if (it != index_.end()) return *it->second;
  }
  M* m = make();
  index_.emplace(std::move(key), m);
  return *m;
}

template <typename M>
void Family<M>::write_text(std::string* out) const {
  std::string& o = *out;
  o += "# HELP " + name_ + " " + escape_help(help_) + "\n";
  o += "# TYPE " + name_ + " " + metric_type_name(type_) + "\n";
  std::shared_lock lock(mu_);
  for (const auto& [values, m] : index_) {
    if constexpr (std::is_same_v<M, Histogram>) {
      int64_t cum = 0;
      const auto& b = m->bounds();
      for (size_t i = 0; i <= b.size(); ++i) {
        cum += m->bucket_count(i);
        std::string le = "le=\"" + (i < b.size() ? format_value(b[i]) : std::string("+Inf")) + "\"";
        o += name_ + "_bucket" + label_text(values, le) + " " + std::to_string(cum) + "\n";
      }
      std::string labels = label_text(values, "");
      o += name_ + "_sum" + labels + " " + format_value(m->sum()) + "\n";
      o += name_ + "_count" + labels + " " + std::to_string(cum) + "\n";
    } else if constexpr (std::is_same_v<M, Counter>) {
      o += name_ + label_text(values, "") + " " + std::to_string(m->value()) + "\n";
    } else {
      o += name_ + label_text(values, "") + " " + format_value(m->value()) + "\n";
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// --- Registry --------------------------------------------------------------------------------

FamilyBase& Registry::add(std::unique_ptr<FamilyBase> f) {
  std::lock_guard lock(mu_);
  for (const auto& g : families_) TS_CHECK(g->name() != f->name(), "duplicate metric family name");
  families_.push_back(std::move(f));
  return *families_.back();
}

CounterFamily& Registry::counter(std::string name, std::string help,
                                 std::vector<std::string> labels, size_t max_series) {
  bool unlabelled = labels.empty();
  auto& f = static_cast<CounterFamily&>(add(std::make_unique<CounterFamily>(
      std::move(name), std::move(help), MetricType::kCounter, std::move(labels), max_series)));
  if (unlabelled) f.with({});  // an unlabelled metric is always exported, 0 until used
  return f;
}

GaugeFamily& Registry::gauge(std::string name, std::string help, std::vector<std::string> labels,
                             size_t max_series) {
  bool unlabelled = labels.empty();
  auto& f = static_cast<GaugeFamily&>(add(std::make_unique<GaugeFamily>(
      std::move(name), std::move(help), MetricType::kGauge, std::move(labels), max_series)));
  if (unlabelled) f.with({});
  return f;
}

HistogramFamily& Registry::histogram(std::string name, std::string help,
                                     std::vector<double> bounds, std::vector<std::string> labels,
                                     size_t max_series) {
  bool unlabelled = labels.empty();
  auto& f = static_cast<HistogramFamily&>(
      add(std::make_unique<HistogramFamily>(std::move(name), std::move(help),
                                            MetricType::kHistogram, std::move(labels), max_series,
                                            std::move(bounds))));
  if (unlabelled) f.with({});
  return f;
}

std::string Registry::prometheus_text() const {
  std::string out;
  out.reserve(16 << 10);
  std::lock_guard lock(mu_);
  for (const auto& f : families_) f->write_text(&out);
  return out;
}

std::vector<Registry::FamilyInfo> Registry::families() const {
  std::lock_guard lock(mu_);
  std::vector<FamilyInfo> out;
  for (const auto& f : families_) out.push_back({f->name(), f->type(), f->label_names()});
  return out;
}

}  // namespace ts::obs
