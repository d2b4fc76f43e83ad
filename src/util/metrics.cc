// Copyright 2026 The Strata Authors.
#include "util/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace strata::metrics {

const std::vector<double> kDurationBuckets = {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                              2.5,   5,     10,   30,   60,  300,  900, 3600};

namespace {

void AtomicAdd(std::atomic<double>& a, double v) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

// Prometheus' float format: integers without a fraction, +Inf/-Inf/NaN.
std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", v);
  }
  return buf;
}

// The text format escapes backslash and newline in HELP text, and a double
// quote too in label values.
std::string Escape(const std::string& v, bool quote) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="x",le="0.5"}; empty when there are no labels.
std::string LabelText(const Labels& labels, const char* extra_name = nullptr,
                      const std::string& extra_value = "") {
  if (labels.empty() && extra_name == nullptr) return "";
  std::string out = "{";
  for (const auto& [k, v] : labels) {
    if (out.size() > 1) out += ",";
    out += k + "=\"" + EscapeLabelValue(v) + "\"";
  }
  if (extra_name != nullptr) {
    if (out.size() > 1) out += ",";
    out += std::string(extra_name) + "=\"" + extra_value + "\"";
  }
  return out + "}";
}

void Header(std::ostringstream& out, const std::string& name, const std::string& help,
            const char* type) {
  out << "# HELP " << name << " " << Escape(help, /*quote=*/false) << "\n# TYPE " << name << " "
      << type << "\n";
}

// One sample: `name{labels} value`.
void Line(std::ostringstream& out, const std::string& name, const Labels& labels, double value) {
  out << name << LabelText(labels) << " " << Number(value) << "\n";
}

}  // namespace

std::string EscapeLabelValue(const std::string& v) { return Escape(v, /*quote=*/true); }

void Counter::Add(double v) {
  if (!(v >= 0)) std::abort();  // a counter only goes up
  AtomicAdd(value_, v);
}

void Gauge::Add(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end())) std::abort();
}

void Histogram::Observe(double v) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::Cumulative() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

Registry::Family& Registry::FamilyFor(const std::string& name, Type type, const std::string& help) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.type = type;
    it->second.help = help;
  } else if (it->second.type != type) {
    std::fprintf(stderr, "metrics: %s used as two types\n", name.c_str());
    std::abort();
  }
  return it->second;
}

Counter& Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  MutexLock l(&mu_);
  auto& slot = FamilyFor(name, Type::kCounter, help).counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  MutexLock l(&mu_);
  auto& slot = FamilyFor(name, Type::kGauge, help).gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& bounds, const Labels& labels) {
  MutexLock l(&mu_);
  Family& f = FamilyFor(name, Type::kHistogram, help);
  if (f.histograms.empty()) f.bounds = bounds;
  auto& slot = f.histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(f.bounds);
  return *slot;
}

int Registry::AddCollector(std::function<void(std::vector<Sample>*)> collect) {
  MutexLock l(&collect_mu_);
  int id = next_collector_++;
  collectors_[id] = std::move(collect);
  return id;
}

void Registry::RemoveCollector(int id) {
  MutexLock l(&collect_mu_);
  collectors_.erase(id);
}

std::string Registry::Render() const {
  std::vector<Sample> samples;
  {
    MutexLock l(&collect_mu_);
    for (const auto& [id, collect] : collectors_) collect(&samples);
  }
  std::ostringstream out;
  MutexLock l(&mu_);
  for (const auto& [name, f] : families_) {
    switch (f.type) {
      case Type::kCounter:
        Header(out, name, f.help, "counter");
        for (const auto& [labels, c] : f.counters) Line(out, name, labels, c->value());
        break;
      case Type::kGauge:
        Header(out, name, f.help, "gauge");
        for (const auto& [labels, g] : f.gauges) Line(out, name, labels, g->value());
        break;
      case Type::kHistogram:
        Header(out, name, f.help, "histogram");
        for (const auto& [labels, h] : f.histograms) {
          std::vector<uint64_t> cumulative = h->Cumulative();
          for (size_t i = 0; i < cumulative.size(); ++i) {
            std::string le = i < h->bounds().size() ? Number(h->bounds()[i]) : "+Inf";
            out << name << "_bucket" << LabelText(labels, "le", le) << " " << cumulative[i] << "\n";
          }
          out << name << "_sum" << LabelText(labels) << " " << Number(h->sum()) << "\n";
          out << name << "_count" << LabelText(labels) << " " << cumulative.back() << "\n";
        }
        break;
    }
  }
  // Collected samples: gauges, one family per name. A name that is also a
  // registered family is left out: two families of one name would make
  // Prometheus refuse the whole scrape.
  std::vector<Sample> kept;
  for (Sample& x : samples) {
    if (families_.count(x.name) == 0) kept.push_back(std::move(x));
  }
  samples = std::move(kept);
  std::stable_sort(samples.begin(), samples.end(),
                   [](const Sample& a, const Sample& b) { return a.name < b.name; });
  for (size_t i = 0; i < samples.size(); ++i) {
    if (i == 0 || samples[i].name != samples[i - 1].name) {
      Header(out, samples[i].name, samples[i].help, "gauge");
    }
    Line(out, samples[i].name, samples[i].labels, samples[i].value);
  }
  return out.str();
}

Registry& Default() {
  static Registry* registry = new Registry();  // never destroyed: metrics outlive statics
  return *registry;
}

}  // namespace strata::metrics
