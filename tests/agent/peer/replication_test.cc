// Copyright 2026 The Strata Authors.
//
// Replication, the node's part in the peer tier, as a component in one
// process: two nodes, each a real store with its Replication, node 1's
// receiving side served by a real Server on loopback; the coordinator is
// played by the test through node 0's hooks; time moves by a ManualClock.
#include "agent/peer/replication.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "agent/peer/retention.h"
#include "agent/rpc/server.h"
#include "component_util.h"
#include "format/naming.h"
#include "format/sync_map.h"
#include "strata/checkpointer.h"
#include "tamper_proxy.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/metrics.h"
#include "util/thread_pool.h"
#include "wire/op.h"

namespace strata::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr char kSecret[] = "replication-test-secret-012345678";

// One node: its store and its Replication.
struct Node {
  explicit Node(const std::string& tag) : dir(tag) {}
  testing::ScratchDir dir;
  ThreadPool pool{1};
  std::unique_ptr<Store> store;
  std::unique_ptr<Replication> replication;
};

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (Node* n : {&sender_, &receiver_}) {
      auto store = Store::Open(n->dir.Sub("store"), &n->pool);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      n->store = std::move(*store);
    }
    target_.config.job_name = "job1";
    target_.config.node_rank = 0;
    target_.config.nodes = 2;
    target_.peers = {1};
    Replication::Hooks hooks;
    hooks.on_replica = [this](const wire::StepKey&, uint64_t) { ++adopted_; };
    hooks.target = [this] {
      std::lock_guard<std::mutex> l(mu_);
      return receiver_target_;
    };
    receiver_.replication = Make(receiver_, std::move(hooks));
    ServeReceiver();
  }

  void TearDown() override {
    stall_ = false;               // a test that failed may have left node 1 stalled
    sender_.replication.reset();  // its thread calls the hooks, which use the members
    server_.reset();
    receiver_.replication.reset();
  }

  // Node 1's receiving side on a real server; its address goes in the target.
  void ServeReceiver() {
    Server::Handlers handlers;
    handlers.long_call = [this](const json& request, net::Socket& socket) -> StatusOr<json> {
      STRATA_ASSIGN_OR_RETURN(wire::Op op, wire::ParseOp(request));
      Replication& r = *receiver_.replication;
      if (op == wire::Op::kPutStep) {
        ++puts_;
        if (forget_on_put_) sender_.replication->Forget();
        if (refuse_) return UnavailableError("node 1 is restarting");
        while (stall_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        STRATA_ASSIGN_OR_RETURN(auto req, wire::PutStepRequest::FromJson(request));
        return r.HandlePutStep(req, socket);
      }
      if (op == wire::Op::kPutFiles) {
        ++put_files_;
        STRATA_ASSIGN_OR_RETURN(auto req, wire::PutFilesRequest::FromJson(request));
        return r.HandlePutFiles(req, socket);
      }
      return UnimplementedError("not served here");
    };
    auto server = testing::ServeOnLoopback(trust_, std::move(handlers), &receiver_address_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  std::unique_ptr<Replication> Make(Node& n, Replication::Hooks hooks) {
    Replication::Options options;
    options.trust = trust_;
    options.local_dir = n.dir.Sub("client");
    options.data_streams = 4;
    options.bounded_collection_fill = bounded_collection_fill_;
    fs::create_directories(options.local_dir);
    return std::make_unique<Replication>(options, n.store.get(), Env::Default(), &clock_,
                                         testing::IdleReplicationHooks(std::move(hooks)));
  }

  // Node 0's Replication, sending to node 1 at `address`; the coordinator
  // records each report and answers with watermark_.
  void StartSender(const std::string& address, int64_t priority = kNoSyncStep,
                   std::set<wire::StepKey> pins = {}) {
    target_.addresses = {{1, address}};
    Replication::Hooks hooks;
    hooks.target = [this] { return std::optional<Replication::Target>(target_); };
    hooks.priority_step = [priority] { return priority; };
    hooks.pins = [pins] { return pins; };
    hooks.call_coordinator = [this](const ReplicatorConfig&, const json& request,
                                    std::chrono::milliseconds) -> StatusOr<json> {
      if (while_reporting_) while_reporting_();
      std::lock_guard<std::mutex> l(mu_);
      reported_.push_back(request.at("step").get<int64_t>());
      cv_.notify_all();
      return json{{"ok", true}, {"watermark", watermark_}};
    };
    sender_.replication = Make(sender_, std::move(hooks));
  }

  // Node 0 holds steps 10 to 60 and sends 60; the coordinator answers its
  // report with the watermark 20.
  void SendWithTheWatermarkAt20() {
    StartSender(receiver_address_);
    watermark_ = 20;
    for (int64_t step : {10, 20, 30, 40, 50, 60}) Ingest(step);
    sender_.replication->Enqueue(Key(60));
    sender_.replication->Start();
    Reports(1);
  }

  // Node 0 ingests step `step` (files of `bytes` each).
  StepIndex Ingest(int64_t step, size_t bytes = 3000) {
    const std::string client = sender_.dir.Sub("in" + std::to_string(step));
    fs::create_directories(client + "/sub");
    testing::WriteFile(client + "/a.bin", std::string(bytes, static_cast<char>('a' + step % 26)));
    testing::WriteFile(client + "/sub/b.bin", std::string(bytes / 3, 'b'));
    auto index = sender_.store->Ingest(client, Key(step));
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    return index.ok() ? *index : StepIndex();
  }

  wire::StepKey Key(int64_t step) const { return {"job1", 0, step}; }

  // `node` ingests a step `key` of these files (path -> content).
  static StepIndex IngestFiles(Node& node, const wire::StepKey& key,
                               const std::map<std::string, std::string>& files) {
    const std::string client =
        node.dir.Sub("in-" + std::to_string(key.rank) + "-" + std::to_string(key.step));
    for (const auto& [path, content] : files) {
      fs::create_directories(fs::path(client + "/" + path).parent_path());
      testing::WriteFile(client + "/" + path, content);
    }
    auto index = node.store->Ingest(client, key);
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    return index.ok() ? *index : StepIndex();
  }

  // Node 0 saves a Strata checkpoint of `step` with two float32 items in
  // 64 KiB chunks, "frozen" and "trained", and ingests it.
  StepIndex IngestStrata(int64_t step, const std::vector<float>& frozen,
                         const std::vector<float>& trained) {
    const std::string client = sender_.dir.Sub("strata" + std::to_string(step));
    CheckpointerOptions o;
    o.async = false;
    o.chunk_size = 64 << 10;
    o.preemption_signals = {};
    auto ckpt = Checkpointer::Open(client, o);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    if (!ckpt.ok()) return {};
    const std::vector<Item> items = {
        {"frozen",
         DType::kFloat32,
         {static_cast<int64_t>(frozen.size())},
         frozen.data(),
         frozen.size() * 4},
        {"trained",
         DType::kFloat32,
         {static_cast<int64_t>(trained.size())},
         trained.data(),
         trained.size() * 4},
    };
    EXPECT_TRUE((*ckpt)->Save(step, items).ok());
    ckpt->reset();
    auto index = sender_.store->Ingest(JoinPath(client, StepDirName(step)), Key(step));
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    return index.ok() ? *index : StepIndex();
  }

  // Node 0's counter `family` for node 1 (0 when it has none yet).
  double SentTo(const std::string& family) const {
    const std::string text = metrics::Default().Render();
    const std::string key = family + "{peer=\"" + receiver_address_ + "\"} ";
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
  }

  // Node 0 sends its step `step` to node 1, which refuses it: returns once
  // the failure shows in the progress.
  void SendRefusedStep(int64_t step) {
    refuse_ = true;
    StartSender(receiver_address_);
    Ingest(step);
    sender_.replication->Enqueue(Key(step));
    sender_.replication->Start();
    ASSERT_TRUE(testing::WaitUntil([&] { return !sender_.replication->progress().error.empty(); }));
  }

  // Node 0 sends its step 10 to node 1, which holds the put_step up
  // (stall_) before it answers: returns once the call has arrived.
  void SendStalledStep10() {
    StartSender(receiver_address_);
    stall_ = true;
    Ingest(10);
    sender_.replication->Enqueue(Key(10));
    sender_.replication->Start();
    ASSERT_TRUE(testing::WaitUntil([&] { return puts_ == 1; }));
  }

  // Waits until `step` was reported `times` times (idle refreshes re-report
  // the newest replicated step, so a count of reports says little).
  void AwaitReport(int64_t step, size_t times = 1) {
    std::unique_lock<std::mutex> l(mu_);
    EXPECT_TRUE(cv_.wait_for(l, 60s,
                             [&] {
                               return static_cast<size_t>(std::count(
                                          reported_.begin(), reported_.end(), step)) >= times;
                             }))
        << "step " << step << " not reported";
  }

  // Waits until `n` reports reached the coordinator; returns the steps.
  std::vector<int64_t> Reports(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    EXPECT_TRUE(cv_.wait_for(l, 30s, [&] { return reported_.size() >= n; }))
        << reported_.size() << " report(s)";
    return reported_;
  }

  net::Trust trust_ = testing::PskTrust(kSecret);  // both nodes'
  ManualClock clock_;
  Node sender_{"repl-node0"};
  Node receiver_{"repl-node1"};
  std::unique_ptr<Server> server_;
  std::string receiver_address_;
  std::atomic<int> puts_{0};         // put_step calls node 1 received
  std::atomic<int> put_files_{0};    // put_files calls (more streams of a put_step)
  std::atomic<bool> refuse_{false};  // node 1 refuses them
  std::atomic<int> adopted_{0};      // copies node 1 received and adopted
  Replication::Target target_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> reported_;                       // guarded by mu_
  std::optional<Replication::Target> receiver_target_;  // node 1's job; guarded by mu_
  int64_t watermark_ = -1;                              // guarded by mu_ once the sender started
  std::function<void()> while_reporting_;               // runs in each report, before its answer
  // Replication::Options::bounded_collection_fill of the nodes made from now
  // on: always bounded, whatever the test machine's disk holds.
  double bounded_collection_fill_ = 0;
  std::atomic<bool> stall_{false};  // node 1 holds each put_step until it is cleared
  // Each put_step at node 1 makes node 0 Forget (set after StartSender: the
  // atomic orders sender_.replication before the server thread's read).
  std::atomic<bool> forget_on_put_{false};
};

// An ingested step reaches the peer, which verifies and holds the same copy;
// the step is reported and the coordinator's watermark taken.
TEST_F(ReplicationTest, AStepReachesThePeerAndIsReported) {
  StartSender(receiver_address_);
  watermark_ = 10;
  const StepIndex sent = Ingest(10);
  sender_.replication->Enqueue(Key(10));
  sender_.replication->Start();
  EXPECT_EQ(Reports(1).front(), 10);
  auto held = receiver_.store->GetIndex(Key(10));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->digest, sent.digest);
  EXPECT_TRUE(sender_.replication->Replicated(10));
  ASSERT_TRUE(testing::WaitUntil([&] { return sender_.replication->progress().watermark == 10; }));
  const Replication::Progress p = sender_.replication->progress();
  EXPECT_EQ(p.newest_ingested, 10);
  EXPECT_EQ(p.newest_replicated, 10);
  EXPECT_EQ(p.lag_seconds, 0);
  EXPECT_TRUE(p.error.empty()) << p.error;
}

// A new incarnation begins (Forget) while a report is in flight: the
// report's answer is for the past incarnation, and its watermark must not
// let garbage collection drop what the new one may restore from.
TEST_F(ReplicationTest, AWatermarkAnsweredAfterForgetIsDropped) {
  StartSender(receiver_address_);
  watermark_ = 10;
  while_reporting_ = [this] { sender_.replication->Forget(); };
  Ingest(10);
  sender_.replication->Enqueue(Key(10));
  sender_.replication->Start();
  EXPECT_EQ(Reports(1).front(), 10);
  EXPECT_FALSE(
      testing::WaitUntil([&] { return sender_.replication->progress().watermark != -1; }, 500ms));
}

// The same with the new incarnation beginning while the step is on its way
// to the peer: the send finishes, but the step does not count as replicated
// for the new incarnation and is not reported.
TEST_F(ReplicationTest, AStepSentAcrossForgetDoesNotCount) {
  StartSender(receiver_address_);
  watermark_ = 10;
  forget_on_put_ = true;
  Ingest(10);
  sender_.replication->Enqueue(Key(10));
  sender_.replication->Start();
  ASSERT_TRUE(testing::WaitUntil([&] { return puts_.load() >= 1; }));
  EXPECT_FALSE(testing::WaitUntil([&] { return sender_.replication->Replicated(10); }, 500ms));
  std::lock_guard<std::mutex> l(mu_);
  EXPECT_TRUE(reported_.empty());
}

// The RAM tier's age after a start of the job: the step it restored holds
// the ranks' state as of the start, until a newer step is ingested; a
// fresh start holds nothing.
TEST_F(ReplicationTest, TheRamTiersAgeCountsFromTheRestoreAfterAStart) {
  StartSender(receiver_address_);
  Replication& r = *sender_.replication;
  r.Forget();
  r.Restored(-1);  // a fresh start
  EXPECT_EQ(r.progress().own_age_seconds, -1);
  r.Forget();
  r.Restored(10);
  clock_.Advance(5s);
  EXPECT_DOUBLE_EQ(r.progress().own_age_seconds, 5);
  Ingest(20);
  r.Enqueue(Key(20));
  clock_.Advance(2s);
  EXPECT_DOUBLE_EQ(r.progress().own_age_seconds, 2);
  r.Forget();  // the next start, until it restores
  EXPECT_EQ(r.progress().own_age_seconds, -1);
}

// Queued steps go newest first, except the job's on-demand step, which goes
// before everything; a step a newer one superseded is never sent.
TEST_F(ReplicationTest, TheOnDemandStepGoesFirstAndSupersededStepsAreSkipped) {
  StartSender(receiver_address_, /*priority=*/20);
  for (int64_t step : {10, 20, 30}) {
    Ingest(step);
    sender_.replication->Enqueue(Key(step));
  }
  sender_.replication->Start();
  EXPECT_EQ(Reports(2), (std::vector<int64_t>{20, 30}));
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
}

// A peer that refuses: the error names it; the node turns unhealthy only
// once a minute has passed on the clock; each retry comes when the clock
// says so (500 ms, then 1 s) and, the peer back, clears the trouble.
TEST_F(ReplicationTest, ARefusingPeerIsTroubleAfterAMinuteAndARetryClearsIt) {
  ASSERT_NO_FATAL_FAILURE(SendRefusedStep(10));
  const std::string error = sender_.replication->progress().error;
  EXPECT_NE(error.find("replicating job1/0/10 to node 1"), std::string::npos) << error;
  EXPECT_NE(error.find("node 1 is restarting"), std::string::npos) << error;
  EXPECT_FALSE(sender_.replication->Trouble(60s).has_value());

  clock_.Advance(61s);
  std::optional<std::string> trouble = sender_.replication->Trouble(60s);
  ASSERT_TRUE(trouble.has_value());
  EXPECT_NE(trouble->find("Peer replication failing for 61 s"), std::string::npos) << *trouble;
  ASSERT_TRUE(testing::WaitUntil([&] { return puts_ == 2; }));  // the first retry was due

  refuse_ = false;  // the peer is back, but the next retry is 1 s away
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(puts_, 2);
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
  clock_.Advance(1s);
  EXPECT_EQ(Reports(1).front(), 10);
  EXPECT_EQ(puts_, 3);
  EXPECT_TRUE(sender_.replication->progress().error.empty());
  EXPECT_FALSE(sender_.replication->Trouble(60s).has_value());
  EXPECT_TRUE(receiver_.store->GetIndex(Key(10)).ok());
}

// A step a peer refused is retried with backoff, but not once a new
// incarnation began (Forget): it was the past one's.
TEST_F(ReplicationTest, ARetryOfAForgottenStepIsDropped) {
  ASSERT_NO_FATAL_FAILURE(SendRefusedStep(10));
  sender_.replication->Forget();
  refuse_ = false;
  clock_.Advance(10s);  // every backoff is over
  EXPECT_FALSE(testing::WaitUntil([&] { return puts_ > 1; }, 1s));
  EXPECT_FALSE(sender_.replication->Replicated(10));
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
}

// Garbage collection keeps the steps at or above the job's watermark, the
// newest step, and what the hooks pin; older steps of the job go.
TEST_F(ReplicationTest, CollectionKeepsTheWatermarkTheNewestAndPins) {
  StartSender(receiver_address_, kNoSyncStep, /*pins=*/{Key(10)});
  watermark_ = 30;
  for (int64_t step : {10, 20, 30, 40}) Ingest(step);
  sender_.replication->Enqueue(Key(40));
  sender_.replication->Start();
  Reports(1);
  ASSERT_TRUE(testing::WaitUntil([&] { return !sender_.store->GetIndex(Key(20)).ok(); }));
  EXPECT_TRUE(sender_.store->GetIndex(Key(10)).ok());  // pinned
  EXPECT_TRUE(sender_.store->GetIndex(Key(30)).ok());  // the watermark
  EXPECT_TRUE(sender_.store->GetIndex(Key(40)).ok());  // the newest
}

// A watermark that stops moving (a peer that cannot take replicas, a coded
// group with a member away) keeps the watermark's step and the two newest,
// not every save since: the RAM disk stays bounded.
TEST_F(ReplicationTest, AStuckWatermarkKeepsItsStepAndTheTwoNewest) {
  SendWithTheWatermarkAt20();
  ASSERT_TRUE(testing::WaitUntil([&] { return !sender_.store->GetIndex(Key(40)).ok(); }));
  for (int64_t gone : {10, 30, 40}) EXPECT_FALSE(sender_.store->GetIndex(Key(gone)).ok()) << gone;
  for (int64_t kept : {20, 50, 60}) EXPECT_TRUE(sender_.store->GetIndex(Key(kept)).ok()) << kept;
}

// Before the watermark is known in a new start of the job (-1), the step
// that start restored is the floor: every node holds it, so it stays while
// newer saves replicate.
TEST_F(ReplicationTest, TheRestoredStepIsKeptUntilTheWatermarkIsKnown) {
  StartSender(receiver_address_);
  for (int64_t step : {10, 20, 30, 40}) Ingest(step);
  sender_.replication->Restored(10);
  sender_.replication->Enqueue(Key(40));
  sender_.replication->Start();
  Reports(1);  // the reply's watermark is -1
  ASSERT_TRUE(testing::WaitUntil([&] { return !sender_.store->GetIndex(Key(20)).ok(); }));
  EXPECT_TRUE(sender_.store->GetIndex(Key(10)).ok());  // restored
  EXPECT_TRUE(sender_.store->GetIndex(Key(30)).ok());
  EXPECT_TRUE(sender_.store->GetIndex(Key(40)).ok());
}

// Found by the 30-minute chaos soak: a send to a peer on a slow link held the
// sending thread for 33 s, which collected nothing meanwhile, and the
// client's saves filled the RAM disk. The agent collects after each ingest.
TEST_F(ReplicationTest, CollectionGoesOnWhileASendIsStalled) {
  ASSERT_NO_FATAL_FAILURE(SendStalledStep10());
  for (int64_t step : {20, 30, 40, 50, 60}) {
    Ingest(step);
    sender_.replication->Enqueue(Key(step));
    sender_.replication->CollectNow();
  }
  for (int64_t gone : {10, 20, 30, 40})
    EXPECT_FALSE(sender_.store->GetIndex(Key(gone)).ok()) << gone;
  for (int64_t kept : {50, 60}) EXPECT_TRUE(sender_.store->GetIndex(Key(kept)).ok()) << kept;
  stall_ = false;
}

// Found by the 30-minute chaos soak (there in the coded tier): a send begun
// before a restart went on after it, held up by a peer, and the new
// incarnation's saves waited behind it. The restore of another step ends it
// at once; without that the sending thread would wait out the stalled
// call's 30 s.
TEST_F(ReplicationTest, ARestoreOfAnotherStepEndsASendInFlight) {
  ASSERT_NO_FATAL_FAILURE(SendStalledStep10());
  sender_.replication->Forget();
  sender_.replication->Restored(5);
  Ingest(20);
  sender_.replication->Enqueue(Key(20));
  ASSERT_TRUE(testing::WaitUntil([&] { return puts_ == 2; })) << "the past send held the thread";
  stall_ = false;
  AwaitReport(20);
  EXPECT_TRUE(receiver_.store->GetIndex(Key(20)).ok());
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());  // its send was ended, not finished
}

