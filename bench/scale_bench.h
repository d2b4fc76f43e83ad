// Copyright 2026 The Strata Authors.
//
// scale_bench's coordinator process (scale_bench_coordinator.cc): the real
// Coordinator behind the real agent Server, forked from the bench, and the
// marks it leaves for the bench in a page both processes share.
#ifndef STRATA_BENCH_SCALE_BENCH_H_
#define STRATA_BENCH_SCALE_BENCH_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>

namespace strata::scale_bench {

using Clock = std::chrono::steady_clock;

inline constexpr char kSecret[] = "scale-bench-secret";

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
inline int64_t Nanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline Clock::time_point FromNanos(int64_t ns) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

// Marks the coordinator process leaves for the bench: steady_clock
// (CLOCK_MONOTONIC, one clock for both processes) nanoseconds. Each is the
// latest (or the longest) since the bench reset it.
struct CoordinatorMarks {
  std::atomic<int64_t> last_register_done{0};  // a register call returned
  std::atomic<int64_t> longest_register{0};    // the longest register call
  std::atomic<int64_t> last_ready{0};          // a ready call arrived

  void Reset() {
    last_register_done = 0;
    longest_register = 0;
    last_ready = 0;
  }
  static void Max(std::atomic<int64_t>& a, int64_t v) {
    int64_t seen = a.load();
    while (seen < v && !a.compare_exchange_weak(seen, v)) {
    }
  }
};

// The coordinator in a child process on 127.0.0.1:port, serving until Stop.
struct CoordinatorProcess {
  pid_t pid = -1;
  int stdin_fd = -1;
  uint16_t port = 0;
  CoordinatorMarks* marks = nullptr;  // shared with the child

  static CoordinatorProcess Start();
  double PeakRssMib() const;  // the child's peak resident memory
  double CpuSeconds() const;  // the child's CPU time so far (user + system)
  // Each thread's CPU time so far, by thread id: what one thread spent
  // bounds a phase's time with the coordinator on cores of its own.
  std::map<pid_t, double> ThreadCpuSeconds() const;
  void Stop();
};

// CPU seconds (user + system) this process has spent.
double OwnCpuSeconds();

// The most CPU time one thread spent between two ThreadCpuSeconds().
double BusiestThreadSeconds(const std::map<pid_t, double>& before,
                            const std::map<pid_t, double>& after);

}  // namespace strata::scale_bench

#endif  // STRATA_BENCH_SCALE_BENCH_H_
