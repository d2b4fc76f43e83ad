// Copyright 2026 The Strata Authors.
//
// Metrics in the Prometheus text exposition format (version 0.0.4): counters,
// gauges and histograms in families with labels, and collectors that add
// samples computed at scrape time. docs/operations.md lists what Strata
// exports.
//
//   static metrics::Histogram& commit = metrics::Default().GetHistogram(
//       "strata_local_commit_seconds", "Ingest of a step into the store",
//       metrics::kDurationBuckets);
//   commit.Observe(seconds);
//
//   metrics::Default().GetCounter("strata_replication_bytes_total", "...",
//                                 {{"peer", "10.0.0.2:7701"}}).Add(bytes);
//
// Names follow Prometheus' conventions (base units, `_seconds`, `_bytes`,
// `_total` for counters). A family's type, help and buckets are fixed by its
// first use; asking for the same name with another type is a programming
// error and aborts. Metrics live as long as the registry (the default one:
// the process), so references to them may be kept. Thread-safe: updates are
// lock-free atomics; creating a series and rendering take the registry's
// lock.
#ifndef STRATA_UTIL_METRICS_H_
#define STRATA_UTIL_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace strata::metrics {

// Label name -> value, in the order given.
using Labels = std::vector<std::pair<std::string, std::string>>;

// Upper bounds (seconds) for durations from a millisecond to an hour.
extern const std::vector<double> kDurationBuckets;

class Counter {
 public:
  void Add(double v = 1);  // REQUIRES: v >= 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Cumulative counts per bound (the last is +Inf), sum and count.
  std::vector<uint64_t> Cumulative() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1 (+Inf)
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// A sample a collector computes at scrape time (a gauge).
struct Sample {
  std::string name;
  std::string help;
  Labels labels;
  double value = 0;
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Counter& GetCounter(const std::string& name, const std::string& help, const Labels& labels = {})
      EXCLUDES(mu_);
  Gauge& GetGauge(const std::string& name, const std::string& help, const Labels& labels = {})
      EXCLUDES(mu_);
  Histogram& GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds, const Labels& labels = {})
      EXCLUDES(mu_);

  // Adds samples to every scrape until RemoveCollector(id). `collect` runs
  // on the scraping thread, without the registry's lock; it must not call
  // AddCollector or RemoveCollector.
  int AddCollector(std::function<void(std::vector<Sample>*)> collect) EXCLUDES(collect_mu_);
  // Returns after any running call of the collector has finished.
  void RemoveCollector(int id) EXCLUDES(mu_, collect_mu_);

  // Every family, sorted by name, in the text format.
  std::string Render() const EXCLUDES(mu_, collect_mu_);

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> bounds;  // histograms
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family& FamilyFor(const std::string& name, Type type, const std::string& help) REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, Family> families_ GUARDED_BY(mu_);
  // Held while collectors run, so RemoveCollector can wait them out; taken
  // before mu_, never while it is held.
  mutable Mutex collect_mu_ ACQUIRED_BEFORE(mu_);
  std::map<int, std::function<void(std::vector<Sample>*)>> collectors_ GUARDED_BY(collect_mu_);
  int next_collector_ GUARDED_BY(collect_mu_) = 1;
};

// The process's registry: what `strata agent --metrics` serves.
Registry& Default();

// The text format's escaping of a label value (backslash, quote, newline).
std::string EscapeLabelValue(const std::string& v);

}  // namespace strata::metrics

#endif  // STRATA_UTIL_METRICS_H_
