// Copyright 2026 The Strata Authors.
//
// End-to-end tests with real processes: build/toy-trainer is killed with
// SIGKILL, sent SIGTERM, has its checkpoints corrupted and its disk filled,
// and must still end bit for bit where an uninterrupted run ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "format/naming.h"
#include "strata/catalog.h"
#include "test_util.h"

namespace strata {
namespace {

using testing::Child;
using testing::LastValue;
using testing::ScratchDir;

struct TrainerFlags {
  int64_t steps = 200;
  int64_t save_interval_steps = 0;
  int state_mb = 4;
  int step_ms = 0;
  int max_to_keep = 2;
  bool exit_after_ondemand = false;
  bool stager = false;  // saves copied straight into the step's files (CudaStager)
};

std::vector<std::string> TrainerArgs(const std::string& dir, const TrainerFlags& f) {
  std::vector<std::string> a = {testing::BinaryPath("toy-trainer"),
                                "--dir",
                                dir,
                                "--steps",
                                std::to_string(f.steps),
                                "--save-interval-steps",
                                std::to_string(f.save_interval_steps),
                                "--state-mb",
                                std::to_string(f.state_mb),
                                "--step-ms",
                                std::to_string(f.step_ms),
                                "--max-to-keep",
                                std::to_string(f.max_to_keep)};
  if (f.exit_after_ondemand) a.push_back("--exit-after-ondemand");
  if (f.stager) a.push_back("--stager");
  return a;
}

// The digest of an uninterrupted run to `steps` (cached per size and steps).
std::string ReferenceDigest(int64_t steps, int state_mb) {
  static std::map<std::pair<int64_t, int>, std::string> cache;
  auto key = std::make_pair(steps, state_mb);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  ScratchDir d("ref");
  TrainerFlags f;
  f.steps = steps;
  f.state_mb = state_mb;
  Child c(TrainerArgs(d.path(), f));
  EXPECT_EQ(c.Wait(), 0) << c.Stderr();
  std::string digest = LastValue(c.Stdout(), "digest");
  EXPECT_EQ(digest.size(), 16u) << c.Stdout();
  cache[key] = digest;
  return digest;
}

// Every step that looks committed must verify completely.
void ExpectEveryStepVerifies(const std::string& dir, const std::string& context) {
  auto steps = ListSteps(dir);
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  for (int64_t s : *steps) {
    auto report = VerifyStep(dir, s);
    ASSERT_TRUE(report.ok()) << context << ": step " << s << ": " << report.status().ToString();
    ASSERT_TRUE(report->ok()) << context << ": step " << s << ": " << report->problems[0].message;
  }
}

int64_t NewestStep(const std::string& dir) {
  auto steps = ListSteps(dir);
  return steps.ok() && !steps->empty() ? steps->back() : -1;
}

// A restarted trainer must restore exactly the newest committed step.
void ExpectRestoresNewest(const Child& c, int64_t newest) {
  std::string out = c.Stdout();
  if (newest < 0) {
    EXPECT_NE(out.find("fresh start"), std::string::npos) << out;
  } else {
    EXPECT_NE(out.find("restored step=" + std::to_string(newest) + "\n"), std::string::npos)
        << "newest committed step " << newest << ", trainer said: " << out.substr(0, 200);
  }
}

// Runs the trainer once per (crash point, max_to_keep), killed at the
// point's third pass: each must be reached, and afterwards the newest step
// is restored and every committed step verifies.
void CrashInEveryPhase(const std::string& dir, const TrainerFlags& f,
                       const std::vector<std::pair<std::string, int>>& phases) {
  for (const auto& [phase, keep] : phases) {
    int64_t newest = NewestStep(dir);
    TrainerFlags pf = f;
    pf.max_to_keep = keep;
    Child c(TrainerArgs(dir, pf), {"STRATA_CRASH_AT=" + phase + ":3"});
    EXPECT_EQ(c.Wait(std::chrono::seconds(120)), 128 + SIGKILL)
        << phase << " was never reached: " << c.Stderr();
    ExpectRestoresNewest(c, newest);
    ExpectEveryStepVerifies(dir, "after a crash at " + phase);
  }
}

TEST(TrainerCrashTest, KillNineInEveryPhaseAndAtRandomMoments) {
  TrainerFlags f;
  f.steps = 1000000;  // never reached: every run below is killed
  f.save_interval_steps = 2;
  f.step_ms = 1;
  ScratchDir d("crash");
  // Every phase of a save, reached deterministically through crash points.
  // With the default max_to_keep 2 the oldest step is recycled; with 1 it is
  // removed after the commit, which is the retention path.
  const std::vector<std::pair<std::string, int>> phases = {
      {"save.after_snapshot", 2},   {"save.after_retire", 2},   {"save.before_data", 2},
      {"save.mid_data", 2},         {"save.after_data", 2},     {"save.after_manifest", 2},
      {"commit.before_rename", 2},  {"commit.after_rename", 2}, {"save.before_retention", 2},
      {"retention.after_rename", 1}};
  CrashInEveryPhase(d.path(), f, phases);
  // SIGKILL from outside at random moments: mostly while training and
  // saving (after the trainer has said where it restored from), every fourth
  // time during start-up and restore.
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay_ms(20, 250);
  int killed = 0;
  for (int i = 0; i < 32; ++i) {
    int64_t newest = NewestStep(d.path());
    Child c(TrainerArgs(d.path(), f));
    const bool during_startup = i % 4 == 3;
    if (!during_startup) {
      ASSERT_TRUE(c.WaitForOutput(newest < 0 ? "fresh start" : "restored step=")) << c.Stderr();
      ExpectRestoresNewest(c, newest);
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(delay_ms(rng) / (during_startup ? 10 : 1)));
    c.Signal(SIGKILL);
    if (c.Wait() == 128 + SIGKILL) ++killed;
    ExpectEveryStepVerifies(d.path(), "after random kill " + std::to_string(i) + " (seed " +
                                          std::to_string(seed) + ")");
  }
  EXPECT_EQ(killed, 32);
  // Finish a little past the newest step and compare with an uninterrupted run.
  f.steps = std::max<int64_t>(NewestStep(d.path()), 0) + 20;
  Child last(TrainerArgs(d.path(), f));
  ASSERT_EQ(last.Wait(), 0) << last.Stderr();
  EXPECT_EQ(LastValue(last.Stdout(), "digest"), ReferenceDigest(f.steps, f.state_mb));
}

// Saves copied straight into the step's files (CudaStager, as strata.torch
// and GPU trainers save): killed in every phase between the copy and the
// commit, and at random moments, every committed step still verifies, the
// newest is restored, and the run ends as an uninterrupted one does.
TEST(TrainerCrashTest, InPlaceSavesSurviveKillNineInEveryPhase) {
  TrainerFlags f;
  f.steps = 1000000;  // never reached: every run below is killed
  f.save_interval_steps = 2;
  f.step_ms = 1;
  f.stager = true;
  ScratchDir d("crash-in-place");
  const std::vector<std::pair<std::string, int>> phases = {
      {"save.before_checksum", 2},  {"save.after_retire", 2},     {"save.after_data", 2},
      {"save.after_manifest", 2},   {"commit.before_rename", 2},  {"commit.after_rename", 2},
      {"save.before_retention", 2}, {"retention.after_rename", 1}};
  CrashInEveryPhase(d.path(), f, phases);
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay_ms(20, 250);
  for (int i = 0; i < 8; ++i) {
    int64_t newest = NewestStep(d.path());
    Child c(TrainerArgs(d.path(), f));
    ASSERT_TRUE(c.WaitForOutput(newest < 0 ? "fresh start" : "restored step=")) << c.Stderr();
    ExpectRestoresNewest(c, newest);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    c.Signal(SIGKILL);
    EXPECT_EQ(c.Wait(), 128 + SIGKILL);
    ExpectEveryStepVerifies(d.path(), "after random kill " + std::to_string(i) + " (seed " +
                                          std::to_string(seed) + ")");
  }
  f.steps = std::max<int64_t>(NewestStep(d.path()), 0) + 20;
  Child last(TrainerArgs(d.path(), f));
  ASSERT_EQ(last.Wait(), 0) << last.Stderr();
  EXPECT_EQ(LastValue(last.Stdout(), "digest"), ReferenceDigest(f.steps, f.state_mb));
}

TEST(TrainerCorruptionTest, FlippedByteIsReportedAndTheOlderStepIsUsed) {
  ScratchDir d("corrupt");
  TrainerFlags f;
  f.steps = 40;
  f.save_interval_steps = 10;
  Child first(TrainerArgs(d.path(), f));
  ASSERT_EQ(first.Wait(), 0) << first.Stderr();
  ASSERT_EQ(ListSteps(d.path()).value(), (std::vector<int64_t>{30, 40}));
  testing::FlipByte(d.path() + "/40/" + DataFileName(1), 12345);

  std::string out;
  EXPECT_EQ(testing::Run({testing::BinaryPath("strata"), "verify", d.path()}, &out), 1);
  EXPECT_NE(out.find("step 30: OK"), std::string::npos) << out;
  EXPECT_NE(out.find("step 40 item \""), std::string::npos) << out;
  EXPECT_NE(out.find("chunk 0"), std::string::npos) << out;

  f.steps = 60;
  Child second(TrainerArgs(d.path(), f));
  ASSERT_EQ(second.Wait(), 0) << second.Stderr();
  EXPECT_NE(second.Stdout().find("restored step=30\n"), std::string::npos) << second.Stdout();
  EXPECT_NE(second.Stderr().find("skipping step 40"), std::string::npos) << second.Stderr();
  EXPECT_EQ(LastValue(second.Stdout(), "digest"), ReferenceDigest(60, f.state_mb));
}

// SIGTERM with a save interval longer than the run: the trainer saves the
// next step on demand, exits 75 (kExitAfterOnDemand: not finished), and a
// restart resumes from exactly there.
TEST(TrainerSigtermTest, OnDemandCheckpointThenExitThenResume) {
  ScratchDir d("sigterm");
  TrainerFlags f;
  f.steps = 100000;
  f.save_interval_steps = 1000000;
  f.step_ms = 5;
  f.exit_after_ondemand = true;
  Child c(TrainerArgs(d.path(), f));
  ASSERT_TRUE(c.WaitForOutput("fresh start"));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  c.Signal(SIGTERM);
  ASSERT_EQ(c.Wait(std::chrono::seconds(60)), 75 /* strata::kExitAfterOnDemand */) << c.Stderr();
  std::string s = LastValue(c.Stdout(), "ondemand checkpoint step");
  ASSERT_FALSE(s.empty()) << c.Stdout();
  int64_t step = std::stoll(s);
  EXPECT_GT(step, 0);
  EXPECT_NE(step % f.save_interval_steps, 0);
  EXPECT_EQ(ListSteps(d.path()).value(), std::vector<int64_t>{step});
  ExpectEveryStepVerifies(d.path(), "after SIGTERM");

  f.steps = step + 10;
  f.step_ms = 0;
  Child resumed(TrainerArgs(d.path(), f));
  ASSERT_EQ(resumed.Wait(), 0) << resumed.Stderr();
  EXPECT_NE(resumed.Stdout().find("restored step=" + s + "\n"), std::string::npos);
  EXPECT_EQ(LastValue(resumed.Stdout(), "digest"), ReferenceDigest(step + 10, f.state_mb));
}

TEST(TrainerSigtermTest, WithoutExitTheTrainerSavesAndContinues) {
  ScratchDir d("sigterm-continue");
  TrainerFlags f;
  f.steps = 300;
  f.save_interval_steps = 1000000;
  f.step_ms = 5;
  Child c(TrainerArgs(d.path(), f));
  ASSERT_TRUE(c.WaitForOutput("fresh start"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c.Signal(SIGTERM);
  ASSERT_EQ(c.Wait(), 0) << c.Stderr();
  EXPECT_NE(c.Stdout().find("ondemand checkpoint step="), std::string::npos) << c.Stdout();
  EXPECT_EQ(LastValue(c.Stdout(), "final step"), "300");
  EXPECT_EQ(LastValue(c.Stdout(), "digest"), ReferenceDigest(300, f.state_mb));
}

// A RAM disk too small for a second checkpoint: the save fails with an error
// naming the directory, the first checkpoint stays intact, training goes on.
TEST(TrainerDiskFullTest, SaveFailsClearlyAndTrainingContinues) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  ScratchDir d("diskfull");
  if (::mount("tmpfs", d.path().c_str(), "tmpfs", 0, "size=12m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs on " << d.path() << ": " << std::strerror(errno);
  }
  TrainerFlags f;
  f.steps = 20;
  f.save_interval_steps = 5;
  f.state_mb = 8;
  Child c(TrainerArgs(d.path(), f));
  int rc = c.Wait();
  std::string err = c.Stderr();
  auto steps = ListSteps(d.path());
  std::string digest = LastValue(c.Stdout(), "digest");
  auto entries = Env::Default()->ListDir(d.path());
  bool temp_left = false;
  for (const auto& e : entries.value()) temp_left |= IsTempName(e.name);
  ExpectEveryStepVerifies(d.path(), "after a full disk");
  ::umount2(d.path().c_str(), MNT_DETACH);

  EXPECT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
  EXPECT_NE(err.find("saving step 10 in " + d.path()), std::string::npos) << err;
  EXPECT_NE(err.find("training continues"), std::string::npos) << err;
  EXPECT_EQ(steps.value(), std::vector<int64_t>{5});
  EXPECT_FALSE(temp_left) << "a failed save left its temporary directory";
  EXPECT_EQ(digest, ReferenceDigest(20, 8));
}

}  // namespace
}  // namespace strata
