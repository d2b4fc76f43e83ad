// Copyright 2026 The Strata Authors.
//
// The coded peer tier's parts: redundancy parsing, the group layout (every
// member's chunks and parity rows, any m losses survivable), groups spread
// over failure domains, and the ISA-L codec. A whole group is simulated in
// memory: each member's step is split into chunks, each parity holder
// builds its rows by accumulating the contributors' chunks in any order,
// members are lost, and each lost member's step is rebuilt from the
// survivors' chunks and parity and compared byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "ec/codec.h"
#include "ec/layout.h"
#include "ec/redundancy.h"
#include "test_util.h"

namespace strata::ec {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes Random(size_t n, uint32_t seed) { return strata::testing::RandomData(n, seed); }

TEST(RedundancyTest, ParsesTheThreeKinds) {
  EXPECT_EQ(Redundancy::Parse("copies")->kind, Redundancy::Kind::kCopies);
  auto x = Redundancy::Parse("xor");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->ToString(), "xor(8)");
  EXPECT_EQ(x->k, 7);
  EXPECT_EQ(x->m, 1);
  auto rs = Redundancy::Parse("rs(6,2)");
  ASSERT_TRUE(rs.ok());
  EXPECT_EQ(rs->ToString(), "rs(6,2)");
  EXPECT_EQ(rs->group_size(), 8);
  EXPECT_EQ(rs->Tolerates(0), 2);
  EXPECT_NEAR(rs->RamFactor(0), 4.0 / 3, 1e-12);
  EXPECT_NEAR(x->RamFactor(0), 8.0 / 7, 1e-12);
  EXPECT_EQ(Redundancy{}.RamFactor(1), 2.0);
  EXPECT_EQ(Redundancy::Parse("rs( 10 , 4 )")->ToString(), "rs(10,4)");
  for (const char* bad : {"", "rs", "rs(6)", "rs(6,0)", "rs(0,2)", "rs(200,100)", "xor(1)",
                          "xor(8,1)", "rs(6,2", "rs(6,x)", "raid6", "rs(6,2)x"}) {
    auto r = Redundancy::Parse(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("redundancy \"") + bad + "\""),
              std::string::npos)
        << r.status().ToString();
  }
}

// Every stripe has its n shards on the n members (one each), so any m lost
// members leave every stripe k; every member contributes k chunks (each
// once) and holds m parity rows.
TEST(GroupLayoutTest, ShardsArePlacedSoAnyMLossesLeaveKPerStripe) {
  for (auto [k, m] : std::vector<std::pair<int, int>>{{6, 2}, {7, 1}, {3, 3}, {1, 1}, {10, 4}}) {
    SCOPED_TRACE(std::to_string(k) + "+" + std::to_string(m));
    GroupLayout g(k, m);
    const int n = g.members();
    for (int s = 0; s < n; ++s) {
      std::set<int> members;
      for (int x : g.ParityHolders(s)) members.insert(x);
      for (int x : g.Contributors(s)) members.insert(x);
      EXPECT_EQ(static_cast<int>(members.size()), n) << "stripe " << s;
      EXPECT_EQ(static_cast<int>(g.Contributors(s).size()), k);
    }
    for (int x = 0; x < n; ++x) {
      std::vector<int> stripes = g.DataStripes(x);
      ASSERT_EQ(static_cast<int>(stripes.size()), k);
      for (int c = 0; c < k; ++c) EXPECT_EQ(g.ChunkOf(x, stripes[c]), c);
      for (auto [s, row] : g.ParityOf(x)) {
        EXPECT_EQ(g.ChunkOf(x, s), -1);
        EXPECT_EQ(g.ParityHolders(s)[row], x);
      }
    }
  }
  EXPECT_EQ(ChunkBytes(600, 6), 128u);  // 100, rounded up to 64
  EXPECT_EQ(ChunkBytes(6 * 64, 6), 64u);
  EXPECT_EQ(ChunkBytes(0, 6), 0u);
}

