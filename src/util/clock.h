// Copyright 2026 The Strata Authors.
//
// SteadyClock: the monotonic time a component reads when it decides
// something from elapsed time (a replication lag, a health verdict, a
// backoff). Components take one, so a test can move time by hand with a
// ManualClock instead of sleeping. Waits on a CondVar still run on the real
// steady clock: a ManualClock changes what a component concludes, not how
// long it sleeps.
#ifndef STRATA_UTIL_CLOCK_H_
#define STRATA_UTIL_CLOCK_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace strata {

class SteadyClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~SteadyClock() = default;
  virtual time_point Now() const = 0;
  // std::chrono::steady_clock; never destroyed.
  static SteadyClock* Real();
};

// Starts at the real clock's now and moves only when told to. Thread-safe.
class ManualClock final : public SteadyClock {
 public:
  ManualClock() : ticks_(std::chrono::steady_clock::now().time_since_epoch().count()) {}
  time_point Now() const override { return time_point(duration(ticks_.load())); }
  void Advance(duration d) { ticks_.fetch_add(d.count()); }

 private:
  std::atomic<duration::rep> ticks_;
};

inline SteadyClock* SteadyClock::Real() {
  struct Real final : SteadyClock {
    time_point Now() const override { return std::chrono::steady_clock::now(); }
  };
  static Real* const clock = new Real;
  return clock;
}

// Seconds from `since` to the clock's now.
inline double SecondsSince(const SteadyClock& clock, SteadyClock::time_point since) {
  return std::chrono::duration<double>(clock.Now() - since).count();
}

// Looks at `done` every `every` (real time) until it holds (true), or until
// `deadline` passes on `clock` or `stop` holds (false). The deadline is the
// clock's, so a ManualClock ends the wait when the test moves it.
inline bool PollUntil(const SteadyClock& clock, SteadyClock::time_point deadline,
                      const std::function<bool()>& done, const std::function<bool()>& stop,
                      std::chrono::milliseconds every = std::chrono::milliseconds(50)) {
  for (;;) {
    if (done()) return true;
    if (clock.Now() >= deadline || stop()) return false;
    std::this_thread::sleep_for(every);
  }
}

}  // namespace strata

#endif  // STRATA_UTIL_CLOCK_H_
