// Copyright 2026 The Strata Authors.
//
// The backup tier end to end: 4 real agents and trainers on loopback back up
// every few steps into a file:// directory or a real moto_server; the whole
// cluster is lost (every agent killed, every RAM directory wiped) and the
// restart restores from the newest committed backup, ending bit for bit
// where an uninterrupted run ends.
#include <gtest/gtest.h>

#include <thread>

#include "backup/layout.h"
#include "cluster.h"
#include "storage/object_store.h"
#include "strata/env.h"

namespace strata::testing {
namespace {

void ExpectAll(const std::vector<TrainerRun>& runs, const std::string& restored, int64_t steps) {
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].exit_code, 0) << "node " << i << ": " << runs[i].err;
    EXPECT_EQ(runs[i].restored, restored) << "node " << i << ": " << runs[i].out;
    EXPECT_EQ(runs[i].digest, Cluster::ReferenceDigest(static_cast<int>(i), steps))
        << "node " << i << " did not end where an uninterrupted run ends";
  }
}

// Every agent killed, every RAM directory wiped, every agent restarted.
void LoseTheWholeCluster(Cluster& c) {
  for (int n = 0; n < c.nodes(); ++n) c.KillAgent(n);
  for (int n = 0; n < c.nodes(); ++n) c.WipeDir(n);
  c.StartAll();
}

std::vector<backup::BackupSummary> Backups(const std::string& url) {
  auto store = storage::OpenObjectStore(url);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return {};
  auto list = backup::ListBackups(**store);
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  return list.ok() ? *list : std::vector<backup::BackupSummary>{};
}

TEST(BackupClusterTest, WholeClusterLossRestoresFromTheFileBackup) {
  Cluster c(4, "backup-file");
  ScratchDir bucket("backup-bucket");
  const std::string url = "file://" + bucket.path();
  c.SetAgentArgs({"--backup", url});
  c.StartAll();
  TrainOptions o;
  o.backup_interval_steps = 4;
  ExpectAll(c.Train(12, 2, o), "fresh", 12);
  const std::string id = c.WaitForBackup(0, 12);
  ASSERT_FALSE(id.empty()) << c.AgentLog(0);
  // Every node learns of it; status shows its age.
  for (int n = 0; n < 4; ++n) {
    auto b = c.Status(n)["backup"];
    EXPECT_EQ(b.value("access", ""), "ok") << b.dump();
    for (int i = 0; i < 100 && !b.contains("newest"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      b = c.Status(n)["backup"];
    }
    EXPECT_TRUE(b.contains("backup_lag_seconds")) << "node " << n << ": " << b.dump();
  }
  auto backups = Backups(url);
  ASSERT_FALSE(backups.empty());
  EXPECT_TRUE(backups.back().complete);
  EXPECT_EQ(backups.back().step, 12);

  LoseTheWholeCluster(c);
  ExpectAll(c.Train(20, 2, o), "12", 20);
  for (int n = 0; n < 4; ++n) {
    EXPECT_NE(c.Status(n)["last_restore"].get<std::string>().find("from backup " + id),
              std::string::npos)
        << c.Status(n).dump(2);
  }
  // The agents never modify or delete a backup: the restored one is intact.
  auto after = Backups(url);
  bool still_there = false;
  for (const auto& b : after) still_there |= b.id_text == id && b.complete;
  EXPECT_TRUE(still_there);
}

TEST(BackupClusterTest, ABackupInterruptedBeforeItsCommitIsNeverUsed) {
  Cluster c(4, "backup-crash");
  ScratchDir bucket("backup-bucket");
  const std::string url = "file://" + bucket.path();
  c.SetAgentArgs({"--backup", url});
  c.StartAll();
  TrainOptions o;
  o.backup_interval_steps = 4;
  ExpectAll(c.Train(4, 2, o), "fresh", 4);
  ASSERT_FALSE(c.WaitForBackup(0, 4).empty()) << c.AgentLog(0);

  // The coordinator dies after every part of the next backup is uploaded,
  // just before it would write the commit object.
  c.KillAgent(0);
  c.SetAgentEnv(0, {"STRATA_CRASH_AT=coordinator_before_commit"});
  c.StartAgent(0);
  o.wait_replicated = false;
  ExpectAll(c.Train(8, 2, o), "4", 8);
  EXPECT_EQ(c.WaitAgentExit(0, std::chrono::seconds(60)), 128 + 9) << c.AgentLog(0);
  auto backups = Backups(url);
  ASSERT_EQ(backups.size(), 2u);
  EXPECT_TRUE(backups[0].complete);
  EXPECT_FALSE(backups[1].complete) << "the interrupted backup must stay incomplete";
  EXPECT_EQ(backups[1].step, 8);

  c.SetAgentEnv(0, {});
  for (int n = 1; n < 4; ++n) c.KillAgent(n);
  for (int n = 0; n < 4; ++n) c.WipeDir(n);
  c.StartAll();
  o.wait_replicated = true;
  ExpectAll(c.Train(12, 2, o), "4", 12);  // the previous, committed backup
  // The client is told which backup it restores from.
  EXPECT_EQ(ReadFile(c.dir(2) + "/replicator.prerestore"),
            "restore-step: 4\nrestore-backup: " + backups[0].id_text + "\n");
  EXPECT_NE(c.AgentLog(2).find("from backup " + backups[0].id_text), std::string::npos)
      << c.AgentLog(2);
}

}  // namespace
}  // namespace strata::testing
