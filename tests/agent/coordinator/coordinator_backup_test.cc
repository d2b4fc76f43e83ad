// Copyright 2026 The Strata Authors.
//
// The coordinator's backup bookkeeping, in process against a file:// store:
// when a backup begins, who is asked for which part, which reports count,
// and that the commit object is written once, last.
#include <gtest/gtest.h>

#include "agent/coordinator/coordinator.h"
#include "backup/layout.h"
#include "storage/object_store.h"
#include "test_util.h"

namespace strata::agent {
namespace {

using testing::ScratchDir;

class CoordinatorBackupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = storage::OpenObjectStore("file://" + dir_.Sub("bucket"));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    coordinator_.EnableBackups(store_.get(), std::nullopt);
    coordinator_.SetWallClock([this] { return now_; });
    for (int node = 0; node < 2; ++node) Register(node);
  }

  StatusOr<json> Call(json request) { return coordinator_.Handle(request); }

  // Node `node` of the 2-node job registers (backups every 2 steps), holding
  // `inventory` ([rank, step, digest] rows).
  void Register(int node, json inventory = json::array()) {
    auto r = Call({{"op", "register"},
                   {"job", "j"},
                   {"nodes", 2},
                   {"node", node},
                   {"dp", 1},
                   {"address", "127.0.0.1:" + std::to_string(7000 + node)},
                   {"inventory", inventory},
                   {"backup_interval_steps", 2}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  // A "replicated" report (with the cadence every 2 steps, or every
  // `minutes`); the reply.
  json Replicated(int node, int64_t step, int minutes = 0) {
    json req = {{"op", "replicated"}, {"job", "j"}, {"node", node},
                {"step", step},       {"nodes", 2}, {"dp", 1}};
    if (minutes > 0) {
      req["backup_interval_minutes"] = minutes;
    } else {
      req["backup_interval_steps"] = 2;
    }
    auto r = Call(req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or(json::object());
  }

  // The job restarts (a new round) with both nodes holding both ranks'
  // checkpoints of `steps`.
  void Restart(std::initializer_list<int64_t> steps) {
    json held = json::array();
    for (int64_t step : steps) {
      for (int rank = 0; rank < 2; ++rank)
        held.push_back({rank, step, "00000000000000c" + std::to_string(rank)});
    }
    for (int node = 0; node < 2; ++node) Register(node, held);
  }

  StatusOr<json> Done(int node, const std::string& id, int part, int64_t step, bool ok = true) {
    return Call({{"op", "backup_done"},
                 {"job", "j"},
                 {"node", node},
                 {"id", id},
                 {"part", part},
                 {"step", step},
                 {"ok", ok},
                 {"bytes", 100 + part},
                 {"digest", "00000000000000a" + std::to_string(part)}});
  }

  std::time_t now_ = 1795000000;  // 2026-11-18, a whole minute
  ScratchDir dir_{"coord-backup"};
  std::unique_ptr<storage::ObjectStore> store_;
  Coordinator coordinator_{std::chrono::milliseconds(50)};
};

TEST_F(CoordinatorBackupTest, APartCountsOnlyFromItsNodeForTheBackupsStep) {
  EXPECT_FALSE(Replicated(0, 1).contains("backup_task"));  // watermark -1: node 1 has not reported
  json reply = Replicated(1, 2);
  EXPECT_FALSE(reply.contains("backup_task"));  // the watermark is 1: not yet a multiple of 2
  reply = Replicated(0, 2);                     // watermark 2: the backup of step 2 begins
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  const std::string id = reply["backup_task"]["id"];
  EXPECT_EQ(reply["backup_task"]["part"], 0);
  EXPECT_EQ(reply["backup_task"]["step"], 2);
  EXPECT_TRUE(backup::ParseBackupId(id).ok()) << id;
  EXPECT_EQ(Replicated(1, 2)["backup_task"]["part"], 1);

  // Reports that are not the node's task are refused.
  EXPECT_EQ(Done(0, id, 1, 2).status().code(), StatusCode::kInvalidArgument);     // not its part
  EXPECT_EQ(Done(0, id, 0, 4).status().code(), StatusCode::kInvalidArgument);     // another step
  EXPECT_EQ(Done(0, "2001-01-01_00-00", 0, 2)->value("abandoned", false), true);  // another id

  auto first = Done(0, id, 0, 2);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->value("committed", true), false);
  EXPECT_FALSE(store_->Get(backup::CommitKey(id)).ok()) << "no commit before every part";
  EXPECT_FALSE(Replicated(0, 2).contains("backup_task")) << "part 0 is done";

  auto last = Done(1, id, 1, 2);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->value("committed", false), true);
  auto commit = backup::ReadCommit(*store_, id);
  ASSERT_TRUE(commit.ok()) << commit.status().ToString();
  EXPECT_EQ(commit->step, 2);
  EXPECT_EQ(commit->job, "j");
  EXPECT_EQ(commit->part_bytes, (std::map<int, uint64_t>{{0, 100}, {1, 101}}));
  EXPECT_EQ(commit->sources, (std::map<int, int>{{0, 0}, {1, 1}}));
  // A late duplicate does not rewrite it; the nodes learn of the backup.
  EXPECT_EQ(Done(1, id, 1, 2)->value("abandoned", false), true);
  reply = Replicated(1, 2);
  EXPECT_EQ(reply["newest_backup"]["id"], id);
  EXPECT_FALSE(reply.contains("backup_task"));
}

TEST_F(CoordinatorBackupTest, AFailedPartAbandonsTheBackupAndItIsRetried) {
  Replicated(0, 2);
  json reply = Replicated(1, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  const std::string id = reply["backup_task"]["id"];
  EXPECT_EQ(Done(1, id, 1, 2, /*ok=*/false)->value("abandoned", false), true);
  reply = Replicated(0, 2);
  EXPECT_FALSE(reply.contains("backup_task")) << "retried after 30 s, not at once";
  EXPECT_NE(reply.value("backup_error", "").find("node 1"), std::string::npos) << reply.dump();
  EXPECT_FALSE(store_->Get(backup::CommitKey(id)).ok()) << "an abandoned backup has no commit";
  now_ += 30;
  reply = Replicated(1, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  EXPECT_EQ(reply["backup_task"]["step"], 2);
  EXPECT_NE(reply["backup_task"]["id"], id) << "the abandoned id is not reused";
}

// The seed-3 case of the eight-node chaos run: a restarted coordinator made
// the watermark a step one node had already collected. That failure is not
// the store's: the next backup must not wait 30 s, and must take a newer step.
TEST_F(CoordinatorBackupTest, APartWhoseStepIsGoneStartsANewerBackupAtOnce) {
  Replicated(0, 2);
  json reply = Replicated(1, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  const std::string id = reply["backup_task"]["id"];
  auto gone = Call({{"op", "backup_done"},
                    {"job", "j"},
                    {"node", 1},
                    {"id", id},
                    {"part", 1},
                    {"step", 2},
                    {"ok", false},
                    {"error", "this agent holds no step j/1/2"},
                    {"step_gone", true}});
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_EQ(gone->value("abandoned", false), true);
  EXPECT_FALSE(store_->Get(backup::CommitKey(id)).ok()) << "an abandoned backup has no commit";
  // Step 2 is not tried again (node 1 cannot upload it), and the job shows
  // no error: nothing failed.
  reply = Replicated(0, 3);
  EXPECT_FALSE(reply.contains("backup_task")) << reply.dump();
  EXPECT_EQ(reply.value("backup_error", ""), "") << reply.dump();
  reply = Replicated(1, 3);  // watermark 3, no clock advance
  ASSERT_TRUE(reply.contains("backup_task")) << "no 30 s wait: " << reply.dump();
  EXPECT_EQ(reply["backup_task"]["step"], 3);
  EXPECT_NE(reply["backup_task"]["id"], id);
}

// Without step_gone a failure is the store's, and the wait stays; a new
// round (a restore may bring older steps back) forgets a step that was gone.
TEST_F(CoordinatorBackupTest, AGoneStepIsForgottenByTheNextRound) {
  Replicated(0, 2);
  json reply = Replicated(1, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  auto gone = Call({{"op", "backup_done"},
                    {"job", "j"},
                    {"node", 1},
                    {"id", reply["backup_task"]["id"]},
                    {"part", 1},
                    {"step", 2},
                    {"ok", false},
                    {"step_gone", true}});
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  for (int node = 0; node < 2; ++node) Register(node);  // the job restarts: round 2
  Replicated(0, 2);
  reply = Replicated(1, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << "step 2 is held again after the restart";
  EXPECT_EQ(reply["backup_task"]["step"], 2);
}

TEST_F(CoordinatorBackupTest, EveryMMinutesCountsFromTheLastBackupsStart) {
  // The cadence is learned from the reports; the job started at now_.
  const std::time_t start = now_;
  Replicated(0, 1, /*minutes=*/2);
  EXPECT_FALSE(Replicated(1, 1, 2).contains("backup_task")) << "not before 2 minutes";
  now_ = start + 119;
  EXPECT_FALSE(Replicated(1, 1, 2).contains("backup_task"));
  now_ = start + 120;
  json reply = Replicated(1, 1, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  const std::string id = reply["backup_task"]["id"];
  EXPECT_EQ(id, (backup::BackupId{start + 120 - (start + 120) % 60, 1}.ToString()));
  ASSERT_TRUE(Done(1, id, 1, 1).ok());
  ASSERT_TRUE(Done(0, id, 0, 1).ok());
  ASSERT_TRUE(backup::ReadCommit(*store_, id).ok());
  // The next one 2 minutes after this one began, and only if the
  // watermark moved.
  now_ = start + 240;
  EXPECT_FALSE(Replicated(1, 1, 2).contains("backup_task")) << "the same step again";
  Replicated(0, 3, 2);
  now_ = start + 239;
  EXPECT_FALSE(Replicated(1, 3, 2).contains("backup_task"));
  now_ = start + 240;
  reply = Replicated(1, 3, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  EXPECT_EQ(reply["backup_task"]["step"], 3);
  EXPECT_NE(reply["backup_task"]["id"], id);
}

// Found by the eight-node chaos run (rs(6,2) seed 29): the job restarted
// 0.8 s into a backup, and the new round dropped it although it restored a
// later step; two crash loops then fell back two backup intervals. A round
// that restores the backup's step or a later one keeps it: the parts already
// reported count, and the rest are asked for again.
TEST_F(CoordinatorBackupTest, ABackupGoesOnIntoARoundThatRestoresItsStepOrLater) {
  int64_t step = 2;
  for (const int64_t later : {0, 1}) {
    SCOPED_TRACE("the new round restores step " + std::to_string(step + later));
    Replicated(0, step);
    json reply = Replicated(1, step);
    ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
    ASSERT_EQ(reply["backup_task"]["step"], step);
    const std::string id = reply["backup_task"]["id"];
    ASSERT_EQ(Done(0, id, 0, step)->value("committed", true), false);

    Restart({step + later});
    reply = Replicated(1, step + later);
    ASSERT_TRUE(reply.contains("backup_task")) << "still asked for its part: " << reply.dump();
    EXPECT_EQ(reply["backup_task"]["id"], id);
    auto last = Done(1, id, 1, step);
    ASSERT_TRUE(last.ok()) << last.status().ToString();
    EXPECT_EQ(last->value("committed", false), true) << last->dump();
    auto commit = backup::ReadCommit(*store_, id);
    ASSERT_TRUE(commit.ok()) << commit.status().ToString();
    EXPECT_EQ(commit->step, step);
    step += 2;
  }
}

// A round that restores an older step (or none) leaves the backup's step to
// a history the job has left; a quarantined step is not backed up either.
TEST_F(CoordinatorBackupTest, ARoundThatRestoresAnOlderStepDropsTheBackup) {
  Replicated(0, 2);
  json reply = Replicated(1, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  std::string id = reply["backup_task"]["id"];
  Restart({1});
  EXPECT_EQ(Done(1, id, 1, 2)->value("abandoned", false), true);
  EXPECT_FALSE(store_->Get(backup::CommitKey(id)).ok()) << "a dropped backup has no commit";

  Replicated(0, 2);
  reply = Replicated(1, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << "step 2 again, under a new id: " << reply.dump();
  id = reply["backup_task"]["id"];
  ASSERT_TRUE(Call({{"op", "quarantine_step"}, {"job", "j"}, {"node", 0}, {"step", 2}}).ok());
  Restart({2, 3});  // the round restores step 3
  EXPECT_EQ(Done(1, id, 1, 2)->value("abandoned", false), true);
  EXPECT_FALSE(store_->Get(backup::CommitKey(id)).ok()) << "a quarantined step has no backup";
}

// rs(6,2) seed 174 at eight nodes: a restart restored a step due for a
// backup, and the backup waited for a save of the new round to replicate on
// every node; a crash loop then poisoned that save, and the job fell back a
// whole backup interval further. The restored step counts as replicated at
// "go": the round's first report begins its backup.
TEST_F(CoordinatorBackupTest, ARestoredStepDueForABackupIsBackedUpWithTheFirstReport) {
  Replicated(0, 2);
  json reply = Replicated(1, 2);
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  const std::string first = reply["backup_task"]["id"];
  ASSERT_TRUE(Done(0, first, 0, 2).ok());
  ASSERT_EQ(Done(1, first, 1, 2)->value("committed", false), true);

  Restart({4});  // round 2 restores step 4 from the nodes' RAM
  auto ready = [&](int node) {
    return Call({{"op", "ready"},
                 {"job", "j"},
                 {"round", 2},
                 {"node", node},
                 {"plan_version", 1},
                 {"ok", true}});
  };
  ready(0).status().IgnoreError();  // node 1 is not ready yet: no "go" for node 0 without a wait
  StatusOr<json> go = ready(1);
  ASSERT_TRUE(go.ok()) << go.status().ToString();
  ASSERT_EQ(go->value("go", false), true) << go->dump();

  reply = Replicated(0, 5);  // node 0's first save of the round is on its peers
  EXPECT_EQ(reply.value("watermark", -1), 4) << reply.dump();
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  EXPECT_EQ(reply["backup_task"]["step"], 4);
}

}  // namespace
}  // namespace strata::agent

namespace strata::agent {
namespace {

// A "replicated" report with a cadence of every 100 steps, naming the
// requested steps the node holds (`requested`) and those it went past
// without its copy (`missing`).
json ReportWithRequests(Coordinator& c, int node, int64_t step, std::vector<int64_t> requested,
                        std::vector<int64_t> missing = {}) {
  json req = {{"op", "replicated"},
              {"job", "j"},
              {"node", node},
              {"step", step},
              {"nodes", 2},
              {"dp", 1},
              {"backup_interval_steps", 100}};
  if (!requested.empty()) req["requested"] = requested;
  if (!missing.empty()) req["requested_missing"] = missing;
  auto r = c.Handle(req);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.value_or(json::object());
}

// One node's request is the step's: every node is told, and once each holds
// its copy the backup begins, out of the cadence; it says it was requested
// and leaves the cadence's count where it was.
TEST_F(CoordinatorBackupTest, ARequestedStepIsBackedUpOnceEveryNodeHoldsIt) {
  json reply = ReportWithRequests(coordinator_, 1, 3, {3});
  EXPECT_EQ(reply["requested"], json::array({3}));
  EXPECT_FALSE(reply.contains("backup_task")) << "node 0 has not said it holds step 3";
  reply = ReportWithRequests(coordinator_, 0, 3, {3});
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  EXPECT_EQ(reply["backup_task"]["step"], 3);
  EXPECT_EQ(reply["requested"], json::array({3})) << "listed until it is committed";
  const std::string id = reply["backup_task"]["id"];
  ASSERT_TRUE(Done(0, id, 0, 3).ok());
  ASSERT_TRUE(Done(1, id, 1, 3).ok());
  auto commit = backup::ReadCommit(*store_, id);
  ASSERT_TRUE(commit.ok()) << commit.status().ToString();
  EXPECT_TRUE(commit->requested);
  EXPECT_FALSE(ReportWithRequests(coordinator_, 1, 3, {}).contains("requested"));
  // Reported again (a node that did not hear the answer): not backed up again.
  EXPECT_FALSE(ReportWithRequests(coordinator_, 1, 3, {3}).contains("requested"));
  // The cadence counts as if the requested backup had not been: step 100.
  ReportWithRequests(coordinator_, 0, 100, {});
  reply = ReportWithRequests(coordinator_, 1, 100, {});
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  EXPECT_EQ(reply["backup_task"]["step"], 100);
}

TEST_F(CoordinatorBackupTest, ARequestANodeWentPastWithoutItsCopyIsGivenUp) {
  ReportWithRequests(coordinator_, 1, 3, {3});
  json reply = ReportWithRequests(coordinator_, 0, 4, {}, {3});
  EXPECT_FALSE(reply.contains("requested")) << reply.dump();
  EXPECT_FALSE(reply.contains("backup_task")) << reply.dump();
  EXPECT_NE(reply.value("backup_error", "")
                .find("the requested backup of step 3 is not made: "
                      "node 0 went past it without its copy"),
            std::string::npos)
      << reply.dump();
}

// Step 0 is a step: a cadence in minutes backs it up like any other.
TEST_F(CoordinatorBackupTest, StepZeroIsBackedUpLikeAnyStep) {
  const std::time_t start = now_;
  Replicated(0, 0, /*minutes=*/1);
  now_ = start + 60;
  json reply = Replicated(1, 0, 1);
  ASSERT_TRUE(reply.contains("backup_task")) << reply.dump();
  EXPECT_EQ(reply["backup_task"]["step"], 0);
}

}  // namespace
}  // namespace strata::agent
