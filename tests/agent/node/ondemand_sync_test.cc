// Copyright 2026 The Strata Authors.
//
// OnDemandSync, the node's part in the job's on-demand step, as a component
// in one process: this test process registers as a rank in a real sync map
// (as a training process does through libstrata), the coordinator is played
// through the hooks.
#include "agent/node/ondemand_sync.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <mutex>
#include <thread>
#include <vector>

#include "component_util.h"
#include "test_util.h"
#include "util/metrics.h"

namespace strata::agent {
namespace {

using namespace std::chrono_literals;

class OnDemandSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OnDemandSync::Hooks hooks;
    hooks.call_coordinator = [this](const ReplicatorConfig&, const json& request,
                                    std::chrono::milliseconds) -> StatusOr<json> {
      std::lock_guard<std::mutex> l(mu_);
      notices_.push_back(request);
      if (refuse_) return UnavailableError("the coordinator is restarting");
      return json{{"ok", true}};
    };
    hooks.coordinator = [](const ReplicatorConfig&) { return std::optional<Endpoint>(); };
    hooks.stopping = [] { return false; };
    auto sync =
        OnDemandSync::Open(dir_.Sub("sync.map"), ::getegid(),
                           testing::PskTrust("secret-0123456789abcdef"), &clock_, std::move(hooks));
    ASSERT_TRUE(sync.ok()) << sync.status().ToString();
    sync_ = std::move(*sync);
    auto rank_map = SyncMap::Open(dir_.Sub("sync.map"));  // the rank's own mapping
    ASSERT_TRUE(rank_map.ok()) << rank_map.status().ToString();
    rank_map_ = std::move(*rank_map);
    // The rank: a process of the job's group (never the agent's own pid,
    // which the agent never counts as a rank); the test writes its slot.
    rank_ = std::make_unique<testing::Child>(
        std::vector<std::string>{"/bin/sh", "-c", "echo ready; exec sleep 600"});
    ASSERT_TRUE(rank_->WaitForOutput("ready"));
    auto slot = rank_map_.Claim(rank_->pid());
    ASSERT_TRUE(slot.ok()) << slot.status().ToString();
    slot_ = *slot;
    job_.config.job_name = "job1";
    job_.config.node_rank = 2;
    job_.round = 3;
  }
  void TearDown() override { sync_.reset(); }

  std::vector<json> Notices() {
    std::lock_guard<std::mutex> l(mu_);
    return notices_;
  }
  wire::SyncDecision Decision(int64_t step, uint64_t generation) {
    wire::SyncDecision d;
    d.step = step;
    d.generation = generation;
    d.round = job_.round;
    d.origin = "node 0";
    return d;
  }

  testing::ScratchDir dir_{"ondemand"};
  ManualClock clock_;
  std::unique_ptr<OnDemandSync> sync_;
  SyncMap rank_map_;
  std::unique_ptr<testing::Child> rank_;
  int slot_ = -1;
  OnDemandSync::Job job_;
  std::mutex mu_;
  std::vector<json> notices_;  // guarded by mu_
  bool refuse_ = false;        // guarded by mu_
};

