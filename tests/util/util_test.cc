// Copyright 2026 The Strata Authors.
//
// util/: the dispatched XXH3 and the non-temporal copy must be exact
// drop-in replacements for libxxhash and memcpy; the commit protocol leaves
// the old file or the new one, never a temp file; files are created only
// new and never through a planted link; a pinned process is the one signalled.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <vector>

#include "fault_env.h"
#include "test_util.h"
#include "util/copy.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/json_bounded.h"
#include "util/process.h"

namespace strata {
namespace {

std::vector<unsigned char> RandomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(HashTest, DispatchedXxh3EqualsLibxxhash) {
  auto data = RandomBytes((9 << 20) + 3, 1);
  for (size_t n : {0, 1, 3, 16, 17, 128, 129, 240, 241, 1000, 4095, 4096, 65537}) {
    for (size_t off : {0, 1, 7}) {
      ASSERT_EQ(Xxh3(data.data() + off, n), XXH3_64bits(data.data() + off, n)) << n << "+" << off;
    }
  }
  EXPECT_EQ(Xxh3(data.data(), data.size()), XXH3_64bits(data.data(), data.size()));
}

TEST(HashTest, HexRoundTrip) {
  EXPECT_EQ(Hex64(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(ParseHex64("0123456789ABCDEF"), 0x0123456789abcdefull);
  EXPECT_FALSE(ParseHex64("0123456789abcde").has_value());
  EXPECT_FALSE(ParseHex64("0123456789abcdeg").has_value());
  Xxh3Stream s;
  s.Update("abc");
  EXPECT_EQ(s.Digest(), XXH3_64bits("abc", 3));
}

TEST(CopyTest, NonTemporalCopyIsExactAtEveryAlignment) {
  auto src = RandomBytes((1 << 20) + 200, 2);
  for (size_t n : {0, 5, 4096, (256 << 10) - 1, 256 << 10, (1 << 20) + 77}) {
    for (size_t so : {0, 3}) {
      for (size_t dof : {0, 1, 9, 16}) {
        std::vector<unsigned char> dst(n + 64, 0xee);
        CopyNonTemporal(dst.data() + dof, src.data() + so, n);
        ASSERT_EQ(0, std::memcmp(dst.data() + dof, src.data() + so, n))
            << n << " " << so << " " << dof;
        ASSERT_EQ(dst[dof + n], 0xee) << "wrote past the end";
        if (dof > 0) {
          ASSERT_EQ(dst[dof - 1], 0xee) << "wrote before the start";
        }
      }
    }
  }
}

// The commit protocol leaves either the old file or the new one, never a
// temp file, whichever of its steps fails.
TEST(FileUtilTest, AFailedCommitLeavesTheOldFileAndNoTemp) {
  testing::ScratchDir d("commit");
  const std::string path = d.Sub("state.json");
  ASSERT_TRUE(WriteFileAtomic(Env::Default(), path, "old").ok());
  for (testing::Op op : {testing::Op::kWrite, testing::Op::kSync, testing::Op::kRename}) {
    testing::FaultInjectionEnv env;
    env.FailAt(op, 1, EIO);
    Status s = WriteFileAtomic(&env, path, "new");
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << static_cast<int>(op) << ": " << s.ToString();
    EXPECT_EQ(testing::ReadFile(path), "old");
    auto entries = Env::Default()->ListDir(d.path());
    ASSERT_TRUE(entries.ok());
    EXPECT_EQ(entries->size(), 1u) << static_cast<int>(op);
  }
  ASSERT_TRUE(WriteFileAtomic(Env::Default(), path, "new").ok());
  EXPECT_EQ(testing::ReadFile(path), "new");
}

// CommitFileAt publishes a file written relative to an open directory and
// closes the descriptor; a failed rename removes the temp file.
TEST(FileUtilTest, CommitFileAtPublishesAndCleansUp) {
  testing::ScratchDir d("commitat");
  int dir = ::open(d.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  int fd = ::openat(dir, "tmp1", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "abc", 3), 3);
  ASSERT_TRUE(CommitFileAt(dir, fd, "tmp1", "object").ok());
  EXPECT_EQ(testing::ReadFile(d.Sub("object")), "abc");
  fd = ::openat(dir, "tmp2", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  Status s = CommitFileAt(dir, fd, "tmp2", "no-such-dir/object");
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("rename tmp2 to no-such-dir/object"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(Env::Default()->Exists(d.Sub("tmp2")));
  ::close(dir);
}

// A name Strata is about to create may be planted by another user of the
// directory: a link there is refused, and its target never written.
TEST(FileUtilTest, CreatingAFileNeverWritesThroughAPlantedLink) {
  testing::ScratchDir d("exclusive");
  const std::string victim = d.Sub("victim"), planted = d.Sub("planted");
  testing::WriteFile(victim, "precious");
  ASSERT_EQ(::symlink(victim.c_str(), planted.c_str()), 0);
  StatusOr<int> fd = CreateExclusive(planted, 0644);
  EXPECT_EQ(fd.status().code(), StatusCode::kAlreadyExists) << fd.status().ToString();
  EXPECT_NE(fd.status().message().find(planted), std::string::npos);
  auto file = Env::Default()->CreateWritable(planted);
  EXPECT_EQ(file.status().code(), StatusCode::kAlreadyExists) << file.status().ToString();
  // Reopening a file to reuse it (a retired step's) never follows a link.
  EXPECT_FALSE(Env::Default()->OpenWritable(planted).ok());
  ASSERT_EQ(::symlink((d.path() + "/no-such-file").c_str(), d.Sub("dangling").c_str()), 0);
  EXPECT_EQ(CreateExclusive(d.Sub("dangling"), 0644).status().code(), StatusCode::kAlreadyExists);
  EXPECT_FALSE(Env::Default()->OpenWritable(d.Sub("dangling")).ok());
  EXPECT_FALSE(Env::Default()->Exists(d.path() + "/no-such-file"));
  EXPECT_EQ(testing::ReadFile(victim), "precious");
  // A temp file is new: an existing one is not opened either.
  EXPECT_EQ(Env::Default()->CreateWritable(victim).status().code(), StatusCode::kAlreadyExists);
}

// A lock file is held while its descriptor is open: a second taker is told
// who holds it, and takes it once the first lets go. A link planted at the
// name is not followed.
TEST(FileUtilTest, ALockFileIsHeldUntilItsDescriptorGoes) {
  testing::ScratchDir d("lock");
  const std::string path = d.Sub("lock");
  auto first = LockFileExclusive(path, "busy", /*write_pid=*/true);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(testing::ReadFile(path), std::to_string(::getpid()));
  // flock(2) belongs to the open file: a second open in this process
  // conflicts as another process would.
  auto second = LockFileExclusive(path, "busy", /*write_pid=*/false);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status().ToString();
  EXPECT_EQ(second.status().message(),
            "busy (pid " + std::to_string(::getpid()) + " holds " + path + ")");
  first->Reset();
  auto third = LockFileExclusive(path, "busy", /*write_pid=*/false);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_TRUE(third->valid());
  EXPECT_EQ(testing::ReadFile(path), std::to_string(::getpid()));  // left as it was

  testing::WriteFile(d.Sub("victim"), "precious");
  ASSERT_EQ(::symlink(d.Sub("victim").c_str(), d.Sub("planted").c_str()), 0);
  auto planted = LockFileExclusive(d.Sub("planted"), "busy", /*write_pid=*/true);
  ASSERT_FALSE(planted.ok());
  EXPECT_NE(planted.status().message().find("open lock file " + d.Sub("planted")),
            std::string::npos)
      << planted.status().ToString();
  EXPECT_EQ(testing::ReadFile(d.Sub("victim")), "precious");
}

// Temp names carry 64 random bits after the pid and the sequence number:
// another user cannot tell the next one in advance.
TEST(FileUtilTest, TempNamesAreNotPredictable) {
  const std::string a = TempPathFor("/d/state.json"), b = TempPathFor("/d/state.json");
  const std::string prefix = "/d/.strata-tmp-state.json-" + std::to_string(::getpid()) + "-";
  ASSERT_EQ(a.rfind(prefix, 0), 0u) << a;
  const std::string random_a = a.substr(a.rfind('-') + 1), random_b = b.substr(b.rfind('-') + 1);
  EXPECT_EQ(random_a.size(), 16u) << a;
  EXPECT_NE(random_a, random_b);
}

// JSON from another process is read whole or not at all: a value nested
// deeper than the bound (the outermost value is level 0) refuses the
// document, it is never left out of it.
TEST(JsonBoundedTest, ADocumentTooDeepIsRefusedWhole) {
  auto nested = [](int depth) {
    return R"({"op":"status","x":)" + std::string(depth, '[') + std::string(depth, ']') + "}";
  };
  const nlohmann::json shallow = ParseBounded(nested(kMaxJsonDepth));
  ASSERT_TRUE(shallow.is_object());
  EXPECT_EQ(shallow.at("op"), "status");
  for (int depth : {kMaxJsonDepth + 1, 1 << 16}) {
    EXPECT_TRUE(ParseBounded(nested(depth)).is_discarded()) << depth;
  }
  EXPECT_TRUE(ParseBounded("{\"op\":").is_discarded());
}

// A pinned process says who it runs as; once it has exited (and been
// reaped, its pid free for another) it can no longer be signalled.
TEST(ProcessTest, APinnedProcessIsSignalledAndNoOtherAfterIt) {
  testing::Child child({"/bin/sh", "-c", "echo ready; exec sleep 60"});
  ASSERT_TRUE(child.WaitForOutput("ready"));
  StatusOr<PinnedProcess> p = PinnedProcess::Open(child.pid());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->credentials().RunsAs(::getuid()));
  EXPECT_TRUE(p->credentials().InGroup(::getgid()));
  EXPECT_TRUE(p->Alive());
  ASSERT_TRUE(p->Signal(SIGKILL).ok());
  EXPECT_EQ(child.Wait(), 128 + SIGKILL);
  EXPECT_FALSE(p->Alive());
  EXPECT_EQ(p->Signal(SIGTERM).code(), StatusCode::kNotFound);
  EXPECT_EQ(PinnedProcess::Open(::getpid()).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(PinnedProcess::Open(0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(PinnedProcess::Open(-1).status().code(), StatusCode::kFailedPrecondition);
}

// A process's state is read while it may exit: its /proc/<pid>/stat, opened
// while it ran, fails with ESRCH once it is reaped. That is an answer
// (nullopt), never an exception: a std::istreambuf_iterator over the same
// file throws from libstdc++'s underflow, which ended an agent that checked
// a rank exiting at that moment.
TEST(ProcessTest, TheStateOfAProcessThatExitsWhileItIsReadIsNoAnswer) {
  testing::Child child({"/bin/sh", "-c", "echo ready; exec sleep 60"});
  ASSERT_TRUE(child.WaitForOutput("ready"));
  const std::optional<char> running = ProcessState(child.pid());
  ASSERT_TRUE(running.has_value());
  EXPECT_NE(*running, 'Z');
  const std::string path = "/proc/" + std::to_string(child.pid()) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::kill(static_cast<pid_t>(child.pid()), SIGKILL), 0);
  EXPECT_EQ(child.Wait(), 128 + SIGKILL);
  EXPECT_EQ(ProcessStateFromStat(fd), std::nullopt);
  ::close(fd);
  EXPECT_EQ(ProcessState(child.pid()), std::nullopt);
  EXPECT_EQ(ProcessState(::getpid()), 'R');
}

}  // namespace
}  // namespace strata
