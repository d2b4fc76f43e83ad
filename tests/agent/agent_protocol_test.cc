// Copyright 2026 The Strata Authors.
//
// Adversarial and protocol-edge tests against a real `strata agent` process
// (one node, so no peers are needed): bad replicator.yaml files, a yaml
// written in place, re-configuration, restore markers and garbage
// collection with a real trainer. Hostile peers are in agent_safety_test.cc,
// fetching copies for a restore in agent_fetch_test.cc. Every wait is a
// bounded poll.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "agent_peer.h"
#include "agent_protocol_fixture.h"
#include "cluster.h"
#include "component_util.h"

namespace strata::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsSymlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

std::string ReadLink(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// ---------------------------------------------------------------------------
// Asking the agent.

int CountHeld(const json& status, const std::string& job, int rank) {
  int n = 0;
  if (!status.contains("steps")) return n;
  for (const auto& s : status["steps"]) n += s["job"] == job && s["rank"] == rank;
  return n;
}

std::vector<std::string> ToyTrainer(const std::string& dir, int64_t steps, int64_t interval,
                                    int step_ms = 0) {
  return {BinaryPath("toy-trainer"),
          "--replicator",
          "orbax",
          "--dir",
          dir,
          "--job",
          "j",
          "--node-rank",
          "0",
          "--nodes",
          "1",
          "--peers-per-node",
          "0",
          "--steps",
          std::to_string(steps),
          "--save-interval-steps",
          std::to_string(interval),
          "--state-mb",
          "1",
          "--seed",
          "100",
          "--step-ms",
          std::to_string(step_ms)};
}

// ---------------------------------------------------------------------------
// replicator.yaml

struct BadYaml {
  const char* what;
  std::string text;
  std::vector<std::string> reason;  // substrings replicator.failed must contain
};

std::string BillionLaughs() {
  std::string y = "a: &a [x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    std::string prev(1, static_cast<char>(c - 1));
    y += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 9; ++i) y += (i ? ", *" : "*") + prev;
    y += "]\n";
  }
  return y + ValidYaml("j") + "peer-ranks: *j\n";
}