// A rank's notice reaches the coordinator with the rank's step; a notice
// the coordinator did not hear is retried until it is, and one that comes
// before the node has a job is held until it has one.
TEST_F(OnDemandSyncTest, ARanksNoticeIsToldAndRetriedUntilHeard) {
  sync_->Start();
  rank_map_.slot(slot_).current_step = 41;
  rank_map_.slot(slot_).notices = 1;  // before the node joined a job
  ASSERT_TRUE(testing::WaitUntil([&] { return sync_->node_step() == 41; }));
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(Notices().empty());
  {
    std::lock_guard<std::mutex> l(mu_);
    refuse_ = true;
  }
  sync_->SetJob(job_);
  // Retries come at most twice a second by the component's clock.
  clock_.Advance(1s);
  ASSERT_TRUE(testing::WaitUntil([&] { return Notices().size() == 1; }));
  EXPECT_FALSE(sync_->NoticeHeard());
  const json n = Notices().front();
  EXPECT_EQ(n.value("op", ""), "notice");
  EXPECT_EQ(n.value("node", -1), 2);
  EXPECT_EQ(n.value("step", int64_t{-1}), 41);
  EXPECT_EQ(n.value("origin", ""), "SIGTERM to rank pid " + std::to_string(rank_->pid()));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Notices().size(), 1u);  // the clock has not moved
  clock_.Advance(1s);
  ASSERT_TRUE(testing::WaitUntil([&] { return Notices().size() == 2; }));
  {
    std::lock_guard<std::mutex> l(mu_);
    refuse_ = false;
  }
  clock_.Advance(1s);
  ASSERT_TRUE(testing::WaitUntil([&] { return sync_->NoticeHeard(); }));
  EXPECT_EQ(Notices().size(), 3u);
  clock_.Advance(1s);  // heard: no more retries
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Notices().size(), 3u);
}

// A decided step is published in the sync map once (a decision taken in is
// not applied again), remembered as the node's on-demand step, and
// withdrawn from the map once every rank there at publication served it;
// the node's step outlives the publication until the job restarts.
TEST_F(OnDemandSyncTest, ADecisionIsPublishedOnceAndWithdrawnWhenServed) {
  sync_->SetJob(job_);
  sync_->Start();
  sync_->Apply(Decision(50, 7));
  SyncHeader& header = rank_map_.header();
  EXPECT_EQ(header.sync_step.load(), 50);
  EXPECT_EQ(sync_->step(), 50);
  const uint64_t generation = header.generation.load();
  sync_->Apply(Decision(50, 7));  // the same decision again
  EXPECT_EQ(header.generation.load(), generation);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(header.sync_step.load(), 50);  // not yet served

  rank_map_.slot(slot_).saved_step = 50;  // the rank saved it
  rank_map_.slot(slot_).served = generation;
  ASSERT_TRUE(testing::WaitUntil([&] { return header.sync_step.load() == kNoSyncStep; }));
  EXPECT_EQ(sync_->step(), 50);
  ASSERT_EQ(sync_->RankStatus().size(), 1u);
  EXPECT_EQ(sync_->RankStatus()[0].ondemand_step, 50);

  sync_->Restart("the job restarted");
  EXPECT_EQ(sync_->step(), kNoSyncStep);
  EXPECT_FALSE(sync_->job().has_value());
}

// The value of a sample `name` (no labels) in the process's metrics; -1
// when absent.
double Sample(const std::string& name) {
  const std::string text = metrics::Default().Render();
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

// The on-demand step's distance counts from the step the notified node had
// reached when the notice came (the coordinator says which), not from where
// this node's ranks happen to be when the decision arrives.
TEST_F(OnDemandSyncTest, TheStepDistanceCountsFromTheNotice) {
  sync_->SetJob(job_);
  rank_map_.slot(slot_).current_step = 49;
  const double sum = std::max(0.0, Sample("strata_ondemand_step_distance_sum"));
  const double count = std::max(0.0, Sample("strata_ondemand_step_distance_count"));
  wire::SyncDecision d = Decision(50, 8);
  d.notice_step = 44;
  sync_->Apply(d);
  EXPECT_EQ(Sample("strata_ondemand_step_distance_sum"), sum + 6);
  EXPECT_EQ(Sample("strata_ondemand_step_distance_count"), count + 1);
}

// A step decided before any rank registered is kept in the map for ranks
// that come late, for a minute by the component's clock.
TEST_F(OnDemandSyncTest, AStepWithNoRankIsKeptAMinuteForLateRanks) {
  rank_map_.Release(slot_);
  sync_->SetJob(job_);
  sync_->Start();
  sync_->Apply(Decision(60, 9));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(rank_map_.header().sync_step.load(), 60);
  clock_.Advance(61s);
  ASSERT_TRUE(
      testing::WaitUntil([&] { return rank_map_.header().sync_step.load() == kNoSyncStep; }));
}

}  // namespace
}  // namespace strata::agent
