// Copyright 2026 The Strata Authors.
//
// Multi-node behaviour with real processes: 4 agents and 4 trainers on
// loopback. Every scenario ends by comparing each node's final digest with
// an uninterrupted run of that node.
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "agent/rpc/client.h"
#include "agent_peer.h"
#include "cluster.h"
#include "component_util.h"
#include "format/naming.h"
#include "format/step_index.h"
#include "strata/env.h"
#include "test_pki.h"

namespace strata::testing {
namespace {

using namespace std::chrono_literals;

TEST(AgentClusterTest, FreshStartThenRestartFromOwnStores) {
  Cluster c(4);
  c.StartAll();
  ExpectAll(c.Train(20, 5), "fresh", 20);
  // Step 0 markers were regular files; every agent holds its own steps and
  // its peer's copies.
  auto status = c.Status(1);
  EXPECT_EQ(status["peers"], nlohmann::json::array({3}));
  bool own = false, replica = false;
  for (const auto& s : status["steps"]) {
    own |= s["rank"] == 1 && s["step"] == 20;
    replica |= s["rank"] == 3 && s["step"] == 20;
  }
  EXPECT_TRUE(own && replica) << status.dump(2);

  ExpectAll(c.Train(30, 5), "20", 30);
  for (int n = 0; n < 4; ++n) {
    EXPECT_NE(c.Status(n)["last_restore"].get<std::string>().find("own store"), std::string::npos);
  }
}

// A job on its site's PKI: the agents replicate and restore a replaced
// node over TLS with certificates of one CA, and `strata status` reaches
// them with a certificate of its own; a client without one is refused.
TEST(AgentClusterTest, AJobOnCertificatesReplicatesAndRestores) {
  TestPki pki("cluster-pki");
  pki.MakeCa("ca");
  pki.MakeCert("agent", "ca", "subjectAltName=IP:127.0.0.1");
  pki.MakeCert("operator", "ca", "subjectAltName=DNS:operator");
  Cluster c(4);
  c.SetAgentArgs(pki.Flags("agent", "ca"));
  c.SetCliArgs(pki.Flags("operator", "ca"));
  c.StartAll();
  EXPECT_NE(c.AgentLog(0).find("TLS 1.3 (certificates)"), std::string::npos) << c.AgentLog(0);
  ExpectAll(c.Train(20, 5), "fresh", 20);
  c.KillAgent(1);
  c.WipeDir(1);
  c.StartAgent(1);
  ExpectAll(c.Train(30, 5), "20", 30);
  EXPECT_NE(c.Status(1)["last_restore"].get<std::string>().find("from node 3"), std::string::npos)
      << c.Status(1).dump(2);

  c.SetCliArgs({});  // the job's secret alone (TLS with a PSK) is not this job's TLS
  std::string out;
  EXPECT_NE(c.Cli("status", 0, {"--json"}, &out), 0) << out;
  EXPECT_NE(out.find("TLS"), std::string::npos) << out;
}

// TLS off is a choice the agent announces; a client that expects TLS is
// told what to check.
TEST(AgentClusterTest, ATlsOffJobSaysSoAndAClientExpectingTlsIsToldWhy) {
  Cluster c(2);
  c.SetAgentArgs({"--tls", "off"});
  c.SetCliArgs({"--tls", "off"});
  c.StartAll();
  ExpectAll(c.Train(10, 5), "fresh", 10);
  EXPECT_NE(c.AgentLog(0).find("TLS is off (tls: off): connections between agents are not "
                               "encrypted"),
            std::string::npos)
      << c.AgentLog(0);
  c.SetCliArgs({});
  std::string out;
  EXPECT_NE(c.Cli("status", 0, {"--json"}, &out), 0) << out;
  EXPECT_NE(out.find("TLS off"), std::string::npos) << out;
}

TEST(AgentClusterTest, ReplacedNodeIsRestoredFromItsPeer) {
  Cluster c(4);
  c.StartAll();
  ExpectAll(c.Train(20, 5), "fresh", 20);
  c.KillAgent(1);
  c.WipeDir(1);  // a new machine: empty RAM disk, new agent
  c.StartAgent(1);
  ExpectAll(c.Train(30, 5), "20", 30);
  EXPECT_NE(c.Status(1)["last_restore"].get<std::string>().find("from node 3"), std::string::npos)
      << c.Status(1).dump(2);
}

TEST(AgentClusterTest, TwoLostNodesThatAreNotPeersAreRestored) {
  Cluster c(4);
  c.StartAll();
  ExpectAll(c.Train(20, 5), "fresh", 20);
  for (int n : {0, 1}) {  // 0's peer is 2, 1's peer is 3
    c.KillAgent(n);
    c.WipeDir(n);
  }
  c.StartAgent(0);
  c.StartAgent(1);
  ExpectAll(c.Train(30, 5), "20", 30);
}

TEST(AgentClusterTest, LosingANodeAndItsPeerFallsBackAndSaysWhy) {
  Cluster c(4);
  c.StartAll();
  ExpectAll(c.Train(20, 5), "fresh", 20);
  for (int n : {0, 2}) {  // each other's only copy
    c.KillAgent(n);
    c.WipeDir(n);
  }
  c.StartAgent(0);
  c.StartAgent(2);
  ExpectAll(c.Train(30, 5), "fresh", 30);
  EXPECT_NE(c.AgentLog(0).find("has no usable copy for node 0"), std::string::npos)
      << c.AgentLog(0);
}

// Node 0 (the coordinator's) is lost with its RAM in the middle of a
// round: the other nodes have registered and wait for it. Its replacement
// coordinates a new round from their retried registrations, and the job
// restores its step, node 0's data from its peer.
TEST(AgentClusterTest, CoordinatorNodeLostMidRoundEndsInARestore) {
  Cluster c(4, "coordloss");
  c.StartAll();
  ExpectAll(c.Train(20, 5), "fresh", 20);
  TrainOptions options;
  std::vector<std::unique_ptr<Child>> trainers(4);
  for (int n = 1; n < 4; ++n) trainers[n] = c.StartTrainer(n, 30, 5, options);
  // Nodes 1..3 registered: the round is open, waiting for node 0.
  ASSERT_TRUE(WaitUntil([&] { return Count(c.AgentLog(0), "round 2 begins") == 1; }, 60s))
      << c.AgentLog(0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        size_t registered = 0;
        for (int n = 1; n < 4; ++n) registered += Count(c.AgentLog(n), "proven unchanged") >= 1;
        return registered == 3;
      },
      60s));
  c.KillAgent(0);
  c.WipeDir(0);
  c.StartAgent(0);
  trainers[0] = c.StartTrainer(0, 30, 5, options);
  std::vector<TrainerRun> runs;
  for (auto& t : trainers) runs.push_back(Cluster::Finish(*t));
  ExpectAll(runs, "20", 30);
  EXPECT_NE(c.Status(0)["last_restore"].get<std::string>().find("from node 2"), std::string::npos)
      << c.Status(0).dump(2);
}

