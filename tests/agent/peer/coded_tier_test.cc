// Copyright 2026 The Strata Authors.
//
// CodedTier, the node's part in a coded peer tier, as components in one
// process: an rs(4,2) group of 6 nodes, each a real Store, ParityStore and
// CodedTier behind a real Server on loopback. Every node contributes its
// step at once (the holders take concurrent chunks into their shards); two
// nodes lose everything and are decoded bit for bit from a plan the real
// planner makes; a chunk or a parity row that changed since it was coded is
// found by its checksum and its holder named.
#include "agent/peer/coded_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "agent/peer/replication.h"
#include "component_util.h"
#include "test_util.h"
#include "util/file_util.h"
#include "wire/op.h"

namespace strata::agent {
// A namespace of its own, not an anonymous one: in a unity build this file
// shares a compiler run with other tests that define the same helper names.
namespace coded_tier_test {

namespace fs = std::filesystem;

constexpr char kSecret[] = "coded-tier-test-secret-0123456789";
constexpr int kNodes = 6;

struct Node {
  explicit Node(int r, const std::string& tag) : rank(r), dir(tag) {}
  int rank;
  testing::ScratchDir dir;
  ThreadPool pool{1};
  std::unique_ptr<Store> store;
  std::unique_ptr<ParityStore> parity;
  std::unique_ptr<CodedTier> coded;
  std::unique_ptr<Server> server;
  std::string address;
};

class CodedTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    group_.members = {0, 1, 2, 3, 4, 5};
    group_.kind = ec::Redundancy::Kind::kRs;
    group_.m = 2;
    for (int r = 0; r < kNodes; ++r) {
      nodes_.push_back(std::make_unique<Node>(r, "coded-node" + std::to_string(r)));
      ASSERT_NO_FATAL_FAILURE(Open(*nodes_.back()));
      addresses_[r] = nodes_.back()->address;
    }
  }
  void TearDown() override {
    for (auto& n : nodes_) n->server.reset();
  }

  void Open(Node& n) {
    auto store = Store::Open(n.dir.Sub("local"), &n.pool);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    n.store = std::move(*store);
    auto parity = ParityStore::Open(JoinPath(n.store->root(), "parity"), Env::Default());
    ASSERT_TRUE(parity.ok()) << parity.status().ToString();
    n.parity = std::move(*parity);
    n.coded = std::make_unique<CodedTier>(
        CodedTier::Options{testing::PskTrust(kSecret), n.dir.Sub("local"), 3}, n.store.get(),
        n.parity.get(), SteadyClock::Real());
    ASSERT_NO_FATAL_FAILURE(Serve(n));
  }

  // Node n's server (where it listened before, if it did).
  void Serve(Node& n) {
    Server::Handlers handlers;
    Node* node = &n;
    handlers.long_call = [node](const json& request, net::Socket& socket) -> StatusOr<json> {
      STRATA_ASSIGN_OR_RETURN(wire::Op op, wire::ParseOp(request));
      if (op == wire::Op::kPutShard) {
        STRATA_ASSIGN_OR_RETURN(auto r, wire::PutShardRequest::FromJson(request));
        return node->coded->HandlePutShard(r, socket, node->rank);
      }
      if (op == wire::Op::kGetShard) {
        STRATA_ASSIGN_OR_RETURN(auto r, wire::GetShardRequest::FromJson(request));
        return node->coded->HandleGetShard(r, socket);
      }
      return UnimplementedError("not served here");
    };
    auto server = testing::ServeOnLoopback(kSecret, std::move(handlers), &n.address);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    n.server = std::move(*server);
  }

  wire::StepKey Key(int rank, int64_t step = 40) const { return {"job1", rank, step}; }

