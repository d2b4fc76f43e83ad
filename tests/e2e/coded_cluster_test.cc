// Copyright 2026 The Strata Authors.
//
// The coded peer tier with real processes: 8 agents and 8 trainers on
// loopback, each node holding its own step and its share of its group's
// parity instead of its peers' copies. Nodes are lost with their RAM and
// come back empty; every run ends by comparing each node's final state
// with an uninterrupted run of that node, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/peer/coded_tier.h"
#include "agent/store/parity_store.h"
#include "agent/store/store.h"
#include "cluster.h"
#include "component_util.h"
#include "strata/env.h"
#include "util/file_util.h"
#include "util/thread_pool.h"

namespace strata::testing {
namespace {

TrainOptions NoCopies() {
  TrainOptions o;
  o.peers_per_node = 1;  // the yaml asks for a peer: the coded tier replaces it
  return o;
}

// The nodes lost come back as new machines: empty RAM disks, new agents.
void Lose(Cluster& c, const std::set<int>& nodes) {
  for (int n : nodes) {
    c.KillAgent(n);
    c.WipeDir(n);
  }
  for (int n : nodes) c.StartAgent(n);
}

// Every node holds its own newest step and two complete parity shards of
// it (rs(6,2): m rows of m stripes each), and no copy of another node.
void ExpectCoded(Cluster& c, int64_t step) {
  for (int n = 0; n < c.nodes(); ++n) {
    nlohmann::json s = c.Status(n);
    EXPECT_EQ(s["redundancy"], "rs(6,2)") << s.dump(2);
    EXPECT_EQ(s["group"].size(), 8u) << s.dump(2);
    EXPECT_TRUE(s["peers"].empty()) << s.dump(2);
    int complete = 0;
    for (const auto& p : s.value("parity", nlohmann::json::array())) {
      if (p["step"] == step && p["complete"].get<bool>()) ++complete;
    }
    EXPECT_EQ(complete, 2) << "node " << n << ": " << s.dump(2);
    for (const auto& h : s["steps"]) EXPECT_EQ(h["rank"], n) << s.dump(2);
    EXPECT_GT(s["parity_bytes"].get<uint64_t>(), 0u);
  }
}

// rs(6,2) over 8 nodes: two nodes lost at once, three times over (two
// nodes that hold parity of the same stripes, the coordinator's node with
// another, two far apart), each time both rebuilt by decoding, bit for bit.
TEST(CodedClusterTest, AnRs62GroupSurvivesTwoLostNodes) {
  Cluster c(8, "rs62");
  c.SetAgentArgs({"--redundancy", "rs(6,2)"});
  c.StartAll();
  ExpectAll(c.Train(20, 5, NoCopies()), "fresh", 20);
  ExpectCoded(c, 20);
  int64_t step = 20;
  for (const std::set<int>& lost : {std::set<int>{1, 2}, {0, 5}, {3, 7}}) {
    Lose(c, lost);
    ExpectAll(c.Train(step + 10, 5, NoCopies()), std::to_string(step), step + 10);
    for (int n : lost) {
      const std::string last = c.Status(n)["last_restore"].get<std::string>();
      EXPECT_NE(last.find("decoded from group rs(6,2) [0,1,2,3,4,5,6,7]"), std::string::npos)
          << "node " << n << ": " << last;
    }
    step += 10;
  }
  ExpectCoded(c, step);
}

// A parity shard whose bytes changed in RAM since they were coded: the
// decode that reads it finds the mismatch, names the holder, and the
// coordinator plans the stripe from another holder's row; the node still
// ends bit for bit.
TEST(CodedClusterTest, ACorruptParityShardIsFoundAndAnotherUsed) {
  Cluster c(8, "rs62-corrupt");
  c.SetAgentArgs({"--redundancy", "rs(6,2)"});
  c.StartAll();
  ExpectAll(c.Train(20, 5, NoCopies()), "fresh", 20);
  // Node 1's stripes are 2..7; stripe 2's first parity row is node 2's.
  int flipped = 0;
  const std::string parity = c.dir(2) + "/.strata-agent/parity/job1/20";
  for (const auto& e : std::filesystem::directory_iterator(parity)) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    char b = 0;
    f.seekg(100);
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x40);
    f.seekp(100);
    f.write(&b, 1);
    ++flipped;
  }
  ASSERT_EQ(flipped, 2);
  Lose(c, {1});
  ExpectAll(c.Train(30, 5, NoCopies()), "20", 30);
  const std::string log = c.AgentLog(1);
  EXPECT_NE(log.find("from node 2: checksum mismatch"), std::string::npos) << log;
  EXPECT_NE(c.Status(1)["last_restore"].get<std::string>().find("decoded"), std::string::npos);
}

// The parity rows a node's status lists for `step` (complete or not).
int ParityRowsOf(const nlohmann::json& status, int64_t step) {
  int rows = 0;
  for (const auto& p : status.value("parity", nlohmann::json::array())) rows += p["step"] == step;
  return rows;
}