// A send of the step the start restored goes on: on a coded tier it
// completes that step's parity (a planned restart restores the on-demand
// step while its chunks are still on their way).
TEST_F(ReplicationTest, ASendOfTheRestoredStepGoesOn) {
  ASSERT_NO_FATAL_FAILURE(SendStalledStep10());
  sender_.replication->Forget();
  sender_.replication->Restored(10);
  stall_ = false;
  EXPECT_TRUE(testing::WaitUntil([&] { return receiver_.store->GetIndex(Key(10)).ok(); }));
  std::lock_guard<std::mutex> l(mu_);
  EXPECT_TRUE(reported_.empty());  // for the past incarnation: not counted
}

// While the RAM disk has room, a node whose watermark lags keeps every step
// from it up: the coordinator may already back up, or the job restore, a
// step between the node's floor and its newest.
TEST_F(ReplicationTest, WithRoomEveryStepFromTheWatermarkUpIsKept) {
  bounded_collection_fill_ = 2;  // never short
  SendWithTheWatermarkAt20();
  ASSERT_TRUE(testing::WaitUntil([&] { return !sender_.store->GetIndex(Key(10)).ok(); }));
  for (int64_t kept : {20, 30, 40, 50, 60})
    EXPECT_TRUE(sender_.store->GetIndex(Key(kept)).ok()) << kept;
}

