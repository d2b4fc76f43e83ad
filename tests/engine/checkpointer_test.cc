// Copyright 2026 The Strata Authors.
#include "strata/checkpointer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "engine/step_io.h"
#include "fault_env.h"
#include "format/naming.h"
#include "strata/catalog.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/ram_disk.h"

namespace strata {
namespace {

using testing::FaultInjectionEnv;
using testing::Op;
using testing::ScratchDir;

// A small model: three tensors whose contents depend on a version number.
struct State {
  std::vector<float> w = std::vector<float>(300000);
  std::vector<int32_t> ids = std::vector<int32_t>(777);
  std::vector<int64_t> step = {0};

  void Fill(int v) {
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>(i % 1000) * 0.5f + static_cast<float>(v);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i) * v;
    step[0] = v;
  }
  std::vector<Item> Items() const {
    return {{"w", DType::kFloat32, {300, 1000}, w.data(), w.size() * 4},
            {"ids", DType::kInt32, {777}, ids.data(), ids.size() * 4},
            {"step", DType::kInt64, {}, step.data(), 8}};
  }
  std::vector<MutableItem> Mutable() {
    return {{"w", DType::kFloat32, {300, 1000}, w.data(), w.size() * 4},
            {"ids", DType::kInt32, {777}, ids.data(), ids.size() * 4},
            {"step", DType::kInt64, {}, step.data(), 8}};
  }
  bool operator==(const State& o) const { return w == o.w && ids == o.ids && step == o.step; }
};

CheckpointerOptions Quiet() {
  CheckpointerOptions o;
  o.preemption_signals = {};
  o.chunk_size = 64 << 10;  // several chunks per item
  return o;
}

std::unique_ptr<Checkpointer> MustOpen(const std::string& dir, CheckpointerOptions o = Quiet()) {
  auto c = Checkpointer::Open(dir, o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

void SaveVersion(Checkpointer& c, int v, bool wait = true) {
  State s;
  s.Fill(v);
  auto items = s.Items();
  auto r = c.Save(v, items);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (wait) {
    ASSERT_TRUE(c.Wait().ok());
  }
}

std::vector<int64_t> Steps(const std::string& dir) {
  auto s = ListSteps(dir);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : std::vector<int64_t>{};
}

TEST(CheckpointerTest, AsyncSaveThenRestoreIsExact) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  State saved;
  saved.Fill(7);
  auto items = saved.Items();
  auto r = c->Save(7, items);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->committed);
  saved.w[0] = -1;  // the caller may reuse its buffers as soon as Save returns
  ASSERT_TRUE(c->Wait().ok());
  saved.w[0] = 7;
  State restored;
  auto into = restored.Mutable();
  auto step = c->RestoreInto(into);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 7);
  EXPECT_TRUE(restored == saved);
  auto report = VerifyStep(d.path(), 7);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->bytes_verified, 300000u * 4 + 777 * 4 + 8);
}

TEST(CheckpointerTest, SyncSaveIsCommittedOnReturn) {
  ScratchDir d;
  auto o = Quiet();
  o.async = false;
  auto c = MustOpen(d.path(), o);
  State s;
  s.Fill(3);
  auto items = s.Items();
  auto r = c->Save(3, items);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->committed);
  EXPECT_EQ(Steps(d.path()), std::vector<int64_t>{3});
}

TEST(CheckpointerTest, RestoreIntoOwnedBuffers) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 4);
  auto r = c->Restore();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step, 4);
  const RestoredItem* ids = r->Find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, DType::kInt32);
  EXPECT_EQ(ids->shape, std::vector<int64_t>{777});
  int32_t v;
  std::memcpy(&v, ids->data.data() + 4 * 5, 4);
  EXPECT_EQ(v, 20);
}

