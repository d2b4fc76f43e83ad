// Copyright 2026 The Strata Authors.
//
// strata plan: checkpoint intervals per tier from measured costs and failure
// rates (interval/interval_plan.h, docs/operations.md).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli.h"
#include "interval/interval_plan.h"
#include "supervisor/supervisor.h"

namespace strata::cli {
namespace {

using interval::Costs;
using interval::kBackup;
using interval::kPeer;
using interval::kRam;
using interval::kTiers;

struct PlanArgs {
  std::string mtbf;  // the job's, all classes
  std::string split = "0.6,0.35,0.05";
  int64_t nodes = 0;
  std::string node_mtbf;
  std::string stall = "10s";
  std::string backup_stall = "0s";
  std::string lag = "ram=2s,peer=30s,backup=5m";
  std::string restart = "ram=1m,peer=2m,backup=10m";
  double step_seconds = 0;
  double simulate_days = 0;
  uint64_t seed = 1;
  bool json = false;
};

// "3h" -> seconds; MTBFs may also be given in days ("14d") or years ("5y",
// 365 days).
StatusOr<double> Seconds(const std::string& flag, const std::string& text) {
  if (!text.empty() && (text.back() == 'd' || text.back() == 'y')) {
    auto hours = supervisor::ParseDuration(text.substr(0, text.size() - 1) + "h");
    if (hours.ok())
      return static_cast<double>(hours->count()) / 1000 * (text.back() == 'd' ? 24 : 8760);
  }
  auto d = supervisor::ParseDuration(text);
  if (!d.ok()) return InvalidArgumentError(flag + ": " + d.status().message());
  return static_cast<double>(d->count()) / 1000;
}

// "ram=2s,peer=30s,backup=5m" -> seconds per tier; unnamed tiers keep `out`.
Status PerTier(const std::string& flag, const std::string& text, std::array<double, kTiers>* out) {
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    auto eq = item.find('=');
    std::string name = item.substr(0, eq);
    int tier = name == "ram" ? kRam : name == "peer" ? kPeer : name == "backup" ? kBackup : -1;
    if (eq == std::string::npos || tier < 0) {
      return InvalidArgumentError(flag + ": \"" + item +
                                  "\" is not ram=, peer= or backup=<duration>");
    }
    STRATA_ASSIGN_OR_RETURN((*out)[tier], Seconds(flag, item.substr(eq + 1)));
  }
  return Status::Ok();
}

StatusOr<std::array<double, kTiers>> Split(const std::string& text) {
  std::array<double, kTiers> share{};
  std::stringstream in(text);
  std::string item;
  for (int t = 0; t < kTiers; ++t) {
    if (!std::getline(in, item, ',')) break;
    char* end = nullptr;
    share[t] = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0' || !(share[t] >= 0)) {
      return InvalidArgumentError("--split: \"" + item + "\" is not a share");
    }
  }
  double sum = share[0] + share[1] + share[2];
  if (std::getline(in, item, ',') || !(sum > 0)) {
    return InvalidArgumentError(
        "--split: want three shares process,node,cluster, e.g. 0.6,0.35,0.05");
  }
  for (double& s : share) s /= sum;
  return share;
}