// An agent killed (kill -9) at a point inside its store or a transfer: a
// step half ingested, a replica received but not committed, committed but
// not indexed, a transfer cut after a file. Restarted, it recovers its
// store, and the job's next start restores the newest step bit for bit.
class AgentCrashTest : public ::testing::TestWithParam<const char*> {};

TEST_P(AgentCrashTest, AKilledAgentRecoversItsStore) {
  Cluster c(2, "crash");
  // Every step is ingested, so the third ingest comes; replicas of steps a
  // newer one superseded are skipped, so only the first adopt (and the first
  // file received) is sure to come.
  const std::string point = GetParam();
  const char* nth = point.starts_with("store.ingest.") ? ":3" : ":1";
  c.SetAgentEnv(1, {"STRATA_CRASH_AT=" + point + nth});
  c.StartAll();
  TrainOptions o;
  o.wait_replicated = false;  // node 1's agent dies on the way
  ExpectAll(c.Train(20, 5, o), "fresh", 20);
  EXPECT_EQ(c.WaitAgentExit(1, 60s), 128 + 9) << GetParam() << " was not reached\n"
                                              << c.AgentLog(1);
  c.SetAgentEnv(1, {});
  c.StartAgent(1);
  ExpectAll(c.Train(30, 5), "20", 30);
}