// A borrowed async save does not snapshot: the writer reads the caller's
// buffers, only after `ready` returns, so the caller may still be filling
// them when Save() returns.
TEST(CheckpointerTest, BorrowedSaveWritesFromTheCallersBuffersOnceReady) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  State lent;
  lent.Fill(1);  // not what is saved: `ready` fills version 9 first
  auto items = lent.Items();
  std::atomic<int> ready_calls{0};
  std::atomic<bool> released{false};
  SaveOptions so;
  so.borrowed = true;
  so.ready = [&]() -> Status {
    while (!released.load()) std::this_thread::yield();
    ++ready_calls;
    return Status::Ok();
  };
  auto r = c->Save(9, items, so);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->committed);
  CheckpointerStatus st = c->status();
  EXPECT_EQ(st.in_flight_step, std::optional<int64_t>(9));
  EXPECT_TRUE(st.borrowed_in_flight);
  EXPECT_EQ(st.staging_bytes, 0u);  // no staging memory: nothing was copied
  lent.Fill(9);                     // still the caller's to fill
  released = true;
  c->AwaitIdle();
  EXPECT_EQ(ready_calls.load(), 1);
  EXPECT_FALSE(c->status().borrowed_in_flight);
  ASSERT_TRUE(c->Wait().ok());
  State restored;
  auto into = restored.Mutable();
  ASSERT_TRUE(c->RestoreInto(into).ok());
  EXPECT_TRUE(restored == lent);
}

TEST(CheckpointerTest, ReadyFailureFailsTheSaveAndKeepsOlderSteps) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 1);
  State s;
  s.Fill(2);
  auto items = s.Items();
  SaveOptions so;
  so.borrowed = true;
  so.ready = [] { return DataLossError("tensor 'w' changed while it was copied"); };
  ASSERT_TRUE(c->Save(2, items, so).ok());
  c->AwaitIdle();  // the failure stays for the next Save() or Wait()
  EXPECT_FALSE(c->status().last_error.ok());
  Status w = c->Wait();
  EXPECT_EQ(w.code(), StatusCode::kDataLoss);
  EXPECT_NE(w.message().find("saving step 2"), std::string::npos) << w.message();
  EXPECT_EQ(Steps(d.path()), std::vector<int64_t>{1});
  // Sync saves call it on the caller's thread, before writing anything.
  auto o = Quiet();
  o.async = false;
  c.reset();
  c = MustOpen(d.path(), o);
  auto r = c->Save(3, items, so);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(Steps(d.path()), std::vector<int64_t>{1});
}

TEST(CheckpointerTest, RestoreIntoMemoryTheCallerAllocates) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 5);
  std::vector<std::byte> arena(2 << 20);
  std::byte* aligned = arena.data() + (64 - reinterpret_cast<uintptr_t>(arena.data()) % 64) % 64;
  size_t asked = 0;
  RestoreAllocator allocate = [&](size_t n) -> StatusOr<std::span<std::byte>> {
    asked = n;
    return std::span<std::byte>(aligned, arena.size() - 64);
  };
  {
    auto r = c->RestoreToMemory(allocate);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(asked, 1200000u + 3136 + 64);  // each item padded to 64 bytes
    const RestoredItem* ids = r->Find("ids");
    ASSERT_NE(ids, nullptr);
    EXPECT_GE(ids->data.data(), aligned);
    EXPECT_LT(ids->data.data(), aligned + arena.size());
    int32_t v;
    std::memcpy(&v, ids->data.data() + 4 * 5, 4);
    EXPECT_EQ(v, 25);
  }  // does not unmap the caller's memory
  // Too small: the engine allocates instead.
  allocate = [&](size_t) -> StatusOr<std::span<std::byte>> {
    return std::span<std::byte>(aligned, 4096);
  };
  auto r = c->RestoreToMemory(allocate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->Find("w")->data.data() < aligned ||
              r->Find("w")->data.data() >= aligned + arena.size());
}