TEST_F(AgentProtocolTest, BadYamlIsRefusedWithAReasonAndTheAgentKeepsServing) {
  const std::string dir = this->dir();
  const std::string head = "job-name: j\nframework: orbax\n";
  const std::vector<BadYaml> cases = {
      {"empty", "", {"empty"}},
      {"not YAML", "{{{", {"not valid YAML"}},
      {"wrong type", head + "node-rank: 0\nnodes: \"four\"\n", {"nodes", "not an integer"}},
      {"mapping for an int", head + "node-rank: {a: 1}\nnodes: 1\n", {"node-rank"}},
      {"negative rank", head + "node-rank: -1\nnodes: 1\n", {"node-rank", "out of range"}},
      {"rank >= nodes", head + "node-rank: 1\nnodes: 1\n", {"node-rank", "out of range"}},
      {"traversal",
       "job-name: ../../x\nframework: orbax\nnode-rank: 0\nnodes: 1\n",
       {"job-name", ".."}},
      {"slash", "job-name: a/b\nframework: orbax\nnode-rank: 0\nnodes: 1\n", {"job-name"}},
      {"framework",
       "job-name: j\nframework: tensorflow\nnode-rank: 0\nnodes: 1\n",
       {"framework", "tensorflow"}},
      {"no job-name", "framework: orbax\nnode-rank: 0\nnodes: 1\n", {"job-name", "required"}},
      {"secret in env",
       "job-name: ${STRATA_SECRET}\nframework: orbax\nnode-rank: 0\nnodes: 1\n",
       {"job-name", "STRATA_SECRET"}},
      {"list",
       "- job-name: j\n- framework: orbax\n- node-rank: 0\n- nodes: 1\n",
       {"not a mapping"}},
      {"billion laughs", BillionLaughs(), {"peer-ranks"}},
      // The agent reads at most 1 MiB: it says so.
      {"3 MiB of junk", std::string(3 << 20, 'x'), {"replicator.yaml: larger than 1 MiB"}},
      {"1 MiB of binary junk", RandomBytes((1 << 20) - 1, 7), {"replicator.yaml"}},
      {"deep nesting", std::string(512 << 10, '['), {"replicator.yaml"}},
  };
  for (const auto& bad : cases) {
    SCOPED_TRACE(bad.what);
    WriteYaml(dir, bad.text);
    ASSERT_TRUE(YamlConsumed(dir)) << "the agent never removed the bad yaml\n" << c_.AgentLog(0);
    ASSERT_TRUE(IsRegularFile(dir + "/replicator.failed")) << c_.AgentLog(0);
    const std::string failed = ReadFile(dir + "/replicator.failed");
    const std::string errors = ReadFile(dir + "/replicator.errors");
    for (const auto& r : bad.reason) EXPECT_NE(failed.find(r), std::string::npos) << failed;
    // One bounded line, also recorded in replicator.errors; never the secret.
    EXPECT_EQ(Count(failed, "\n"), 1u) << failed;
    EXPECT_LT(failed.size(), 512u) << failed;
    EXPECT_NE(errors.find(failed), std::string::npos) << errors;
    EXPECT_EQ(failed.find(c_.secret()), std::string::npos);
    // Nothing escaped the directory, and no marker was made.
    EXPECT_FALSE(Exists(dir + "/../../x-s0-n0-w0.restore"));
    EXPECT_FALSE(Exists(dir + "/../x-s0-n0-w0.restore"));
    EXPECT_FALSE(Exists(Marker(dir, "j", 0)));
    // The client reads and deletes the error files.
    ::unlink((dir + "/replicator.failed").c_str());
    ::unlink((dir + "/replicator.errors").c_str());
  }
  EXPECT_EQ(Count(c_.AgentLog(0), "rejecting"), cases.size()) << c_.AgentLog(0);

  // Still serving: a valid yaml gets a fresh-start marker.
  ExpectServing(c_);
  Handshake(dir, "j", 0);
  EXPECT_TRUE(IsRegularFile(Marker(dir, "j", 0)));
  EXPECT_EQ(ReadFile(Marker(dir, "j", 0)), "");
  EXPECT_NE(ReadFile(dir + "/replicator.prerestore").find("{}"), std::string::npos);
  EXPECT_FALSE(Exists(dir + "/replicator.failed"));
  EXPECT_FALSE(Exists(dir + "/replicator.errors"));
}

TEST_F(AgentProtocolTest, YamlWrittenInPlaceIsReadOnceAfterClose) {
  const std::string dir = this->dir();
  const std::string text = ValidYaml("j");
  const size_t half = text.size() / 2;  // mid-key: the first half alone is invalid
  int fd = ::open(YamlPath(dir).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, text.data(), half), static_cast<ssize_t>(half));
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(Exists(YamlPath(dir))) << "the agent took a half-written yaml";
  ASSERT_EQ(::write(fd, text.data() + half, text.size() - half),
            static_cast<ssize_t>(text.size() - half));
  ASSERT_EQ(::close(fd), 0);

  ASSERT_TRUE(YamlConsumed(dir)) << c_.AgentLog(0);
  ASSERT_TRUE(WaitUntil([&] { return Exists(Marker(dir, "j", 0)); })) << c_.AgentLog(0);
  EXPECT_TRUE(IsRegularFile(Marker(dir, "j", 0)));
  EXPECT_FALSE(Exists(dir + "/replicator.failed")) << ReadFile(dir + "/replicator.failed");
  EXPECT_FALSE(Exists(dir + "/replicator.errors")) << ReadFile(dir + "/replicator.errors");
  const std::string log = c_.AgentLog(0);
  EXPECT_EQ(Count(log, "rejecting"), 0u) << log;
  EXPECT_EQ(Count(log, "begins (node 0 registered)"), 1u) << log;
  EXPECT_EQ(c_.Status(0).value("job", ""), "j");
}

