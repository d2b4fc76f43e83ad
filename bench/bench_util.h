// Copyright 2026 The Strata Authors.
//
// What every benchmark prints the same way: repeated timings and their
// median, one line of absolute figures per measured operation, and the
// `ratio <name> <value> target <t>` lines scripts/bench.sh collects.
#ifndef STRATA_BENCH_BENCH_UTIL_H_
#define STRATA_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace strata::bench {

using Clock = std::chrono::steady_clock;

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

// `bytes` (rounded up to 8) of incompressible splitmix64 output; `seed`
// picks the stream.
inline std::vector<uint64_t> Payload(uint64_t bytes, uint64_t seed = 0) {
  std::vector<uint64_t> v((bytes + 7) / 8);
  uint64_t x = seed * 0x2545f4914f6cdd1d;
  for (uint64_t& z : v) {
    z = (x += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    z ^= z >> 31;
  }
  return v;
}

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Repeated timings of one operation, in seconds.
class Samples {
 public:
  void Add(double seconds) { s_.push_back(seconds); }
  double Median() const {
    std::vector<double> v = s_;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  double Min() const { return *std::min_element(s_.begin(), s_.end()); }
  double Max() const { return *std::max_element(s_.begin(), s_.end()); }

 private:
  std::vector<double> s_;
};

// One line: median time, its spread and, when bytes > 0, the throughput
// (GB/s, or MB/s below 1 GB/s).
inline void PrintSamples(const char* label, const Samples& s, uint64_t bytes) {
  std::printf("  %-40s %9.2f ms  (min %8.2f, max %8.2f)", label, s.Median() * 1e3, s.Min() * 1e3,
              s.Max() * 1e3);
  if (bytes > 0) {
    const double rate = static_cast<double>(bytes) / s.Median();
    if (rate >= 1e9) {
      std::printf("  %6.2f GB/s", rate / 1e9);
    } else {
      std::printf("  %6.1f MB/s", rate / 1e6);
    }
  }
  std::printf("\n");
}

// `target` is empty for report-only ratios.
inline void PrintRatio(const char* name, double value, const char* target,
                       bool lower_is_better = false) {
  if (*target != '\0') {
    const double t = std::strtod(target, nullptr);
    const bool met = lower_is_better ? value <= t : value >= t;
    std::printf("  target: %s %s -> %s\n", lower_is_better ? "<=" : ">=", target,
                met ? "met" : "NOT met");
  }
  std::printf("ratio %s %.3f target %s\n", name, value, *target != '\0' ? target : "report");
  std::fflush(stdout);
}

}  // namespace strata::bench

#endif  // STRATA_BENCH_BENCH_UTIL_H_