TEST(GroupLayoutTest, GroupsSpreadOverFailureDomains) {
  // 16 nodes on 4 racks of 4, in rack order: groups of 8 take 2 per rack.
  std::vector<std::string> racks;
  for (int n = 0; n < 16; ++n) racks.push_back("rack" + std::to_string(n / 4));
  auto g = FormGroups(racks, 8);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->members.size(), 2u);
  EXPECT_EQ(g->max_in_one_domain, 2);  // rs(6,2) survives a lost rack
  std::set<int> all;
  for (const auto& group : g->members) all.insert(group.begin(), group.end());
  EXPECT_EQ(all.size(), 16u);
  // 10 nodes, no domains: one group of 10 (the remainder joins it).
  auto ten = FormGroups(std::vector<std::string>(10), 8);
  ASSERT_TRUE(ten.ok());
  ASSERT_EQ(ten->members.size(), 1u);
  EXPECT_EQ(ten->members[0].size(), 10u);
  EXPECT_EQ(ten->max_in_one_domain, 1);
  // 17 nodes in groups of 8: 9 and 8.
  auto odd = FormGroups(std::vector<std::string>(17), 8);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->members[0].size(), 9u);
  EXPECT_EQ(odd->members[1].size(), 8u);
  EXPECT_EQ(FormGroups(std::vector<std::string>(5), 8).status().code(),
            StatusCode::kInvalidArgument);
  // Unequal domains: 6 nodes on rack a, 2 on rack b, groups of 4: each
  // group gets 3 of a and 1 of b (not 4 of a in one).
  auto uneven = FormGroups({"a", "a", "a", "a", "a", "a", "b", "b"}, 4);
  ASSERT_TRUE(uneven.ok());
  EXPECT_EQ(uneven->max_in_one_domain, 3);
  // A domain named like a node without one is still its own domain.
  auto named = FormGroups({"", "", "0", "0"}, 2);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->max_in_one_domain, 1);
  EXPECT_EQ(FormGroups(std::vector<std::string>(399), 200).status().code(),
            StatusCode::kInvalidArgument);  // one group of 399: beyond GF(2^8)
}

TEST(CodecTest, AnyKShardsRebuildTheOthers) {
  for (const char* text : {"rs(6,2)", "rs(4,3)", "xor(8)", "rs(1,1)"}) {
    SCOPED_TRACE(text);
    auto codec = Codec::Create(*Redundancy::Parse(text));
    ASSERT_TRUE(codec.ok()) << codec.status().ToString();
    const int k = codec->k(), m = codec->m(), n = k + m;
    const size_t len = 3 * (1 << 20) + 17;  // several slabs, and a tail
    std::vector<Bytes> shard(n);
    for (int i = 0; i < k; ++i) shard[i] = Random(len, 7 + i);
    for (int j = 0; j < m; ++j) shard[k + j].assign(len, 0);
    std::vector<const uint8_t*> data;
    std::vector<uint8_t*> parity;
    for (int i = 0; i < k; ++i) data.push_back(shard[i].data());
    for (int j = 0; j < m; ++j) parity.push_back(shard[k + j].data());
    codec->Encode(data, parity, len);
    // Accumulating the shards in reverse order makes the same rows.
    for (int j = 0; j < m; ++j) {
      Bytes row(len, 0);
      for (int i = k - 1; i >= 0; --i) codec->Accumulate(j, i, shard[i].data(), row.data(), len);
      EXPECT_EQ(row, shard[k + j]) << "row " << j;
    }
    // Every choice of m lost shards.
    std::vector<bool> lost(n, false);
    std::fill(lost.begin(), lost.begin() + m, true);
    do {
      std::vector<int> have, gone;
      std::vector<const uint8_t*> in;
      for (int i = 0; i < n; ++i) {
        if (lost[i]) {
          gone.push_back(i);
        } else if (static_cast<int>(have.size()) < k) {
          have.push_back(i);
          in.push_back(shard[i].data());
        }
      }
      std::vector<Bytes> rebuilt(gone.size(), Bytes(len));
      std::vector<uint8_t*> out;
      for (auto& b : rebuilt) out.push_back(b.data());
      ASSERT_TRUE(codec->Reconstruct(have, in, gone, out, len).ok());
      for (size_t r = 0; r < gone.size(); ++r) {
        EXPECT_TRUE(rebuilt[r] == shard[gone[r]]) << "shard " << gone[r];
      }
    } while (std::prev_permutation(lost.begin(), lost.end()));
  }
}