INSTANTIATE_TEST_SUITE_P(CrashPoints, AgentCrashTest,
                         ::testing::Values("store.ingest.before_index", "store.ingest.before_seal",
                                           "store.adopt.before_commit", "store.adopt.before_index",
                                           "transfer.mid_receive"),
                         [](const auto& point) {
                           std::string name = point.param;
                           for (char& ch : name) ch = ch == '.' ? '_' : ch;
                           return name;
                         });

TEST(AgentClusterTest, CorruptCopyIsDetectedAndAnotherUsed) {
  Cluster c(4);
  c.StartAll();
  ExpectAll(c.Train(20, 5), "fresh", 20);
  // Flip a byte of node 1's own copy of step 20 in its store.
  FlipByte(c.dir(1) + "/.strata-agent/steps/job1/1/20/" + DataFileName(0), 777);
  ExpectAll(c.Train(30, 5), "20", 30);
  EXPECT_NE(c.AgentLog(1).find("dropping corrupt copy job1/1/20"), std::string::npos);
  EXPECT_NE(c.Status(1)["last_restore"].get<std::string>().find("from node 3"), std::string::npos);
}

TEST(AgentClusterTest, NemoStyleClientWorks) {
  Cluster c(2, "nemo");
  c.StartAll();
  ExpectAll(c.Train(10, 5, "nemo"), "fresh", 10);
  c.KillAgent(1);
  c.WipeDir(1);
  c.StartAgent(1);
  ExpectAll(c.Train(15, 5, "nemo"), "10", 15);
}

