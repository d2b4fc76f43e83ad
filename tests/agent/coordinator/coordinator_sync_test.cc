// Copyright 2026 The Strata Authors.
//
// The coordinator's choice of the job's on-demand step, in process: the
// collection after a notice, the step every rank can still reach, a silent
// node, a new round withdrawing it, and quarantined steps (kept across a
// restart of the coordinator by the nodes' registrations).
#include <gtest/gtest.h>

#include "agent/coordinator/coordinator.h"

namespace strata::agent {
namespace {

class CoordinatorSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int node = 0; node < 2; ++node) Register(node, json::array());
  }
  void Register(int node, json inventory) {
    auto r = c_.Handle({{"op", "register"},
                        {"job", "j"},
                        {"nodes", 2},
                        {"node", node},
                        {"dp", 1},
                        {"address", "127.0.0.1:" + std::to_string(7000 + node)},
                        {"inventory", inventory}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  json Sync(int node, int64_t step, double rate, uint64_t generation, uint64_t collect) {
    auto r = c_.Handle({{"op", "sync"},
                        {"job", "j"},
                        {"node", node},
                        {"step", step},
                        {"rate", rate},
                        {"generation", generation},
                        {"collect", collect}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or(json::object());
  }
  json Notice(int node) {
    auto r = c_.Handle({{"op", "notice"}, {"job", "j"}, {"node", node}, {"origin", "test"}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or(json::object());
  }

  // Node `node`'s copies of its own steps 20 and 40.
  static json TwoSteps(int node) {
    const std::string d = node == 0 ? "00000000000000a" : "00000000000000c";
    return json::array({json::array({node, 20, d + "a"}), json::array({node, 40, d + "b"})});
  }

  Coordinator c_{std::chrono::milliseconds(50)};
};

TEST_F(CoordinatorSyncTest, OneStepAheadOfEveryRankOnceAllReported) {
  json idle = Sync(0, 10, 0, 0, 0);
  const uint64_t generation = idle["generation"].get<uint64_t>();
  EXPECT_TRUE(idle["step"].is_null());
  json n = Notice(1);
  ASSERT_TRUE(n["collecting"].get<bool>());
  const uint64_t collect = n["collect"].get<uint64_t>();
  // Node 0 at step 10 (idle rate), node 1 at 40 steps/s at step 12.
  Sync(0, 10, 0, generation, collect);
  json decided = Sync(1, 12, 40, generation, collect);
  ASSERT_FALSE(decided["step"].is_null()) << decided.dump();
  const int64_t step = decided["step"].get<int64_t>();
  // 12 + ceil(40 * lead) + 1 with lead in [0.1 s, 1 s].
  EXPECT_GE(step, 12 + 4 + 1);
  EXPECT_LE(step, 12 + 40 + 1);
  EXPECT_NE(decided["generation"].get<uint64_t>(), generation);
  // A second notice joins the decided step.
  EXPECT_EQ(Notice(0)["step"], decided["step"]);
}

TEST_F(CoordinatorSyncTest, ASilentNodeIsProjectedFromItsLastReport) {
  Sync(1, 100, 10, 0, 0);  // node 1 reported once, then fell silent
  json n = Notice(0);
  const uint64_t collect = n["collect"].get<uint64_t>();
  json r = Sync(0, 5, 0, n["generation"].get<uint64_t>(), collect);
  for (int i = 0; i < 100 && r["step"].is_null(); ++i) {  // the 1 s window closes
    r = Sync(0, 5, 0, r["generation"].get<uint64_t>(), collect);
  }
  ASSERT_FALSE(r["step"].is_null());
  EXPECT_GT(r["step"].get<int64_t>(), 100);
}

TEST_F(CoordinatorSyncTest, ANewRoundWithdrawsTheStep) {
  json n = Notice(0);
  const uint64_t collect = n["collect"].get<uint64_t>();
  Sync(0, 7, 0, 0, collect);
  json decided = Sync(1, 7, 0, 0, collect);
  ASSERT_FALSE(decided["step"].is_null());
  Register(0, json::array());  // the job restarted
  json after = Sync(0, -1, 0, decided["generation"].get<uint64_t>(), 0);
  EXPECT_TRUE(after["step"].is_null()) << after.dump();
  EXPECT_GT(after["generation"].get<uint64_t>(), decided["generation"].get<uint64_t>());
}

TEST_F(CoordinatorSyncTest, AQuarantinedStepIsNeverPlannedAgain) {
  const json inv = TwoSteps(0), inv1 = TwoSteps(1);
  Register(0, inv);
  Register(1, inv1);
  auto plan = c_.Handle({{"op", "await_plan"}, {"job", "j"}, {"round", 2}, {"plan_version", 0}});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)["step"], 40);
  auto q = c_.Handle({{"op", "quarantine_step"}, {"job", "j"}, {"node", 0}, {"step", 40}});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  Register(0, inv);  // the next start: a new round, the quarantine carried over
  Register(1, inv1);
  plan = c_.Handle({{"op", "await_plan"}, {"job", "j"}, {"round", 3}, {"plan_version", 0}});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)["step"], 20) << plan->dump();
}

// Found by the 30-minute chaos soak: the coordinator's agent was killed
// after crash loops had quarantined steps, and the restarted coordinator
// planned them again (the nodes looped on them and quarantined ever older
// steps). The plan lists the quarantines for every node to keep, and a
// registration that carries them teaches a new coordinator.
TEST_F(CoordinatorSyncTest, AQuarantineOutlivesARestartOfTheCoordinator) {
  const json inv = TwoSteps(0), inv1 = TwoSteps(1);
  Register(0, inv);
  Register(1, inv1);
  ASSERT_TRUE(c_.Handle({{"op", "quarantine_step"}, {"job", "j"}, {"node", 0}, {"step", 40}}).ok());
  Register(0, inv);
  Register(1, inv1);
  auto plan = c_.Handle({{"op", "await_plan"}, {"job", "j"}, {"round", 3}, {"plan_version", 0}});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)["quarantined"], json::array({40})) << plan->dump();

  Coordinator restarted{std::chrono::milliseconds(50)};
  auto reg = [&](int node, json inventory, json quarantined) {
    json r = {{"op", "register"},
              {"job", "j"},
              {"nodes", 2},
              {"node", node},
              {"dp", 1},
              {"address", "127.0.0.1:" + std::to_string(7000 + node)},
              {"inventory", inventory}};
    if (!quarantined.is_null()) r["quarantined"] = quarantined;
    ASSERT_TRUE(restarted.Handle(r).ok());
  };
  reg(0, inv, nullptr);  // this node's agent restarted too: it forgot
  reg(1, inv1, json::array({40}));
  plan = restarted.Handle({{"op", "await_plan"}, {"job", "j"}, {"round", 1}, {"plan_version", 0}});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)["step"], 20) << plan->dump();
  EXPECT_EQ((*plan)["quarantined"], json::array({40})) << plan->dump();
}