// Aligned buffers and lengths that are a multiple of 32 take ISA-L's XOR
// kernel; xor(2) (one data shard) takes a copy; both agree with the GF path.
TEST(CodecTest, XorKernelAndXorOfTwoAgreeWithTheGfPath) {
  for (const char* text : {"xor(2)", "xor(3)", "xor(8)"}) {
    SCOPED_TRACE(text);
    auto codec = Codec::Create(*Redundancy::Parse(text));
    ASSERT_TRUE(codec.ok());
    const int k = codec->k();
    const size_t len = 2 * (1 << 20) + 64;
    std::vector<uint8_t*> data;
    for (int i = 0; i < k; ++i) {
      data.push_back(static_cast<uint8_t*>(std::aligned_alloc(64, len)));
      Bytes r = Random(len, 3 + i);
      std::copy(r.begin(), r.end(), data.back());
    }
    auto* parity = static_cast<uint8_t*>(std::aligned_alloc(64, len));
    std::vector<const uint8_t*> in(data.begin(), data.end());
    std::vector<uint8_t*> out = {parity};
    codec->Encode(in, out, len);  // the kernel
    Bytes expect(len, 0);
    for (int i = 0; i < k; ++i) codec->Accumulate(0, i, data[i], expect.data(), len);  // GF
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), parity));
    // Shard 0 lost: rebuilt from the others and the parity.
    std::vector<int> have;
    std::vector<const uint8_t*> shards;
    for (int i = 1; i <= k; ++i) {
      have.push_back(i);
      shards.push_back(i < k ? data[i] : parity);
    }
    Bytes rebuilt(len);
    std::vector<int> lost = {0};
    std::vector<uint8_t*> to = {rebuilt.data()};
    ASSERT_TRUE(codec->Reconstruct(have, shards, lost, to, len).ok());
    EXPECT_TRUE(std::equal(rebuilt.begin(), rebuilt.end(), data[0]));
    // A shard at hand asked for is that shard, not the missing one.
    std::vector<int> at_hand = {have[0]};
    ASSERT_TRUE(codec->Reconstruct(have, shards, at_hand, to, len).ok());
    EXPECT_TRUE(std::equal(rebuilt.begin(), rebuilt.end(), shards[0]));
    for (uint8_t* p : data) std::free(p);
    std::free(parity);
  }
}

TEST(CodecTest, RefusesWhatItCannotDo) {
  EXPECT_EQ(Codec::Create(Redundancy{}).status().code(), StatusCode::kInvalidArgument);
  auto codec = Codec::Create(*Redundancy::Parse("rs(3,2)"));
  ASSERT_TRUE(codec.ok());
  Bytes a(64), b(64), c(64);
  std::vector<const uint8_t*> in = {a.data(), b.data()};
  std::vector<uint8_t*> out = {c.data()};
  std::vector<int> two = {0, 1}, lost = {4};
  EXPECT_EQ(codec->Reconstruct(two, in, lost, out, 64).code(), StatusCode::kInvalidArgument);
  std::vector<const uint8_t*> in3 = {a.data(), b.data(), b.data()};
  std::vector<int> dup = {0, 1, 1};
  EXPECT_EQ(codec->Reconstruct(dup, in3, lost, out, 64).code(), StatusCode::kInvalidArgument);
}

// One group, as the agents would run it: member x's step (its own size) is
// padded to the largest and split into k chunks; the holder of each parity
// row accumulates the stripe's contributors' chunks as they arrive (in a
// random order); members are lost; each lost member's step is rebuilt
// stripe by stripe from k surviving shards.
class GroupSimulation {
 public:
  GroupSimulation(const Redundancy& r, const std::vector<size_t>& sizes, uint32_t seed)
      : codec_(*Codec::Create(r)), layout_(r.k, r.m) {
    const int n = layout_.members();
    size_t largest = *std::max_element(sizes.begin(), sizes.end());
    chunk_ = ChunkBytes(largest, r.k);
    for (int x = 0; x < n; ++x) {
      steps_.push_back(Random(sizes[x], seed + x));
      Bytes padded = steps_[x];
      padded.resize(chunk_ * r.k, 0);
      padded_.push_back(std::move(padded));
    }
    std::mt19937 rng(seed);
    for (int s = 0; s < n; ++s) {
      std::vector<int> order = layout_.Contributors(s);
      std::shuffle(order.begin(), order.end(), rng);
      for (int j = 0; j < r.m; ++j) {
        Bytes& row = parity_[{s, j}];
        row.assign(chunk_, 0);
        for (int x : order) {
          const auto contributors = layout_.Contributors(s);
          const int index = static_cast<int>(
              std::find(contributors.begin(), contributors.end(), x) - contributors.begin());
          codec_.Accumulate(j, index, Chunk(x, s), row.data(), chunk_);
        }
      }
    }
  }

