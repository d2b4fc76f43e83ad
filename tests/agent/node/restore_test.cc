// Copyright 2026 The Strata Authors.
//
// Restore, one start of the client on a node, as a component in one
// process: two nodes, each a real store and client directory, with a real
// Server on loopback that serves its copies to the other (Replication's
// receiving side); the coordinator is the real one, called in process. The
// state machine is driven to each of its ends: done (fresh, own store, a
// peer), cancelled (a new yaml), failed (a plan the coordinator cannot
// make), and through refused calls.
#include "agent/node/restore.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <thread>

#include "agent/coordinator/coordinator.h"
#include "agent/peer/replication.h"
#include "agent/rpc/server.h"
#include "component_util.h"
#include "format/naming.h"
#include "storage/object_store.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/thread_pool.h"
#include "wire/op.h"

namespace strata::agent {
// A namespace of its own, not an anonymous one: in a unity build this file
// shares a compiler run with other tests that define the same helper names.
namespace restore_test {

namespace fs = std::filesystem;

constexpr char kSecret[] = "restore-test-secret-0123456789abc";
constexpr char kJob[] = "job1";

// One node: its store, client directory, a server for its peers, and the
// Restore under test.
struct Node {
  explicit Node(int r) : rank(r), dir("restore-node" + std::to_string(r)) {}
  const int rank;
  testing::ScratchDir dir;
  ThreadPool pool{1};
  std::unique_ptr<Store> store;
  std::unique_ptr<LocalDir> local;
  std::unique_ptr<Replication> replication;  // serves fetch_step and get_index
  std::unique_ptr<Server> server;
  Endpoint address;
  std::unique_ptr<Restore> restore;
  std::string client() const { return dir.Sub("client"); }
  std::string yaml() const { return JoinPath(client(), std::string(kReplicatorYaml)); }
};

class RestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (Node* n : {&node0_, &node1_}) Open(*n);
  }
  void TearDown() override {
    for (Node* n : {&node0_, &node1_}) {
      n->restore.reset();
      n->server.reset();
      n->replication.reset();
    }
  }

  void Open(Node& n) {
    fs::create_directories(n.client());
    auto store = Store::Open(n.client(), &n.pool);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    n.store = std::move(*store);
    n.local = std::make_unique<LocalDir>(Env::Default(), n.client());
    Replication::Options ro;
    ro.trust = testing::PskTrust(kSecret);
    ro.local_dir = n.client();
    n.replication = std::make_unique<Replication>(
        ro, n.store.get(), Env::Default(), SteadyClock::Real(), testing::IdleReplicationHooks());
    Serve(n);
  }

  void Serve(Node& n) {
    Server::Handlers handlers;
    Replication* r = n.replication.get();
    handlers.control = [r](const json& request, const std::string&, Server::Reply reply) {
      auto req = wire::GetIndexRequest::FromJson(request);
      reply(req.ok() ? r->HandleGetIndex(*req) : StatusOr<json>(req.status()));
    };
    handlers.long_call = [r](const json& request, net::Socket& socket) -> StatusOr<json> {
      STRATA_ASSIGN_OR_RETURN(auto req, wire::FetchStepRequest::FromJson(request));
      return r->HandleFetchStep(req, socket);
    };
    std::string address;
    auto server = testing::ServeOnLoopback(kSecret, std::move(handlers), &address);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    n.server = std::move(*server);
    auto endpoint = ParseEndpoint(address);
    ASSERT_TRUE(endpoint.ok());
    n.address = *endpoint;
  }

