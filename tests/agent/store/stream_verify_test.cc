// Copyright 2026 The Strata Authors.
//
// Verification on arrival: the checks planned for a step are the ones a
// full verification makes, and the verifier finds a flipped byte, a range
// never received, and a manifest that is not the copy's.
#include "agent/store/stream_verify.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "agent/store/step_seal.h"
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
    auto index = BuildStepIndex(Env::Default(), step_, &pool_);
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
  Status VerifyAll(int threads, std::pair<size_t, size_t> skip = {SIZE_MAX, 0},
                   StreamVerifier::Read read = StreamVerifier::Read::kAuto) {
    auto plan = PlanRangeChecks(index_, &manifest_);
    if (!plan.ok()) return plan.status();
    StreamVerifier v(step_, index_, *plan, threads, read);
    for (size_t f = 0; f < index_.files.size(); ++f) {
      const std::string& path = index_.files[f].path;
      for (size_t c = 0; c < v.ChecksFor(path).size(); ++c) {
        if (std::make_pair(f, c) != skip) v.Submit(path, c, c + 1);
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
  auto plan = PlanRangeChecks(index_, &manifest_);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->files.size(), index_.files.size());
  uint64_t bytes = 0, count = 0;
  for (size_t f = 0; f < plan->files.size(); ++f) {
    const auto& file = plan->files[f];
    if (index_.files[f].path == "strata.manifest") {
      EXPECT_TRUE(file.empty());
    }
    for (size_t c = 0; c < file.size(); ++c) {
      EXPECT_LE(file[c].end(), index_.files[f].size) << c;
      EXPECT_LE(file[c].length, 64u << 10) << c;
      EXPECT_EQ(plan->item_names.at(static_cast<size_t>(file[c].item)).size(), 1u);
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
  for (auto read : {StreamVerifier::Read::kMapped, StreamVerifier::Read::kPread}) {
    EXPECT_TRUE(VerifyAll(2, {SIZE_MAX, 0}, read).ok());
    EXPECT_TRUE(VerifyAll(0, {SIZE_MAX, 0}, read).ok());  // no threads: checks run in Submit
  }
}

TEST_F(StrataStepTest, FlippedByteIsNamedWithItsFileAndRange) {
  // The byte 70000 of the first item's file: which chunk of which item.
  const ItemInfo& first = manifest_.items.front();
  const std::string file = manifest_.files[first.file].name;
  const uint64_t at = 70000;
  std::string expected;
  for (const ItemInfo& item : manifest_.items) {
    if (item.file == first.file && item.offset <= at && at < item.offset + item.nbytes) {
      const uint64_t chunk = (at - item.offset) / manifest_.chunk_size;
      const uint64_t begin = item.offset + chunk * manifest_.chunk_size;
      const uint64_t end = std::min(begin + manifest_.chunk_size, item.offset + item.nbytes);
      expected = file + " bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
                 ") (item '" + item.name + "' chunk " + std::to_string(chunk) +
                 "): checksum mismatch";
    }
  }
  ASSERT_FALSE(expected.empty());
  testing::FlipByte(JoinPath(step_, file), at);
  for (auto read : {StreamVerifier::Read::kMapped, StreamVerifier::Read::kPread}) {
    for (int threads : {0, 2}) {
      Status s = VerifyAll(threads, {SIZE_MAX, 0}, read);
      EXPECT_EQ(s.code(), StatusCode::kDataLoss);
      EXPECT_EQ(s.message(), expected);
    }
  }
}

// A data file of another size than the manifest gives, or a file the
// manifest does not name, would leave bytes no check covers.
TEST_F(StrataStepTest, FilesTheManifestDoesNotDescribeAreRefused) {
  StepIndex longer = index_;
  for (auto& f : longer.files) {
    if (f.path != "strata.manifest") f.size += 4096;
  }
  auto s = PlanRangeChecks(longer, &manifest_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("the manifest with"), std::string::npos) << s.message();
  StepIndex extra = index_;
  extra.files.push_back({"zzz.bin", 100, {}});
  s = PlanRangeChecks(extra, &manifest_).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("zzz.bin is not a file of the checkpoint"), std::string::npos)
      << s.message();
  // On disk: the agent indexes such a directory by hashing it, and a
  // Strata index of it no longer verifies.
  testing::WriteFile(JoinPath(step_, "zzz.bin"), std::string(100, 'z'));
  auto rebuilt = BuildStepIndex(Env::Default(), step_, &pool_);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().message();
  EXPECT_FALSE(rebuilt->strata);
  extra.files.back().chunk_xxh3.clear();
  EXPECT_EQ(VerifyStepIndex(Env::Default(), step_, extra, &pool_).code(), StatusCode::kDataLoss);
}

TEST_F(StrataStepTest, ARangeNeverSubmittedFails) {
  size_t data_file = 0;
  while (index_.files[data_file].path == "strata.manifest") ++data_file;
  Status s = VerifyAll(2, {data_file, 2});
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(index_.files[data_file].path + " bytes ["), std::string::npos)
      << s.message();
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
  StepInfo past = manifest_;
  past.items.back().offset += 1u << 20;
  s = PlanRangeChecks(index_, &past).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);  // (the digest covers no offsets)
  EXPECT_NE(s.message().find("does not fit its data file"), std::string::npos) << s.message();
}

TEST(StreamVerifyTest, OtherStepsAreCheckedIn16MiBChunksOfTheIndex) {
  testing::ScratchDir dir("stream-verify-index");
  const std::string big(40 << 20, 'x');
  testing::WriteFile(dir.Sub("big"), big);
  testing::WriteFile(dir.Sub("empty"), "");
  ThreadPool pool(1);
  auto index = BuildStepIndex(Env::Default(), dir.path(), &pool);
  ASSERT_TRUE(index.ok()) << index.status().message();
  ASSERT_FALSE(index->strata);
  auto plan = PlanRangeChecks(*index, nullptr);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->files.size(), 2u);
  const auto& checks = plan->files[0];
  ASSERT_EQ(checks.size(), 3u);  // "big": 16 + 16 + 8 MiB
  EXPECT_EQ(checks[2].offset, 32u << 20);
  EXPECT_EQ(checks[2].length, 8u << 20);
  EXPECT_EQ(checks[1].xxh3, Xxh3(big.data() + (16 << 20), 16 << 20));
  EXPECT_TRUE(plan->files[1].empty());

  StreamVerifier v(dir.path(), *index, *plan, 1);
  v.Submit("big", 0, 2);
  v.Submit("big", 1, 3);      // overlapping: only check 2 is new
  v.Submit("big", 0, 1);      // again: harmless
  v.Submit("unknown", 0, 1);  // not in the index: ignored
  EXPECT_TRUE(v.Finish().ok());

  // Both ways of reading the bytes back find a flipped byte, and say so
  // once through the failure callback.
  testing::FlipByte(dir.Sub("big"), (40 << 20) - 1);
  for (auto read : {StreamVerifier::Read::kMapped, StreamVerifier::Read::kPread}) {
    for (int threads : {0, 2}) {
      StreamVerifier bad(dir.path(), *index, *plan, threads, read);
      int told = 0;
      bad.SetOnFailure([&] { ++told; });
      bad.Submit("big", 0, 1);
      bad.Submit("big", 1, 3);
      Status s = bad.Finish();
      EXPECT_EQ(s.code(), StatusCode::kDataLoss);
      EXPECT_NE(s.message().find("big bytes [33554432, 41943040) (chunk 2)"), std::string::npos)
          << s.message();
      EXPECT_EQ(told, 1);
    }
  }
}

}  // namespace
}  // namespace strata::agent