TEST_F(AgentProtocolTest, NewYamlReconfiguresAndCleansUp) {
  const std::string dir = this->dir();
  Handshake(dir, "j", 0);
  // Leftovers a client could have: a stale marker of another step, a
  // client's temp dir, a half-written step.
  WriteFile(Marker(dir, "j", 5), "");
  fs::create_directory(dir + "/7.orbax-checkpoint-tmp-3");
  WriteFile(dir + "/7.orbax-checkpoint-tmp-3/x", "partial");

  Handshake(dir, "k", 0);
  EXPECT_TRUE(IsRegularFile(Marker(dir, "k", 0)));
  EXPECT_FALSE(Exists(Marker(dir, "j", 0)));
  EXPECT_FALSE(Exists(Marker(dir, "j", 5)));
  EXPECT_FALSE(Exists(dir + "/7.orbax-checkpoint-tmp-3"));
  EXPECT_NE(ReadFile(dir + "/replicator.prerestore").find("{}"), std::string::npos);
  EXPECT_EQ(c_.Status(0).value("job", ""), "k");
  // Only the markers of the new job remain among the protocol's files.
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.ends_with(".restore")) {
      EXPECT_EQ(n, "k-s0-n0-w0.restore");
    }
  }
}

// The agent is stuck restoring a job whose other node never comes (the
// client said nodes: 2 by mistake). The client gives up and writes a
// corrected yaml: a new yaml "at any later time" must start a new
// incarnation. Restore looks for a new yaml before each call and cancels
// the stuck one (restore.h).
TEST_F(AgentProtocolTest, NewYamlReplacesAStuckIncarnation) {
  const std::string dir = this->dir();
  WriteYaml(dir, ValidYaml("j", /*nodes=*/2));
  ASSERT_TRUE(YamlConsumed(dir)) << c_.AgentLog(0);  // registered, waiting for node 1
  EXPECT_FALSE(Exists(Marker(dir, "j", 0)));
  Handshake(dir, "j", 0);
  EXPECT_TRUE(IsRegularFile(Marker(dir, "j", 0)));
}

// ---------------------------------------------------------------------------
// Markers and garbage collection with a real trainer.

// A step committed just before the client restarts (its on-demand step)
// arrives together with the new yaml: it is ingested, not cleaned away, and
// it is what the job restores.
TEST_F(AgentProtocolTest, AStepCommittedRightBeforeANewYamlIsKept) {
  const std::string dir = this->dir();
  {
    Child t(ToyTrainer(dir, 10, 5));
    ASSERT_EQ(t.Wait(60s), 0) << t.Stderr();
  }
  ASSERT_TRUE(WaitUntil([&] { return Holds(c_.Status(0), "j", 0, 10); }));
  // Step 12 of the same run, committed elsewhere, then renamed in: the
  // rename and the yaml reach the agent together.
  testing::ScratchDir scratch("proto-late");
  std::string out;
  ASSERT_EQ(testing::Run({BinaryPath("toy-trainer"), "--dir", scratch.path(), "--steps", "12",
                          "--save-interval-steps", "12", "--state-mb", "1", "--seed", "100"},
                         &out),
            0)
      << out;
  const std::string tmp = dir + "/replicator.yaml.tmp";
  WriteFile(tmp, ValidYaml("j"));
  ASSERT_EQ(::rename((scratch.path() + "/12").c_str(), (dir + "/12").c_str()), 0);
  ASSERT_EQ(::rename(tmp.c_str(), YamlPath(dir).c_str()), 0);
  ASSERT_TRUE(YamlConsumed(dir));
  ASSERT_TRUE(
      WaitUntil([&] { return Exists(Marker(dir, "j", 12)) || Exists(Marker(dir, "j", 10)); }));
  EXPECT_EQ(ReadFile(dir + "/replicator.prerestore"), "restore-step: 12\n");
  EXPECT_TRUE(Exists(Marker(dir, "j", 12)));
}