  // Node `n`'s Restore; its calls go to coordinator_ unless `refuse` says
  // to refuse them (the n-th call, from 1).
  void MakeRestore(Node& n, std::function<bool(int)> refuse = {},
                   double make_room_fill = kBoundedCollectionFill,
                   std::function<Status()> on_go = {}) {
    Restore::Options options;
    options.make_room_fill = make_room_fill;
    options.trust = testing::PskTrust(kSecret);
    options.data_streams = 2;
    options.address = n.address;
    options.yaml_path = n.yaml();
    Restore::Hooks hooks;
    hooks.call_coordinator = [this, refuse, calls = std::make_shared<std::atomic<int>>(0)](
                                 const ReplicatorConfig&, const json& request,
                                 std::chrono::milliseconds) -> StatusOr<json> {
      if (refuse && refuse(++*calls)) return UnavailableError("connection refused (test)");
      if (on_call_) on_call_(request);
      return coordinator_->Handle(request);
    };
    hooks.stopping = [this] { return stopping_.load(); };
    hooks.on_round = [&n, this](const ReplicatorConfig&, int64_t round) {
      rounds_[n.rank] = round;
    };
    hooks.on_go = std::move(on_go);
    if (n.rank == 0) hooks.before_listing = before_listing_;
    n.restore = std::make_unique<Restore>(Env::Default(), SteadyClock::Real(), n.store.get(),
                                          n.local.get(), nullptr, options, std::move(hooks));
  }

  static Restore::Request Request(const Node& n) {
    Restore::Request r;
    r.config.job_name = kJob;
    r.config.node_rank = n.rank;
    r.config.nodes = 2;
    r.config.workers_per_node = 2;
    r.peers = {1 - n.rank};
    return r;
  }

  // Writes node `n`'s yaml (its content is the agent's business, not
  // Restore's: only its presence counts here).
  static void WriteYaml(const Node& n) { testing::WriteFile(n.yaml(), "job-name: job1\n"); }

  // Node `n`'s request, from a yaml written and identified as the agent
  // takes it (ClientFiles::TakeYaml).
  static Restore::Request RequestFromYaml(const Node& n) {
    WriteYaml(n);
    Restore::Request r = Request(n);
    auto identity = Env::Default()->Identify(n.yaml());
    EXPECT_TRUE(identity.ok()) << identity.status().ToString();
    if (identity.ok()) r.yaml = *identity;
    return r;
  }

  // Ingests `rank`'s step `step` into `n`'s store (a copy of a peer's step
  // when rank != n.rank).
  // `history` tells apart two saves of one step (a job that went back
  // and saved it again).
  static StepIndex Hold(Node& n, int rank, int64_t step, const std::string& history = "") {
    const std::string in =
        n.dir.Sub("in-" + std::to_string(rank) + "-" + std::to_string(step) + history);
    fs::create_directories(in + "/sub");
    testing::WriteFile(in + "/state.bin", std::string(70000 + rank, static_cast<char>('a' + rank)));
    testing::WriteFile(in + "/sub/opt.bin",
                       std::to_string(step) + "/" + std::to_string(rank) + history);
    auto index = n.store->Ingest(in, {kJob, rank, step});
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    return index.ok() ? *index : StepIndex();
  }

  // Runs both nodes' restores at once.
  std::pair<StatusOr<Restore::Outcome>, StatusOr<Restore::Outcome>> RunBoth() {
    for (Node* n : {&node0_, &node1_}) {
      WriteYaml(*n);
      if (!n->restore) MakeRestore(*n);
    }
    StatusOr<Restore::Outcome> other = InternalError("not run");
    std::thread t([&] { other = node1_.restore->Run(Request(node1_)); });
    StatusOr<Restore::Outcome> mine = node0_.restore->Run(Request(node0_));
    t.join();
    return {std::move(mine), std::move(other)};
  }

  // Starts node 0's restore alone (node 1 never comes) and waits until it
  // awaits the plan; the thread sets *result when Run returns.
  std::thread StartAloneAwaitingPlan(StatusOr<Restore::Outcome>* result) {
    WriteYaml(node0_);
    MakeRestore(node0_);
    std::thread t([this, result] { *result = node0_.restore->Run(Request(node0_)); });
    EXPECT_TRUE(testing::WaitUntil(
        [&] { return node0_.restore->summary().state == Restore::State::kAwaitPlan; }));
    return t;
  }

  static std::string Marker(const Node& n, int64_t step, int worker) {
    return JoinPath(n.client(), MarkerName({kJob, step, n.rank, worker}));
  }

  std::unique_ptr<Coordinator> coordinator_ =
      std::make_unique<Coordinator>(std::chrono::milliseconds(100));
  std::atomic<bool> stopping_{false};
  std::function<void()> before_listing_;          // node 0's, set before MakeRestore
  std::function<void(const json&)> on_call_;      // sees each call before the coordinator
  std::array<std::atomic<int64_t>, 2> rounds_{};  // by node rank; both nodes write
  Node node0_{0};
  Node node1_{1};
};

