// Copyright 2026 The Strata Authors.
//
// LocalDir, the protocol's files in the client's directory: what cleanup
// removes and keeps, which step directories count as committed, the markers
// a client matches, and what a power cut leaves of replicator.prerestore.
#include "agent/store/local_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "fault_env.h"
#include "format/sync_map.h"
#include "test_util.h"
#include "util/file_util.h"

namespace strata::agent {
namespace {

namespace fs = std::filesystem;

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

TEST(LocalDirTest, CleanupRemovesProtocolLeftoversAndKeepsTheRest) {
  testing::ScratchDir d("localdir-clean");
  const std::string p = d.path();
  for (const char* f :
       {"replicator.yaml", "jax-init-info.txt", "replicator.prerestore", "replicator.errors",
        "replicator.failed", "job1-s10-n0-w0.restore", "job1-s10-n0-w0.save", "notes.txt"}) {
    testing::WriteFile(p + "/" + f, "x");
  }
  for (const char* dir : {".strata-agent", "10", "step=5", "x.orbax-checkpoint-tmp-1", "logs"}) {
    fs::create_directories(p + "/" + dir);
  }
  fs::create_directory_symlink("10", p + "/20");
  LocalDir local(Env::Default(), p);
  ASSERT_TRUE(local.Clean("replicator.yaml").ok());
  EXPECT_EQ(Entries(p), (std::set<std::string>{".strata-agent", "jax-init-info.txt", "logs",
                                               "notes.txt", "replicator.yaml"}));
}

TEST(LocalDirTest, CommittedStepsAreRealDirectoriesWithCanonicalNames) {
  testing::ScratchDir d("localdir-steps");
  const std::string p = d.path();
  for (const char* dir : {"10", "2", "007", "-3", "5.orbax-checkpoint-tmp-9"}) {
    fs::create_directories(p + "/" + dir);
  }
  fs::create_directory_symlink("10", p + "/20");  // a restore link, not a step
  testing::WriteFile(p + "/30", "a file");
  EXPECT_EQ(LocalDir(Env::Default(), p).CommittedSteps(), (std::vector<int64_t>{2, 10}));
}

// One marker per worker, under its final name: links to the step for a
// restore, empty files with step 0 when there is nothing to restore.
TEST(LocalDirTest, MarkersAreLinksToTheStepOrEmptyFilesForStepZero) {
  testing::ScratchDir d("localdir-markers");
  LocalDir local(Env::Default(), d.path());
  ASSERT_TRUE(local.WriteMarkers("job1", 3, 2, 40, {"a/40", "b/40"}).ok());
  EXPECT_EQ(fs::read_symlink(d.path() + "/job1-s40-n3-w0.restore"), "a/40");
  EXPECT_EQ(fs::read_symlink(d.path() + "/job1-s40-n3-w1.restore"), "b/40");
  ASSERT_TRUE(local.WriteMarkers("job1", 3, 1, 40, {}).ok());
  const std::string empty = d.path() + "/job1-s0-n3-w0.restore";
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(empty)));
  EXPECT_EQ(fs::file_size(empty), 0u);
  EXPECT_EQ(local.SymlinkTargets().size(), 2u);
}

// replicator.prerestore, cut by a power failure after any number of the
// calls that write it: the client finds the old answer or the new one,
// never a part of one; once written, it survives.
TEST(LocalDirTest, APowerCutLeavesTheOldOrTheNewPrerestoreNeverAPart) {
  const std::string before = "{}\n", after = "restore-step: 1200\nrestore-backup: b-7\n";
  for (int cut = 0; cut < 12; ++cut) {
    SCOPED_TRACE("power cut after " + std::to_string(cut) + " changing calls");
    testing::ScratchDir d("localdir-powercut");
    testing::FaultInjectionEnv env;
    LocalDir local(&env, d.path());
    ASSERT_TRUE(local.WritePrerestore(std::nullopt).ok());
    env.CutPowerAfter(cut);
    Status s = local.WritePrerestore(1200, "b-7");
    env.DropUnsyncedData();
    auto text = ReadFileToString(Env::Default(), d.path() + "/replicator.prerestore", 4096);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    if (s.ok()) {
      EXPECT_EQ(*text, after);
    } else {
      EXPECT_TRUE(*text == before || *text == after) << *text;
    }
  }
}

}  // namespace
}  // namespace strata::agent
