// Copyright 2026 The Strata Authors.
//
// Round formation in process: registrations retried because a reply was
// lost or a call was refused or timed out keep the round, so many nodes
// retrying under load converge on one round and one plan; a new start of a
// node's client begins a new round.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "agent/coordinator/coordinator.h"
#include "test_util.h"
#include "util/clock.h"

namespace strata::agent {
namespace {

class CoordinatorRoundTest : public ::testing::Test {
 protected:
  StatusOr<json> Register(int nodes, int node, const std::string& incarnation,
                          json inventory = json::array()) {
    json req = {{"op", "register"},
                {"job", "j"},
                {"nodes", nodes},
                {"node", node},
                {"dp", 1},
                {"address", "127.0.0.1:" + std::to_string(7000 + node)},
                {"inventory", std::move(inventory)}};
    if (!incarnation.empty()) req["incarnation"] = incarnation;
    return c_.Handle(req);
  }
  int64_t Round(int nodes, int node, const std::string& incarnation) {
    auto r = Register(nodes, node, incarnation);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["round"].get<int64_t>() : -1;
  }
  StatusOr<json> AwaitPlan(int64_t round) {
    return c_.Handle({{"op", "await_plan"}, {"job", "j"}, {"round", round}, {"plan_version", 0}});
  }

  Coordinator c_{std::chrono::milliseconds(20)};
};

TEST_F(CoordinatorRoundTest, ARetriedRegistrationKeepsTheRound) {
  const int64_t round = Round(2, 0, "start-a");
  EXPECT_EQ(Round(2, 0, "start-a"), round);  // the reply was lost: again
  EXPECT_EQ(Round(2, 1, "start-b"), round);  // the last node: planned
  ASSERT_TRUE(AwaitPlan(round).ok());
  EXPECT_EQ(Round(2, 1, "start-b"), round);  // a retry after the plan
  auto plan = AwaitPlan(round);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)["plan_version"].get<int64_t>(), 1);
  // Node 1's client started again: a new round, which node 0 must join.
  const int64_t next = Round(2, 1, "start-c");
  EXPECT_EQ(next, round + 1);
  EXPECT_EQ(AwaitPlan(round).status().code(), StatusCode::kAborted);
  EXPECT_EQ(AwaitPlan(next).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Round(2, 0, "start-d"), next);
  EXPECT_TRUE(AwaitPlan(next).ok());
}

TEST_F(CoordinatorRoundTest, ARegistrationWithoutAnIdIsANewStartAsBefore) {
  const int64_t round = Round(2, 0, "");
  EXPECT_EQ(Round(2, 0, ""), round + 1);
}

// 128 nodes register in a random order; every reply is lost with
// probability 1/2 and the node registers again (up to 3 times), as the
// agents do when a call is refused or times out. One round, one plan.
TEST_F(CoordinatorRoundTest, ManyNodesRetryingAtRandomConvergeOnOneRound) {
  constexpr int kNodes = 128;
  std::mt19937 rng(20261124);
  std::vector<int> calls;
  for (int n = 0; n < kNodes; ++n) {
    int tries = 1;
    while (tries < 4 && rng() % 2 == 0) ++tries;
    calls.insert(calls.end(), tries, n);
  }
  std::shuffle(calls.begin(), calls.end(), rng);
  const int64_t round = Round(kNodes, calls.front(), "start-" + std::to_string(calls.front()));
  for (int n : calls) EXPECT_EQ(Round(kNodes, n, "start-" + std::to_string(n)), round) << n;
  auto plan = AwaitPlan(round);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)["plan_version"].get<int64_t>(), 1);
  EXPECT_EQ((*plan)["addresses"].size(), static_cast<size_t>(kNodes));
}

