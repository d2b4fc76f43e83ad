// Copyright 2026 The Strata Authors.
//
// Replication, the node's part in the peer tier, as a component in one
// process (replication_fixture.h): what reaches the peer, what is reported
// and collected, retries, a new incarnation, dedup and multi-stream sends.
#include <algorithm>
#include <iterator>

#include "replication_fixture.h"

namespace strata::agent::replication_fixture {
// A namespace of its own, not an anonymous one: in a unity build this file
// shares a compiler run with other tests that define the same helper names.
namespace replication_test {

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

double SkippedPeerSteps() {
  return metrics::Default()
      .GetCounter("strata_skipped_steps_total", "", {{"tier", "peer"}})
      .value();
}

// Saves that come while a send holds the thread: only the newest and the
// steps requested for a backup are sent, the others are counted as skipped,
// and the queue stays bounded however many come.
TEST_F(ReplicationTest, SavesFasterThanThePeerLeaveTheNewestAndTheRequested) {
  const double skipped_before = SkippedPeerSteps();
  StartSender(receiver_address_, kNoSyncStep, /*pins=*/{Key(12)});  // as the agent pins requests
  stall_ = true;
  Ingest(10);
  sender_.replication->Enqueue(Key(10));
  sender_.replication->Start();
  ASSERT_TRUE(testing::WaitUntil([&] { return puts_ == 1; }));
  const int64_t last = 10 + static_cast<int64_t>(Replication::kMaxQueued) * 2 + 5;
  for (int64_t step = 11; step <= last; ++step) {
    Ingest(step);
    sender_.replication->Enqueue(Key(step), /*backup_requested=*/step == 12);
    EXPECT_LE(sender_.replication->progress().queued, Replication::kMaxQueued + 1) << step;
  }
  stall_ = false;
  AwaitReport(last);
  AwaitReport(12);
  for (int64_t step = 10; step <= last; ++step) {
    const bool sent = step == 10 || step == 12 || step == last;
    EXPECT_EQ(receiver_.store->GetIndex(Key(step)).ok(), sent) << step;
  }
  EXPECT_EQ(SkippedPeerSteps() - skipped_before, static_cast<double>(last - 10 + 1 - 3));
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

// Found by copies seed 142 at eight nodes: nodes learn the watermark a
// report apart, and one that moved to the new floor dropped the step a node
// still at the old floor kept. A node keeps the floor of its last collection
// as well, until the watermark moves on again.
TEST_F(ReplicationTest, AMovedWatermarkKeepsTheLastFloorsStepToo) {
  SendWithTheWatermarkAt20();
  ASSERT_TRUE(testing::WaitUntil([&] { return !sender_.store->GetIndex(Key(40)).ok(); }));
  {
    std::lock_guard<std::mutex> l(mu_);
    watermark_ = 50;
  }
  // An idle report takes the new watermark (on the real clock's tick); the
  // steps come after it, or a collection at the old floor could drop 50.
  ASSERT_TRUE(testing::WaitUntil([&] { return sender_.replication->progress().watermark == 50; }));
  for (int64_t step : {70, 80}) Ingest(step);
  sender_.replication->Enqueue(Key(80));
  Reports(2);
  ASSERT_TRUE(testing::WaitUntil([&] { return !sender_.store->GetIndex(Key(60)).ok(); }));
  for (int64_t kept : {20, 50, 70, 80})
    EXPECT_TRUE(sender_.store->GetIndex(Key(kept)).ok()) << kept;
  {
    std::lock_guard<std::mutex> l(mu_);
    watermark_ = 70;
  }
  ASSERT_TRUE(testing::WaitUntil([&] { return sender_.replication->progress().watermark == 70; }));
  Ingest(90);
  sender_.replication->Enqueue(Key(90));
  Reports(3);
  ASSERT_TRUE(testing::WaitUntil([&] { return !sender_.store->GetIndex(Key(20)).ok(); }));
  for (int64_t kept : {50, 70, 80, 90})
    EXPECT_TRUE(sender_.store->GetIndex(Key(kept)).ok()) << kept;
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

TEST(StepsToKeepTest, ANodeAtTheNewFloorKeepsTheStepOfTheOldOne) {
  // Copies seed 142 at eight nodes: node 1 learned the watermark 350 and
  // dropped 375; node 0 learned 375 and dropped 350.
  const std::set<int64_t> node1 = StepsToKeep({300, 350, 375, 400, 425}, 350, true, 300);
  const std::set<int64_t> node0 = StepsToKeep({300, 350, 375}, 375, true, 350);
  EXPECT_EQ(node1, (std::set<int64_t>{300, 350, 400, 425}));
  EXPECT_EQ(node0, (std::set<int64_t>{350, 375}));
  std::set<int64_t> common;
  std::ranges::set_intersection(node0, node1, std::inserter(common, common.end()));
  EXPECT_EQ(common, (std::set<int64_t>{350}));
  // A previous floor between two held steps keeps the older one; one at
  // or below nothing held keeps nothing more.
  EXPECT_EQ(StepsToKeep({10, 20, 30, 40, 50}, 40, true, 25), (std::set<int64_t>{20, 40, 50}));
  EXPECT_EQ(StepsToKeep({10, 20, 30, 40, 50}, 40, true, 5), (std::set<int64_t>{40, 50}));
  // Unbounded, every step from the floor up is kept, and nothing below it.
  EXPECT_EQ(StepsToKeep({10, 20, 30, 40, 50}, 30, false, 10), (std::set<int64_t>{30, 40, 50}));
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
  // The counters are labelled by the peer's address, and an earlier test's
  // receiver may have had the same port: count from what they hold now.
  const double before = SentTo("strata_replication_bytes_total");
  StartSender(receiver_address_);
  const std::string same(3 << 20, 'x');
  IngestFiles(sender_, Key(10), {{"a.bin", same}, {"sub/b.bin", std::string(1 << 20, 'y')}});
  sender_.replication->Enqueue(Key(10));
  sender_.replication->Start();
  Reports(1);
  const double sent = SentTo("strata_replication_bytes_total");
  const double deduped = SentTo("strata_replication_dedup_bytes_total");
  EXPECT_EQ(sent - before, 4 << 20);  // the first copy goes whole
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

}  // namespace replication_test
}  // namespace strata::agent::replication_fixture
