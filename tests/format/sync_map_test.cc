// Copyright 2026 The Strata Authors.
//
// The agent's side of the sync map: who may write it. The ranks of the job
// (its group) may, no other user: the map is 0660, its mode and group set
// through the descriptor; a link or another user's file at its name is
// never used or written through.
#include "format/sync_map.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

namespace strata {
namespace {

struct stat Stat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(SyncMapTest, TheMapIsWritableByTheJobsGroupOnly) {
  testing::ScratchDir d("syncmap-mode");
  const std::string path = d.Sub("sync.map");
  auto map = SyncMap::OpenOrCreate(path, ::getegid());
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(Stat(path).st_mode & 07777, 0660u);
  EXPECT_EQ(Stat(path).st_gid, ::getegid());
  // A map of an older release (0666) is kept (ranks have it mapped) and
  // made 0660.
  map->Publish(7, 1);
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  auto again = SyncMap::OpenOrCreate(path, ::getegid());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->header().sync_step.load(), 7);
  EXPECT_EQ(Stat(path).st_mode & 07777, 0660u);
}

TEST(SyncMapTest, TheJobsGroupIsGivenToTheMap) {
  std::string why;
  auto user = testing::UnprivilegedUser(&why);
  if (!user) GTEST_SKIP() << why;
  testing::ScratchDir d("syncmap-group");
  const std::string path = d.Sub("sync.map");
  ASSERT_TRUE(SyncMap::OpenOrCreate(path, user->gid).ok());
  EXPECT_EQ(Stat(path).st_gid, user->gid);
  EXPECT_EQ(Stat(path).st_uid, ::geteuid());
  EXPECT_EQ(Stat(path).st_mode & 07777, 0660u);
}

// A link planted at the map's name: the ranks' Open does not follow it, and
// the agent replaces the link with a map of its own; its target is untouched.
TEST(SyncMapTest, ALinkAtTheMapsNameIsNeverFollowed) {
  testing::ScratchDir d("syncmap-link");
  const std::string path = d.Sub("sync.map"), victim = d.Sub("victim");
  testing::WriteFile(victim, std::string(kSyncMapBytes, 'v'));
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  EXPECT_FALSE(SyncMap::Open(path).ok());
  auto map = SyncMap::OpenOrCreate(path, ::getegid());
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_TRUE(S_ISREG(Stat(path).st_mode));
  EXPECT_EQ(testing::ReadFile(victim), std::string(kSyncMapBytes, 'v'));
  EXPECT_EQ(Stat(victim).st_mode & 07777, 0644u);
}

// A valid map another user made (who could write any pid into it) is
// replaced by the agent's own, never used.
TEST(SyncMapTest, AnotherUsersMapIsReplaced) {
  std::string why;
  auto user = testing::UnprivilegedUser(&why);
  if (!user) GTEST_SKIP() << why;
  testing::ScratchDir d("syncmap-foreign");
  const std::string path = d.Sub("sync.map");
  {
    auto planted = SyncMap::OpenOrCreate(path, ::getegid());
    ASSERT_TRUE(planted.ok());
    planted->Publish(99, 1);
  }
  ASSERT_EQ(::chown(path.c_str(), user->uid, user->gid), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  auto map = SyncMap::OpenOrCreate(path, ::getegid());
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->header().sync_step.load(), kNoSyncStep);  // a new map
  EXPECT_EQ(Stat(path).st_uid, ::geteuid());
  EXPECT_EQ(Stat(path).st_mode & 07777, 0660u);
}

}  // namespace
}  // namespace strata