TEST_F(RestoreTest, AFreshJobWritesEmptyMarkersOnEveryNode) {
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->round, b->round);
  EXPECT_EQ(rounds_[0].load(), a->round);
  for (Node* n : {&node0_, &node1_}) {
    EXPECT_FALSE(fs::exists(n->yaml())) << "the yaml is taken";
    for (int w = 0; w < 2; ++w) {
      EXPECT_TRUE(fs::is_regular_file(Marker(*n, 0, w))) << Marker(*n, 0, w);
      EXPECT_EQ(fs::file_size(Marker(*n, 0, w)), 0u);
    }
    const Restore::Summary s = n->restore->summary();
    EXPECT_EQ(s.state, Restore::State::kDone);
    EXPECT_EQ(s.step, -1);
    EXPECT_EQ(s.last, "nothing to restore (fresh start)");
    EXPECT_FALSE(n->restore->active());
  }
}

TEST_F(RestoreTest, EachNodeRestoresItsOwnStep) {
  for (Node* n : {&node0_, &node1_}) {
    Hold(*n, n->rank, 10);
    Hold(*n, n->rank, 20);
  }
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (Node* n : {&node0_, &node1_}) {
    const Restore::Summary s = n->restore->summary();
    EXPECT_EQ(s.step, 20);
    EXPECT_EQ(s.last, "step 20 from own store");
    const std::string target = n->store->RelativeStepPath({kJob, n->rank, 20});
    EXPECT_EQ(fs::read_symlink(Marker(*n, 20, 1)).string(), target);
  }
}

// A node learns the job's quarantines from the plan, whichever node asked
// for them, and registers with them: a coordinator that restarted does not
// plan a quarantined step again.
TEST_F(RestoreTest, QuarantinesFromThePlanOutliveTheCoordinator) {
  for (Node* n : {&node0_, &node1_}) {
    Hold(*n, n->rank, 10);
    Hold(*n, n->rank, 20);
  }
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(
      coordinator_->Handle({{"op", "quarantine_step"}, {"job", kJob}, {"node", 0}, {"step", 20}})
          .ok());
  auto [c, d] = RunBoth();
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_EQ(node1_.restore->Quarantined(kJob), (std::set<int64_t>{20}));
  coordinator_ = std::make_unique<Coordinator>(std::chrono::milliseconds(100));
  auto [e, f] = RunBoth();
  ASSERT_TRUE(e.ok() && f.ok());
  for (Node* n : {&node0_, &node1_}) EXPECT_EQ(n->restore->summary().step, 10);
}

// Node 0 came back without its RAM: its step comes from node 1's copy, over
// the data plane, verified, and the markers point at it.
TEST_F(RestoreTest, ANodeWithoutItsStepFetchesItFromAPeer) {
  const StepIndex held = Hold(node1_, 0, 30);
  Hold(node1_, 1, 30);
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(node0_.restore->summary().last, "step 30 of node 0 from node 1");
  ASSERT_TRUE(node0_.store->Has({kJob, 0, 30}));
  EXPECT_TRUE(node0_.store->Verify({kJob, 0, 30}).ok());
  auto index = node0_.store->GetIndex({kJob, 0, 30});
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->digest, held.digest);
  EXPECT_EQ(a->addresses.at(1), node1_.address.ToString());
  EXPECT_EQ(node1_.restore->summary().last, "step 30 from own store");
}

// Found by the eight-node soak (rs(6,2), seed 1000): a node whose RAM disk
// had filled with its own later saves could not fetch the plan's step, and
// each failure sent the plan to an older one. A fetch into a disk past the
// fill (here any) first removes the steps held above the plan's: they are
// gone before "go".
TEST_F(RestoreTest, AFetchIntoAFullDiskFirstRemovesTheStepsHeldAboveThePlans) {
  Hold(node1_, 0, 30);
  Hold(node1_, 1, 30);
  for (int64_t later : {40, 50}) Hold(node0_, 0, later);  // node 1 never replicated them
  Hold(node0_, 1, 20);
  std::atomic<bool> held_at_go{true};
  MakeRestore(node0_, {}, /*make_room_fill=*/0.0, [&] {
    held_at_go = node0_.store->Has({kJob, 0, 40}) || node0_.store->Has({kJob, 0, 50});
    return Status::Ok();
  });
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(node0_.restore->summary().last, "step 30 of node 0 from node 1");
  EXPECT_TRUE(node0_.store->Has({kJob, 0, 30}));
  EXPECT_FALSE(held_at_go) << "the steps above the plan's stayed through the fetch";
  EXPECT_TRUE(node0_.store->Has({kJob, 1, 20})) << "only steps above the plan's go";
}