TEST(StepsToKeepTest, WithRoomTheFloorsStepAndEveryStepAboveIt) {
  EXPECT_EQ(StepsToKeep({10, 20, 30, 40, 50}, 20, false), (std::set<int64_t>{20, 30, 40, 50}));
  EXPECT_EQ(StepsToKeep({10, 20, 30, 40, 50}, 25, false), (std::set<int64_t>{20, 30, 40, 50}));
  EXPECT_EQ(StepsToKeep({10, 20, 30}, -1, false), (std::set<int64_t>{10, 20, 30}));
  EXPECT_EQ(StepsToKeep({10, 20, 30}, 90, false), (std::set<int64_t>{30}));
}

TEST(StepsToKeepTest, TheFloorsStepTheTwoNewestAboveAndTheNewest) {
  EXPECT_EQ(StepsToKeep({}, 5), (std::set<int64_t>{}));
  EXPECT_EQ(StepsToKeep({10, 20, 30, 40, 50}, 20), (std::set<int64_t>{20, 40, 50}));
  // No held step at the floor: the newest below it.
  EXPECT_EQ(StepsToKeep({10, 20, 30, 40, 50}, 25), (std::set<int64_t>{20, 40, 50}));
  // Unknown floor (-1): the two newest.
  EXPECT_EQ(StepsToKeep({10, 20, 30}, -1), (std::set<int64_t>{20, 30}));
  // Nothing above the floor: the floor's step, which is the newest.
  EXPECT_EQ(StepsToKeep({10, 20, 30}, 30), (std::set<int64_t>{30}));
  EXPECT_EQ(StepsToKeep({10, 20, 30}, 90), (std::set<int64_t>{30}));
  EXPECT_EQ(StepsToKeep({10}, 5), (std::set<int64_t>{10}));
}

