// Copyright 2026 The Strata Authors.
//
// Verification on arrival: the checks planned for a step are the ones a
// full verification makes, and the verifier finds a flipped byte, a range
// never received, and a manifest that is not the copy's.
#include "agent/stream_verify.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "format/manifest.h"
#include "format/naming.h"
#include "strata/checkpointer.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/thread_pool.h"

namespace strata::agent {
namespace {

// A Strata checkpoint of three float32 items in 64 KiB chunks, some items
// several chunks long, one not a whole number of chunks.
class StrataStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_.resize(kFloats);
    std::mt19937 rng(7);
    for (auto& f : data_) f = static_cast<float>(rng());
    const std::byte* p = reinterpret_cast<const std::byte*>(data_.data());
    std::vector<Item> items = {
        {"a", DType::kFloat32, {50000}, p, 200000},
        {"b", DType::kFloat32, {16384}, p + 200000, 65536},
        {"c", DType::kFloat32, {kFloats - 66384}, p + 265536, (kFloats - 66384) * 4},
    };
    CheckpointerOptions o;
    o.async = false;
    o.chunk_size = 64 << 10;
    o.preemption_signals = {};
    auto ckpt = Checkpointer::Open(dir_.path(), o);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    ASSERT_TRUE((*ckpt)->Save(1, items).ok());
    step_ = JoinPath(dir_.path(), StepDirName(1));
    auto index = BuildStepIndex(step_, &pool_);
    ASSERT_TRUE(index.ok()) << index.status().message();
    index_ = *index;
    ASSERT_TRUE(index_.strata);
    auto bytes = ReadFileToString(Env::Default(), JoinPath(step_, "strata.manifest"), 1 << 20);
    ASSERT_TRUE(bytes.ok());
    auto manifest = DecodeManifest(*bytes, "manifest");
    ASSERT_TRUE(manifest.ok()) << manifest.status().message();
    manifest_ = *manifest;
  }

  // Submits every planned check (but `skip`, a file and check position).
  Status VerifyAll(int threads, std::pair<size_t, size_t> skip = {SIZE_MAX, 0}) {
    auto checks = PlanRangeChecks(index_, &manifest_);
    if (!checks.ok()) return checks.status();
    StreamVerifier v(step_, index_, *checks, threads);
    for (size_t f = 0; f < index_.files.size(); ++f) {
      const std::string& path = index_.files[f].path;
      for (size_t c = 0; c < v.ChecksFor(path).size(); ++c) {
        if (std::make_pair(f, c) != skip) v.Submit(path, c);
      }
    }
    return v.Finish();
  }

  static constexpr int64_t kFloats = 200000;
  std::vector<float> data_;
  testing::ScratchDir dir_{"stream-verify"};
  ThreadPool pool_{1};
  std::string step_;
  StepIndex index_;
  StepInfo manifest_;
};

TEST_F(StrataStepTest, ChecksAreTheManifestsChunksInFilePositions) {
  auto checks = PlanRangeChecks(index_, &manifest_);
  ASSERT_TRUE(checks.ok()) << checks.status().message();
  ASSERT_EQ(checks->size(), index_.files.size());
  uint64_t bytes = 0, count = 0;
  for (size_t f = 0; f < checks->size(); ++f) {
    const auto& file = (*checks)[f];
    if (index_.files[f].path == "strata.manifest") {
      EXPECT_TRUE(file.empty());
    }
    for (size_t c = 0; c < file.size(); ++c) {
      EXPECT_LE(file[c].end(), index_.files[f].size) << file[c].what;
      EXPECT_LE(file[c].length, 64u << 10) << file[c].what;
      if (c > 0) {
        EXPECT_LE(file[c - 1].end(), file[c].end());
      }
      bytes += file[c].length;
      ++count;
    }
  }
  uint64_t chunks = 0;
  for (const ItemInfo& item : manifest_.items) chunks += item.chunk_xxh3.size();
  EXPECT_EQ(bytes, static_cast<uint64_t>(kFloats) * 4);
  EXPECT_EQ(count, chunks);
  EXPECT_GT(count, 3u);  // several chunks per item
}

TEST_F(StrataStepTest, VerifierPassesAnIntactStep) {
  EXPECT_TRUE(VerifyAll(2).ok());
  EXPECT_TRUE(VerifyAll(0).ok());  // no threads: checks run as they are submitted
}

TEST_F(StrataStepTest, FlippedByteIsNamedWithItsFileAndRange) {
  const IndexedFile* data = nullptr;
  for (const auto& f : index_.files) {
    if (f.path != "strata.manifest") data = &f;
  }
  ASSERT_NE(data, nullptr);
  testing::FlipByte(JoinPath(step_, data->path), 70000);
  Status s = VerifyAll(2);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(data->path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("chunk 1"), std::string::npos) << s.message();
}

TEST_F(StrataStepTest, ARangeNeverSubmittedFails) {
  size_t data_file = 0;
  while (index_.files[data_file].path == "strata.manifest") ++data_file;
  Status s = VerifyAll(2, {data_file, 2});
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("never received"), std::string::npos) << s.message();
}

TEST_F(StrataStepTest, AManifestThatIsNotTheCopysIsRefused) {
  StepIndex other = index_;
  other.digest ^= 1;
  EXPECT_EQ(PlanRangeChecks(other, &manifest_).status().code(), StatusCode::kDataLoss);
  StepIndex missing = index_;
  std::erase_if(missing.files, [](const IndexedFile& f) { return f.path != "strata.manifest"; });
  auto s = PlanRangeChecks(missing, &manifest_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("is not in the copy's index"), std::string::npos) << s.message();
  StepIndex shorter = index_;
  for (auto& f : shorter.files) {
    if (f.path != "strata.manifest") f.size -= 1;
  }
  s = PlanRangeChecks(shorter, &manifest_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("does not fit its data file"), std::string::npos) << s.message();
}

TEST(StreamVerifyTest, OtherStepsAreCheckedIn16MiBChunksOfTheIndex) {
  testing::ScratchDir dir("stream-verify-index");
  const std::string big(40 << 20, 'x');
  testing::WriteFile(dir.Sub("big"), big);
  testing::WriteFile(dir.Sub("empty"), "");
  ThreadPool pool(1);
  auto index = BuildStepIndex(dir.path(), &pool);
  ASSERT_TRUE(index.ok()) << index.status().message();
  ASSERT_FALSE(index->strata);
  auto checks = PlanRangeChecks(*index, nullptr);
  ASSERT_TRUE(checks.ok());
  ASSERT_EQ(checks->size(), 2u);
  ASSERT_EQ((*checks)[0].size(), 3u);  // "big": 16 + 16 + 8 MiB
  EXPECT_EQ((*checks)[0][2].offset, 32u << 20);
  EXPECT_EQ((*checks)[0][2].length, 8u << 20);
  EXPECT_EQ((*checks)[0][1].xxh3, Xxh3(big.data() + (16 << 20), 16 << 20));
  EXPECT_TRUE((*checks)[1].empty());

  StreamVerifier v(dir.path(), *index, *checks, 1);
  for (size_t c = 0; c < 3; ++c) v.Submit("big", c);
  v.Submit("big", 0);      // twice: harmless
  v.Submit("unknown", 0);  // not in the index: ignored
  EXPECT_TRUE(v.Finish().ok());
}

}  // namespace
}  // namespace strata::agent