// The chunks of a step still on their way when the job starts again (the
// on-demand step's, typically: its coders race the restart). A holder
// between the two starts, keeping its rank, takes them: its parity rows are
// the same. It used to refuse them ("serves no incarnation of job ...
// yet"), and the step the job then restored stayed without complete parity
// until a save of the new start was coded.
TEST(CodedClusterTest, AHolderBetweenTwoStartsTakesTheLastStartsChunks) {
  Cluster c(4, "rs22-between");
  c.SetAgentArgs({"--redundancy", "rs(2,2)"});
  c.StartAll();
  ExpectAll(c.Train(10, 5, NoCopies()), "fresh", 10);
  // Node 0's rank starts the job again first: its agent leaves the first
  // start and waits in the restore round for the other three.
  std::vector<std::unique_ptr<Child>> trainers;
  trainers.push_back(c.StartTrainer(0, 20, 5, NoCopies()));
  ASSERT_TRUE(WaitUntil([&] { return c.Status(0).value("restore_state", "") == "awaiting plan"; },
                        std::chrono::seconds(30)))
      << c.Status(0).dump(2);

  // Node 1's coder, late, with step 12 of the first start: every holder of
  // a parity row of its stripes gets its chunk, node 0 among them (stripe
  // 3's second row).
  ScratchDir late("rs22-late-coder");
  ThreadPool pool(1);
  auto store = agent::Store::Open(late.Sub("local"), &pool);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto parity = agent::ParityStore::Open(JoinPath((*store)->root(), "parity"), Env::Default());
  ASSERT_TRUE(parity.ok()) << parity.status().ToString();
  agent::CodedTier coder({PskTrust(c.secret()), late.Sub("local"), 2}, store->get(), parity->get(),
                         SteadyClock::Real());
  const std::string client = late.Sub("client");
  std::filesystem::create_directories(client);
  WriteFile(client + "/state.bin", std::string(300000, 'x'));
  const wire::StepKey key{"job1", 1, 12};
  auto index = (*store)->Ingest(client, key);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ec::Group group;
  group.members = {0, 1, 2, 3};
  group.kind = ec::Redundancy::Kind::kRs;
  group.m = 2;
  std::map<int, std::string> addresses;
  for (int n = 0; n < c.nodes(); ++n) addresses[n] = c.address(n);
  const Status sent = coder.Contribute(key, group, addresses, nullptr);
  EXPECT_TRUE(sent.ok()) << sent.ToString();
  EXPECT_EQ(ParityRowsOf(c.Status(0), 12), 1) << c.Status(0).dump(2);

  // The job starts: it restores step 10, and step 12's parity, a history
  // the job left, goes at "go" on every node that took it.
  for (int n = 1; n < c.nodes(); ++n) trainers.push_back(c.StartTrainer(n, 20, 5, NoCopies()));
  std::vector<TrainerRun> runs;
  for (auto& t : trainers) runs.push_back(Cluster::Finish(*t));
  ExpectAll(runs, "10", 20);
  EXPECT_NE(c.AgentLog(0).find("the job goes on from step 10: removed what this node held above "
                               "it (1 parity shard(s)"),
            std::string::npos)
      << c.AgentLog(0);
  for (int n = 0; n < c.nodes(); ++n) {
    EXPECT_EQ(ParityRowsOf(c.Status(n), 12), 0) << "node " << n << ": " << c.Status(n).dump(2);
  }
}

// Three lost of an rs(6,2) group are one more than it survives: the newest
// step cannot be decoded for them, the coordinator says which stripe lacks
// shards, and the job restores the backup's older step, bit for bit.
TEST(CodedClusterTest, ThreeLostOfAnRs62GroupRestoreTheBackup) {
  Cluster c(8, "rs62-3");
  ScratchDir bucket("coded-backup");
  c.SetAgentArgs({"--redundancy", "rs(6,2)", "--backup", "file://" + bucket.path()});
  c.StartAll();
  TrainOptions o = NoCopies();
  o.backup_interval_steps = 20;
  ExpectAll(c.Train(20, 5, o), "fresh", 20);
  ASSERT_FALSE(c.WaitForBackup(0, 20).empty()) << c.AgentLog(0);
  ExpectAll(c.Train(25, 5, o), "20", 25);  // step 25: coded, not backed up
  Lose(c, {1, 2, 3});
  ExpectAll(c.Train(35, 5, o), "20", 35);
  const std::string log = c.AgentLog(0);
  EXPECT_NE(log.find("step 25 has no usable copy for node 1 (group rs(6,2) [0,1,2,3,4,5,6,7]: "
                     "stripe "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("of the 6 shards it needs"), std::string::npos) << log;
  EXPECT_NE(c.Status(2)["last_restore"].get<std::string>().find("backup"), std::string::npos)
      << c.Status(2).dump(2);
}

// xor(4) asked for in the yaml (the agents run copies by default), over 8
// nodes in 4 racks of 2: two groups, each with one node per rack, so a lost
// rack costs each group one member. A rack lost with its RAM: both its
// nodes decoded, each from its own group.
TEST(CodedClusterTest, XorGroupsFromTheYamlSpreadOverRacks) {
  Cluster c(8, "xor4");
  for (int n = 0; n < 8; ++n)
    c.SetAgentEnv(n, {"STRATA_FAILURE_DOMAIN=rack-" + std::to_string(n / 2)});
  c.StartAll();
  TrainOptions o = NoCopies();
  o.redundancy = "xor(4)";
  ExpectAll(c.Train(20, 5, o), "fresh", 20);
  std::set<std::vector<int>> groups;
  for (int n = 0; n < 8; ++n) {
    nlohmann::json s = c.Status(n);
    EXPECT_EQ(s["redundancy"], "xor(4)");
    const std::vector<int> g = s["group"].get<std::vector<int>>();
    ASSERT_EQ(g.size(), 4u) << s.dump(2);
    std::set<int> racks;
    for (int member : g) racks.insert(member / 2);
    EXPECT_EQ(racks.size(), 4u) << "group of node " << n << ": " << s.dump();
    groups.insert(g);
  }
  EXPECT_EQ(groups.size(), 2u);
  Lose(c, {4, 5});  // rack 2
  ExpectAll(c.Train(30, 5, o), "20", 30);
  for (int n : {4, 5}) {
    EXPECT_NE(c.Status(n)["last_restore"].get<std::string>().find("decoded from group xor(4)"),
              std::string::npos)
        << c.Status(n).dump(2);
  }
}

}  // namespace
}  // namespace strata::testing