// A copy the peer already holds costs one call: no bytes are sent again.
TEST_F(ReplicationTest, ACopyThePeerHoldsIsNotSentAgain) {
  StartSender(receiver_address_);
  Ingest(10);
  sender_.replication->Enqueue(Key(10));
  sender_.replication->Start();
  Reports(1);
  EXPECT_EQ(adopted_, 1);
  sender_.replication->Enqueue(Key(10));
  ASSERT_TRUE(testing::WaitUntil([&] { return puts_ == 2; }));
  AwaitReport(10, 2);
  EXPECT_EQ(puts_, 2);
  EXPECT_EQ(adopted_, 1);
}

// Replication by content: a step whose files an older step the peer holds
// already has is offered by its index, and only the changed file's bytes
// travel; the copy the peer adopts is the sender's, digest for digest.
TEST_F(ReplicationTest, AnOlderStepsUnchangedFilesAreNotSentAgain) {
  StartSender(receiver_address_);
  const std::string same(3 << 20, 'x');
  IngestFiles(sender_, Key(10), {{"a.bin", same}, {"sub/b.bin", std::string(1 << 20, 'y')}});
  sender_.replication->Enqueue(Key(10));
  sender_.replication->Start();
  Reports(1);
  const double sent = SentTo("strata_replication_bytes_total");
  const double deduped = SentTo("strata_replication_dedup_bytes_total");
  EXPECT_EQ(sent, 4 << 20);  // the first copy goes whole
  const StepIndex eleven =
      IngestFiles(sender_, Key(11), {{"a.bin", same}, {"sub/b.bin", std::string(1 << 20, 'z')}});
  sender_.replication->Enqueue(Key(11));
  AwaitReport(11);
  EXPECT_EQ(SentTo("strata_replication_bytes_total") - sent, 1 << 20);
  EXPECT_EQ(SentTo("strata_replication_dedup_bytes_total") - deduped, 3 << 20);
  auto held = receiver_.store->GetIndex(Key(11));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->digest, eleven.digest);
  EXPECT_TRUE(receiver_.store->Verify(Key(11)).ok());
}