TEST(CheckpointerTest, RestoreStepReadsADirectoryWithoutACheckpointer) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 3);
  SaveVersion(*c, 4);
  auto r = RestoreStep(d.path(), 3);  // the directory stays locked by `c`: no lock is taken
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step, 3);
  const RestoredItem* step = r->Find("step");
  ASSERT_NE(step, nullptr);
  int64_t v;
  std::memcpy(&v, step->data.data(), 8);
  EXPECT_EQ(v, 3);
  testing::FlipByte(d.path() + "/4/" + DataFileName(0), 100);
  auto corrupt = RestoreStep(d.path(), 4);
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss);  // no fallback
  EXPECT_EQ(RestoreStep(d.path(), 5).status().code(), StatusCode::kNotFound);
}

TEST(CheckpointerTest, AgentModeWithoutAnAgentTimesOutNamingTheFile) {
  ScratchDir d;
  CheckpointerOptions o = Quiet();
  o.agent_job = AgentJob{.job = "nobody", .timeout = std::chrono::seconds(1)};
  o.max_to_keep = 2;
  auto c = MustOpen(d.path(), o);
  SaveVersion(*c, 1);
  SaveVersion(*c, 2);
  SaveVersion(*c, 3);
  EXPECT_TRUE(
      std::filesystem::exists(d.path() + "/1"));  // the agent owns the directory: no retention
  auto r = c->Restore();
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find(d.path() + "/replicator.yaml"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(c->Restore(RestoreOptions{.step = 3}).status().code(), StatusCode::kInvalidArgument);
  // The yaml no agent took is gone, so a later attempt is not refused as stale.
  EXPECT_FALSE(std::filesystem::exists(d.path() + "/replicator.yaml"));
}

TEST(CheckpointerTest, AHandshakeEndsWhenItsCallerCancelsIt) {
  ScratchDir d;
  int polls = 0;
  AgentJob job{.job = "j", .timeout = std::chrono::seconds(60), .cancelled = [&] {
                 return ++polls < 3 ? Status::Ok() : CancelledError("stop");
               }};
  auto r = AgentHandshake(d.path(), job);
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_EQ(polls, 3);
}

TEST(CheckpointerTest, AllStepsCorruptIsDataLossNotAFreshStart) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 1);
  SaveVersion(*c, 2);
  testing::FlipByte(d.path() + "/1/" + DataFileName(0), 100);
  testing::FlipByte(d.path() + "/2/" + DataFileName(0), 100);
  auto r = c->Restore();
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("skipped corrupt steps 2, 1"), std::string::npos)
      << r.status().ToString();
}

TEST(CheckpointerTest, RestoredItemsAreAlignedForEveryDtype) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  std::vector<uint8_t> odd(13, 1);
  std::vector<double> f64(5, 2.0);
  std::vector<Item> items = {{"a", DType::kUInt8, {13}, odd.data(), odd.size()},
                             {"b", DType::kFloat64, {5}, f64.data(), 40}};
  ASSERT_TRUE(c->Save(1, items).ok());
  ASSERT_TRUE(c->Wait().ok());
  auto r = c->Restore();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const RestoredItem& it : r->items) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(it.data.data()) % 64, 0u) << it.name;
  }
}

TEST(CheckpointerTest, AgentJobIsValidated) {
  ScratchDir d;
  AgentJob job{.job = "j", .node_rank = 2, .nodes = 2};
  auto r = AgentHandshake(d.path(), job);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("node rank 2 is not in [0, 2)"), std::string::npos);
  job = AgentJob{.job = "", .nodes = 1};
  EXPECT_EQ(AgentHandshake(d.path(), job).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(d.path() + "/replicator.yaml"));  // nothing was written
}

TEST(CheckpointerTest, EmptyDirectoryIsNotFound) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  State s;
  auto into = s.Mutable();
  auto r = c->RestoreInto(into);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(d.path()), std::string::npos);
}

