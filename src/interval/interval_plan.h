// Copyright 2026 The Strata Authors.
//
// Checkpoint intervals from measured costs and failure rates (`strata plan`,
// docs/operations.md).
//
// Each class of failure is recovered from one tier: a process crash from the
// node's own RAM, a node loss from a peer's RAM, the loss of the cluster (or
// of a node and its peers) from the backup. A tier is a level of a
// multi-level checkpointing scheme:
//
//   Young (1974)      τ = √(2 δ M)
//   Daly (2006)       τ = √(2 δ M) · [1 + ⅓ √(δ / 2M) + ⅑ (δ / 2M)] − δ   for δ < 2M, else M
//   multi-level       level ℓ every T_ℓ = √(2 C_ℓ / λ_ℓ), waste ≈ Σ_ℓ √(2 λ_ℓ C_ℓ)
//                     (first order; Benoit, Cavelan, Le Fèvre, Robert, Sun,
//                     IEEE Trans. Computers 2017)
//
// with δ = C the blocking cost of one checkpoint, M = 1/λ the mean time
// between the failures the level recovers from. Saves are asynchronous: only
// the blocking stall costs training time, and the durability lag L (from the
// save's start until the tier holds the step for the whole job) adds to the
// work lost at each failure, as does the restart time R, so a level's waste
// is √(2 λ C) + λ (L + R).
//
// Strata's RAM and peer tiers hold the same saves (every save is
// replicated), so they share one interval, planned for the sum of both
// rates; backups are taken every k-th save.
//
// Simulate() checks a plan against a job: failures of each class drawn as
// Poisson arrivals, each rolling the job back to the newest step a
// surviving tier held at that moment. Everything here is pure; times are in
// seconds.
#ifndef STRATA_INTERVAL_INTERVAL_PLAN_H_
#define STRATA_INTERVAL_INTERVAL_PLAN_H_

#include <array>
#include <cstdint>
#include <string>

namespace strata::interval {

double YoungInterval(double cost, double mtbf);
double DalyInterval(double cost, double mtbf);

// The tiers, in the order failures reach further down.
enum Tier { kRam = 0, kPeer = 1, kBackup = 2 };
inline constexpr int kTiers = 3;
const char* TierName(int tier);

struct TierCosts {
  double failure_rate = 0;  // failures per second this tier recovers from (and no nearer one)
  double cost = 0;          // seconds of blocked training per checkpoint this tier needs
  double lag = 0;           // seconds from a save's start until the tier holds it job-wide
  double restart = 0;       // seconds from a failure to training again from this tier
};

struct Costs {
  std::array<TierCosts, kTiers> tier;
};

struct TierPlan {
  double young = 0;       // Young's interval for this tier alone
  double daly = 0;        // Daly's interval for this tier alone
  double multilevel = 0;  // T_ℓ of the multi-level model, for this tier alone
  double waste = 0;       // √(2 λ C) + λ (L + R): its share of the time lost
};

// What Strata runs: one save interval for RAM and peers, backups every
// `backup_every` saves.
struct Plan {
  std::array<TierPlan, kTiers> tier;
  double save_interval = 0;
  int64_t backup_every = 1;
  double waste = 0;    // expected fraction of time lost, model (first order)
  double goodput = 1;  // 1 - waste, floored at 0
};

// The plan for `costs`. Rates of zero give infinite intervals for their
// tier (and a backup every... never: backup_every is then 0).
Plan MakePlan(const Costs& costs);

// The model's expected waste of running saves every `save_interval` and a
// backup every `backup_every` saves (0: never).
double ExpectedWaste(const Costs& costs, double save_interval, int64_t backup_every);

struct SimResult {
  double goodput = 0;  // useful training time / wall time
  std::array<int64_t, kTiers> failures{};
  int64_t saves = 0;
  int64_t backups = 0;
};

// Runs a job for `horizon` seconds of wall time, saving every
// `save_interval` seconds of training (each save blocking for the RAM
// tier's cost, each backup for the backup tier's), failing as the rates
// say, seeded for reproducibility.
SimResult Simulate(const Costs& costs, double save_interval, int64_t backup_every, double horizon,
                   uint64_t seed);

}  // namespace strata::interval

#endif  // STRATA_INTERVAL_INTERVAL_PLAN_H_