  // Node r's step: files of uneven sizes (so chunks cross files), its own bytes.
  void Ingest(Node& n, int64_t step = 40) {
    const std::string client = n.dir.Sub("in" + std::to_string(step));
    fs::create_directories(client + "/sub");
    std::string a(300000 + 1000 * n.rank, '\0'), b(70001, '\0');
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<char>((i * 7 + n.rank) % 251);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>((i * 13 + 3 * n.rank) % 253);
    testing::WriteFile(client + "/a.bin", a);
    testing::WriteFile(client + "/sub/b.bin", b);
    testing::WriteFile(client + "/empty.bin", "");
    auto index = n.store->Ingest(client, Key(n.rank, step));
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    digests_[n.rank] = index->digest;
  }

  // Every node contributes its step, all at once.
  void ContributeAll() {
    std::vector<std::thread> threads;
    std::vector<Status> results(kNodes);
    for (int r = 0; r < kNodes; ++r) {
      threads.emplace_back([&, r] {
        std::vector<std::string> done;
        results[r] = nodes_[r]->coded->Contribute(Key(r), group_, addresses_, &done);
        if (results[r].ok()) {  // the holders of its 4 stripes' rows: the 5 others
          EXPECT_EQ(done.size(), 5u) << "node " << r;
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < kNodes; ++r) EXPECT_TRUE(results[r].ok()) << results[r].ToString();
  }

  // The plan for node `lost` from what every node holds.
  std::optional<wire::Source> Plan(int lost) {
    Inventory inv;
    for (auto& n : nodes_) {
      for (const auto& [key, index] : n->store->List()) {
        inv.Add(key.rank, key.step, n->rank, index.digest);
      }
      for (const wire::HeldParity& p : n->coded->Inventory("job1")) {
        inv.AddParity(n->rank, p);
      }
    }
    RestorePlan plan = PlanRestore(inv, kNodes, 1);
    if (!plan.step || !plan.sources.count(lost)) return std::nullopt;
    return plan.sources[lost];
  }

  // Wipes node `r` (its store and shards), as a replaced node comes back.
  void Wipe(int r) {
    Node& n = *nodes_[r];
    for (const auto& [key, index] : n.store->List()) ASSERT_TRUE(n.store->Remove(key).ok());
    for (const auto& [key, h] : n.parity->List()) ASSERT_TRUE(n.parity->Remove(key).ok());
  }

  ec::Group group_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<int, std::string> addresses_;
  std::map<int, uint64_t> digests_;
};

// Every node contributes at once: each holds two complete shards, which
// the real planner turns into decodes for two lost nodes; each rebuilt
// step is the lost one, digest and bytes.
TEST_F(CodedTierTest, TwoLostNodesAreDecodedBitForBit) {
  for (auto& n : nodes_) ASSERT_NO_FATAL_FAILURE(Ingest(*n));
  std::map<int, std::string> before;
  for (int r : {1, 4}) {
    auto bytes = ReadFileToString(Env::Default(),
                                  JoinPath(nodes_[r]->store->StepPath(Key(r)), "a.bin"), 1 << 20);
    ASSERT_TRUE(bytes.ok());
    before[r] = *bytes;
  }
  ContributeAll();
  for (auto& n : nodes_) {
    EXPECT_EQ(n->coded->Inventory("job1").size(), 2u) << "node " << n->rank;
    EXPECT_GT(n->parity->BytesHeld(), 0u);
  }
  ContributeAll();  // again (a retry): every contribution is in already
  for (int r : {1, 4}) Wipe(r);
  for (int r : {1, 4}) {
    std::optional<wire::Source> src = Plan(r);
    ASSERT_TRUE(src.has_value());
    ASSERT_TRUE(src->decode.has_value());
    std::vector<wire::FailedHolder> bad;
    Status s = nodes_[r]->coded->Decode(Key(r), src->digest, *src->decode, addresses_,
                                        "node " + std::to_string(r), &bad);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(bad.empty());
    auto index = nodes_[r]->store->GetIndex(Key(r));
    ASSERT_TRUE(index.ok());
    EXPECT_EQ(index->digest, digests_[r]);
    EXPECT_TRUE(nodes_[r]->store->Verify(Key(r)).ok());
    auto bytes = ReadFileToString(Env::Default(),
                                  JoinPath(nodes_[r]->store->StepPath(Key(r)), "a.bin"), 1 << 20);
    EXPECT_TRUE(bytes.ok() && *bytes == before[r]);
  }
}

// A survivor whose step changed under its index since it was coded, and a
// parity row that changed in RAM: the decode finds each by its checksum,
// fails naming the holder, and keeps nothing.
TEST_F(CodedTierTest, ChangedShardsAreFoundAndTheirHoldersNamed) {
  for (auto& n : nodes_) ASSERT_NO_FATAL_FAILURE(Ingest(*n));
  ContributeAll();
  Wipe(0);
  std::optional<wire::Source> src = Plan(0);
  ASSERT_TRUE(src && src->decode);
  // A data shard of stripe 1 from a member other than 0 (the lost one).
  const wire::StripeSource& stripe = src->decode->stripes[0];
  int data_holder = -1, parity_holder = -1;
  for (const wire::ShardSource& sh : stripe.shards) {
    if (sh.rank != wire::kParityRank) data_holder = sh.holder;
    if (sh.rank == wire::kParityRank) parity_holder = sh.holder;
  }
  ASSERT_GE(data_holder, 0);
  ASSERT_GE(parity_holder, 0);
  auto flip = [](const std::string& path, uint64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(static_cast<std::streamoff>(at));
    f.read(&c, 1);
    c = static_cast<char>(c ^ 1);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
  };
  // Every byte of the holder's step, flipped in place (no index change).
  const std::string victim =
      JoinPath(nodes_[data_holder]->store->StepPath(Key(data_holder)), "a.bin");
  for (uint64_t at = 0; at < 300000; at += 4096) flip(victim, at);
  std::vector<wire::FailedHolder> bad;
  Status s =
      nodes_[0]->coded->Decode(Key(0), src->digest, *src->decode, addresses_, "node 0", &bad);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("from node " + std::to_string(data_holder) + ": checksum mismatch"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(std::find(bad.begin(), bad.end(), wire::FailedHolder{data_holder, data_holder, 40}),
            bad.end());
  EXPECT_FALSE(nodes_[0]->store->GetIndex(Key(0)).ok());
  for (uint64_t at = 0; at < 300000; at += 4096) flip(victim, at);  // mended

  const ParityKey row{
      "job1", 40, group_.Id(), stripe.stripe,
      group_.layout().ParityHolders(stripe.stripe)[0] == group_.Position(parity_holder) ? 0 : 1};
  flip(nodes_[parity_holder]->parity->PathOf(row), 10);
  bad.clear();
  s = nodes_[0]->coded->Decode(Key(0), src->digest, *src->decode, addresses_, "node 0", &bad);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(
      std::find(bad.begin(), bad.end(), wire::FailedHolder{parity_holder, wire::kParityRank, 40}),
      bad.end())
      << s.ToString();
  flip(nodes_[parity_holder]->parity->PathOf(row), 10);
  bad.clear();
  s = nodes_[0]->coded->Decode(Key(0), src->digest, *src->decode, addresses_, "node 0", &bad);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A holder takes only the rows it holds, and nothing between incarnations
// of the wrong group: a chunk sent to another node's row is refused.
TEST_F(CodedTierTest, AChunkForAnotherNodesRowIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Ingest(*nodes_[1]));
  std::map<int, std::string> wrong = addresses_;
  std::swap(wrong[2], wrong[3]);  // every chunk for node 2 reaches node 3 and back
  std::vector<std::string> done;
  Status s = nodes_[1]->coded->Contribute(Key(1), group_, wrong, &done);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("is node 2's, not node 3's"), std::string::npos) << s.ToString();
  for (const std::string& a : done) EXPECT_NE(a, addresses_[2]);
}

// Found by the chaos soak: the members of an rs(6,2) group coded each its
// own newest step; while coding ran behind the saves they picked different
// steps, none was ever complete and the watermark stopped for minutes. A
// member joins the step the others code: node 1 has begun step 20, node 0
// holds 20 and 30 and codes 20 first (its shards reach the holders), then
// 30.
TEST_F(CodedTierTest, AMemberCodesTheStepTheOthersHaveBegun) {
  Node& zero = *nodes_[0];
  ASSERT_NO_FATAL_FAILURE(Ingest(*nodes_[1], 20));
  std::vector<std::string> done;
  ASSERT_TRUE(nodes_[1]->coded->Contribute(Key(1, 20), group_, addresses_, &done).ok());
  EXPECT_EQ(zero.coded->StepsCodedByOthers("job1", group_), (std::set<int64_t>{20}));
  ec::Group other = group_;
  other.m = 1;
  EXPECT_TRUE(zero.coded->StepsCodedByOthers("job1", other).empty());
  EXPECT_TRUE(zero.coded->StepsCodedByOthers("job2", group_).empty());

  ASSERT_NO_FATAL_FAILURE(Ingest(zero, 20));
  ASSERT_NO_FATAL_FAILURE(Ingest(zero, 30));
  Replication::Target target;
  target.config.job_name = "job1";
  target.config.node_rank = 0;
  target.config.nodes = kNodes;
  target.addresses = addresses_;
  target.group = group_;
  Replication::Hooks hooks;
  hooks.target = [target] { return std::optional<Replication::Target>(target); };
  hooks.call_coordinator = [](const ReplicatorConfig&, const json&,
                              std::chrono::milliseconds) -> StatusOr<json> {
    return wire::ReplicatedReply{}.ToJson();
  };
  Replication::Options options;
  options.trust = testing::PskTrust(kSecret);
  options.local_dir = zero.dir.Sub("local");
  Replication replication(options, zero.store.get(), Env::Default(), SteadyClock::Real(),
                          testing::IdleReplicationHooks(hooks), zero.coded.get());
  replication.Enqueue(Key(0, 20));
  replication.Enqueue(Key(0, 30));
  replication.Start();
  ASSERT_TRUE(testing::WaitUntil([&] { return replication.progress().newest_replicated == 30; }));
  replication.Stop();
  // Every holder of a row of node 0's stripes has node 0's chunk of step 20.
  int holders = 0;
  for (int r = 1; r < kNodes; ++r) {
    for (const auto& [key, h] : nodes_[r]->parity->List()) {
      if (key.step == 20 && h.Find(0) != nullptr) {
        ++holders;
        break;
      }
    }
  }
  EXPECT_EQ(holders, kNodes - 1);
}

// A save sends several chunks to each holder of its rows. The connection
// of one chunk carries the next (a handshake each cost the eight-node chaos
// run's coded tier its currency), and one the holder closed meanwhile (it
// restarted) is replaced without failing the chunk.
TEST_F(CodedTierTest, AConnectionToAHolderCarriesTheNextChunks) {
  auto accepted = [&] {
    uint64_t n = 0;
    for (int r = 1; r < kNodes; ++r) n += nodes_[r]->server->stats().accepted;
    return n;
  };
  for (int64_t step : {40, 50, 60}) ASSERT_NO_FATAL_FAILURE(Ingest(*nodes_[0], step));
  // Node 0's 4 chunks go to 2 holders each: 8 sends to its 5 peers.
  constexpr uint64_t kSends = 8, kHolders = 5;
  auto contribute = [&](int64_t step) {
    std::vector<std::string> done;
    Status s = nodes_[0]->coded->Contribute(Key(0, step), group_, addresses_, &done);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(done.size(), kHolders) << "step " << step;
  };
  const uint64_t before = accepted();
  contribute(40);
  const uint64_t first = accepted() - before;
  EXPECT_LE(first, kSends);
  EXPECT_GE(first, kHolders);
  // Every holder kept at least one connection: at most the sends beyond one
  // per holder open new ones (as many as ran at once to the same holder).
  contribute(50);
  EXPECT_LE(accepted() - before - first, kSends - kHolders) << "a connection per chunk again";

  Node& restarted = *nodes_[2];
  restarted.server.reset();  // closes node 0's connections to it
  ASSERT_NO_FATAL_FAILURE(Serve(restarted));
  contribute(60);
  EXPECT_GE(restarted.server->stats().accepted, 1u);
}

// Found by the 30-minute chaos soak: after a restart, the chunks of a step
// the job had left went on to a holder for 27 s (a partition had just
// healed, and TCP backed off), and the member coded none of its new saves
// meanwhile. A cancelled ticket ends such a contribution at once, here one
// stuck on a holder that took the call and then read nothing.
TEST_F(CodedTierTest, ACancelledContributionEndsItsChunksInFlight) {
  Node& holder = *nodes_[1];
  holder.server.reset();
  struct Gate {
    std::atomic<int> stalled{0};
    std::atomic<bool> release{false};
  };
  auto gate = std::make_shared<Gate>();  // the server's threads may outlive this body
  Server::Handlers handlers;
  handlers.long_call = [gate](const json&, net::Socket& socket) -> StatusOr<json> {
    STRATA_RETURN_IF_ERROR(SendReply(socket, wire::PutShardReady{false}.ToJson()));
    ++gate->stalled;
    while (!gate->release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return UnavailableError("node 1 read nothing");
  };
  auto server = testing::ServeOnLoopback(kSecret, std::move(handlers), &holder.address);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  holder.server = std::move(*server);
  addresses_[1] = holder.address;
  ASSERT_NO_FATAL_FAILURE(Ingest(*nodes_[0]));

  net::Cancellation cancellation;
  const net::Cancellation::Ticket ticket = cancellation.Take();
  auto contributed = std::async(std::launch::async, [&] {
    return nodes_[0]->coded->Contribute(Key(0), group_, addresses_, nullptr, ticket);
  });
  struct Release {  // before the future waits for Contribute, whatever fails
    std::shared_ptr<Gate> gate;
    ~Release() { gate->release = true; }
  } release{gate};
  ASSERT_TRUE(testing::WaitUntil([&] { return gate->stalled > 0; }));
  cancellation.Cancel();
  // Uncancelled, it would wait for node 1's commit until its data deadline.
  const bool ended = contributed.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  gate->release = true;
  ASSERT_TRUE(ended) << "the contribution went on after its ticket was cancelled";
  const Status s = contributed.get();
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_NE(s.message().find("coding job1/0/40"), std::string::npos) << s.message();
}

// Which step a member joins: the newest the others code above what it
// has replicated and above the step this start restored, unless that is
// its newest queued step anyway.
TEST(StepToJoinTest, TheNewestStepTheOthersCodeAboveTheMembersOwn) {
  EXPECT_EQ(Replication::StepToJoin({}, 10, -1, 30), std::nullopt);
  EXPECT_EQ(Replication::StepToJoin({5, 10}, 10, -1, 30), std::nullopt) << "coded already";
  EXPECT_EQ(Replication::StepToJoin({20, 30}, 10, -1, 30), std::nullopt)
      << "the newest is next anyway";
  EXPECT_EQ(Replication::StepToJoin({15, 20}, 10, -1, 30), 20);
  EXPECT_EQ(Replication::StepToJoin({20, 40}, 10, -1, 30), 40)
      << "a held step newer than the queue's";
}

// The eight-node soak (rs(6,2), seed 1000): a partition cut the coding of
// step 36,125; the job restored 36,450, and with nothing replicated since
// the start every member joined the shards begun for 36,125, held up by
// a slow link and collection, and coded none of its new saves for 20 s,
// until a replaced node found none of its steps decodable.
TEST(StepToJoinTest, NotAStepBelowTheOneThisStartRestored) {
  EXPECT_EQ(Replication::StepToJoin({36125}, -1, 36450, 36700), std::nullopt);
  EXPECT_EQ(Replication::StepToJoin({36450}, -1, 36450, 36700), std::nullopt) << "complete";
  EXPECT_EQ(Replication::StepToJoin({36125, 36675}, -1, 36450, 36700), 36675);
}

}  // namespace coded_tier_test
}  // namespace strata::agent