// RestoreOptions::item_verified: each item once, when its bytes are in the
// memory and verified; never an item that fails; every attempt reported.
TEST(CheckpointerTest, ItemVerifiedReportsEachVerifiedItemOfEveryStepTried) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 1);
  SaveVersion(*c, 2);
  testing::FlipByte(d.path() + "/2/" + DataFileName(0), 100);  // "w", chunk 0
  std::mutex mu;
  std::vector<std::pair<int64_t, std::string>> seen;
  std::vector<std::string> wrong;
  RestoreOptions options;
  options.item_verified = [&](const RestoredStep& reading, size_t i) {
    const RestoredItem& it = reading.items[i];
    bool ok = true;
    if (it.name == "ids") {  // ids[5] == 5 * version
      int32_t v;
      std::memcpy(&v, it.data.data() + 4 * 5, 4);
      ok = v == 5 * reading.step;
    } else if (it.name == "step") {
      int64_t v;
      std::memcpy(&v, it.data.data(), 8);
      ok = v == reading.step;
    }
    std::lock_guard<std::mutex> l(mu);
    seen.emplace_back(reading.step, it.name);
    if (!ok) wrong.push_back(it.name);
  };
  auto r = c->Restore(options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step, 1);
  EXPECT_TRUE(wrong.empty()) << wrong.front();
  std::multiset<std::pair<int64_t, std::string>> got(seen.begin(), seen.end());
  std::multiset<std::pair<int64_t, std::string>> want = {
      {1, "w"}, {1, "ids"}, {1, "step"}, {2, "ids"}, {2, "step"}};
  // Step 2's small items were read before "w" failed (smallest first; with
  // several threads one of them may still have been in flight).
  for (const auto& e : got) {
    EXPECT_TRUE(want.count(e) == 1) << e.first << " " << e.second;
  }
  EXPECT_EQ(got.count({1, "w"}), 1u);
  EXPECT_EQ(got.count({1, "ids"}), 1u);
  EXPECT_EQ(got.count({1, "step"}), 1u);
  EXPECT_EQ(got.count({2, "w"}), 0u);
}

TEST(CheckpointerTest, CorruptNewestStepFallsBackToOlder) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 1);
  SaveVersion(*c, 2);
  testing::FlipByte(d.path() + "/2/" + DataFileName(0), 100);
  State restored;
  auto into = restored.Mutable();
  auto step = c->RestoreInto(into);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 1);
  State expected;
  expected.Fill(1);
  EXPECT_TRUE(restored == expected);
  auto report = VerifyStep(d.path(), 2);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_EQ(report->problems[0].chunk, 0);
  EXPECT_NE(report->problems[0].message.find("checksum mismatch"), std::string::npos);
}

TEST(CheckpointerTest, TruncatedDataFileIsSkipped) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 1);
  SaveVersion(*c, 2);
  ASSERT_EQ(::truncate((d.path() + "/2/" + DataFileName(0)).c_str(), 10), 0);
  State restored;
  auto into = restored.Mutable();
  auto step = c->RestoreInto(into);
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(*step, 1);
}

TEST(CheckpointerTest, ExplicitStepDoesNotFallBack) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 1);
  SaveVersion(*c, 2);
  testing::FlipByte(d.path() + "/2/" + DataFileName(0), 100);
  State restored;
  auto into = restored.Mutable();
  auto step = c->RestoreInto(into, RestoreOptions{.step = 2});
  EXPECT_EQ(step.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(step.status().message().find("step 2 item"), std::string::npos);
}

TEST(CheckpointerTest, ShapeMismatchIsAnErrorNamingTheItem) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 1);
  State s;
  auto into = s.Mutable();
  into[1].shape = {776};
  into[1].size = 776 * 4;
  auto r = c->RestoreInto(into);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("\"ids\""), std::string::npos) << r.status().message();
  into = s.Mutable();
  into.push_back({"extra", DType::kUInt8, {1}, s.w.data(), 1});
  r = c->RestoreInto(into);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("\"extra\""), std::string::npos);
}

TEST(CheckpointerTest, RejectsBadItems) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  State s;
  auto items = s.Items();
  items[1].name = "w";
  EXPECT_EQ(c->Save(1, items).status().code(), StatusCode::kInvalidArgument);
  items = s.Items();
  items[0].name = "../escape";
  auto r = c->Save(1, items);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("step 1"), std::string::npos);
  items = s.Items();
  items[0].size -= 4;
  r = c->Save(1, items);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("\"w\""), std::string::npos);
  EXPECT_EQ(c->Save(-1, s.Items()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Steps(d.path()).empty());
}