// Found by the same soak: once every node goes on from the plan's step, the
// steps above it are a history the job left. Kept, they passed for the
// newest steps: collection kept them and dropped each new save before the
// group coded it. On a disk with room they stay through the fetch (a later
// round might restore them) and go at "go", on every node.
TEST_F(RestoreTest, EveryNodeRemovesTheStepsAboveTheRestoredOneAtGo) {
  Hold(node1_, 0, 30);
  Hold(node1_, 1, 30);
  Hold(node1_, 1, 50);  // node 1's own later save: no step above 30 is complete
  Hold(node0_, 0, 40);
  std::atomic<bool> held_at_go{false};
  MakeRestore(node0_, {}, kBoundedCollectionFill, [&] {
    held_at_go = node0_.store->Has({kJob, 0, 40});
    return Status::Ok();
  });
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(held_at_go) << "a disk with room lost a step above the plan's before go";
  EXPECT_TRUE(node0_.store->Has({kJob, 0, 30}));
  EXPECT_FALSE(node0_.store->Has({kJob, 0, 40}));
  EXPECT_TRUE(node1_.store->Has({kJob, 1, 30}));
  EXPECT_FALSE(node1_.store->Has({kJob, 1, 50}));
}

// What lands while the hook before the listing runs is a history the job
// left like the rest: the agent lets the last start's chunks in until then
// (Agent::EndHolding), and the list made after it goes at "go".
TEST_F(RestoreTest, WhatLandsBeforeTheListingHookReturnsGoesAtGo) {
  Hold(node1_, 0, 30);
  Hold(node1_, 1, 30);
  Hold(node1_, 1, 50);  // no step above 30 is complete
  int calls = 0;
  before_listing_ = [&] {
    ++calls;
    Hold(node0_, 1, 45);  // a copy of the last start, landing late
  };
  MakeRestore(node0_);
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(node0_.store->Has({kJob, 1, 45})) << "a step above the plan's outlived the list";
  EXPECT_TRUE(node0_.store->Has({kJob, 0, 30}));
}

// A node that handles its "go" late may already hold the first new save
// of a node that went on sooner: a step above the plan's it did not hold
// when it reported ready, or a new save of a step it held from the history
// the job left. "go" removes what it held then, not these.
TEST_F(RestoreTest, ALateGoKeepsTheNewSavesANodeThatWentOnSoonerSent) {
  Hold(node1_, 0, 30);
  Hold(node1_, 1, 30);
  Hold(node1_, 1, 50);  // no step above 30 is complete
  Hold(node0_, 0, 40);
  const uint64_t old_save = Hold(node0_, 1, 50).digest;  // a copy of node 1's save
  uint64_t new_save = 0;
  MakeRestore(node0_, {}, kBoundedCollectionFill, [&] {
    // Node 1 went on first; its next saves reached node 0 before node 0's "go".
    Hold(node0_, 1, 45);
    new_save = Hold(node0_, 1, 50, "-again").digest;
    return Status::Ok();
  });
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_NE(new_save, old_save);
  EXPECT_FALSE(node0_.store->Has({kJob, 0, 40})) << "held at the report: it goes";
  EXPECT_TRUE(node0_.store->Has({kJob, 1, 45})) << "a new save was removed";
  auto again = node0_.store->GetIndex({kJob, 1, 50});
  ASSERT_TRUE(again.ok()) << "a new save of a step held before was removed";
  EXPECT_EQ(again->digest, new_save);
}