// An agent restarted while its trainer keeps saving resumes the job from its
// saved state (no new replicator.yaml) and catches up.
TEST(AgentClusterTest, RestartedAgentResumesWithoutANewYaml) {
  Cluster c(2, "restart");
  c.StartAll();
  std::vector<TrainerRun> runs;
  std::thread train([&] { runs = c.Train(300, 10, "orbax", 2, /*step_ms=*/10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  c.KillAgent(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c.StartAgent(1);
  train.join();  // Train waits until both agents replicated step 300
  ExpectAll(runs, "fresh", 300);
  // What the start restored comes back with the state: a coded member
  // must not go back to code older steps (Replication::StepToJoin).
  EXPECT_NE(c.AgentLog(1).find("resuming job job1 as node 1 of 2 (it started fresh)"),
            std::string::npos);

  // The same after a start that restored a step.
  std::thread again([&] { runs = c.Train(600, 10, "orbax", 2, /*step_ms=*/10); });
  EXPECT_TRUE(WaitUntil([&] { return c.TryStatus(1).value("restored_step", int64_t{-1}) == 300; }))
      << c.AgentLog(1);
  c.KillAgent(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c.StartAgent(1);
  again.join();
  ExpectAll(runs, "300", 600);
  EXPECT_NE(c.AgentLog(1).find("resuming job job1 as node 1 of 2 (its start restored step 300)"),
            std::string::npos)
      << c.AgentLog(1);
  EXPECT_EQ(c.Status(1)["restored_step"], 300);
}

// An agent killed in the middle of a start, after it took (removed) its
// client's replicator.yaml and before it wrote the markers: the client polls
// for markers and will not write the yaml again. The restarted agent runs the
// start it left pending, and the job restores without waiting out the
// client's timeout.
TEST(AgentClusterTest, AgentKilledMidStartResumesTheStart) {
  Cluster c(2, "midstart");
  c.StartAll();
  ExpectAll(c.Train(10, 5), "fresh", 10);
  TrainOptions options;
  std::vector<std::unique_ptr<Child>> trainers(2);
  trainers[1] = c.StartTrainer(1, 15, 5, options);
  // Node 1 registered and removed its yaml; the round waits for node 0.
  const std::string yaml = c.dir(1) + "/" + std::string(kReplicatorYaml);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Count(c.AgentLog(1), "proven unchanged") >= 1 && access(yaml.c_str(), F_OK) != 0;
      },
      60s))
      << c.AgentLog(1);
  c.KillAgent(1);
  c.StartAgent(1);
  trainers[0] = c.StartTrainer(0, 15, 5, options);
  std::vector<TrainerRun> runs;
  // Well inside the client's 300 s timeout: the resumed start answered it.
  for (auto& t : trainers) runs.push_back(Cluster::Finish(*t, 90s));
  ExpectAll(runs, "10", 15);
  EXPECT_NE(c.AgentLog(1).find("resuming the start the previous agent process left unanswered"),
            std::string::npos)
      << c.AgentLog(1);
  EXPECT_FALSE(
      Env::Default()->Exists(c.dir(1) + "/.strata-agent/" + std::string(kPendingStartFile)));
}

// A peer that dies in the middle of receiving a copy gets a clean retry once
// it is back; the half-received transfer is discarded.
TEST(AgentClusterTest, PeerRestartMidTransferIsRetried) {
  Cluster c(2, "retry");
  c.StartAll();
  std::vector<TrainerRun> runs;
  std::thread train([&] { runs = c.Train(40, 10, "orbax", 48, /*step_ms=*/20); });
  // Kill node 1's agent repeatedly while steps of 48 MiB stream to it.
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    c.KillAgent(1);
    c.StartAgent(1);
  }
  train.join();
  ExpectAll(runs, "fresh", 40, 48);
  const auto status = c.Status(1);  // keep it alive through the loop
  bool have = false;
  for (const auto& s : status["steps"]) have |= s["rank"] == 0 && s["step"] == 40;
  EXPECT_TRUE(have) << status.dump(2);
}

// assume-data-parallelism: 4 nodes as 2 replicas of 2 ({0,1} and {2,3}),
// no peer copies. Node 0 is lost; its data is taken from node 2, which holds
// the identical column.
TEST(AgentClusterTest, DataParallelReplicaSubstitutesForALostNode) {
  Cluster c(4, "dp");
  c.StartAll();
  TrainOptions o;
  o.peers_per_node = 0;
  o.data_parallelism = 2;
  o.seed = [](int node) { return 100 + node % 2; };  // replicas hold identical state
  auto check = [&](const std::vector<TrainerRun>& runs, const std::string& restored,
                   int64_t steps) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(runs[static_cast<size_t>(i)].restored, restored)
          << runs[static_cast<size_t>(i)].out;
      EXPECT_EQ(runs[static_cast<size_t>(i)].digest,
                Cluster::ReferenceDigestForSeed(o.seed(i), steps, o.state_mb));
    }
  };
  check(c.Train(20, 5, o), "fresh", 20);
  c.KillAgent(0);
  c.WipeDir(0);
  c.StartAgent(0);
  check(c.Train(30, 5, o), "20", 30);
  EXPECT_NE(c.Status(0)["last_restore"].get<std::string>().find("step 20 of node 2 from node 2"),
            std::string::npos)
      << c.Status(0).dump(2);
}

// An idle peer connection must not hold up shutdown after SIGTERM.
TEST(AgentClusterTest, SigtermStopsTheAgentPromptlyWithAnIdleConnectionOpen) {
  Cluster c(1, "sigterm");
  c.StartAll();
  auto to = agent::ParseEndpoint(c.address(0));
  ASSERT_TRUE(to.ok());
  auto idle = agent::RpcClient::Connect(*to, testing::PskTrust(c.secret()), "idle test client");
  ASSERT_TRUE(idle.ok()) << idle.status().ToString();
  // Without the fix the agent waits out the connection's 5-minute idle limit.
  auto took = c.StopAgent(0, std::chrono::seconds(60));
  EXPECT_GE(took.count(), 0) << "SIGTERM did not stop the agent within 60 s";
}

