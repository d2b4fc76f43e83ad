// Copyright 2026 The Strata Authors.
//
// Maintenance, the node's side of a maintenance event, as a component in one
// process: real child processes registered as ranks in a real sync map
// (as training processes do through libstrata), a real store and client
// directory; the coordinator is played through OnDemandSync's hooks.
#include "agent/node/maintenance.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "component_util.h"
#include "format/naming.h"
#include "format/sync_map.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/thread_pool.h"

namespace strata::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class MaintenanceEventTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(client());
    auto store = Store::Open(client(), &pool_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    local_ = std::make_unique<LocalDir>(Env::Default(), client());
    Replication::Options ro;
    ro.local_dir = client();
    replication_ = std::make_unique<Replication>(
        ro, store_.get(), Env::Default(), SteadyClock::Real(), testing::IdleReplicationHooks());
    OnDemandSync::Hooks sh;
    sh.call_coordinator = [](const ReplicatorConfig&, const json&,
                             std::chrono::milliseconds) -> StatusOr<json> {
      return json{{"ok", true}};
    };
    sh.coordinator = [](const ReplicatorConfig&) { return std::optional<Endpoint>(); };
    sh.stopping = [] { return false; };
    auto sync = OnDemandSync::Open(dir_.Sub("sync.map"), ::getegid(),
                                   testing::PskTrust("secret-0123456789abcdef"),
                                   SteadyClock::Real(), std::move(sh));
    ASSERT_TRUE(sync.ok()) << sync.status().ToString();
    sync_ = std::move(*sync);
    auto ranks = SyncMap::Open(dir_.Sub("sync.map"));  // as the ranks map it
    ASSERT_TRUE(ranks.ok()) << ranks.status().ToString();
    rank_map_ = std::move(*ranks);
    maintenance_ = Make();
  }
  void TearDown() override {
    maintenance_.reset();
    sync_.reset();
    replication_.reset();
  }

  std::unique_ptr<Maintenance> Make(SteadyClock* clock = SteadyClock::Real()) {
    Maintenance::Parts parts;
    parts.store = store_.get();
    parts.local = local_.get();
    parts.replication = replication_.get();
    parts.sync = sync_.get();
    Maintenance::Hooks hooks;
    hooks.job = [] { return std::optional<Maintenance::Job>(Maintenance::Job{"job1", 0, true}); };
    hooks.restoring = [] { return false; };
    hooks.stopping = [] { return false; };
    return std::make_unique<Maintenance>(Env::Default(), clock, record(), parts, std::move(hooks));
  }

  std::string client() const { return dir_.Sub("client"); }
  std::string record() const { return dir_.Sub("maintenance.json"); }

  // A process registered as a rank in the sync map; with `ignore_term` it
  // ignores SIGTERM (a rank stuck in a collective).
  std::unique_ptr<testing::Child> Rank(bool ignore_term) {
    auto child = std::make_unique<testing::Child>(
        std::vector<std::string>{"/bin/sh", "-c",
                                 std::string(ignore_term ? "trap '' TERM; " : "") +
                                     "echo ready; while :; do sleep 0.05; done"});
    EXPECT_TRUE(child->WaitForOutput("ready"));
    auto slot = rank_map_.Claim(child->pid());
    EXPECT_TRUE(slot.ok()) << slot.status().ToString();
    return child;
  }

  static wire::MaintenanceRequest Request(std::chrono::milliseconds grace, bool lose_ram) {
    wire::MaintenanceRequest r;
    r.grace = grace;
    r.lose_ram = lose_ram;
    r.origin = "maintenance-event-test";
    return r;
  }

  testing::ScratchDir dir_{"maint"};
  ThreadPool pool_{1};
  std::unique_ptr<Store> store_;
  std::unique_ptr<LocalDir> local_;
  std::unique_ptr<Replication> replication_;
  std::unique_ptr<OnDemandSync> sync_;
  SyncMap rank_map_;
  std::unique_ptr<Maintenance> maintenance_;
};

// The ranks get SIGTERM and exit; the event says so, is recorded on disk
// and read back by a restarted agent's Maintenance.
TEST_F(MaintenanceEventTest, AnEventStopsTheRanksAndIsRecorded) {
  auto a = Rank(false), b = Rank(false);
  auto event = maintenance_->Handle(Request(10s, false));
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  EXPECT_EQ(a->Wait(5s), 128 + SIGTERM);
  EXPECT_EQ(b->Wait(5s), 128 + SIGTERM);
  EXPECT_EQ(event->ranks, 2);
  EXPECT_EQ(event->ranks_killed, 0);
  EXPECT_LT(event->ranks_exited_seconds, 10);
  EXPECT_FALSE(event->sync_step.has_value());  // no on-demand step was decided
  EXPECT_FALSE(event->wiped);
  EXPECT_EQ(event->origin, "maintenance-event-test");
  EXPECT_FALSE(maintenance_->since().has_value());
  ASSERT_TRUE(maintenance_->last().has_value());
  auto again = Make();  // a restarted agent
  ASSERT_TRUE(again->last().has_value());
  EXPECT_EQ(again->last()->unix_ms, event->unix_ms);
  EXPECT_EQ(again->last()->ranks, 2);
}