// The client started again while this node waited for a plan (node 1
// never came): the restore ends CANCELLED, writes no marker, and the new
// yaml stays for the next one.
TEST_F(RestoreTest, ANewYamlCancelsARestoreWaitingForAPlan) {
  StatusOr<Restore::Outcome> result = InternalError("not run");
  std::thread t = StartAloneAwaitingPlan(&result);
  EXPECT_TRUE(node0_.restore->active());
  WriteYaml(node0_);
  t.join();
  EXPECT_EQ(result.status().code(), StatusCode::kCancelled) << result.status().ToString();
  EXPECT_EQ(node0_.restore->summary().state, Restore::State::kCancelled);
  EXPECT_FALSE(node0_.restore->active());
  EXPECT_TRUE(fs::exists(node0_.yaml()));
  EXPECT_FALSE(fs::exists(Marker(node0_, 0, 0)));
}

// A start removes the yaml it was read from once it has registered, and
// only that file: a restarted client's newer yaml, written after the agent
// read the old one and before the registration came back, stays and
// cancels the start (it was once removed unseen, and the client waited for
// markers that never came).
TEST_F(RestoreTest, AYamlWrittenWhileRegisteringStaysAndCancelsTheStart) {
  Restore::Request request = RequestFromYaml(node0_);
  const std::string newer = "job-name: job1\nnode-rank: 0\nnodes: 1\n";
  on_call_ = [&](const json& call) {
    if (call.value("op", "") != "register") return;
    testing::WriteFile(node0_.yaml() + ".tmp", newer);  // as clients write it
    fs::rename(node0_.yaml() + ".tmp", node0_.yaml());
  };
  MakeRestore(node0_);
  StatusOr<Restore::Outcome> result = InternalError("not run");
  std::atomic<bool> ended{false};
  std::thread t([&] {
    result = node0_.restore->Run(request);
    ended = true;
  });
  // Node 1 never comes: a start that lost the newer yaml would wait for it.
  EXPECT_TRUE(testing::WaitUntil([&] { return ended.load(); })) << "the start was not cancelled";
  stopping_ = true;
  t.join();
  EXPECT_EQ(result.status().code(), StatusCode::kCancelled) << result.status().ToString();
  EXPECT_NE(result.status().message().find("replicator.yaml"), std::string::npos)
      << result.status().ToString();
  ASSERT_TRUE(fs::exists(node0_.yaml()));
  EXPECT_EQ(testing::ReadFile(node0_.yaml()), newer);
  EXPECT_FALSE(fs::exists(JoinPath(node0_.client(), std::string(kReplicatorYamlTaken))));
  EXPECT_FALSE(fs::exists(Marker(node0_, 0, 0)));
}

TEST_F(RestoreTest, TheYamlAStartWasReadFromGoesOnceItRegistered) {
  Restore::Request request = RequestFromYaml(node0_);
  MakeRestore(node0_);
  StatusOr<Restore::Outcome> result = InternalError("not run");
  std::thread t([&] { result = node0_.restore->Run(request); });
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return node0_.restore->summary().state == Restore::State::kAwaitPlan; }));
  EXPECT_FALSE(fs::exists(node0_.yaml()));
  EXPECT_FALSE(fs::exists(JoinPath(node0_.client(), std::string(kReplicatorYamlTaken))));
  stopping_ = true;  // node 1 never comes
  t.join();
  EXPECT_EQ(result.status().code(), StatusCode::kCancelled) << result.status().ToString();
}

// The client's supervisor says the client ended while its node waited for a
// plan (node 1 never came): the restore ends CANCELLED, naming why, and
// writes no marker: the dead process is neither counted ready nor kept in
// the round.
TEST_F(RestoreTest, TheClientEndingCancelsARestoreWaitingForAPlan) {
  StatusOr<Restore::Outcome> result = InternalError("not run");
  std::thread t = StartAloneAwaitingPlan(&result);
  node0_.restore->ClientEnded("exit code 137");
  t.join();
  EXPECT_EQ(result.status().code(), StatusCode::kCancelled) << result.status().ToString();
  EXPECT_NE(result.status().message().find("exit code 137"), std::string::npos)
      << result.status().ToString();
  EXPECT_EQ(node0_.restore->summary().state, Restore::State::kCancelled);
  EXPECT_FALSE(node0_.restore->active());
  EXPECT_FALSE(fs::exists(Marker(node0_, 0, 0)));
}