// A held copy is trusted for nothing: its index says a range hashes to the
// offered value, but its bytes changed since (a flipped page, a stray
// write). The receiver hashes what it copies, finds the difference, and the
// sender sends that range; the replica is the sender's bytes.
TEST_F(ReplicationTest, ARangeWhoseHeldBytesDifferIsNeverTaken) {
  StartSender(receiver_address_);
  const std::string good(2 << 20, 'g');
  const wire::StepKey own{"job1", 1, 7};  // node 1's own step: the same bytes, once
  IngestFiles(receiver_, own, {{"a.bin", good}});
  std::string bad = good;
  bad[12345] = 'B';
  testing::WriteFile(JoinPath(receiver_.store->StepPath(own), "a.bin"), bad);
  IngestFiles(sender_, Key(7), {{"a.bin", good}});
  sender_.replication->Enqueue(Key(7));
  const double sent = SentTo("strata_replication_bytes_total");
  sender_.replication->Start();
  Reports(1);
  EXPECT_EQ(SentTo("strata_replication_bytes_total") - sent, 2 << 20);
  auto bytes = ReadFileToString(Env::Default(),
                                JoinPath(receiver_.store->StepPath(Key(7)), "a.bin"), 4 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_TRUE(*bytes == good);
}

// A held range with the same length but other bytes hashes otherwise and
// is never looked at; a range of the same bytes under another name (a
// data-parallel replica's own step) is taken.
TEST_F(ReplicationTest, OnlyRangesWithTheOfferedHashAreTaken) {
  StartSender(receiver_address_);
  IngestFiles(receiver_, {"job1", 1, 3},
              {{"other.bin", std::string(1 << 20, 'o')}, {"copy.bin", std::string(1 << 20, 'c')}});
  IngestFiles(sender_, Key(3),
              {{"a.bin", std::string(1 << 20, 'a')}, {"b.bin", std::string(1 << 20, 'c')}});
  sender_.replication->Enqueue(Key(3));
  const double sent = SentTo("strata_replication_bytes_total");
  sender_.replication->Start();
  Reports(1);
  EXPECT_EQ(SentTo("strata_replication_bytes_total") - sent, 1 << 20);  // a.bin only
  EXPECT_TRUE(receiver_.store->Verify(Key(3)).ok());
}

// A Strata checkpoint is offered by its manifest's item chunks: an item
// training left alone (a frozen layer) is not sent again, wherever the
// writer packed it in its data files.
TEST_F(ReplicationTest, AStrataStepsUnchangedItemsAreNotSentAgain) {
  StartSender(receiver_address_);
  std::vector<float> frozen(300000), trained(100000);
  for (size_t i = 0; i < frozen.size(); ++i) frozen[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < trained.size(); ++i) trained[i] = static_cast<float>(i);
  IngestStrata(1, frozen, trained);
  sender_.replication->Enqueue(Key(1));
  sender_.replication->Start();
  Reports(1);
  const double sent = SentTo("strata_replication_bytes_total");
  for (float& f : trained) f += 1;
  const StepIndex two = IngestStrata(2, frozen, trained);
  sender_.replication->Enqueue(Key(2));
  AwaitReport(2);
  EXPECT_EQ(SentTo("strata_replication_bytes_total") - sent,
            static_cast<double>(two.total_bytes - frozen.size() * 4));
  auto held = receiver_.store->GetIndex(Key(2));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->digest, two.digest);
  EXPECT_TRUE(receiver_.store->Verify(Key(2)).ok());
}

