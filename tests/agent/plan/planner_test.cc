// Copyright 2026 The Strata Authors.
#include "agent/plan/planner.h"

#include <gtest/gtest.h>

#include <set>

namespace strata::agent {
namespace {

TEST(ChoosePeersTest, SpreadsAroundTheRing) {
  EXPECT_EQ(ChoosePeers(0, 4, 1), std::vector<int>{2});
  EXPECT_EQ(ChoosePeers(1, 4, 1), std::vector<int>{3});
  EXPECT_EQ(ChoosePeers(3, 4, 1), std::vector<int>{1});
  EXPECT_EQ(ChoosePeers(0, 8, 1), std::vector<int>{4});
  EXPECT_EQ(ChoosePeers(0, 9, 2), (std::vector<int>{3, 6}));
  EXPECT_EQ(ChoosePeers(2, 4, 3), (std::vector<int>{3, 0, 1}));
}

TEST(ChoosePeersTest, EdgeCases) {
  EXPECT_TRUE(ChoosePeers(0, 1, 1).empty());
  EXPECT_TRUE(ChoosePeers(0, 4, 0).empty());
  EXPECT_EQ(ChoosePeers(0, 2, 5), std::vector<int>{1});  // at most nodes - 1
  EXPECT_EQ(ChoosePeers(1, 3, 1), std::vector<int>{0});  // stride 2 from rank 1 -> 0
  for (int n = 2; n <= 12; ++n) {
    for (int k = 1; k < n; ++k) {
      for (int r = 0; r < n; ++r) {
        auto p = ChoosePeers(r, n, k);
        ASSERT_EQ(p.size(), static_cast<size_t>(k)) << n << " " << k << " " << r;
        for (int x : p) ASSERT_NE(x, r);
      }
    }
  }
}

TEST(ChoosePeersTest, DataParallelPeersLiveInAnotherReplica) {
  // 8 nodes, 2 replicas of 4: node r's peer is r + 4.
  EXPECT_EQ(ChoosePeers(1, 8, 1, 2), std::vector<int>{5});
  EXPECT_EQ(ChoosePeers(6, 8, 1, 2), std::vector<int>{2});
}

Inventory FourNodesWithPeers(std::vector<int64_t> steps) {
  Inventory inv;
  for (int64_t s : steps) {
    for (int r = 0; r < 4; ++r) {
      inv.Add(r, s, r, 1000 + static_cast<uint64_t>(r * 100 + s));            // own copy
      inv.Add(r, s, (r + 2) % 4, 1000 + static_cast<uint64_t>(r * 100 + s));  // its peer's
    }
  }
  return inv;
}

Inventory Without(Inventory inv, std::set<int> lost) {
  for (auto& [rank, by_step] : inv.copies) {
    for (auto& [step, copies] : by_step) {
      std::erase_if(copies, [&](const Copy& c) { return lost.count(c.holder) > 0; });
    }
  }
  return inv;
}

TEST(PlanRestoreTest, NewestCompleteStepFromOwnStores) {
  auto plan = PlanRestore(FourNodesWithPeers({10, 20}), 4, 1);
  ASSERT_TRUE(plan.step.has_value());
  EXPECT_EQ(*plan.step, 20);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(plan.sources[r].source_rank, r);
    EXPECT_EQ(plan.sources[r].holders.front(), r) << "own store first";
  }
}

TEST(PlanRestoreTest, LostNodeIsRestoredFromItsPeer) {
  auto plan = PlanRestore(Without(FourNodesWithPeers({10, 20}), {1}), 4, 1);
  ASSERT_EQ(plan.step, 20);
  EXPECT_EQ(plan.sources[1].holders, std::vector<int>{3});
}

TEST(PlanRestoreTest, TwoLostNodesThatAreNotPeers) {
  auto plan = PlanRestore(Without(FourNodesWithPeers({10, 20}), {0, 1}), 4, 1);
  ASSERT_EQ(plan.step, 20);
  EXPECT_EQ(plan.sources[0].holders, std::vector<int>{2});
  EXPECT_EQ(plan.sources[1].holders, std::vector<int>{3});
}

TEST(PlanRestoreTest, NodeAndItsPeerLostFallsBackToAnOlderCompleteStep) {
  Inventory inv = Without(FourNodesWithPeers({20}), {0, 2});
  auto plan = PlanRestore(inv, 4, 1);
  EXPECT_FALSE(plan.step.has_value());
  EXPECT_NE(plan.reason.find("step 20 has no usable copy for node 0"), std::string::npos)
      << plan.reason;
  // An older step that a third node also holds for node 0 is chosen instead.
  inv = FourNodesWithPeers({20});
  inv.Add(0, 10, 1, 5);
  inv.Add(1, 10, 1, 6);
  inv.Add(2, 10, 1, 7);
  inv.Add(3, 10, 1, 8);
  plan = PlanRestore(Without(inv, {0, 2}), 4, 1);
  ASSERT_EQ(plan.step, 10);
}

TEST(PlanRestoreTest, ExcludedAndDisagreeingCopiesAreNotUsed) {
  Inventory inv = FourNodesWithPeers({10, 20});
  auto plan = PlanRestore(inv, 4, 1, {{1, 1, 20}});  // node 1's own copy failed verification
  ASSERT_EQ(plan.step, 20);
  EXPECT_EQ(plan.sources[1].holders, std::vector<int>{3});
  plan = PlanRestore(inv, 4, 1, {{1, 1, 20}, {3, 1, 20}});
  ASSERT_EQ(plan.step, 10);
  inv.Add(2, 20, 0, 999);  // a third copy of node 2's step 20 that disagrees
  plan = PlanRestore(inv, 4, 1);
  ASSERT_EQ(plan.step, 10);
}

TEST(PlanRestoreTest, DataParallelSubstitution) {
  // 4 nodes, 2 replicas: {0,1} and {2,3}; node 0 == node 2 column-wise.
  Inventory inv;
  inv.Add(1, 30, 1, 11);
  inv.Add(2, 30, 2, 20);
  inv.Add(3, 30, 3, 11);
  auto plan = PlanRestore(inv, 4, 2);
  ASSERT_EQ(plan.step, 30);
  EXPECT_EQ(plan.sources[0].source_rank, 2);
  EXPECT_EQ(plan.sources[0].holders, std::vector<int>{2});
  EXPECT_EQ(plan.sources[1].source_rank, 1);
  EXPECT_FALSE(PlanRestore(inv, 4, 1).step.has_value()) << "without substitution node 0 lacks data";
}

// Saved by 2 replicas of 2 nodes (ranks 0..3), restored by 4 (ranks 0..7):
// the new ranks take their column's content; fewer replicas keep working.
TEST(PlanRestoreTest, MoreReplicasThanSavedTakeTheirColumnsContent) {
  Inventory inv;
  for (int r = 0; r < 4; ++r) {
    inv.Add(r, 30, r, 500 + r % 2);            // columns 0 and 1 agree
    inv.Add(r, 30, (r + 2) % 4, 500 + r % 2);  // and each copy is on a peer
  }
  RestorePlan plan = PlanRestore(inv, 8, 4);
  ASSERT_EQ(plan.step, 30) << plan.reason;
  EXPECT_TRUE(plan.error.empty());
  for (int r = 4; r < 8; ++r) {
    EXPECT_EQ(plan.sources[r].source_rank % 2, r % 2) << r;
    EXPECT_EQ(plan.sources[r].digest, 500u + r % 2) << r;
  }
  EXPECT_EQ(plan.sources[0].source_rank, 0);  // the old ranks keep their own
  plan = PlanRestore(inv, 2, 1);              // fewer replicas than saved
  ASSERT_EQ(plan.step, 30);
  EXPECT_EQ(plan.sources[1].source_rank, 1);
}

TEST(PlanRestoreTest, AConflictingColumnIsAnErrorNamingStepColumnAndRanks) {
  Inventory inv;  // saved by 2 replicas of 1 node whose steps differ
  inv.Add(0, 30, 0, 0xaa);
  inv.Add(1, 30, 1, 0xbb);
  inv.Add(0, 20, 0, 0xcc);  // an older step the column agrees on
  inv.Add(1, 20, 1, 0xcc);
  RestorePlan plan = PlanRestore(inv, 4, 4);
  EXPECT_FALSE(plan.step.has_value()) << "not an older step: " << plan.reason;
  EXPECT_EQ(plan.error,
            "step 30: column 0 holds conflicting content (rank 0 digest 00000000000000aa, "
            "rank 1 digest 00000000000000bb), so rank 2, which has no copy of its own, cannot "
            "be given it");
  // The saved replicas alone restore it: each has its own copy.
  plan = PlanRestore(inv, 2, 2);
  EXPECT_EQ(plan.step, 30);
  EXPECT_TRUE(plan.error.empty());
  // Without rank 1's copy the column holds one content, which every rank takes.
  inv.copies[1].erase(30);
  plan = PlanRestore(inv, 4, 4);
  ASSERT_EQ(plan.step, 30);
  EXPECT_TRUE(plan.error.empty());
  for (int r = 0; r < 4; ++r) EXPECT_EQ(plan.sources[r].source_rank, 0) << r;
}

// A committed backup's parts are copies held by kBackupHolder.
TEST(PlanRestoreTest, BackupIsUsedOnlyWhenNoInClusterCopyServes) {
  Inventory inv;
  for (int r = 0; r < 4; ++r) inv.Add(r, 10, wire::kBackupHolder, 100 + r);  // backup of step 10
  // Whole cluster lost: the backup's step, every node from the backup.
  auto plan = PlanRestore(inv, 4, 1);
  ASSERT_EQ(plan.step, 10);
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(plan.sources[r].holders, std::vector<int>{wire::kBackupHolder});
  // Node 1 still holds step 10 and node 3's peer (node 1) holds node 3's copy:
  // they come first; the backup stays a fallback.
  inv.Add(1, 10, 1, 101);
  inv.Add(3, 10, 1, 103);
  plan = PlanRestore(inv, 4, 1);
  EXPECT_EQ(plan.sources[1].holders, (std::vector<int>{1, wire::kBackupHolder}));
  EXPECT_EQ(plan.sources[3].holders, (std::vector<int>{1, wire::kBackupHolder}));
  EXPECT_EQ(plan.sources[0].holders, std::vector<int>{wire::kBackupHolder});
  // A newer step complete in the cluster wins over the older backup.
  for (int r = 0; r < 4; ++r) inv.Add(r, 12, r, 200 + r);
  EXPECT_EQ(PlanRestore(inv, 4, 1).step, 12);
  // A backup part that failed verification is excluded like any copy.
  Inventory only_backup;
  for (int r = 0; r < 4; ++r) only_backup.Add(r, 10, wire::kBackupHolder, 100 + r);
  EXPECT_FALSE(PlanRestore(only_backup, 4, 1, {{wire::kBackupHolder, 2, 10}}).step.has_value());
}

TEST(PlanRestoreTest, DataParallelBackupHoldsOneReplica) {
  Inventory inv;  // 4 nodes, 2 replicas: the backup holds parts 0 and 1 only
  inv.Add(0, 8, wire::kBackupHolder, 50);
  inv.Add(1, 8, wire::kBackupHolder, 51);
  auto plan = PlanRestore(inv, 4, 2);
  ASSERT_EQ(plan.step, 8);
  EXPECT_EQ(plan.sources[2].source_rank, 0);
  EXPECT_EQ(plan.sources[3].source_rank, 1);
  EXPECT_EQ(plan.sources[3].holders, std::vector<int>{wire::kBackupHolder});
}

// With data parallelism, another replica's copy in RAM beats the node's own
// rank in the backup.
TEST(PlanRestoreTest, DataParallelRamCopyBeatsOwnRankInTheBackup) {
  Inventory inv;
  inv.Add(0, 8, wire::kBackupHolder, 50);  // the backup holds parts 0 and 1
  inv.Add(1, 8, wire::kBackupHolder, 51);
  inv.Add(2, 8, 2, 50);  // node 2 holds rank 2 (= rank 0's column) in RAM
  inv.Add(3, 8, 3, 51);
  inv.Add(1, 8, 1, 51);
  auto plan = PlanRestore(inv, 4, 2);  // node 0 was replaced
  ASSERT_EQ(plan.step, 8);
  EXPECT_EQ(plan.sources[0].source_rank, 2);
  EXPECT_EQ(plan.sources[0].holders, std::vector<int>{2});
  EXPECT_EQ(plan.sources[1].source_rank, 1);  // its own store first
  EXPECT_EQ(plan.sources[1].holders, (std::vector<int>{1, wire::kBackupHolder}));
}

// An 8-node rs(6,2) group (ranks 0..7) whose nodes hold step `step` of
// their own (digest 1000 + rank + step) and every complete parity shard,
// but nodes in `lost`, which hold nothing.
void AddCodedStep(Inventory* inv, const ec::Group& g, int64_t step, const std::set<int>& lost) {
  const ec::GroupLayout layout = g.layout();
  for (int r : g.members) {
    if (!lost.count(r)) inv->Add(r, step, r, 1000 + r + step);
  }
  for (int s = 0; s < layout.stripes(); ++s) {
    for (int row = 0; row < g.m; ++row) {
      const int holder = g.members[layout.ParityHolders(s)[row]];
      if (lost.count(holder)) continue;
      wire::HeldParity p{step, g, s, row, {}};
      for (int x : layout.Contributors(s)) p.digests[g.members[x]] = 1000 + g.members[x] + step;
      inv->AddParity(holder, p);
    }
  }
}

ec::Group Rs62() {
  ec::Group g;
  g.members = {0, 1, 2, 3, 4, 5, 6, 7};
  g.kind = ec::Redundancy::Kind::kRs;
  g.m = 2;
  return g;
}

// Any two nodes of an rs(6,2) group lost: each decodes its step, every one
// of its six stripes from six shards of the survivors, never from a lost
// node, the data shards from copies of the digests the parity was coded
// from.
TEST(PlanRestoreTest, AnyTwoLostOfAnRs62GroupAreDecoded) {
  const ec::Group g = Rs62();
  const ec::GroupLayout layout = g.layout();
  for (int a = 0; a < 8; ++a) {
    for (int b = a + 1; b < 8; ++b) {
      Inventory inv;
      AddCodedStep(&inv, g, 40, {a, b});
      auto plan = PlanRestore(inv, 8, 1);
      ASSERT_EQ(plan.step, 40) << a << "," << b << ": " << plan.reason;
      for (int lost : {a, b}) {
        const wire::Source& src = plan.sources[lost];
        ASSERT_TRUE(src.decode.has_value()) << lost;
        EXPECT_EQ(src.digest, 1000u + lost + 40);
        EXPECT_EQ(src.decode->group, g);
        ASSERT_EQ(src.decode->stripes.size(), 6u);
        EXPECT_FALSE(src.holders.empty());  // parity holders: they hold its index
        for (size_t c = 0; c < 6; ++c) {
          const wire::StripeSource& ss = src.decode->stripes[c];
          EXPECT_EQ(ss.stripe, layout.DataStripes(lost)[c]);
          ASSERT_EQ(ss.shards.size(), 6u);
          std::set<int> indices;
          for (const wire::ShardSource& sh : ss.shards) {
            EXPECT_NE(sh.holder, a);
            EXPECT_NE(sh.holder, b);
            indices.insert(sh.index);
            if (sh.index < 6) {  // a data shard: that member's own step
              EXPECT_EQ(sh.rank, g.members[layout.Contributors(ss.stripe)[sh.index]]);
              EXPECT_EQ(sh.holder, sh.rank);
            } else {
              EXPECT_EQ(sh.rank, wire::kParityRank);
              EXPECT_EQ(sh.holder, g.members[layout.ParityHolders(ss.stripe)[sh.index - 6]]);
            }
          }
          EXPECT_EQ(indices.size(), 6u);
        }
      }
      for (int r = 0; r < 8; ++r) {
        if (r != a && r != b) {
          EXPECT_FALSE(plan.sources[r].decode.has_value());
        }
      }
    }
  }
}

// Three lost of a group: some stripe is short of shards, the reason says
// which, and the newest step complete elsewhere (here the backup's) wins.
TEST(PlanRestoreTest, ThreeLostOfAnRs62GroupFallBackToTheBackup) {
  Inventory inv;
  AddCodedStep(&inv, Rs62(), 40, {1, 2, 3});
  auto plan = PlanRestore(inv, 8, 1);
  EXPECT_FALSE(plan.step.has_value()) << plan.reason;
  EXPECT_NE(plan.reason.find("step 40 has no usable copy for node 1 (group rs(6,2) "
                             "[0,1,2,3,4,5,6,7]: stripe "),
            std::string::npos)
      << plan.reason;
  EXPECT_NE(plan.reason.find("of the 6 shards it needs"), std::string::npos) << plan.reason;
  for (int r = 0; r < 8; ++r) inv.Add(r, 30, wire::kBackupHolder, 500 + r);
  plan = PlanRestore(inv, 8, 1);
  ASSERT_EQ(plan.step, 30) << plan.reason;
  EXPECT_EQ(plan.sources[2].holders, std::vector<int>{wire::kBackupHolder});
  EXPECT_NE(plan.reason.find("step 40 has no usable copy for node 1"), std::string::npos);
}

// A survivor whose copy is not the step the parity was coded from gives no
// data shard; parity shards that disagree on a member's step are all
// distrusted; an excluded parity holder is passed over.
TEST(PlanRestoreTest, DecodeUsesOnlyShardsOfTheCodedSteps) {
  const ec::Group g = Rs62();
  Inventory inv;
  AddCodedStep(&inv, g, 40, {0});
  auto plan = PlanRestore(inv, 8, 1);
  ASSERT_EQ(plan.step, 40);
  ASSERT_TRUE(plan.sources[0].decode.has_value());

  Inventory other = inv;  // node 1 saved step 40 again after it was coded
  other.copies[1][40] = {{1, 77}};
  plan = PlanRestore(other, 8, 1);
  ASSERT_EQ(plan.step, 40);  // node 1 restores its own copy, node 0 decodes without it
  for (const wire::StripeSource& ss : plan.sources[0].decode->stripes) {
    for (const wire::ShardSource& sh : ss.shards) EXPECT_NE(sh.rank, 1);
  }

  Inventory disagree = inv;
  disagree.parity[40][3].digests.begin()->second ^= 1;
  plan = PlanRestore(disagree, 8, 1);
  EXPECT_FALSE(plan.step.has_value());
  EXPECT_NE(plan.reason.find("disagree on the steps they code"), std::string::npos) << plan.reason;

  // Node 0's stripes (1..6) lost every parity row (a restart before they
  // were complete): nothing codes its step, and the reason says so.
  Inventory uncoded = inv;
  std::erase_if(uncoded.parity[40],
                [](const wire::HeldParity& p) { return p.stripe != 0 && p.stripe != 7; });
  plan = PlanRestore(uncoded, 8, 1);
  EXPECT_FALSE(plan.step.has_value());
  EXPECT_NE(plan.reason.find("no complete shard of group rs(6,2) [0,1,2,3,4,5,6,7] codes its step"),
            std::string::npos)
      << plan.reason;

  // Stripe 1's parity rows are on nodes 1 and 2: with both excluded, its
  // five data shards do not rebuild node 0's chunk; with one, they do.
  plan = PlanRestore(inv, 8, 1, {{1, wire::kParityRank, 40}, {2, wire::kParityRank, 40}});
  EXPECT_FALSE(plan.step.has_value()) << plan.reason;
  EXPECT_NE(plan.reason.find("stripe 1 has 5 of the 6 shards it needs"), std::string::npos)
      << plan.reason;
  plan = PlanRestore(inv, 8, 1, {{2, wire::kParityRank, 40}});
  ASSERT_EQ(plan.step, 40) << plan.reason;
  for (const wire::StripeSource& ss : plan.sources[0].decode->stripes) {
    for (const wire::ShardSource& sh : ss.shards) {
      if (sh.rank == wire::kParityRank) {  // its data shard still serves
        EXPECT_NE(sh.holder, 2);
      }
    }
  }
}

TEST(PlanRestoreTest, EmptyInventoryMeansFreshStart) {
  auto plan = PlanRestore(Inventory{}, 4, 1);
  EXPECT_FALSE(plan.step.has_value());
  EXPECT_TRUE(plan.sources.empty());
}

}  // namespace
}  // namespace strata::agent