// A rank that ignores SIGTERM is killed when the grace period ends. Until
// then the event holds the node: a second event is refused, and a client's
// new yaml waits for the event's end.
TEST_F(MaintenanceEventTest, AStuckRankIsKilledAndTheNodeIsHeldUntilTheEnd) {
  ManualClock clock;  // the grace period ends when the test says
  maintenance_ = Make(&clock);
  auto stuck = Rank(true);
  StatusOr<wire::MaintenanceEvent> event = InternalError("not run");
  std::thread t([&] { event = maintenance_->Handle(Request(1500ms, false)); });
  ASSERT_TRUE(testing::WaitUntil([&] { return maintenance_->since().has_value(); }));
  EXPECT_FALSE(maintenance_->TakeYaml(true));  // a complete yaml, deferred
  auto second = maintenance_->Handle(Request(1s, false));
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(client()), std::string::npos)
      << second.status().ToString();
  std::this_thread::sleep_for(300ms);  // real time passes; the grace period does not
  EXPECT_TRUE(maintenance_->since().has_value());
  clock.Advance(1500ms);
  t.join();
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  EXPECT_EQ(event->ranks_killed, 1);
  EXPECT_GE(event->seconds, 1.5);
  EXPECT_EQ(stuck->Wait(5s), 128 + SIGKILL);
  EXPECT_TRUE(maintenance_->TakeYaml(false));   // the deferred yaml, now
  EXPECT_FALSE(maintenance_->TakeYaml(false));  // once
}

// --lose-ram: once the step is where it can be (none here), every step
// held and every client file go; a client's new yaml stays.
TEST_F(MaintenanceEventTest, LosingTheRamWipesTheStoreButKeepsANewYaml) {
  const std::string in = dir_.Sub("in");
  fs::create_directories(in);
  testing::WriteFile(in + "/state.bin", std::string(5000, 's'));
  ASSERT_TRUE(store_->Ingest(in, {"job1", 0, 4}).ok());
  testing::WriteFile(JoinPath(client(), std::string(kReplicatorYaml)), "job-name: job1\n");
  fs::create_directories(JoinPath(client(), "5"));  // a step the client committed
  testing::WriteFile(JoinPath(client(), "5/state.bin"), "x");
  testing::WriteFile(JoinPath(client(), std::string(kPrerestoreFile)), "restore-step: 4\n");
  auto event = maintenance_->Handle(Request(2s, true));
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  EXPECT_TRUE(event->wiped);
  EXPECT_EQ(event->ranks, 0);
  EXPECT_TRUE(store_->List().empty());
  EXPECT_EQ(store_->BytesHeld(), 0u);
  EXPECT_TRUE(fs::exists(JoinPath(client(), std::string(kReplicatorYaml))));
  EXPECT_FALSE(fs::exists(JoinPath(client(), "5")));
  EXPECT_FALSE(fs::exists(JoinPath(client(), std::string(kPrerestoreFile))));
}

// A drain with no ranks here and no notice to tell is over at once; one
// with a live rank lasts until the rank is gone (or the deadline).
TEST_F(MaintenanceEventTest, ADrainLastsWhileRanksRemain) {
  const auto deadline = maintenance_->BeginDrain(60s);
  EXPECT_TRUE(maintenance_->DrainOver(deadline));
  auto rank = Rank(false);
  const auto second = maintenance_->BeginDrain(60s);
  EXPECT_FALSE(maintenance_->DrainOver(second));
  rank->Signal(SIGTERM);
  rank->Wait(5s);
  EXPECT_TRUE(testing::WaitUntil([&] { return maintenance_->DrainOver(second); }));
  EXPECT_TRUE(maintenance_->DrainOver(SteadyClock::Real()->Now()));  // the deadline passed
}

// The sync map names processes by pid, and anyone who can write it can name
// any pid. Only the job's own ranks (its group) are signalled: another
// user's process, pid 1 and the agent itself are never, nor counted.
TEST_F(MaintenanceEventTest, ALocalUsersPidInTheSyncMapIsNeverSignalled) {
  std::string why;
  auto user = testing::UnprivilegedUser(&why);
  if (!user) GTEST_SKIP() << why;
  testing::Child other(user->Command({"/bin/sh", "-c", "echo ready; exec sleep 600"}));
  ASSERT_TRUE(other.WaitForOutput("ready"));
  ASSERT_TRUE(rank_map_.Claim(other.pid()).ok());
  ASSERT_TRUE(rank_map_.Claim(1).ok());
  ASSERT_TRUE(rank_map_.Claim(::getpid()).ok());
  auto rank = Rank(false);
  EXPECT_EQ(sync_->LiveRanks().size(), 1u);
  auto event = maintenance_->Handle(Request(10s, false));
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  EXPECT_EQ(event->ranks, 1);
  EXPECT_EQ(event->ranks_killed, 0);
  EXPECT_EQ(rank->Wait(5s), 128 + SIGTERM);
  EXPECT_TRUE(ProcessAlive(other.pid()));
  EXPECT_FALSE(other.Exited());
}

}  // namespace
}  // namespace strata::agent
