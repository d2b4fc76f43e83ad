// Copyright 2026 The Strata Authors.
//
// LocalDir, the protocol's files in the client's directory: what cleanup
// removes and keeps, which step directories count as committed, the markers
// a client matches, and what a power cut leaves of replicator.prerestore;
// which local directories the agent refuses to act in.
#include "agent/store/local_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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

struct stat Stat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

// A fresh path is made the agent's, and so is its agent directory: 0750,
// with the local directory's group (the job's).
TEST(SecureLocalDirTest, AFreshDirectoryIsMadeTheAgents) {
  testing::ScratchDir d("secure-fresh");
  const std::string local = d.Sub("local");
  StatusOr<gid_t> group = SecureLocalDir(local);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  EXPECT_EQ(*group, Stat(local).st_gid);
  const std::string agent = local + "/" + std::string(kAgentDirName);
  EXPECT_EQ(Stat(agent).st_uid, ::geteuid());
  EXPECT_EQ(Stat(agent).st_mode & 07777, 0750u);
  ASSERT_EQ(::chmod(agent.c_str(), 0755), 0);  // made by an older release
  ASSERT_TRUE(SecureLocalDir(local).ok());
  EXPECT_EQ(Stat(agent).st_mode & 07777, 0750u);
}

// A link planted as the local directory (or as its agent directory) would
// steer every write of the agent: refused, and nothing is written where it
// points.
TEST(SecureLocalDirTest, APlantedLinkIsRefusedAndNothingIsWrittenThrough) {
  testing::ScratchDir d("secure-link");
  const std::string target = d.Sub("elsewhere"), local = d.Sub("local");
  fs::create_directories(target);
  ASSERT_EQ(::symlink(target.c_str(), local.c_str()), 0);
  StatusOr<gid_t> s = SecureLocalDir(local);
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find(local + " is a symbolic link"), std::string::npos)
      << s.status().ToString();
  EXPECT_TRUE(Entries(target).empty());

  const std::string real = d.Sub("real");
  fs::create_directories(real);
  ASSERT_EQ(::symlink(target.c_str(), (real + "/" + std::string(kAgentDirName)).c_str()), 0);
  s = SecureLocalDir(real);
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("rm -rf"), std::string::npos) << s.status().ToString();
  EXPECT_TRUE(Entries(target).empty());
}

TEST(SecureLocalDirTest, ADirectoryEveryoneMayWriteIsRefused) {
  testing::ScratchDir d("secure-mode");
  const std::string local = d.Sub("local");
  fs::create_directories(local);
  ASSERT_EQ(::chmod(local.c_str(), 0777), 0);
  StatusOr<gid_t> s = SecureLocalDir(local);
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("writable by every user (mode 0777)"), std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find("chmod o-w " + local), std::string::npos);
  EXPECT_TRUE(Entries(local).empty());
  ASSERT_EQ(::chmod(local.c_str(), 02770), 0);  // the job's group may write, no one else
  EXPECT_TRUE(SecureLocalDir(local).ok());

  // Its parent: others could rename it away and put theirs in its place.
  const std::string parent = d.Sub("open"), inner = parent + "/local";
  fs::create_directories(inner);
  ASSERT_EQ(::chmod(parent.c_str(), 0777), 0);
  s = SecureLocalDir(inner);
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("lies in " + parent), std::string::npos)
      << s.status().ToString();
  ASSERT_EQ(::chmod(parent.c_str(), 01777), 0);  // sticky, as /tmp and /dev/shm
  EXPECT_TRUE(SecureLocalDir(inner).ok());
}

TEST(SecureLocalDirTest, AnotherUsersDirectoryIsRefused) {
  std::string why;
  auto user = testing::UnprivilegedUser(&why);
  if (!user) GTEST_SKIP() << why;
  testing::ScratchDir d("secure-owner");
  const std::string local = d.Sub("local");
  fs::create_directories(local);
  ASSERT_EQ(::chown(local.c_str(), user->uid, user->gid), 0);
  StatusOr<gid_t> s = SecureLocalDir(local);
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("belongs to uid " + std::to_string(user->uid)),
            std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find("install -d"), std::string::npos);
  EXPECT_TRUE(Entries(local).empty());
}

}  // namespace
}  // namespace strata::agent