// With data parallelism, a peer at this node's position in another replica
// sends the bytes this node's own step of that number will hold: a
// receiver whose own step is not in yet waits a moment for it, and then
// takes every byte from it.
TEST_F(ReplicationTest, ADataParallelReplicaWaitsForItsOwnStepAndTakesItAll) {
  {
    std::lock_guard<std::mutex> l(mu_);
    Replication::Target t;
    t.config.job_name = "job1";
    t.config.node_rank = 1;
    t.config.nodes = 2;
    t.config.assume_data_parallelism = 2;  // nodes 0 and 1 are replicas
    receiver_target_ = t;
  }
  StartSender(receiver_address_);
  const std::map<std::string, std::string> files = {{"w.bin", std::string(3 << 20, 'w')},
                                                    {"m.bin", std::string(1 << 20, 'm')}};
  IngestFiles(sender_, Key(5), files);
  sender_.replication->Enqueue(Key(5));
  const double sent = SentTo("strata_replication_bytes_total");
  sender_.replication->Start();
  ASSERT_TRUE(testing::WaitUntil([&] { return puts_ == 1; }));
  std::this_thread::sleep_for(300ms);  // node 1's ranks save a moment later
  const wire::StepKey own{"job1", 1, 5};
  IngestFiles(receiver_, own, files);
  receiver_.replication->Enqueue(own);
  Reports(1);
  EXPECT_EQ(SentTo("strata_replication_bytes_total") - sent, 0);
  EXPECT_TRUE(receiver_.store->Verify(Key(5)).ok());
}