TEST(CheckpointerTest, KeepsNewestMaxToKeep) {
  ScratchDir d;
  auto o = Quiet();
  o.max_to_keep = 3;
  auto c = MustOpen(d.path(), o);
  for (int v = 1; v <= 6; ++v) SaveVersion(*c, v);
  EXPECT_EQ(Steps(d.path()), (std::vector<int64_t>{4, 5, 6}));
  for (int64_t s : Steps(d.path())) EXPECT_TRUE(VerifyStep(d.path(), s)->ok()) << s;
}

TEST(CheckpointerTest, MaxToKeepZeroKeepsAll) {
  ScratchDir d;
  auto o = Quiet();
  o.max_to_keep = 0;
  auto c = MustOpen(d.path(), o);
  for (int v = 1; v <= 4; ++v) SaveVersion(*c, v);
  EXPECT_EQ(Steps(d.path()), (std::vector<int64_t>{1, 2, 3, 4}));
}

// The newest step `c` restores is version `v`'s.
void ExpectRestores(Checkpointer& c, int v) {
  State restored;
  auto into = restored.Mutable();
  ASSERT_EQ(*c.RestoreInto(into), v);
  State expected;
  expected.Fill(v);
  EXPECT_TRUE(restored == expected);
}

ino_t Inode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

TEST(CheckpointerTest, RecyclingReusesTheRetiredStepsFiles) {
  ScratchDir d;
  auto c = MustOpen(d.path());  // max_to_keep 2, recycle_space on
  SaveVersion(*c, 1);
  SaveVersion(*c, 2);
  ino_t first = Inode(d.path() + "/1/" + DataFileName(0));
  SaveVersion(*c, 3);
  EXPECT_EQ(Steps(d.path()), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Inode(d.path() + "/3/" + DataFileName(0)), first);
  ExpectRestores(*c, 3);
}

// A step another process maps to read in place (engine/step_lock.h) is not
// the one whose files a save overwrites: the reader's bytes stay the step's.
TEST(CheckpointerTest, RecyclingTakesNoStepBeingRead) {
  ScratchDir d;
  if (!IsTmpfs(d.path())) GTEST_SKIP() << d.path() << " is not on a tmpfs";
  auto c = MustOpen(d.path());  // max_to_keep 2, recycle_space on
  SaveVersion(*c, 1);
  SaveVersion(*c, 2);
  const ino_t first = Inode(d.path() + "/1/" + DataFileName(0));
  auto held = ReadStepInPlace(d.path(), 1, RestoreAllocator(), RestoreOptions(), 2);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_TRUE(held->hold);
  State one;
  one.Fill(1);
  auto same = [&] {
    return std::memcmp(held->Find("w")->data.data(), one.w.data(), one.w.size() * 4) == 0 &&
           std::memcmp(held->Find("ids")->data.data(), one.ids.data(), one.ids.size() * 4) == 0;
  };
  SaveVersion(*c, 3);
  EXPECT_TRUE(same()) << "step 1 changed under its reader";
  EXPECT_EQ(Steps(d.path()), (std::vector<int64_t>{2, 3}));
  EXPECT_NE(Inode(d.path() + "/3/" + DataFileName(0)), first);
  *held = RestoredStep();
  const ino_t second = Inode(d.path() + "/2/" + DataFileName(0));
  SaveVersion(*c, 4);  // nobody reads step 2: recycled
  EXPECT_EQ(Inode(d.path() + "/4/" + DataFileName(0)), second);
  ExpectRestores(*c, 4);
}

