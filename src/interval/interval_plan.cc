// Copyright 2026 The Strata Authors.
#include "interval/interval_plan.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <random>

namespace strata::interval {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double Rate(const Costs& c, int t) { return c.tier[t].failure_rate; }

}  // namespace

const char* TierName(int tier) {
  switch (tier) {
    case kRam:
      return "ram";
    case kPeer:
      return "peer";
    case kBackup:
      return "backup";
  }
  return "?";
}

double YoungInterval(double cost, double mtbf) { return std::sqrt(2 * cost * mtbf); }

double DalyInterval(double cost, double mtbf) {
  if (cost >= 2 * mtbf) return mtbf;
  double x = cost / (2 * mtbf);
  return std::sqrt(2 * cost * mtbf) * (1 + std::sqrt(x) / 3 + x / 9) - cost;
}

double ExpectedWaste(const Costs& c, double save_interval, int64_t backup_every) {
  const TierCosts& ram = c.tier[kRam];
  const TierCosts& peer = c.tier[kPeer];
  const TierCosts& backup = c.tier[kBackup];
  double in_cluster = ram.failure_rate + peer.failure_rate;
  double waste = ram.cost / save_interval + in_cluster * save_interval / 2 +
                 ram.failure_rate * (ram.lag + ram.restart) +
                 peer.failure_rate * (peer.lag + peer.restart);
  if (backup.failure_rate > 0 && backup_every <= 0) return 1;  // every cluster loss loses all
  if (backup_every > 0) {
    double tb = save_interval * static_cast<double>(backup_every);
    waste += backup.cost / tb + backup.failure_rate * (tb / 2 + backup.lag + backup.restart);
  }
  return std::min(1.0, waste);
}

Plan MakePlan(const Costs& c) {
  Plan p;
  for (int t = 0; t < kTiers; ++t) {
    const TierCosts& tc = c.tier[t];
    TierPlan& tp = p.tier[t];
    if (tc.failure_rate <= 0) {
      tp.young = tp.daly = tp.multilevel = kInf;
      continue;
    }
    double mtbf = 1 / tc.failure_rate;
    tp.young = YoungInterval(tc.cost, mtbf);
    tp.daly = DalyInterval(tc.cost, mtbf);
    tp.multilevel = std::sqrt(2 * tc.cost / tc.failure_rate);
    tp.waste = std::sqrt(2 * tc.failure_rate * tc.cost) + tc.failure_rate * (tc.lag + tc.restart);
  }
  // One save interval for both in-cluster tiers, planned for both rates; a
  // save cannot start before the previous one is committed locally.
  double in_cluster = Rate(c, kRam) + Rate(c, kPeer);
  p.save_interval = in_cluster > 0 ? std::sqrt(2 * c.tier[kRam].cost / in_cluster) : kInf;
  p.save_interval = std::max({p.save_interval, c.tier[kRam].lag, 1.0});
  if (!std::isfinite(p.save_interval)) {
    // No in-cluster failures: save as often as the backup needs.
    p.save_interval = std::max(p.tier[kBackup].multilevel, 1.0);
  }
  if (Rate(c, kBackup) > 0 && std::isfinite(p.save_interval)) {
    // A backup cannot start before the previous one is uploaded.
    double tb = std::max(p.tier[kBackup].multilevel, c.tier[kBackup].lag);
    p.backup_every = std::max<int64_t>(1, std::llround(tb / p.save_interval));
  } else {
    p.backup_every = 0;
  }
  p.waste = std::isfinite(p.save_interval) ? ExpectedWaste(c, p.save_interval, p.backup_every) : 0;
  p.goodput = std::max(0.0, 1 - p.waste);
  return p;
}

namespace {

// The steps a tier holds for the whole job: those durable there (by
// `durable_at`) and the newest of them.
struct TierState {
  std::deque<std::pair<double, double>> pending;  // (durable at, progress), in order
  double newest = 0;                              // progress of the newest durable save