// Over 16 MiB left to send goes in several range groups, each on its own
// connection, and a large file's ranges spread over them.
TEST_F(ReplicationTest, RangesLeftToSendTravelInSeveralStreams) {
  StartSender(receiver_address_);
  std::string big(48 << 20, 'k');  // three 16 MiB index chunks
  IngestFiles(sender_, Key(20), {{"big.bin", big}});
  sender_.replication->Enqueue(Key(20));
  sender_.replication->Start();
  Reports(1);
  const int puts = puts_;
  const double sent = SentTo("strata_replication_bytes_total");
  big[1] = 'x';               // the first chunk changes,
  big[(40 << 20) + 1] = 'y';  // and the last
  IngestFiles(sender_, Key(21), {{"big.bin", big}});
  sender_.replication->Enqueue(Key(21));
  AwaitReport(21);
  EXPECT_EQ(SentTo("strata_replication_bytes_total") - sent, 32 << 20);
  EXPECT_EQ(puts_, puts + 1);
  EXPECT_GE(put_files_, 2);  // 32 MiB in 16 MiB ranges: at least two streams
  EXPECT_TRUE(receiver_.store->Verify(Key(21)).ok());
}

// --- A man in the middle (net/tls.h) ---

// Bytes an eavesdropper would recognize: 1 MiB of a model's "weights".
constexpr std::string_view kMarker = "weights-nobody-on-the-path-may-read:";
constexpr size_t kWeightBytes = 1 << 20;

class TamperTest : public ReplicationTest {
 protected:
  // A proxy in front of node 1; node 0 sends its step 10 through it.
  void SendThroughProxy() {
    const std::string port = receiver_address_.substr(receiver_address_.rfind(':') + 1);
    auto proxy = testing::TamperProxy::Start(std::stoi(port));
    ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
    proxy_ = std::move(*proxy);
    if (arm_) arm_(*proxy_);
    StartSender(proxy_->address());
    std::string weights;
    while (weights.size() < kWeightBytes) weights += kMarker;
    sent_ = IngestFiles(sender_, Key(10), {{"weights.bin", weights}});
    sender_.replication->Enqueue(Key(10));
    sender_.replication->Start();
  }