StatusOr<Costs> ToCosts(const PlanArgs& a) {
  Costs c;
  STRATA_ASSIGN_OR_RETURN(auto share, Split(a.split));
  double rate = 0;
  if (!a.mtbf.empty()) {
    STRATA_ASSIGN_OR_RETURN(double mtbf, Seconds("--mtbf", a.mtbf));
    if (mtbf <= 0) return InvalidArgumentError("--mtbf must be positive");
    rate = 1 / mtbf;
  }
  for (int t = 0; t < kTiers; ++t) c.tier[t].failure_rate = rate * share[t];
  if (!a.node_mtbf.empty()) {
    if (a.nodes <= 0) return InvalidArgumentError("--node-mtbf needs --nodes");
    STRATA_ASSIGN_OR_RETURN(double node_mtbf, Seconds("--node-mtbf", a.node_mtbf));
    if (node_mtbf <= 0) return InvalidArgumentError("--node-mtbf must be positive");
    c.tier[kPeer].failure_rate = static_cast<double>(a.nodes) / node_mtbf;
  }
  if (a.mtbf.empty() && a.node_mtbf.empty()) {
    return InvalidArgumentError("give --mtbf (the job's), or --nodes with --node-mtbf");
  }
  std::array<double, kTiers> lag{2, 30, 300}, restart{60, 120, 600};
  STRATA_RETURN_IF_ERROR(PerTier("--lag", a.lag, &lag));
  STRATA_RETURN_IF_ERROR(PerTier("--restart", a.restart, &restart));
  STRATA_ASSIGN_OR_RETURN(double stall, Seconds("--stall", a.stall));
  STRATA_ASSIGN_OR_RETURN(double backup_stall, Seconds("--backup-stall", a.backup_stall));
  for (int t = 0; t < kTiers; ++t) {
    c.tier[t].lag = lag[t];
    c.tier[t].restart = restart[t];
    c.tier[t].cost = t == kBackup ? backup_stall : stall;  // RAM and peers share the save
  }
  return c;
}

// 817 -> "13m37s"; infinity -> "never".
std::string Human(double s) {
  if (!std::isfinite(s)) return "never";
  if (s < 60) return fmt::format("{:.3g}s", s);
  auto t = static_cast<int64_t>(std::llround(s));
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  if (t < 86400) return fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60);
  return fmt::format("{}d{:02}h", t / 86400, t % 86400 / 3600);
}

std::string Steps(double seconds, double step_seconds) {
  if (step_seconds <= 0 || !std::isfinite(seconds)) return "";
  return fmt::format(" ({} steps)", std::max<int64_t>(1, std::llround(seconds / step_seconds)));
}

void Print(Context& ctx, const PlanArgs& a, const Costs& c, const interval::Plan& p) {
  const char* classes[kTiers] = {"process crash", "node loss", "cluster loss"};
  ctx.out << fmt::format("{:<7} {:<14} {:>8} {:>7} {:>7} {:>8} {:>9} {:>9} {:>12}\n", "tier",
                         "recovers from", "every", "stall", "lag", "restart", "Young", "Daly",
                         "multi-level");
  for (int t = 0; t < kTiers; ++t) {
    const auto& tc = c.tier[t];
    const auto& tp = p.tier[t];
    ctx.out << fmt::format(
        "{:<7} {:<14} {:>8} {:>7} {:>7} {:>8} {:>9} {:>9} {:>12}\n", interval::TierName(t),
        classes[t], Human(tc.failure_rate > 0 ? 1 / tc.failure_rate : INFINITY), Human(tc.cost),
        Human(tc.lag), Human(tc.restart), Human(tp.young), Human(tp.daly), Human(tp.multilevel));
  }
  ctx.out << fmt::format("plan: save every {}{}", Human(p.save_interval),
                         Steps(p.save_interval, a.step_seconds));
  if (p.backup_every > 0) {
    double tb = p.save_interval * static_cast<double>(p.backup_every);
    ctx.out << fmt::format("; back up every {} save(s), every {}{}", p.backup_every, Human(tb),
                           Steps(tb, a.step_seconds));
  } else {
    ctx.out << "; no backups needed (no cluster losses)";
  }
  ctx.out << fmt::format("\nexpected time lost {:.2f}% (goodput {:.2f}%)\n", 100 * p.waste,
                         100 * p.goodput);
}

nlohmann::json ToJson(const Costs& c, const interval::Plan& p) {
  nlohmann::json tiers = nlohmann::json::array();
  auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  for (int t = 0; t < kTiers; ++t) {
    tiers.push_back({{"tier", interval::TierName(t)},
                     {"failure_rate_per_hour", c.tier[t].failure_rate * 3600},
                     {"stall_seconds", c.tier[t].cost},
                     {"lag_seconds", c.tier[t].lag},
                     {"restart_seconds", c.tier[t].restart},
                     {"young_seconds", finite(p.tier[t].young)},
                     {"daly_seconds", finite(p.tier[t].daly)},
                     {"multilevel_seconds", finite(p.tier[t].multilevel)}});
  }
  return {{"tiers", tiers},
          {"save_interval_seconds", finite(p.save_interval)},
          {"backup_every_saves", p.backup_every},
          {"expected_waste", p.waste},
          {"expected_goodput", p.goodput}};
}

