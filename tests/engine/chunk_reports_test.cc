// Copyright 2026 The Strata Authors.
//
// RestoreOptions::chunk_verified, which a restore that copies each chunk
// as it verifies relies on (engine/planned_restore.h): every byte of every
// item reported once, in ranges that are in memory and verified when
// reported, each before item_verified reports its item -- by the path that
// reads a step into memory and by the one that verifies it where it is
// mapped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/step_io.h"
#include "format/naming.h"
#include "strata/checkpointer.h"
#include "strata/env.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

using testing::RandomData;

// What the reading threads reported, checked against the step read.
class Reports {
 public:
  RestoreOptions Options() {
    RestoreOptions o;
    o.chunk_verified = [this](const RestoredStep& r, size_t item, uint64_t offset, uint64_t size) {
      std::lock_guard<std::mutex> l(mu_);
      const std::span<std::byte> data = r.items[item].data;
      if (offset + size > data.size() || size == 0) {
        problems_.push_back(r.items[item].name + ": a range past its end, or empty");
        return;
      }
      // The bytes as they are when reported: they must not change later.
      std::vector<std::byte>& seen = seen_[item];
      seen.resize(data.size());
      std::memcpy(seen.data() + offset, data.data() + offset, size);
      ranges_[item].emplace_back(offset, size);
    };
    o.item_verified = [this](const RestoredStep& r, size_t item) {
      std::lock_guard<std::mutex> l(mu_);
      uint64_t reported = 0;
      for (const auto& [offset, size] : ranges_[item]) reported += size;
      if (reported != r.items[item].data.size()) {
        problems_.push_back(r.items[item].name + ": reported before its chunks");
      }
    };
    return o;
  }

  // Every item's ranges tile it exactly, and hold its bytes.
  void Check(const RestoredStep& step, const std::vector<std::vector<uint8_t>>& want) {
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& p : problems_) ADD_FAILURE() << p;
    ASSERT_EQ(step.items.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      std::vector<std::pair<uint64_t, uint64_t>> ranges = ranges_[i];
      std::sort(ranges.begin(), ranges.end());
      uint64_t next = 0;
      for (const auto& [offset, size] : ranges) {
        EXPECT_EQ(offset, next) << step.items[i].name << ": a gap or an overlap";
        next = offset + size;
      }
      EXPECT_EQ(next, want[i].size()) << step.items[i].name;
      if (want[i].empty()) continue;
      const std::vector<std::byte>& seen = seen_[i];
      ASSERT_EQ(seen.size(), want[i].size()) << step.items[i].name;
      EXPECT_EQ(std::memcmp(seen.data(), want[i].data(), want[i].size()), 0) << step.items[i].name;
    }
  }

 private:
  std::mutex mu_;
  std::map<size_t, std::vector<std::pair<uint64_t, uint64_t>>> ranges_;
  std::map<size_t, std::vector<std::byte>> seen_;
  std::vector<std::string> problems_;
};

class ChunkReportsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Items of one chunk, of several (one partial), and none.
    for (size_t size : {100000, 4096, 0, 3 * 4096 + 17, 1}) {
      bytes_.push_back(RandomData(size, static_cast<uint32_t>(size)));
    }
    std::vector<Item> items;
    for (size_t i = 0; i < bytes_.size(); ++i) {
      items.push_back(Item{"item" + std::to_string(i),
                           DType::kUInt8,
                           {static_cast<int64_t>(bytes_[i].size())},
                           bytes_[i].data(),
                           bytes_[i].size()});
    }
    WriteStepRequest req;
    req.dir = dir_.path();
    req.step = 7;
    req.items = items;
    req.chunk_size = 4096;
    req.max_files = 2;
    auto info = WriteStep(Env::Default(), &pool_, req);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    info_ = *info;
  }

  testing::ScratchDir dir_{"chunks"};
  ThreadPool pool_{3};
  std::vector<std::vector<uint8_t>> bytes_;
  StepInfo info_;
};

TEST_F(ChunkReportsTest, AReadIntoMemoryReportsEveryChunkOnceBeforeItsItem) {
  Reports reports;
  RestoredStep out;
  ASSERT_TRUE(
      ReadOwned(Env::Default(), &pool_, dir_.path(), info_, nullptr, &out, reports.Options()).ok());
  reports.Check(out, bytes_);
}

TEST_F(ChunkReportsTest, AMappedStepReportsEveryChunkOnceBeforeItsItem) {
  Reports reports;
  auto out = VerifyMapped(Env::Default(), &pool_, JoinPath(dir_.path(), StepDirName(7)), info_,
                          nullptr, reports.Options());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  reports.Check(*out, bytes_);
}

// RestoreOptions::first_item is verified and reported before the other
// items, although it is the biggest (the smallest go first otherwise), by
// either path; every chunk is still reported once.
TEST_F(ChunkReportsTest, TheFirstItemNamedIsReportedFirst) {
  for (bool mapped : {false, true}) {
    SCOPED_TRACE(mapped ? "mapped" : "read into memory");
    Reports reports;
    RestoreOptions o = reports.Options();
    o.first_item = "item0";
    std::mutex mu;
    std::vector<size_t> order;
    auto check = o.chunk_verified;
    o.chunk_verified = [&](const RestoredStep& r, size_t item, uint64_t offset, uint64_t size) {
      {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(item);
      }
      check(r, item, offset, size);
    };
    RestoredStep out;
    if (mapped) {
      auto step = VerifyMapped(Env::Default(), &pool_, JoinPath(dir_.path(), StepDirName(7)), info_,
                               nullptr, o);
      ASSERT_TRUE(step.ok()) << step.status().ToString();
      out = std::move(*step);
    } else {
      ASSERT_TRUE(ReadOwned(Env::Default(), &pool_, dir_.path(), info_, nullptr, &out, o).ok());
    }
    reports.Check(out, bytes_);
    ASSERT_FALSE(order.empty());
    EXPECT_EQ(order.front(), 0u) << "item" << order.front() << " was reported first";
  }
}

TEST_F(ChunkReportsTest, ACorruptChunkIsNeverReported) {
  // The last byte of item0's first chunk.
  const ItemInfo& first = info_.items[0];
  testing::FlipByte(JoinPath(JoinPath(dir_.path(), StepDirName(7)), info_.files[first.file].name),
                    first.offset + 4095);
  std::mutex mu;
  std::vector<std::pair<size_t, uint64_t>> reported;
  RestoreOptions o;
  o.chunk_verified = [&](const RestoredStep&, size_t item, uint64_t offset, uint64_t) {
    std::lock_guard<std::mutex> l(mu);
    reported.emplace_back(item, offset);
  };
  RestoredStep out;
  Status s = ReadOwned(Env::Default(), &pool_, dir_.path(), info_, nullptr, &out, o);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  for (const auto& [item, offset] : reported) EXPECT_FALSE(item == 0 && offset == 0);
}

}  // namespace
}  // namespace strata
