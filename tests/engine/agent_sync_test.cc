// Copyright 2026 The Strata Authors.
//
// The Checkpointer's side of the sync map, against a map the test plays the
// agent for: registration, the published step, the notice mirror and the
// fallback when no step comes.
#include "engine/agent_sync.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "format/sync_map.h"
#include "strata/checkpointer.h"
#include "test_util.h"
#include "util/file_util.h"

namespace strata {
namespace {

using testing::ScratchDir;

struct Fixture {
  ScratchDir dir{"agent-sync"};
  SyncMap map;
  std::vector<int64_t> state = std::vector<int64_t>(1000, 7);

  Fixture() {
    std::string agent_dir = JoinPath(dir.path(), std::string(kAgentDirName));
    EXPECT_TRUE(CreateDirs(Env::Default(), agent_dir).ok());
    auto m = SyncMap::OpenOrCreate(JoinPath(agent_dir, std::string(kSyncMapName)), ::getegid());
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    map = std::move(*m);
  }
  // The map as each test leaves it: a seed of the state fuzz target.
  ~Fixture() { testing::SaveFuzzSeed("state", testing::ReadFile(map.path())); }
  std::unique_ptr<Checkpointer> Open(
      std::chrono::milliseconds sync_timeout = std::chrono::seconds(10)) {
    CheckpointerOptions o;
    o.preemption_signals = {};
    o.max_to_keep = 0;
    o.sync_timeout = sync_timeout;
    auto c = Checkpointer::Open(dir.path(), o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::vector<Item> Items() const {
    return {{"state", DType::kInt64, {1000}, state.data(), state.size() * 8}};
  }
  int OwnSlot() const {
    for (int i = 0; i < kSyncSlots; ++i) {
      if (map.slot(i).pid.load() == ::getpid()) return i;
    }
    return -1;
  }
};

TEST(SyncMapTest, ReopeningKeepsTheMapAndRejectsAForeignFile) {
  Fixture f;
  f.map.Publish(12, 99);
  auto again = SyncMap::OpenOrCreate(f.map.path(), ::getegid());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->header().sync_step.load(), 12);  // the same file, not a new one
  ScratchDir d("sync-foreign");
  testing::WriteFile(d.Sub("sync.map"), std::string(4096, 'x'));
  auto foreign = SyncMap::Open(d.Sub("sync.map"));
  EXPECT_EQ(foreign.status().code(), StatusCode::kDataLoss) << foreign.status().ToString();
  EXPECT_EQ(SyncMap::Open(d.Sub("none")).status().code(), StatusCode::kNotFound);
}

TEST(SyncMapTest, SlotsOfDeadProcessesAreReused) {
  Fixture f;
  f.map.slot(0).pid.store(999999999);  // no such process
  auto slot = f.map.Claim(::getpid());
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(*slot, 0);
  EXPECT_EQ(f.map.slot(0).pid.load(), ::getpid());
}

TEST(AgentSyncTest, EveryRankSavesThePublishedStepAndOnlyThat) {
  Fixture f;
  auto ckpt = f.Open();
  ASSERT_NE(ckpt, nullptr);
  const int slot = f.OwnSlot();
  ASSERT_GE(slot, 0) << "the checkpointer did not register";
  EXPECT_FALSE(ckpt->ShouldSave(5));
  EXPECT_EQ(f.map.slot(slot).current_step.load(), 5);  // published for the agent
  f.map.Publish(8, 0);
  EXPECT_FALSE(ckpt->ShouldSave(7));
  EXPECT_EQ(ckpt->status().sync_step, 8);
  ASSERT_TRUE(ckpt->ShouldSave(8));
  auto r = ckpt->Save(8, f.Items());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->on_demand);
  EXPECT_TRUE(r->committed);
  EXPECT_EQ(f.map.slot(slot).saved_step.load(), 8);
  EXPECT_EQ(f.map.slot(slot).served.load(), f.map.header().generation.load());
  EXPECT_FALSE(ckpt->ShouldSave(9));  // served
  EXPECT_FALSE(ckpt->status().sync_step.has_value());
  ckpt.reset();
  EXPECT_EQ(f.map.slot(slot).pid.load(), 0) << "the slot was not released";
}

TEST(AgentSyncTest, ALocalNoticeWaitsForTheJobsStepThenFallsBack) {
  Fixture f;
  auto ckpt = f.Open(std::chrono::milliseconds(300));
  ASSERT_NE(ckpt, nullptr);
  const int slot = f.OwnSlot();
  ckpt->RequestOnDemand();
  EXPECT_EQ(f.map.slot(slot).notices.load(), 1u) << "the agent cannot see the notice";
  EXPECT_FALSE(ckpt->ShouldSave(3)) << "saved before the job agreed on a step";
  bool due = false;
  for (int i = 0; i < 200 && !due; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    due = ckpt->ShouldSave(4);
  }
  ASSERT_TRUE(due) << "no fallback without an agent";
  auto r = ckpt->Save(4, f.Items());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->on_demand);
  EXPECT_FALSE(ckpt->ShouldSave(5));
}

TEST(AgentSyncTest, ARankPastThePublishedStepSavesAtOnce) {
  Fixture f;
  auto ckpt = f.Open();
  ASSERT_NE(ckpt, nullptr);
  EXPECT_FALSE(ckpt->ShouldSave(9));  // training
  f.map.Publish(10, 0);
  ASSERT_TRUE(ckpt->ShouldSave(12));  // it was past the step when it saw it
  auto r = ckpt->Save(12, f.Items());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->on_demand);
  f.map.Publish(kNoSyncStep, 0);  // withdrawn: nothing due
  EXPECT_FALSE(ckpt->ShouldSave(13));
}

// A step published for the ranks before this process (it was already
// there when the process started, at a later step) is not its to save.
TEST(AgentSyncTest, AStepOlderThanTheProcessIsNotDue) {
  Fixture f;
  f.map.Publish(10, 0);
  auto ckpt = f.Open();
  ASSERT_NE(ckpt, nullptr);
  EXPECT_FALSE(ckpt->ShouldSave(11));
  EXPECT_FALSE(ckpt->ShouldSave(12));
  EXPECT_FALSE(ckpt->status().sync_step.has_value());
}

// Two checkpointers in one process are two ranks to the agent: a slot each,
// and closing one leaves the other registered.
TEST(AgentSyncTest, EachCheckpointerHasASlotOfItsOwn) {
  Fixture f;
  auto first = f.Open();
  ScratchDir other("agent-sync-other");
  CheckpointerOptions o;
  o.preemption_signals = {};
  o.agent_dir = JoinPath(f.dir.path(), std::string(kAgentDirName));
  auto second = Checkpointer::Open(other.path(), o);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  int mine = 0;
  for (int i = 0; i < kSyncSlots; ++i) mine += f.map.slot(i).pid.load() == ::getpid();
  EXPECT_EQ(mine, 2);
  first.reset();
  EXPECT_EQ(f.OwnSlot() >= 0, true) << "closing one checkpointer released the other's slot";
}

TEST(AgentSyncTest, UseAgentFalseIgnoresTheMap) {
  Fixture f;
  CheckpointerOptions o;
  o.preemption_signals = {};
  o.use_agent = false;
  auto ckpt = Checkpointer::Open(f.dir.path(), o);
  ASSERT_TRUE(ckpt.ok());
  f.map.Publish(3, 0);
  EXPECT_FALSE((*ckpt)->ShouldSave(3));
  EXPECT_EQ(f.OwnSlot(), -1);
}

}  // namespace
}  // namespace strata