  void Advance(double now) {
    while (!pending.empty() && pending.front().first <= now) {
      newest = std::max(newest, pending.front().second);
      pending.pop_front();
    }
  }
};

class Job {
 public:
  Job(const Costs& c, double interval, int64_t backup_every, uint64_t seed)
      : c_(c), interval_(interval), backup_every_(backup_every), rng_(seed) {
    for (int t = 0; t < kTiers; ++t) next_failure_[t] = Draw(t, 0);
  }

  SimResult Run(double horizon) {
    while (wall_ < horizon) {
      int cls = NextFailure();
      double due = next_failure_[cls];
      double save_at = static_cast<double>(index_ + 1) * interval_;
      double work = save_at - progress_;
      if (wall_ + work > std::min(due, horizon)) {
        double until = std::min(due, horizon);
        progress_ += std::max(0.0, until - wall_);
        wall_ = std::max(wall_, until);
        if (due <= horizon) Fail(cls);
        continue;
      }
      wall_ += work;
      progress_ = save_at;
      Save(due);
    }
    result_.goodput = progress_ / wall_;
    return result_;
  }

 private:
  double Draw(int tier, double from) {
    double rate = Rate(c_, tier);
    if (rate <= 0) return kInf;
    return from + std::exponential_distribution<double>(rate)(rng_);
  }

  int NextFailure() const {
    return static_cast<int>(std::min_element(next_failure_.begin(), next_failure_.end()) -
                            next_failure_.begin());
  }

  // A save at the current progress: it blocks, then lands in each tier
  // after that tier's lag. A failure during the stall loses it.
  void Save(double due) {
    double start = wall_;
    const int64_t index = ++index_;
    bool backup = backup_every_ > 0 && index % backup_every_ == 0;
    wall_ += c_.tier[kRam].cost + (backup ? c_.tier[kBackup].cost : 0);
    if (due < wall_) {
      wall_ = due;
      Fail(NextFailure());
      return;
    }
    ++result_.saves;
    tiers_[kRam].pending.emplace_back(start + c_.tier[kRam].lag, progress_);
    tiers_[kPeer].pending.emplace_back(start + c_.tier[kPeer].lag, progress_);
    if (backup) {
      ++result_.backups;
      tiers_[kBackup].pending.emplace_back(start + c_.tier[kBackup].lag, progress_);
    }
  }

  // A failure of class `cls` now: the job resumes from the newest step a
  // tier that survives it held, after the restart time. Tiers nearer than
  // the class lose what they held; saves in flight are lost with them.
  void Fail(int cls) {
    ++result_.failures[cls];
    for (auto& t : tiers_) t.Advance(wall_);
    for (int t = 0; t < kTiers; ++t) {
      if (t < cls) tiers_[t].newest = 0;  // a lost node's RAM: incomplete for the job
      if (t < cls || t == kRam || cls >= kPeer) {
        tiers_[t].pending.clear();  // in flight from the lost process or node
        continue;
      }
      // A process crash: the agent still copies what reached its RAM.
      std::erase_if(tiers_[t].pending, [&](const std::pair<double, double>& s) {
        return s.first - c_.tier[t].lag + c_.tier[kRam].lag > wall_;
      });
    }
    double resume = 0;
    for (int t = cls; t < kTiers; ++t) resume = std::max(resume, tiers_[t].newest);
    progress_ = resume;
    index_ = std::llround(resume / interval_);  // resume is a save's progress
    for (auto& t : tiers_) t.newest = std::min(t.newest, resume);
    next_failure_[cls] = Draw(cls, wall_);
    wall_ += c_.tier[cls].restart;
  }

  const Costs& c_;
  const double interval_;
  const int64_t backup_every_;
  std::mt19937_64 rng_;
  std::array<double, kTiers> next_failure_{};
  std::array<TierState, kTiers> tiers_;
  double wall_ = 0;
  double progress_ = 0;
  int64_t index_ = 0;  // the save at or below progress_ (progress index_ * interval_)
  SimResult result_;
};

}  // namespace

SimResult Simulate(const Costs& costs, double save_interval, int64_t backup_every, double horizon,
                   uint64_t seed) {
  return Job(costs, save_interval, backup_every, seed).Run(horizon);
}

}  // namespace strata::interval