TEST_F(AgentProtocolTest, MarkerIsARelativeSymlinkToAVerifiedStep) {
  const std::string dir = this->dir();
  {
    Child t(ToyTrainer(dir, 10, 5));
    ASSERT_EQ(t.Wait(60s), 0) << t.Stderr();
    EXPECT_NE(t.Stdout().find("fresh start"), std::string::npos) << t.Stdout();
  }
  ASSERT_TRUE(WaitUntil([&] { return Holds(c_.Status(0), "j", 0, 10); }))
      << c_.Status(0).dump(2) << c_.AgentLog(0);

  // A client's handshake, inspected instead of consumed.
  Handshake(dir, "j", 10);
  const std::string marker = Marker(dir, "j", 10);
  EXPECT_EQ(ReadFile(dir + "/replicator.prerestore"), "restore-step: 10\n");
  EXPECT_FALSE(Exists(Marker(dir, "j", 0)));
  ASSERT_TRUE(IsSymlink(marker));
  const std::string target = ReadLink(marker);
  ASSERT_FALSE(target.empty());
  EXPECT_NE(target.front(), '/') << target;
  EXPECT_EQ(fs::path(target).filename(), "10") << target;
  EXPECT_TRUE(fs::is_directory(fs::path(dir) / target)) << target;
  const std::string parent = (fs::path(dir) / target).parent_path().string();
  std::string out;
  EXPECT_EQ(testing::Run({BinaryPath("strata"), "verify", parent, "--step", "10"}, &out), 0) << out;

  json status = c_.Status(0);
  EXPECT_TRUE(Holds(status, "j", 0, 10)) << status.dump(2);
  EXPECT_EQ(status.value("job", ""), "j");
  EXPECT_GT(status.value("ram_bytes", uint64_t{0}), uint64_t{1} << 20);

  // The next trainer restores the step the marker named.
  Child t(ToyTrainer(dir, 15, 5));
  ASSERT_EQ(t.Wait(60s), 0) << t.Stderr();
  EXPECT_NE(t.Stdout().find("restored step=10"), std::string::npos) << t.Stdout();
  EXPECT_EQ(LastValue(t.Stdout(), "digest"), Cluster::ReferenceDigest(0, 15, 1)) << t.Stdout();
}

TEST_F(AgentProtocolTest, GarbageCollectionKeepsRamBounded) {
  const std::string dir = this->dir();
  Child t(ToyTrainer(dir, 60, 5, /*step_ms=*/15));
  int most = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (t.Wait(100ms) == -1 && std::chrono::steady_clock::now() < deadline) {
    most = std::max(most, CountHeld(c_.Status(0), "j", 0));
  }
  ASSERT_EQ(t.Wait(1s), 0) << t.Stderr();
  ASSERT_TRUE(WaitUntil([&] { return Holds(c_.Status(0), "j", 0, 60); })) << c_.AgentLog(0);
  ASSERT_TRUE(WaitUntil([&] { return CountHeld(c_.Status(0), "j", 0) <= 3; }))
      << c_.Status(0).dump(2);
  json status = c_.Status(0);
  uint64_t step_bytes = 0;
  for (const auto& s : status["steps"]) {
    if (s["step"] == 60) step_bytes = s["bytes"].get<uint64_t>();
  }
  EXPECT_LE(status["ram_bytes"].get<uint64_t>(), 3 * step_bytes) << status.dump(2);
  // Spare files of removed steps, kept for the next transfer: at most a step.
  EXPECT_LE(status["spare_bytes"].get<uint64_t>(), step_bytes) << status.dump(2);
  EXPECT_GE(most, 1) << "status never showed a step during the run";
  EXPECT_LE(most, 4) << "the agent held " << most << " steps of 12 at once during the run";
  // Nothing of the client's is left behind in the local directory either.
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_FALSE(e.is_directory() && !e.is_symlink() &&
                 e.path().filename().string().find_first_not_of("0123456789") == std::string::npos)
        << "step directory " << e.path() << " was not ingested";
  }
}

}  // namespace
}  // namespace strata::testing