TEST(CheckpointerTest, ResavingAStepReplacesIt) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  SaveVersion(*c, 5);
  State s;
  s.Fill(9);
  s.step[0] = 5;
  auto items = s.Items();
  ASSERT_TRUE(c->Save(5, items).ok());
  ASSERT_TRUE(c->Wait().ok());
  State restored;
  auto into = restored.Mutable();
  ASSERT_EQ(*c->RestoreInto(into), 5);
  EXPECT_TRUE(restored == s);
}

TEST(CheckpointerTest, IntervalInSteps) {
  ScratchDir d;
  auto o = Quiet();
  o.save_interval_steps = 5;
  auto c = MustOpen(d.path(), o);
  std::vector<int64_t> due;
  for (int64_t s = 1; s <= 20; ++s) {
    if (c->ShouldSave(s)) due.push_back(s);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{5, 10, 15, 20}));
}

TEST(CheckpointerTest, IntervalInSecondsFlipsWithoutPolling) {
  ScratchDir d;
  auto o = Quiet();
  o.save_interval_seconds = 0.2;
  auto c = MustOpen(d.path(), o);
  EXPECT_FALSE(c->ShouldSave(1));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!c->ShouldSave(1) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(c->ShouldSave(1));
  SaveVersion(*c, 1);
  EXPECT_FALSE(c->ShouldSave(2));  // the save restarted the interval
}

TEST(CheckpointerTest, OnDemandSaveIsCommittedAndAsksToExit) {
  ScratchDir d;
  auto o = Quiet();
  o.save_interval_steps = 1000;
  o.exit_after_ondemand = true;
  auto c = MustOpen(d.path(), o);
  EXPECT_FALSE(c->ShouldSave(17));
  c->RequestOnDemand();
  EXPECT_TRUE(c->ShouldSave(17));
  State s;
  s.Fill(17);
  auto items = s.Items();
  auto r = c->Save(17, items);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->on_demand);
  EXPECT_TRUE(r->committed);
  EXPECT_TRUE(r->should_exit);
  EXPECT_EQ(Steps(d.path()), std::vector<int64_t>{17});
  EXPECT_FALSE(c->ShouldSave(18));  // the notice has been served
}

int g_previous_handler_calls = 0;
void PreviousHandler(int) { ++g_previous_handler_calls; }

TEST(CheckpointerTest, SigtermSetsTheFlagAndChainsThePreviousHandler) {
  struct sigaction sa {};
  sa.sa_handler = PreviousHandler;
  sigemptyset(&sa.sa_mask);
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  ScratchDir d;
  auto o = Quiet();
  o.preemption_signals = {SIGUSR2};
  o.save_interval_steps = 1000;
  auto c = MustOpen(d.path(), o);
  EXPECT_FALSE(c->ShouldSave(3));
  ASSERT_EQ(::raise(SIGUSR2), 0);
  EXPECT_TRUE(c->ShouldSave(3));
  EXPECT_EQ(g_previous_handler_calls, 1);
  State s;
  s.Fill(3);
  auto items = s.Items();
  auto r = c->Save(3, items);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->on_demand);
  EXPECT_FALSE(r->should_exit);  // exit_after_ondemand is off
}

TEST(CheckpointerTest, SecondCheckpointerOnTheSameDirectoryIsRefused) {
  ScratchDir d;
  auto c = MustOpen(d.path());
  auto second = Checkpointer::Open(d.path(), Quiet());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
}

TEST(CheckpointerTest, OpenRemovesLeftoverTempsAndIgnoresStepsWithoutManifest) {
  ScratchDir d;
  std::string tmp = d.Sub(TempDirName(8));
  ASSERT_TRUE(Env::Default()->CreateDir(tmp).ok());
  testing::WriteFile(tmp + "/data-00000.bin", "partial");
  ASSERT_TRUE(Env::Default()->CreateDir(d.Sub("9")).ok());  // no manifest: not a checkpoint
  auto c = MustOpen(d.path());
  EXPECT_FALSE(Env::Default()->Exists(tmp));
  EXPECT_TRUE(Steps(d.path()).empty());
}