void Simulate(Context& ctx, const PlanArgs& a, const Costs& c, const interval::Plan& p,
              nlohmann::json* report) {
  double horizon = a.simulate_days * 86400;
  struct Variant {
    const char* name;
    double scale;
  };
  nlohmann::json out = nlohmann::json::array();
  for (Variant v :
       {Variant{"planned", 1}, Variant{"10x as often", 0.1}, Variant{"10x as rarely", 10}}) {
    // The backup period stays where it can (a backup is never more often
    // than a save): only the save interval varies.
    int64_t backup_every =
        p.backup_every <= 0
            ? 0
            : std::max<int64_t>(1, std::llround(static_cast<double>(p.backup_every) / v.scale));
    auto r = interval::Simulate(c, p.save_interval * v.scale, backup_every, horizon, a.seed);
    if (!a.json) {
      ctx.out << fmt::format(
          "simulated {:g} days, {:<13} save every {:>8}: goodput {:.2f}% ({} process, {} node, {} "
          "cluster failures)\n",
          a.simulate_days, v.name, Human(p.save_interval * v.scale), 100 * r.goodput,
          r.failures[kRam], r.failures[kPeer], r.failures[kBackup]);
    }
    out.push_back({{"variant", v.name},
                   {"save_interval_seconds", p.save_interval * v.scale},
                   {"goodput", r.goodput},
                   {"failures", r.failures}});
  }
  (*report)["simulation"] = out;
}

void RunPlan(Context& ctx, const PlanArgs& a) {
  auto costs = ToCosts(a);
  if (!costs.ok()) {
    ctx.err << "strata plan: " << costs.status().message() << "\n";
    ctx.exit_code = 2;
    return;
  }
  interval::Plan p = interval::MakePlan(*costs);
  nlohmann::json report = ToJson(*costs, p);
  if (!a.json) Print(ctx, a, *costs, p);
  if (a.simulate_days > 0 && std::isfinite(p.save_interval)) Simulate(ctx, a, *costs, p, &report);
  if (a.json) ctx.out << report.dump(2) << "\n";
}

}  // namespace

void RegisterPlanCommand(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Checkpoint intervals per tier from measured costs and failure rates");
  plan->add_option("--mtbf", a->mtbf, "The job's mean time between interruptions, e.g. 3h");
  plan->add_option("--split", a->split, "Shares of process crashes, node losses, cluster losses")
      ->capture_default_str();
  plan->add_option("--nodes", a->nodes, "Nodes in the job (with --node-mtbf)");
  plan->add_option("--node-mtbf", a->node_mtbf,
                   "Mean time between losses of one node; node losses then come --nodes times "
                   "as often");
  plan->add_option("--stall", a->stall, "Training time one save blocks (measured)")
      ->capture_default_str();
  plan->add_option("--backup-stall", a->backup_stall, "Training time one backup blocks")
      ->capture_default_str();
  plan->add_option("--lag", a->lag, "Per tier: from a save's start until the tier holds it")
      ->capture_default_str();
  plan->add_option("--restart", a->restart, "Per tier: from a failure to training again")
      ->capture_default_str();
  plan->add_option("--step-seconds", a->step_seconds, "Seconds per training step, to print steps");
  plan->add_option("--simulate", a->simulate_days,
                   "Simulate this many days of the job, planned intervals against 10x/0.1x");
  plan->add_option("--seed", a->seed, "Seed of the simulation")->capture_default_str();
  plan->add_flag("--json", a->json, "Print JSON");
  plan->callback([&ctx, a] { RunPlan(ctx, *a); });
}

}  // namespace strata::cli