  // What member x holds for the peer tier: its parity rows.
  uint64_t ParityBytes(int x) const { return layout_.ParityOf(x).size() * chunk_; }

  // Member x's step rebuilt with `lost` members gone; FAILED_PRECONDITION
  // naming the stripe when fewer than k of its shards are left.
  StatusOr<Bytes> Rebuild(int x, const std::set<int>& lost) const {
    Bytes out(chunk_ * layout_.k());
    for (int s : layout_.DataStripes(x)) {
      std::vector<int> have;
      std::vector<const uint8_t*> in;
      const auto contributors = layout_.Contributors(s);
      for (size_t i = 0; i < contributors.size(); ++i) {
        if (!lost.count(contributors[i]) && static_cast<int>(have.size()) < layout_.k()) {
          have.push_back(static_cast<int>(i));
          in.push_back(Chunk(contributors[i], s));
        }
      }
      const auto holders = layout_.ParityHolders(s);
      for (int j = 0; j < layout_.m(); ++j) {
        if (!lost.count(holders[j]) && static_cast<int>(have.size()) < layout_.k()) {
          have.push_back(layout_.k() + j);
          in.push_back(parity_.at({s, j}).data());
        }
      }
      if (static_cast<int>(have.size()) < layout_.k()) {
        return FailedPreconditionError("stripe " + std::to_string(s) + ": " +
                                       std::to_string(have.size()) + " of " +
                                       std::to_string(layout_.k()) + " shards left");
      }
      const int index = static_cast<int>(std::find(contributors.begin(), contributors.end(), x) -
                                         contributors.begin());
      std::vector<int> want = {index};
      std::vector<uint8_t*> dst = {out.data() + layout_.ChunkOf(x, s) * chunk_};
      STRATA_RETURN_IF_ERROR(codec_.Reconstruct(have, in, want, dst, chunk_));
    }
    out.resize(steps_[x].size());
    return out;
  }

  const Bytes& step(int x) const { return steps_[x]; }

 private:
  const uint8_t* Chunk(int x, int stripe) const {
    return padded_[x].data() + layout_.ChunkOf(x, stripe) * chunk_;
  }

  Codec codec_;
  GroupLayout layout_;
  size_t chunk_ = 0;
  std::vector<Bytes> steps_, padded_;
  std::map<std::pair<int, int>, Bytes> parity_;
};

TEST(CodedGroupTest, EightNodesInRs62SurviveAnyTwoLostBitExactly) {
  std::vector<size_t> sizes;
  for (int x = 0; x < 8; ++x) sizes.push_back((1 << 20) + 4099 * x);  // uneven steps
  GroupSimulation g(*Redundancy::Parse("rs(6,2)"), sizes, 42);
  for (int a = 0; a < 8; ++a) {
    for (int b = a + 1; b < 8; ++b) {
      for (int x : {a, b}) {
        auto rebuilt = g.Rebuild(x, {a, b});
        ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().ToString();
        EXPECT_TRUE(*rebuilt == g.step(x))
            << "member " << x << " with " << a << "," << b << " lost";
      }
    }
  }
  // RAM per member for the peer tier: 2 of 6 chunks of the largest step.
  EXPECT_NEAR(static_cast<double>(g.ParityBytes(0)) / sizes.back(), 2.0 / 6, 0.001);
}

TEST(CodedGroupTest, ThreeLostOfAnRs62GroupCannotBeRebuiltAndSaysWhichStripe) {
  GroupSimulation g(*Redundancy::Parse("rs(6,2)"), std::vector<size_t>(8, 100000), 5);
  auto rebuilt = g.Rebuild(0, {0, 1, 2});
  EXPECT_EQ(rebuilt.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(rebuilt.status().message().find("5 of 6 shards left"), std::string::npos)
      << rebuilt.status().ToString();
}

TEST(CodedGroupTest, XorSetOfEightSurvivesAnyOneLost) {
  GroupSimulation g(*Redundancy::Parse("xor(8)"), std::vector<size_t>(8, 300001), 9);
  for (int x = 0; x < 8; ++x) {
    auto rebuilt = g.Rebuild(x, {x});
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().ToString();
    EXPECT_TRUE(*rebuilt == g.step(x)) << "member " << x;
  }
  EXPECT_FALSE(g.Rebuild(0, {0, 3}).ok());
}

}  // namespace
}  // namespace strata::ec