// A node's plan names its own source and the addresses of its holders and
// peers only, however large the job; without "node" the whole plan comes.
TEST_F(CoordinatorRoundTest, ANodesPlanHoldsOnlyWhatItNeeds) {
  constexpr int kNodes = 50;
  for (int n = 0; n < kNodes; ++n) {
    const int left = (n + kNodes - 1) % kNodes;
    // Its own step, and its left neighbour's copy.
    json held = json::array(
        {json::array({n, 10, "00000000000000aa"}), json::array({left, 10, "00000000000000aa"})});
    ASSERT_TRUE(Register(kNodes, n, "i" + std::to_string(n), held).ok());
  }
  auto wait = [&](json req) {
    req.update({{"op", "await_plan"}, {"job", "j"}, {"round", 1}, {"plan_version", 0}});
    return c_.Handle(req);
  };
  auto plan = wait({{"node", 3}, {"peers", {4, 20}}});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)["step"], 10);
  EXPECT_EQ((*plan)["sources"].size(), 1u);
  EXPECT_EQ((*plan)["sources"]["3"]["holders"], json::array({3, 4}));
  EXPECT_EQ((*plan)["addresses"],
            json({{"3", "127.0.0.1:7003"}, {"4", "127.0.0.1:7004"}, {"20", "127.0.0.1:7020"}}));
  auto whole = wait(json::object());
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ((*whole)["sources"].size(), static_cast<size_t>(kNodes));
  EXPECT_EQ((*whole)["addresses"].size(), static_cast<size_t>(kNodes));
}

// The watermark is the lowest newest step over every node, -1 until each
// has reported; a report older than a node's newest changes nothing.
TEST_F(CoordinatorRoundTest, TheWatermarkIsTheSlowestNodesNewestStep) {
  auto report = [&](int node, int64_t step) {
    auto r = c_.Handle({{"op", "replicated"},
                        {"job", "j"},
                        {"node", node},
                        {"step", step},
                        {"nodes", 3},
                        {"dp", 1}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["watermark"].get<int64_t>() : -2;
  };
  EXPECT_EQ(report(0, 10), -1);
  EXPECT_EQ(report(1, 20), -1);
  EXPECT_EQ(report(2, 30), 10);
  EXPECT_EQ(report(0, 40), 20);
  EXPECT_EQ(report(1, 15), 20);  // older than node 1's newest
  EXPECT_EQ(report(1, 50), 30);
  EXPECT_EQ(report(2, 60), 40);
}

// A parked call's deadline is on the coordinator's clock: real time alone
// never ends it, and moving the clock past the deadline does.
TEST(CoordinatorClockTest, AParkedCallEndsWhenTheClockPassesItsDeadline) {
  ManualClock clock;
  // Before the coordinator: a failing test's ~Coordinator still answers.
  std::atomic<bool> answered{false};
  StatusCode code = StatusCode::kOk;
  Coordinator c(std::chrono::seconds(2), &clock);
  auto registered = c.Handle({{"op", "register"},
                              {"job", "j"},
                              {"nodes", 2},
                              {"node", 0},
                              {"dp", 1},
                              {"address", "127.0.0.1:7000"},
                              {"inventory", json::array()}});
  ASSERT_TRUE(registered.ok()) << registered.status().ToString();
  c.HandleAsync({{"op", "await_plan"},
                 {"job", "j"},
                 {"round", (*registered)["round"]},
                 {"plan_version", 0},
                 {"wait_ms", 1000}},
                [&](StatusOr<json> r) {
                  code = r.status().code();
                  answered = true;
                });
  EXPECT_EQ(c.waiting(), 1u);
  // Several of the timer's ticks, in real time: still parked.
  EXPECT_FALSE(testing::WaitUntil([&] { return answered.load(); }, std::chrono::milliseconds(300)));
  clock.Advance(std::chrono::milliseconds(999));
  EXPECT_FALSE(testing::WaitUntil([&] { return answered.load(); }, std::chrono::milliseconds(200)));
  clock.Advance(std::chrono::milliseconds(1));
  ASSERT_TRUE(testing::WaitUntil([&] { return answered.load(); }));
  EXPECT_EQ(code, StatusCode::kDeadlineExceeded);
  EXPECT_EQ(c.waiting(), 0u);
}

}  // namespace
}  // namespace strata::agent