TEST(CheckpointerTest, OptionsAreValidated) {
  ScratchDir d;
  auto o = Quiet();
  o.chunk_size = 3000;
  EXPECT_EQ(Checkpointer::Open(d.path(), o).status().code(), StatusCode::kInvalidArgument);
  o = Quiet();
  o.max_to_keep = -1;
  EXPECT_EQ(Checkpointer::Open(d.path(), o).status().code(), StatusCode::kInvalidArgument);
}

// A failing background save surfaces on the next call, names its step, and
// leaves the previous checkpoint intact; the following save succeeds.
TEST(CheckpointerFaultTest, BackgroundFailureSurfacesOnNextCall) {
  ScratchDir d;
  FaultInjectionEnv env;
  auto o = Quiet();
  o.env = &env;
  auto c = MustOpen(d.path(), o);
  SaveVersion(*c, 1);
  env.FailAt(Op::kWrite, 1, ENOSPC);
  SaveVersion(*c, 2, /*wait=*/false);
  State s;
  s.Fill(3);
  auto items = s.Items();
  auto r = c->Save(3, items);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("saving step 2 in " + d.path()), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("No space left"), std::string::npos);
  EXPECT_EQ(c->status().last_error.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Steps(d.path()), std::vector<int64_t>{1});
  EXPECT_TRUE(VerifyStep(d.path(), 1)->ok());
  r = c->Save(3, items);  // the error was reported once; this save runs
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(c->Wait().ok());
  EXPECT_EQ(Steps(d.path()), (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(c->status().last_error.ok());
}

// Every failure point of a save leaves the committed steps intact and no
// temporary directory behind.
TEST(CheckpointerFaultTest, EveryFailurePointPreservesCommittedSteps) {
  const std::vector<Op> ops = {Op::kOpenWritable, Op::kTruncate, Op::kWrite,
                               Op::kSync,         Op::kSyncDir,  Op::kRename};
  for (Op op : ops) {
    for (int nth : {1, 2, 3}) {
      ScratchDir d;
      FaultInjectionEnv env;
      auto o = Quiet();
      o.env = &env;
      o.async = false;
      o.max_to_keep = 0;
      auto c = MustOpen(d.path(), o);
      SaveVersion(*c, 1);
      SaveVersion(*c, 2);
      env.FailAt(op, nth, EIO);
      State s;
      s.Fill(3);
      auto items = s.Items();
      auto r = c->Save(3, items);
      env.Clear();
      auto steps = Steps(d.path());
      ASSERT_GE(steps.size(), 2u) << "op " << static_cast<int>(op) << " nth " << nth;
      for (int64_t step : steps) {
        EXPECT_TRUE(VerifyStep(d.path(), step)->ok()) << step;
      }
      auto entries = Env::Default()->ListDir(d.path());
      for (const auto& e : *entries) {
        if (!r.ok()) {
          EXPECT_FALSE(IsTempName(e.name)) << e.name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(FileUtilTest, WriteFileAtomicReplacesAndLeavesNoTemp) {
  testing::ScratchDir d;
  std::string path = d.Sub("replicator.prerestore");
  ASSERT_TRUE(WriteFileAtomic(Env::Default(), path, "restore-step: 1\n").ok());
  ASSERT_TRUE(WriteFileAtomic(Env::Default(), path, "restore-step: 2\n").ok());
  EXPECT_EQ(testing::ReadFile(path), "restore-step: 2\n");
  auto entries = Env::Default()->ListDir(d.path());
  ASSERT_EQ(entries->size(), 1u);
}

TEST(FileUtilTest, FailedWriteKeepsTheOldContents) {
  testing::ScratchDir d;
  testing::FaultInjectionEnv env;
  std::string path = d.Sub("state");
  ASSERT_TRUE(WriteFileAtomic(&env, path, "old").ok());
  env.FailAt(testing::Op::kSync, 1, EIO);
  Status s = WriteFileAtomic(&env, path, "new");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(testing::ReadFile(path), "old");
  EXPECT_EQ(Env::Default()->ListDir(d.path())->size(), 1u);
}

}  // namespace
}  // namespace strata