// A new job name is a new job: the earlier job's steps cannot be restored
// by it and are collected; status reports the new job caught up.
TEST(AgentClusterTest, StepsOfAnEarlierJobAreCollected) {
  Cluster c(1, "jobs");
  c.StartAll();
  TrainOptions o;
  o.peers_per_node = 0;
  ExpectAll(c.Train(10, 5, o), "fresh", 10);
  o.job = "job2";
  auto runs = c.Train(10, 5, o);
  EXPECT_EQ(runs[0].restored, "fresh") << runs[0].out;
  auto only_job2 = [&] {
    const auto status = c.Status(0);
    for (const auto& s : status["steps"]) {
      if (s["job"] != "job2") return false;
    }
    return !status["steps"].empty();
  };
  for (int i = 0; i < 200 && !only_job2(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto status = c.Status(0);
  EXPECT_TRUE(only_job2()) << status.dump(2);
  EXPECT_EQ(status["job"], "job2");
  EXPECT_EQ(status["newest_ingested"], 10);
  EXPECT_EQ(status["replication_lag_seconds"], 0.0) << "replication has caught up";
}

// A replica that would not fit in the receiver's directory is refused
// before any byte of it is sent.
TEST(AgentClusterTest, ACopyThatDoesNotFitIsRefused) {
  Cluster c(1, "nofit");
  c.StartAll();
  ServeJob(c, "j", 0, 2);  // a step of node 1 of job j is a peer's
  StepIndex huge;          // a Strata step carries no chunk list in its index
  huge.strata = true;
  huge.digest = 1;
  huge.total_bytes = uint64_t{1} << 50;
  huge.files.push_back({"data-00000.bin", huge.total_bytes, {}});
  auto to = agent::ParseEndpoint(c.address(0));
  ASSERT_TRUE(to.ok());
  auto client = agent::RpcClient::Connect(*to, testing::PskTrust(c.secret()), "test");
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  agent::json put = {{"op", "put_step"},
                     {"key", {{"job", "j"}, {"rank", 1}, {"step", 7}}},
                     {"index", StepIndexToJson(huge)}};
  auto reply = client->Call(put, std::chrono::seconds(30));
  EXPECT_EQ(reply.status().code(), StatusCode::kResourceExhausted) << reply.status().ToString();
  EXPECT_NE(reply.status().message().find("no room for j/1/7"), std::string::npos)
      << reply.status().message();
  EXPECT_TRUE(c.Status(0)["steps"].empty());
}

// framework: pytorch — each worker writes its own .save file; the agent
// gathers workers-per-node of them into one step, and restores each worker
// from its own file.
TEST(AgentFrameworkTest, PytorchSaveFilesPerWorker) {
  Cluster c(1, "pytorch");
  c.StartAll();
  const std::string dir = c.dir(0);
  auto write_yaml = [&] {
    WriteFile(dir + "/replicator.yaml.tmp",
              "job-name: pt\nframework: pytorch\nnode-rank: 0\nnodes: 1\nworkers-per-node: 2\n");
    ASSERT_EQ(::rename((dir + "/replicator.yaml.tmp").c_str(), (dir + "/replicator.yaml").c_str()),
              0);
  };
  auto wait_for = [](const std::function<bool()>& done) {
    for (int i = 0; i < 1000 && !done(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return done();
  };
  write_yaml();
  ASSERT_TRUE(wait_for([&] { return Env::Default()->Exists(dir + "/pt-s0-n0-w1.restore"); }));
  ::unlink((dir + "/pt-s0-n0-w0.restore").c_str());
  ::unlink((dir + "/pt-s0-n0-w1.restore").c_str());
  WriteFile(dir + "/pt-s10-n0-w0.save", "state of worker 0");
  WriteFile(dir + "/pt-s10-n0-w1.save", "state of worker 1, a little longer");
  ASSERT_TRUE(wait_for([&] { return c.TryStatus(0).value("newest_ingested", int64_t{-1}) == 10; }))
      << c.AgentLog(0);
  write_yaml();  // the job restarts
  ASSERT_TRUE(wait_for([&] { return Env::Default()->Exists(dir + "/pt-s10-n0-w1.restore"); }))
      << c.AgentLog(0);
  EXPECT_EQ(ReadFile(dir + "/pt-s10-n0-w0.restore"), "state of worker 0");
  EXPECT_EQ(ReadFile(dir + "/pt-s10-n0-w1.restore"), "state of worker 1, a little longer");
}

}  // namespace
}  // namespace strata::testing
