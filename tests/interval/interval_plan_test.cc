// Copyright 2026 The Strata Authors.
//
// The interval planner against the published values (Daly 2006, Table 1's
// setting: restart 10 min, checkpoint 5 min) and against a simulated
// 10,000-node job.
#include "interval/interval_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "cli/cli.h"

namespace strata::interval {
namespace {

constexpr double kMin = 60;
constexpr double kHour = 3600;

TEST(IntervalPlanTest, DalyMatchesHisPublishedValues) {
  EXPECT_NEAR(DalyInterval(5 * kMin, 24 * kHour) / kMin, 117, 0.5);
  EXPECT_NEAR(DalyInterval(5 * kMin, 6 * kHour) / kMin, 57, 0.5);
  EXPECT_NEAR(DalyInterval(5 * kMin, 15 * kMin) / kMin, 9.1, 0.05);
}

TEST(IntervalPlanTest, YoungMatchesHisPublishedValues) {
  EXPECT_NEAR(YoungInterval(5 * kMin, 24 * kHour) / kMin, 120, 1e-9);
  EXPECT_NEAR(YoungInterval(5 * kMin, 6 * kHour) / kMin, 60, 1e-9);
  EXPECT_NEAR(YoungInterval(5 * kMin, 15 * kMin) / kMin, 12.25, 0.005);
}

TEST(IntervalPlanTest, DalyIsTheMtbfWhenACheckpointOutlastsTwoOfThem) {
  EXPECT_EQ(DalyInterval(3 * kHour, 1 * kHour), 1 * kHour);
}

// A 10,000-node job: a node lost every 5 years per node (one every 4.4 h for
// the job), a process crash every 4 h, the cluster lost every 2 weeks.
Costs TenThousandNodes() {
  Costs c;
  c.tier[kRam] = {1 / (4 * kHour), 10, 2, 60};
  c.tier[kPeer] = {10000 / (5 * 365 * 24 * kHour), 10, 30, 120};
  c.tier[kBackup] = {1 / (14 * 24 * kHour), 0, 300, 600};
  return c;
}

TEST(IntervalPlanTest, MultiLevelIntervalsAndWasteFollowTheModel) {
  Costs c = TenThousandNodes();
  Plan p = MakePlan(c);
  double in_cluster = c.tier[kRam].failure_rate + c.tier[kPeer].failure_rate;
  EXPECT_NEAR(p.save_interval, std::sqrt(2 * 10 / in_cluster), 1e-6);
  EXPECT_NEAR(p.tier[kRam].multilevel, std::sqrt(2 * 10 / c.tier[kRam].failure_rate), 1e-6);
  // A backup blocks nothing here: as often as an upload allows.
  EXPECT_EQ(p.backup_every, std::max<int64_t>(1, std::llround(300 / p.save_interval)));
  // The planned interval is where the model's waste is lowest.
  EXPECT_LT(p.waste, ExpectedWaste(c, p.save_interval * 1.5, p.backup_every));
  EXPECT_LT(p.waste, ExpectedWaste(c, p.save_interval / 1.5, p.backup_every));
  EXPECT_NEAR(p.goodput, 1 - p.waste, 1e-12);
  EXPECT_GT(p.goodput, 0.9);
}

TEST(IntervalPlanTest, PlannedIntervalsBeatTenTimesMoreAndLessOftenInSimulation) {
  Costs c = TenThousandNodes();
  Plan p = MakePlan(c);
  const double year = 365 * 24 * kHour;
  for (uint64_t seed : {1, 2, 3}) {
    SimResult planned = Simulate(c, p.save_interval, p.backup_every, year, seed);
    SimResult often = Simulate(c, p.save_interval / 10, p.backup_every * 10, year, seed);
    SimResult rarely =
        Simulate(c, p.save_interval * 10, std::max<int64_t>(1, p.backup_every / 10), year, seed);
    EXPECT_GT(planned.goodput, often.goodput) << "seed " << seed;
    EXPECT_GT(planned.goodput, rarely.goodput) << "seed " << seed;
    // Every class of failure happened, and the model predicts the simulation.
    EXPECT_GT(planned.failures[kRam], 1000);
    EXPECT_GT(planned.failures[kPeer], 1000);
    EXPECT_GT(planned.failures[kBackup], 10);
    EXPECT_NEAR(planned.goodput, p.goodput, 0.01) << "seed " << seed;
  }
}

TEST(IntervalPlanTest, AClusterLossRollsBackToTheNewestBackup) {
  Costs c;
  c.tier[kBackup] = {1 / (10 * kHour), 0, 0, 0};
  // Saves every 100 s, never backed up: each cluster loss loses everything.
  SimResult none = Simulate(c, 100, 0, 1000 * kHour, 7);
  EXPECT_GT(none.failures[kBackup], 50);
  EXPECT_LT(none.goodput, 0.2);
  // Backed up at every save: only the work since it is lost (50 s on average).
  SimResult every = Simulate(c, 100, 1, 1000 * kHour, 7);
  EXPECT_GT(every.goodput, 0.99);
}

TEST(PlanCommandTest, PrintsAPlanAndASimulation) {
  std::ostringstream out, err;
  int rc = cli::RunCli(
      {"plan", "--mtbf", "3h", "--stall", "10s", "--step-seconds", "2", "--simulate", "30"}, out,
      err);
  ASSERT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("plan: save every"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("steps)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("10x as rarely"), std::string::npos) << out.str();
}

TEST(PlanCommandTest, BadInputNamesTheFlag) {
  std::ostringstream out, err;
  EXPECT_EQ(cli::RunCli({"plan", "--mtbf", "3 hours"}, out, err), 2);
  EXPECT_NE(err.str().find("--mtbf"), std::string::npos) << err.str();
  std::ostringstream out2, err2;
  EXPECT_EQ(cli::RunCli({"plan", "--mtbf", "3h", "--lag", "disk=3s"}, out2, err2), 2);
  EXPECT_NE(err2.str().find("--lag"), std::string::npos) << err2.str();
  std::ostringstream out3, err3;
  EXPECT_EQ(cli::RunCli({"plan"}, out3, err3), 2);
}

}  // namespace
}  // namespace strata::interval