  // Waits for the failure the attack causes; it names the peer.
  std::string AwaitFailure() {
    EXPECT_TRUE(testing::WaitUntil([&] { return !sender_.replication->progress().error.empty(); }));
    const std::string error = sender_.replication->progress().error;
    EXPECT_NE(error.find("replicating job1/0/10 to node 1"), std::string::npos) << error;
    EXPECT_NE(error.find(proxy_->address()), std::string::npos) << error;
    return error;
  }

  // The retry after an attack, on a clean path, delivers the same step.
  void ExpectTheRetryDelivers() {
    clock_.Advance(1s);
    EXPECT_EQ(Reports(1).front(), 10);
    auto held = receiver_.store->GetIndex(Key(10));
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    EXPECT_EQ(held->digest, sent_.digest);
  }

  std::function<void(testing::TamperProxy&)> arm_;  // the attack, armed before sending
  std::unique_ptr<testing::TamperProxy> proxy_;
  StepIndex sent_;
};

// Everything on the wire is ciphertext: not the weights, not the calls.
TEST_F(TamperTest, AnEavesdropperSeesNoPlaintext) {
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  EXPECT_EQ(Reports(1).front(), 10);
  const std::string wire = proxy_->AllBytes();
  EXPECT_GT(wire.size(), kWeightBytes);
  EXPECT_EQ(wire.find(kMarker.substr(0, 16)), std::string::npos);
  EXPECT_EQ(wire.find("put_step"), std::string::npos);
  EXPECT_EQ(wire.find("weights.bin"), std::string::npos);
  EXPECT_EQ(wire.find("node 0"), std::string::npos);  // the client id, inside TLS
}

// The same eavesdropper on a job that turned TLS off reads the weights:
// the test above would catch a channel that does not encrypt.
TEST_F(TamperTest, WithTlsOffTheEavesdropperReadsTheWeights) {
  server_.reset();
  trust_ = net::Trust{kSecret, nullptr};
  ServeReceiver();
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  EXPECT_EQ(Reports(1).front(), 10);
  const std::string wire = proxy_->AllBytes();
  EXPECT_NE(wire.find(kMarker), std::string::npos);
  EXPECT_NE(wire.find("put_step"), std::string::npos);
}

// One bit changed in the middle of the step's data: the record fails its
// tag, the connection fails, node 1 commits nothing, and the sender's error
// names the peer. The retry, on a clean path, delivers the step.
TEST_F(TamperTest, AByteChangedInFlightFailsTheCopyAndCommitsNothing) {
  arm_ = [](testing::TamperProxy& p) { p.FlipUpstreamByte(kWeightBytes / 2); };
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  AwaitFailure();
  EXPECT_TRUE(proxy_->flipped());
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
  EXPECT_EQ(adopted_, 0);
  ExpectTheRetryDelivers();
}

// A bit changed in the handshake itself fails the handshake.
TEST_F(TamperTest, AByteChangedInTheHandshakeFailsIt) {
  arm_ = [](testing::TamperProxy& p) { p.FlipUpstreamByte(100); };  // in the ClientHello
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  const std::string error = AwaitFailure();
  EXPECT_EQ(puts_, 0);
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
  ExpectTheRetryDelivers();
}

// The stream cut short in the data: nothing is committed.
TEST_F(TamperTest, AStreamCutShortCommitsNothing) {
  arm_ = [](testing::TamperProxy& p) { p.TruncateUpstreamAfter(kWeightBytes / 3); };
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  AwaitFailure();
  EXPECT_TRUE(proxy_->truncated());
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
  EXPECT_EQ(adopted_, 0);
  ExpectTheRetryDelivers();
}

// What a client sent, captured and replayed on a new connection, reaches
// no handler: the server's fresh handshake keys do not match the recorded
// Finished message.
TEST_F(TamperTest, ARecordedSessionReplayedReachesNoHandler) {
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  EXPECT_EQ(Reports(1).front(), 10);
  const int puts = puts_;
  ASSERT_GE(proxy_->connections(), 1u);
  std::string recorded;  // the connection that carried the step
  for (size_t i = 0; i < proxy_->connections(); ++i) {
    if (proxy_->Upstream(i).size() > recorded.size()) recorded = proxy_->Upstream(i);
  }
  ASSERT_GT(recorded.size(), kWeightBytes);
  ASSERT_TRUE(receiver_.store->Remove(Key(10)).ok());
  auto answer = proxy_->Replay(recorded);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(puts_, puts);
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
}

}  // namespace
}  // namespace strata::agent
