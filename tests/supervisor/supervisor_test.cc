// Copyright 2026 The Strata Authors.
//
// `strata run` as a real process: restarts with backoff, the do-not-restart
// code, signal forwarding and SIGKILL after the grace period, the restart
// limit, the lock, and crash loops with build/toy-trainer whose poisoned
// step is quarantined so the job still ends bit for bit where an
// uninterrupted run ends.
#include "supervisor/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <thread>

#include "format/naming.h"
#include "strata/catalog.h"
#include "strata/checkpointer.h"
#include "test_util.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using testing::Child;
using testing::LastValue;
using testing::ScratchDir;
using Clock = std::chrono::steady_clock;

std::vector<std::string> RunArgs(std::vector<std::string> options,
                                 const std::vector<std::string>& command) {
  options.insert(options.begin(), {testing::BinaryPath("strata"), "run"});
  options.push_back("--");
  options.insert(options.end(), command.begin(), command.end());
  return options;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

bool WaitForFile(const std::string& path, milliseconds timeout = milliseconds(20000)) {
  for (auto until = Clock::now() + timeout; Clock::now() < until;) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

// A shell script in `d` that runs `body`.
std::vector<std::string> Script(const ScratchDir& d, const std::string& body) {
  testing::WriteFile(d.Sub("script.sh"), body);
  return {"sh", d.Sub("script.sh")};
}

TEST(SupervisorTest, RestartsWithBackoffUntilTheCommandSucceeds) {
  ScratchDir d("run");
  auto cmd = Script(d, "n=$(cat " + d.Sub("count") + " 2>/dev/null || echo 0)\n" +
                           "echo $((n + 1)) > " + d.Sub("count") + "\n[ $n -ge 2 ]\n");
  auto start = Clock::now();
  Child c(RunArgs({"--backoff", "100ms,1s"}, cmd));
  ASSERT_EQ(c.Wait(), 0) << c.Stderr();
  std::string log = c.Stderr();
  EXPECT_EQ(testing::ReadFile(d.Sub("count")), "3\n");
  EXPECT_EQ(Count(log, "start attempt="), 3) << log;
  EXPECT_NE(log.find("exit attempt=1 code=1"), std::string::npos) << log;
  EXPECT_NE(log.find("backoff 0."), std::string::npos) << log;
  EXPECT_NE(log.find("before attempt=3"), std::string::npos) << log;
  EXPECT_NE(log.find("exit attempt=3 code=0"), std::string::npos) << log;
  // Jittered into the upper half: at least 50 ms, then at least 100 ms.
  EXPECT_GE(Clock::now() - start, milliseconds(150));
}

// The job's secret stays with strata run: the training command, and
// anything running in its processes, never sees it in its environment.
TEST(SupervisorTest, TheTrainersEnvironmentCarriesNoSecret) {
  Child c(RunArgs({}, {"sh", "-c", "env | grep ^STRATA_ || true; echo SEEN=$KEPT"}),
          {"STRATA_SECRET=do-not-pass-this-on-0123456789", "STRATA_SECRET_FILE=/etc/strata/secret",
           "KEPT=yes"});
  ASSERT_EQ(c.Wait(), 0) << c.Stderr();
  EXPECT_EQ(c.Stdout().find("STRATA_SECRET"), std::string::npos) << c.Stdout();
  EXPECT_NE(c.Stdout().find("SEEN=yes"), std::string::npos) << c.Stdout();
}

TEST(SupervisorTest, DoNotRestartCodeEndsTheLoopWithThatCode) {
  ScratchDir d("run");
  Child c(RunArgs({"--backoff", "10ms,10ms"},
                  {"sh", "-c", "exit " + std::to_string(supervisor::kExitDoNotRestart)}));
  EXPECT_EQ(c.Wait(), supervisor::kExitDoNotRestart) << c.Stderr();
  EXPECT_EQ(Count(c.Stderr(), "start attempt="), 1) << c.Stderr();
  EXPECT_NE(c.Stderr().find("asked not to be restarted"), std::string::npos) << c.Stderr();
}

// Exit 75 (stopped after an on-demand checkpoint) is a planned stop: the
// command is restarted at once, however long the backoff, and such runs
// never add up to a crash loop.
TEST(SupervisorTest, StoppedAfterOnDemandCheckpointRestartsAtOnce) {
  ScratchDir d("run");
  auto cmd = Script(d, "n=$(cat " + d.Sub("count") + " 2>/dev/null || echo 0)\n" +
                           "echo $((n + 1)) > " + d.Sub("count") + "\n[ $n -ge 4 ] || exit " +
                           std::to_string(supervisor::kExitRestartNow) + "\n");
  auto start = Clock::now();
  Child c(RunArgs(
      {"--backoff", "30s,60s", "--checkpoint-dir", d.Sub("ckpt"), "--crash-loop-runs", "2"}, cmd));
  ASSERT_EQ(c.Wait(), 0) << c.Stderr();
  EXPECT_LT(Clock::now() - start, milliseconds(20000)) << "a backoff wait was taken";
  EXPECT_EQ(testing::ReadFile(d.Sub("count")), "5\n");
  EXPECT_EQ(Count(c.Stderr(), "restarting at once"), 4) << c.Stderr();
  EXPECT_EQ(Count(c.Stderr(), "backoff"), 0) << c.Stderr();
  EXPECT_EQ(Count(c.Stderr(), "crash loop"), 0) << c.Stderr();
}

TEST(SupervisorTest, GivesUpAfterMaxRestarts) {
  Child c(RunArgs({"--backoff", "10ms,20ms", "--max-restarts", "2"}, {"sh", "-c", "exit 7"}));
  EXPECT_EQ(c.Wait(), supervisor::kExitGaveUp) << c.Stderr();
  EXPECT_EQ(Count(c.Stderr(), "start attempt="), 3) << c.Stderr();
  EXPECT_NE(c.Stderr().find("giving up: the command failed 3 time(s); --max-restarts 2 reached"),
            std::string::npos)
      << c.Stderr();
}

TEST(SupervisorTest, CommandThatCannotStart) {
  Child c(RunArgs({}, {"/nonexistent/command"}));
  EXPECT_EQ(c.Wait(), supervisor::kExitCannotStart) << c.Stderr();
  EXPECT_NE(c.Stderr().find("cannot start /nonexistent/command"), std::string::npos);
}

TEST(SupervisorTest, SigtermIsForwardedAndTheCommandIsNotRestarted) {
  ScratchDir d("run");
  auto cmd = Script(d, "trap 'echo bye > " + d.Sub("term") + "; exit 0' TERM\n" + "echo up > " +
                           d.Sub("up") + "\nwhile :; do sleep 0.05; done\n");
  Child c(RunArgs({"--backoff", "10ms,10ms"}, cmd));
  ASSERT_TRUE(WaitForFile(d.Sub("up"))) << c.Stderr();
  c.Signal(SIGTERM);
  EXPECT_EQ(c.Wait(milliseconds(20000)), 0) << c.Stderr();
  EXPECT_EQ(testing::ReadFile(d.Sub("term")), "bye\n");
  EXPECT_EQ(Count(c.Stderr(), "start attempt="), 1) << c.Stderr();
  EXPECT_NE(c.Stderr().find("SIGTERM: forwarding to process group"), std::string::npos);
}

TEST(SupervisorTest, CommandIgnoringSigtermIsKilledAfterTheGracePeriod) {
  ScratchDir d("run");
  auto cmd =
      Script(d, "trap '' TERM\necho up > " + d.Sub("up") + "\nwhile :; do sleep 0.05; done\n");
  Child c(RunArgs({"--grace", "1s"}, cmd));
  ASSERT_TRUE(WaitForFile(d.Sub("up"))) << c.Stderr();
  auto signalled = Clock::now();
  c.Signal(SIGTERM);
  EXPECT_EQ(c.Wait(milliseconds(20000)), 128 + SIGKILL) << c.Stderr();
  EXPECT_GE(Clock::now() - signalled, milliseconds(1000));
  EXPECT_NE(c.Stderr().find("grace period of 1s over: SIGKILL"), std::string::npos) << c.Stderr();
  EXPECT_EQ(Count(c.Stderr(), "start attempt="), 1) << c.Stderr();
}

TEST(SupervisorTest, ProcessesLeftInTheGroupAreStoppedBeforeTheNextRun) {
  ScratchDir d("run");
  auto cmd = Script(d, "sleep 600 &\necho $! > " + d.Sub("pid") + "\nexit 1\n");
  Child c(RunArgs({"--max-restarts", "0", "--grace", "30s"}, cmd));
  EXPECT_EQ(c.Wait(), supervisor::kExitGaveUp) << c.Stderr();
  EXPECT_NE(c.Stderr().find("outlived its leader: SIGTERM"), std::string::npos) << c.Stderr();
  pid_t straggler = std::stoi(testing::ReadFile(d.Sub("pid")));
  EXPECT_EQ(::kill(straggler, 0), -1) << "the backgrounded sleep survived";
  EXPECT_EQ(errno, ESRCH);
}

TEST(SupervisorTest, SignalDuringTheBackoffWaitStopsAtOnce) {
  Child c(RunArgs({"--backoff", "10m,10m"}, {"sh", "-c", "exit 1"}));
  for (int i = 0; i < 2000 && c.Stderr().find("backoff") == std::string::npos; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  c.Signal(SIGINT);
  EXPECT_EQ(c.Wait(milliseconds(20000)), 128 + SIGINT) << c.Stderr();
  EXPECT_NE(c.Stderr().find("stopped by SIGINT during the backoff wait"), std::string::npos);
  EXPECT_EQ(Count(c.Stderr(), "start attempt="), 1) << c.Stderr();
}

TEST(SupervisorTest, SecondSupervisorOnTheSameDirectoryIsRefused) {
  ScratchDir d("run");
  auto cmd = Script(d, "echo up > " + d.Sub("up") + "\nwhile :; do sleep 0.05; done\n");
  Child first(RunArgs({"--checkpoint-dir", d.Sub("ckpt")}, cmd));
  ASSERT_TRUE(WaitForFile(d.Sub("up"))) << first.Stderr();
  Child second(RunArgs({"--checkpoint-dir", d.Sub("ckpt")}, {"true"}));
  EXPECT_EQ(second.Wait(), supervisor::kExitGaveUp);
  EXPECT_NE(second.Stderr().find("is supervised by another strata run (pid " +
                                 std::to_string(first.pid())),
            std::string::npos)
      << second.Stderr();
  first.Signal(SIGINT);
  EXPECT_EQ(first.Wait(milliseconds(20000)), 128 + SIGINT) << first.Stderr();
}

// --- With build/toy-trainer ------------------------------------------------

constexpr int kStateMb = 1;

std::vector<std::string> TrainerArgs(const std::string& dir, int64_t steps) {
  return {testing::BinaryPath("toy-trainer"),
          "--dir",
          dir,
          "--steps",
          std::to_string(steps),
          "--save-interval-steps",
          "10",
          "--state-mb",
          std::to_string(kStateMb)};
}

std::string ReferenceDigest(int64_t steps) {
  ScratchDir d("ref");
  Child c(TrainerArgs(d.path(), steps));
  EXPECT_EQ(c.Wait(), 0) << c.Stderr();
  return LastValue(c.Stdout(), "digest");
}

// A trainer wrapper for a checkpoint that restores fine but that training
// cannot get past (think NaN losses from a bad step): when the newest step
// holds a file named "poison", the trainer is SIGKILLed at its first save.
std::vector<std::string> PoisonableTrainer(const ScratchDir& d, const std::string& dir,
                                           int64_t steps) {
  auto cmd = Script(d, "newest=$(ls " + dir + " | grep -E '^[0-9]+$' | sort -n | tail -n 1)\n" +
                           "if [ -n \"$newest\" ] && [ -e " + dir + "/$newest/poison ]; then\n" +
                           "  export STRATA_CRASH_AT=save.after_snapshot\nfi\nexec \"$@\"\n");
  auto trainer = TrainerArgs(dir, steps);
  cmd.insert(cmd.end(), trainer.begin(), trainer.end());
  return cmd;
}

// Steps 30 and 40 in `dir`, with the given ones poisoned.
void MakePoisonedSteps(const std::string& dir, const std::vector<int>& poisoned) {
  Child c(TrainerArgs(dir, 40));
  ASSERT_EQ(c.Wait(), 0) << c.Stderr();
  ASSERT_EQ(ListSteps(dir).value(), (std::vector<int64_t>{30, 40}));
  for (int s : poisoned) testing::WriteFile(dir + "/" + std::to_string(s) + "/poison", "x");
}

TEST(SupervisorCrashLoopTest, PoisonedStepIsQuarantinedAndTheJobFinishes) {
  ScratchDir d("loop");
  const std::string dir = d.Sub("ckpt");
  MakePoisonedSteps(dir, {40});
  Child c(RunArgs({"--checkpoint-dir", dir, "--backoff", "10ms,50ms", "--crash-loop-runs", "2"},
                  PoisonableTrainer(d, dir, 60)));
  ASSERT_EQ(c.Wait(), 0) << c.Stderr();
  std::string log = c.Stderr();
  EXPECT_NE(log.find("exit attempt=1 signal=SIGKILL"), std::string::npos) << log;
  EXPECT_EQ(Count(log, "step=40->40 no-progress"), 2) << log;
  EXPECT_NE(log.find("crash loop: 2 failed runs in a row made no progress past step 40"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("QUARANTINED step 40: renamed " + dir +
                     "/40 to 40.quarantined (1 of at "
                     "most 3); the next run restores step 30"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("exit attempt=3 code=0"), std::string::npos) << log;
  EXPECT_EQ(Count(log, "start attempt="), 3) << log;
  // The trainer restored the older step, and neither the catalog nor the
  // Checkpointer's cleanup touched the quarantined one.
  EXPECT_NE(c.Stdout().find("restored step=30\n"), std::string::npos) << c.Stdout();
  EXPECT_TRUE(std::filesystem::exists(dir + "/40.quarantined/poison"));
  EXPECT_EQ(ListSteps(dir).value(), (std::vector<int64_t>{50, 60}));
  EXPECT_EQ(LastValue(c.Stdout(), "digest"), ReferenceDigest(60));
}

TEST(SupervisorCrashLoopTest, GivesUpWhenQuarantinesRunOut) {
  ScratchDir d("loop");
  const std::string dir = d.Sub("ckpt");
  MakePoisonedSteps(dir, {30, 40});
  Child c(RunArgs({"--checkpoint-dir", dir, "--backoff", "10ms,50ms", "--crash-loop-runs", "2",
                   "--max-quarantines", "1"},
                  PoisonableTrainer(d, dir, 60)));
  ASSERT_EQ(c.Wait(), supervisor::kExitGaveUp) << c.Stderr();
  std::string log = c.Stderr();
  EXPECT_NE(log.find("QUARANTINED step 40"), std::string::npos) << log;
  EXPECT_EQ(Count(log, "step=30->30 no-progress"), 2) << log;
  EXPECT_NE(log.find("giving up: crash loop at step 30 and 1 quarantine(s) done "
                     "(--max-quarantines)"),
            std::string::npos)
      << log;
  EXPECT_EQ(Count(log, "start attempt="), 4) << log;
  EXPECT_EQ(ListSteps(dir).value(), std::vector<int64_t>{30});
}

// Two separate crash loops with --max-quarantines 1: step 40 is poisoned;
// once it is quarantined, the run from step 30 saves 40 and 50 (past the
// quarantined step) and is killed; step 50 then turns out poisoned too. The
// second loop has its own budget, so the job finishes.
TEST(SupervisorCrashLoopTest, ACrashLoopAfterTrainingPassedTheLastOneHasItsOwnBudget) {
  ScratchDir d("loops");
  const std::string dir = d.Sub("ckpt");
  MakePoisonedSteps(dir, {40});
  auto cmd = Script(d, "newest=$(ls " + dir + " | grep -E '^[0-9]+$' | sort -n | tail -n 1)\n" +
                           "if [ \"$newest\" = 50 ] && [ ! -e " + d.Sub("second") + " ]; then\n" +
                           "  touch " + d.Sub("second") + " " + dir + "/50/poison\nfi\n" +
                           "if [ -e " + dir + "/$newest/poison ]; then\n" +
                           "  export STRATA_CRASH_AT=save.after_snapshot\n" +
                           "elif [ \"$newest\" = 30 ]; then\n" +
                           "  export STRATA_CRASH_AT=save.before_retention:2\nfi\nexec \"$@\"\n");
  auto trainer = TrainerArgs(dir, 60);
  cmd.insert(cmd.end(), trainer.begin(), trainer.end());
  Child c(RunArgs({"--checkpoint-dir", dir, "--backoff", "10ms,50ms", "--crash-loop-runs", "2",
                   "--max-quarantines", "1"},
                  cmd));
  ASSERT_EQ(c.Wait(), 0) << c.Stderr();
  const std::string log = c.Stderr();
  EXPECT_NE(log.find("QUARANTINED step 40"), std::string::npos) << log;
  EXPECT_NE(log.find("step 50 is past the quarantined step 40: that crash loop is over"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("QUARANTINED step 50"), std::string::npos) << log;
  EXPECT_EQ(log.find("giving up"), std::string::npos) << log;
  EXPECT_EQ(LastValue(c.Stdout(), "digest"), ReferenceDigest(60));
}

// Every run is SIGKILLed right after its second commit, so every run makes
// progress: even --crash-loop-runs 1 never quarantines.
TEST(SupervisorCrashLoopTest, RunsThatMakeProgressAreNeverQuarantined) {
  ScratchDir d("progress");
  const std::string dir = d.Sub("ckpt");
  auto trainer = TrainerArgs(dir, 60);
  trainer.insert(trainer.begin(), {"env", "STRATA_CRASH_AT=save.before_retention:2"});
  Child c(RunArgs({"--checkpoint-dir", dir, "--backoff", "10ms,50ms", "--crash-loop-runs", "1"},
                  trainer));
  ASSERT_EQ(c.Wait(), 0) << c.Stderr();
  std::string log = c.Stderr();
  EXPECT_EQ(log.find("crash loop"), std::string::npos) << log;
  EXPECT_EQ(log.find("QUARANTINED"), std::string::npos) << log;
  EXPECT_NE(log.find("step=none->20 progress"), std::string::npos) << log;
  EXPECT_NE(log.find("step=20->40 progress"), std::string::npos) << log;
  EXPECT_NE(log.find("step=40->60 progress"), std::string::npos) << log;
  EXPECT_EQ(Count(log, "start attempt="), 4) << log;
  EXPECT_EQ(LastValue(c.Stdout(), "digest"), ReferenceDigest(60));
}

// --- The core, in-process ---------------------------------------------------

TEST(SupervisorCoreTest, QuarantineRefusesADirectoryInUseAndNeverOverwrites) {
  ScratchDir d("q");
  CheckpointerOptions o;
  o.preemption_signals = {};
  o.async = false;
  o.max_to_keep = 0;
  auto ckpt = Checkpointer::Open(d.path(), o);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::vector<float> w(1000, 1.0f);
  std::vector<Item> items = {{"w", DType::kFloat32, {1000}, w.data(), w.size() * 4}};
  ASSERT_TRUE((*ckpt)->Save(10, items).ok());
  auto busy = supervisor::QuarantineStep(d.path(), 10);
  EXPECT_EQ(busy.status().code(), StatusCode::kFailedPrecondition) << busy.status().ToString();
  EXPECT_NE(busy.status().message().find("still in use"), std::string::npos);
  ASSERT_TRUE((*ckpt)->Save(20, items).ok());
  ckpt->reset();

  EXPECT_EQ(supervisor::QuarantineStep(d.path(), 20).value(), "20.quarantined");
  // The same step saved and quarantined again gets a new name.
  ASSERT_TRUE(std::filesystem::create_directory(d.Sub("20")));
  EXPECT_EQ(supervisor::QuarantineStep(d.path(), 20).value(), "20.quarantined-1");
  EXPECT_EQ(ListSteps(d.path()).value(), std::vector<int64_t>{10});
  // Opening and restoring leaves the quarantined steps alone.
  auto reopened = Checkpointer::Open(d.path(), o);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->Restore().value().step, 10);
  EXPECT_TRUE(std::filesystem::exists(d.Sub("20.quarantined/strata.manifest")));
  EXPECT_TRUE(std::filesystem::exists(d.Sub("20.quarantined-1")));
}

TEST(SupervisorCoreTest, BackoffDoublesUpToMaxWithJitterInTheUpperHalf) {
  std::mt19937_64 rng(1);
  const milliseconds min(100), max(1000);
  for (int i = 0; i < 200; ++i) {
    for (int n : {0, 1, 2, 3, 4, 40, 1000}) {
      int64_t full = std::min<int64_t>(100LL << std::min(n, 10), 1000);
      auto d = supervisor::BackoffDelay(n, min, max, rng).count();
      EXPECT_GE(d, full / 2) << n;
      EXPECT_LE(d, full) << n;
    }
  }
}

TEST(SupervisorCoreTest, ParseDuration) {
  EXPECT_EQ(supervisor::ParseDuration("300s").value(), milliseconds(300000));
  EXPECT_EQ(supervisor::ParseDuration("5m").value(), milliseconds(300000));
  EXPECT_EQ(supervisor::ParseDuration("1h").value(), milliseconds(3600000));
  EXPECT_EQ(supervisor::ParseDuration("250ms").value(), milliseconds(250));
  EXPECT_EQ(supervisor::ParseDuration("1.5").value(), milliseconds(1500));
  for (const char* bad : {"", "s", "-1s", "5x", "1e99s", "nan"}) {
    auto r = supervisor::ParseDuration(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace strata