// A replica that reached a registered node before the plan (a node leaving
// for maintenance replicates its on-demand step while the others register)
// counts: the node that lost its RAM restores it from there.
TEST_F(CoordinatorSyncTest, CopiesReportedBeforeThePlanCount) {
  Register(0, json::array({json::array({0, 40, "00000000000000aa"})}));  // round 2
  auto added = c_.Handle({{"op", "add_copies"},
                          {"job", "j"},
                          {"round", 2},
                          {"node", 0},
                          {"inventory", json::array({json::array({1, 40, "00000000000000bb"})})}});
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_FALSE((*added)["planned"].get<bool>());
  Register(1, json::array());  // back without its RAM
  auto plan = c_.Handle({{"op", "await_plan"}, {"job", "j"}, {"round", 2}, {"plan_version", 0}});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)["step"], 40) << plan->dump();
  EXPECT_EQ((*plan)["sources"]["1"]["holders"], json::array({0})) << plan->dump();
}

// Found by the chaos runner (seed 10: the coordinator's agent killed, then
// a maintenance notice): a restarted coordinator learns the job from the
// nodes' replication reports, which do not carry the round; its decisions
// were for round 0 and no node took them, so the notice's node saved alone.
// The nodes' sync calls carry their round, and the decision is for it.
TEST(CoordinatorRestartTest, DecidesForTheRoundTheNodesAreIn) {
  Coordinator c(std::chrono::milliseconds(50));
  for (int node = 0; node < 2; ++node) {
    auto r = c.Handle({{"op", "replicated"},
                       {"job", "j"},
                       {"node", node},
                       {"step", 20},
                       {"nodes", 2},
                       {"dp", 1}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  auto sync = [&](int node, uint64_t collect) {
    auto r = c.Handle({{"op", "sync"},
                       {"job", "j"},
                       {"node", node},
                       {"step", 30},
                       {"rate", 0},
                       {"generation", 0},
                       {"collect", collect},
                       {"round", 3}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or(json::object());
  };
  sync(0, 0);
  sync(1, 0);
  auto n = c.Handle({{"op", "notice"}, {"job", "j"}, {"node", 1}, {"origin", "test"}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  const uint64_t collect = (*n)["collect"].get<uint64_t>();
  sync(0, collect);
  json decided = sync(1, collect);
  ASSERT_FALSE(decided["step"].is_null()) << decided.dump();
  EXPECT_EQ(decided["round"], 3) << decided.dump();
  EXPECT_GT(decided["step"].get<int64_t>(), 30);
}

}  // namespace
}  // namespace strata::agent