#include <thread>

#include "agent/rpc/transfer.h"

namespace strata::agent {
namespace {

StepIndex FilesOfSizes(std::vector<uint64_t> sizes) {
  StepIndex index;
  for (size_t i = 0; i < sizes.size(); ++i) {
    index.files.push_back({"f" + std::to_string(i), sizes[i], {}});
    index.total_bytes += sizes[i];
  }
  return index;
}

TEST(TransferTest, PartitionBalancesBytesAndKeepsEveryFileOnce) {
  StepIndex index = FilesOfSizes({40, 26, 1, 30, 3});
  auto groups = PartitionFiles(index, 2);
  ASSERT_EQ(groups.size(), 2u);
  std::vector<size_t> all;
  uint64_t a = 0, b = 0;
  for (size_t f : groups[0]) a += index.files[f].size, all.push_back(f);
  for (size_t f : groups[1]) b += index.files[f].size, all.push_back(f);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<size_t>{0, 1, 2, 3, 4}));
  // Largest first to the lighter group: 40 | 30 | 26 -> 30's | 3 -> 40's | 1 -> 40's.
  EXPECT_EQ(groups[0], (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(groups[1], (std::vector<size_t>{1, 3}));
  EXPECT_LE(std::max(a, b) - std::min(a, b), 40u);  // never more than the largest file
  EXPECT_EQ(PartitionFiles(index, 8).size(), 5u);   // never more groups than files
  EXPECT_EQ(SubIndex(index, groups[0]).total_bytes, a);
}

TEST(TransferTest, WaitEndsWhenEveryGroupArrivedOrOneFailed) {
  TransferTable table;
  uint64_t id = table.Begin("/d", FilesOfSizes({1, 2, 3}));
  std::thread t([&] {
    table.Finish(id, 2, Status::Ok());
    table.Finish(id, 1, Status::Ok());
  });
  EXPECT_TRUE(table.Wait(id, std::chrono::seconds(30)).ok());
  t.join();
  uint64_t bad = table.Begin("/d", FilesOfSizes({1, 2}));
  table.Finish(bad, 0, DataLossError("connection closed by peer"));
  EXPECT_EQ(table.Wait(bad, std::chrono::seconds(30)).code(), StatusCode::kDataLoss);
  uint64_t stalled = table.Begin("/d", FilesOfSizes({1}));
  EXPECT_EQ(table.Wait(stalled, std::chrono::milliseconds(50)).code(),
            StatusCode::kDeadlineExceeded);
  table.End(id);
  std::string dir;
  StepIndex index;
  EXPECT_EQ(table.Lookup(id, &dir, &index).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace strata::agent