// A notice that came while no restore ran (the client ended while training)
// is no reason to cancel the next start's restore.
TEST_F(RestoreTest, AClientThatEndedBetweenRestoresCancelsNoLaterOne) {
  MakeRestore(node0_);
  node0_.restore->ClientEnded("exit code 137");
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  // And one that ended an earlier restore does not reach the next.
  StatusOr<Restore::Outcome> result = InternalError("not run");
  std::thread t = StartAloneAwaitingPlan(&result);
  node0_.restore->ClientEnded("exit code 137");
  t.join();
  ASSERT_EQ(result.status().code(), StatusCode::kCancelled);
  auto [c, d] = RunBoth();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(d.ok()) << d.status().ToString();
}

// Stopping the agent ends a restore in any state.
TEST_F(RestoreTest, StoppingCancelsARestore) {
  StatusOr<Restore::Outcome> result = InternalError("not run");
  std::thread t = StartAloneAwaitingPlan(&result);
  stopping_ = true;
  t.join();
  EXPECT_EQ(result.status().code(), StatusCode::kCancelled) << result.status().ToString();
}

// Refused calls (a coordinator restarting, a full accept queue) are
// retried with backoff, in every state, and the restore completes.
TEST_F(RestoreTest, RefusedCallsAreRetriedUntilTheRestoreCompletes) {
  WriteYaml(node0_);
  WriteYaml(node1_);
  // Node 0: its 1st-3rd calls (registration) and every 5th after are refused.
  MakeRestore(node0_, [](int call) { return call <= 3 || call % 5 == 0; });
  MakeRestore(node1_, [](int call) { return call % 4 == 0; });
  Hold(node0_, 0, 7);
  Hold(node1_, 1, 7);
  auto [a, b] = RunBoth();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->round, b->round);
  EXPECT_EQ(node0_.restore->summary().step, 7);
  EXPECT_EQ(node1_.restore->summary().step, 7);
}

// A registration no retry mends (no coordinator to call; one the
// coordinator refuses as malformed) ends the restore at once, its yaml
// still in place: the agent tells the client before the yaml goes.
TEST_F(RestoreTest, ARegistrationNoRetryMendsFailsBeforeTheYamlGoes) {
  for (StatusCode code : {StatusCode::kFailedPrecondition, StatusCode::kInvalidArgument}) {
    WriteYaml(node0_);
    Restore::Options options;
    options.trust = testing::PskTrust(kSecret);
    options.address = node0_.address;
    options.yaml_path = node0_.yaml();
    Restore::Hooks hooks;
    int calls = 0;
    hooks.call_coordinator = [&](const ReplicatorConfig&, const json&,
                                 std::chrono::milliseconds) -> StatusOr<json> {
      ++calls;
      return Status(code, "no coordinator: pass --coordinator or set master in replicator.yaml");
    };
    hooks.stopping = [] { return false; };
    Restore restore(Env::Default(), SteadyClock::Real(), node0_.store.get(), node0_.local.get(),
                    nullptr, options, std::move(hooks));
    StatusOr<Restore::Outcome> r = restore.Run(Request(node0_));
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_EQ(calls, 1) << "not retried";
    EXPECT_TRUE(fs::exists(node0_.yaml())) << "the agent removes it once the client was told";
  }
}

// --restore-backup names a backup that does not exist: the coordinator
// cannot plan, and the restore fails with its reason (the agent tells the
// client), instead of retrying forever.
TEST_F(RestoreTest, APlanTheCoordinatorCannotMakeFailsTheRestore) {
  auto store = storage::OpenObjectStore("file://" + node0_.dir.Sub("bucket"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  coordinator_->EnableBackups(store->get(), std::string("20260101T0000-01"));
  auto [a, b] = RunBoth();
  for (const auto* r : {&a, &b}) {
    EXPECT_EQ(r->status().code(), StatusCode::kFailedPrecondition) << r->status().ToString();
    EXPECT_NE(r->status().message().find("--restore-backup 20260101T0000-01"), std::string::npos)
        << r->status().ToString();
  }
  EXPECT_EQ(node0_.restore->summary().state, Restore::State::kFailed);
  coordinator_.reset();  // before the store it was given
}

}  // namespace restore_test
}  // namespace strata::agent
