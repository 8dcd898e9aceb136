// Metrics registry: counters, gauges and histograms with labels, and their Prometheus text
// exposition (format 0.0.4).
//
// Hot path: Counter::inc, Gauge::set/add and Histogram::observe are single atomic operations
// (relaxed fetch_add/store on the metric itself; histogram buckets are separate atomics), so no
// caller ever waits on a lock to record a value. Resolving a label set to its series
// (Family::with) takes a shared (reader) lock on the family's index and, only the first time a
// label set is seen, a short exclusive lock to insert it; callers on tight loops resolve their
// series once and keep the reference, which stays valid for the registry's lifetime.
//
// Cardinality is bounded: a family holds at most `max_series` label sets; later new label sets
// all share one overflow series whose every label value is kOverflowLabel. Callers that know a
// label is user-controlled (tenant names) bound it themselves before (see ServerMetrics).
//
// Thread-safety: every method of Registry, the families and the metrics is thread-safe.
// Families are registered at start-up; references returned stay valid until the Registry dies.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ts::obs {

inline constexpr std::string_view kOverflowLabel = "__overflow__";

enum class MetricType { kCounter, kGauge, kHistogram };
const char* metric_type_name(MetricType t);  // "counter" | "gauge" | "histogram"

// A monotonically increasing integer (requests, tokens).
class Counter {
 public:
  void inc(int64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  // Raises the counter to `total` when that is larger (mirrors a cumulative count kept
  // elsewhere, e.g. the engine's preemptions); never lowers it.
  void advance_to(int64_t total);
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// A value that goes up and down (queue depth, KV usage).
class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double d) { value_.fetch_add(d, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Cumulative-bucket histogram. Bounds are upper bounds ("le"), strictly increasing; the +Inf
// bucket is implicit. count() is derived from the buckets so _count always equals the +Inf
// bucket in one scrape.
class Histogram {
 public:
  explicit Histogram(std::span<const double> bounds);
  // Records `n` observations of value `v` (n > 1: e.g. n inter-token gaps of the mean length).
  void observe(double v, int64_t n = 1);

  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i (i == bounds().size() is the +Inf bucket).
  int64_t bucket_count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  int64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  // Estimated q-quantile (0 <= q <= 1) by linear interpolation inside the bucket, as
  // Prometheus' histogram_quantile does; NaN when empty. Values in the +Inf bucket report
  // the highest finite bound.
  double quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<int64_t>[]> counts_;  // [bounds_.size() + 1]
  std::atomic<double> sum_{0.0};
};

// Quantile over explicit bucket counts (same rules as Histogram::quantile); exposed for the
// dashboard's per-interval histograms. counts.size() == bounds.size() + 1.
double bucket_quantile(std::span<const double> bounds, std::span<const int64_t> counts, double q);

// Orders label-value tuples; transparent so a lookup needs no allocation.
struct LabelValuesLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        [](std::string_view x, std::string_view y) { return x < y; });
  }
};

// Common part of a labelled metric family.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type,
             std::vector<std::string> label_names, size_t max_series);
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Appends this family's HELP, TYPE and sample lines.
  virtual void write_text(std::string* out) const = 0;

 protected:
  // Rendered `{a="x",b="y"}` for a label-value tuple ("" when the family has no labels);
  // `extra` is appended inside the braces (the histogram's le).
  std::string label_text(const std::vector<std::string>& values, std::string_view extra) const;

  std::string name_;
  std::string help_;
  MetricType type_;
  std::vector<std::string> label_names_;
  size_t max_series_;
};

// A metric type with a label set per series. M is Counter, Gauge or Histogram.
template <typename M>
class Family : public FamilyBase {
 public:
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> labels,
         size_t max_series, std::vector<double> bounds = {})
      : FamilyBase(std::move(name), std::move(help), type, std::move(labels), max_series),
        bounds_(std::move(bounds)) {}

  // The series for these label values (one per label name, in order; CHECKed). Creates it on
  // first use; past max_series new label sets map to the overflow series.
  M& with(std::span<const std::string_view> values);
  M& with(std::initializer_list<std::string_view> values) {
    return with(std::span<const std::string_view>(values.begin(), values.size()));
  }
  // Visits every series (label values, metric) under the reader lock.
  template <typename F>
  void for_each(F&& f) const {
    std::shared_lock lock(mu_);
    for (const auto& [values, m] : index_) f(values, *m);
  }
  void write_text(std::string* out) const override;

 private:
  M* make();

  std::vector<double> bounds_;  // histograms only
  mutable std::shared_mutex mu_;
  std::map<std::vector<std::string>, M*, LabelValuesLess> index_;  // label values -> series
  std::deque<M> storage_;                                      // stable addresses
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class Registry {
 public:
  static constexpr size_t kDefaultMaxSeries = 2000;

  // Registers a family (names must be unique; CHECKed). Call at start-up.
  CounterFamily& counter(std::string name, std::string help, std::vector<std::string> labels = {},
                         size_t max_series = kDefaultMaxSeries);
  GaugeFamily& gauge(std::string name, std::string help, std::vector<std::string> labels = {},
                     size_t max_series = kDefaultMaxSeries);
  HistogramFamily& histogram(std::string name, std::string help, std::vector<double> bounds,
                             std::vector<std::string> labels = {},
                             size_t max_series = kDefaultMaxSeries);

  // All families in registration order, as Prometheus text format 0.0.4. Families without
  // labels always show their one series (0 until used); labelled ones show only used series.
  std::string prometheus_text() const;
  struct FamilyInfo {
    std::string name;                 // full name (counters end in _total)
    MetricType type;
    std::vector<std::string> labels;  // label names (histograms add "le" to _bucket)
  };
  // Every registered family, in registration order.
  std::vector<FamilyInfo> families() const;

 private:
  FamilyBase& add(std::unique_ptr<FamilyBase> f);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_;
};

// Formats a sample value the way Prometheus reads it: shortest round-trip decimal,
// "+Inf"/"-Inf"/"NaN" for the special values.
std::string format_value(double v);
// Escapes a label value (backslash, double quote, newline).
std::string escape_label_value(std::string_view v);

}  // namespace ts::obs
