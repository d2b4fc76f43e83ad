// Copyright 2026 The Strata Authors.
#include "wire/coded.h"

#include "util/hash.h"
#include "wire/codec.h"
#include "wire/coordination.h"
#include "wire/op.h"
#include "wire/vocabulary.h"

namespace strata::wire {
namespace {

// The stripe, row and chunk of a shard, within `g`'s layout.
Status CheckShard(const ec::Group& g, int stripe, int row, int chunk, const std::string& what) {
  const ec::GroupLayout layout = g.layout();
  if (stripe < 0 || stripe >= layout.stripes() || row < 0 || row >= g.m || chunk < 0 ||
      chunk >= g.k()) {
    return InvalidArgumentError(what + ": no stripe " + std::to_string(stripe) + ", row " +
                                std::to_string(row) + " or chunk " + std::to_string(chunk) +
                                " in group " + g.ToString());
  }
  return Status::Ok();
}

std::optional<std::vector<int>> ReadMembers(const json& v, FieldError* e) {
  e->want = "a list of at most " + std::to_string(ec::kMaxGroupSize) + " node ranks";
  return ReadInts(v, 0, kMaxNodes - 1, ec::kMaxGroupSize, e);
}

std::optional<ec::Redundancy::Kind> ReadCode(const json& v, FieldError* e) {
  if (v == "rs") return ec::Redundancy::Kind::kRs;
  if (v == "xor") return ec::Redundancy::Kind::kXor;
  e->want = "\"rs\" or \"xor\"";
  return std::nullopt;
}

json WriteCode(const ec::Redundancy::Kind& kind) {
  return kind == ec::Redundancy::Kind::kXor ? "xor" : "rs";
}

// [[member rank, "digest"], ...]
std::optional<std::map<int, uint64_t>> ReadDigests(const json& v, FieldError* e) {
  e->want = "a list of [member rank, \"digest\"]";
  if (!v.is_array() || v.size() > ec::kMaxGroupSize) return std::nullopt;
  std::map<int, uint64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& d = v[i];
    e->want = EntryWant("a list of [member rank, \"digest\"]", i);
    if (!d.is_array() || d.size() != 2) return std::nullopt;
    FieldError ignored;
    StatusOr<int64_t> rank = ReadInt(d[0], 0, kMaxNodes - 1, &ignored);
    std::optional<uint64_t> digest = ReadHex64(d[1], &ignored);
    if (!rank.ok() || !digest) return std::nullopt;
    out[static_cast<int>(*rank)] = *digest;
  }
  return out;
}

json WriteDigests(const std::map<int, uint64_t>& digests) {
  json out = json::array();
  for (const auto& [rank, digest] : digests) out.push_back({rank, Hex64(digest)});
  return out;
}

const Codec<HeldParity>& HeldParityCodec() {
  using H = HeldParity;
  return Codec<H>::Once("a parity shard", [](Codec<H>& codec) {
    codec.Int("step", &H::step, 0, kInt64Max)
        .Object("group", &H::group, Presence::kRequired, GroupCodec())
        .Int("stripe", &H::stripe, 0, ec::kMaxGroupSize - 1)
        .Int("row", &H::row, 0, ec::kMaxGroupSize - 1)
        .Value<std::map<int, uint64_t>>("digests", &H::digests, Presence::kRequired, &ReadDigests,
                                        &WriteDigests)
        .Check([](const Codec<H>& c, const H& h) {
          return CheckShard(h.group, h.stripe, h.row, 0, c.name());
        })
        .Check([](const Codec<H>& c, const H& h) {
          for (const auto& [rank, digest] : h.digests) {
            if (h.group.Position(rank) < 0) {
              return c.Error("digests", "digests of the group's members");
            }
          }
          return Status::Ok();
        });
  });
}

const Codec<Contribution>& ContributionCodec() {
  using C = Contribution;
  return Codec<C>::Once("a contribution", [](Codec<C>& codec) {
    codec.Int("rank", &C::rank, 0, kMaxNodes - 1)
        .Int("chunk", &C::chunk, 0, ec::kMaxGroupSize)
        .Int("length", &C::length, 0, kInt64Max)
        .Digest("xxh3", &C::xxh3)
        .Digest("digest", &C::step_digest);
  });
}

// The stripe, row and chunk fields of a shard call, within its group.
template <typename R>
Status CheckShardOf(const Codec<R>& c, const R& r) {
  return CheckShard(r.group, r.stripe, r.row, r.chunk, c.name());
}

const Codec<PutShardRequest>& PutShardCodec() {
  using R = PutShardRequest;
  return Codec<R>::Once(Op::kPutShard, [](Codec<R>& codec) {
    codec.Value<StepKey>("key", &R::key, Presence::kRequired, &ReadStepKey, &WriteStepKey)
        .Digest("digest", &R::digest)
        .Nested<StepIndex>("index", &R::index, Presence::kRequired, &ReadStepIndex, &WriteStepIndex)
        .Object("group", &R::group, Presence::kRequired, GroupCodec())
        .Int("stripe", &R::stripe, 0, ec::kMaxGroupSize)
        .Int("row", &R::row, 0, ec::kMaxGroupSize)
        .Int("chunk", &R::chunk, 0, ec::kMaxGroupSize)
        .Int("length", &R::length, 0, kInt64Max)
        .Digest("xxh3", &R::xxh3)
        .Check(&CheckShardOf<R>);
  });
}

const Codec<PutShardReady>& PutShardReadyCodec() {
  using R = PutShardReady;
  return Codec<R>::Once("put_shard's answer",
                        [](Codec<R>& codec) { codec.Constant("ok", true).Bool("have", &R::have); });
}

// A parity row is asked for by stripe and row, a member's chunk by the
// member's step digest and the chunk.
const Codec<GetShardRequest>& GetShardCodec() {
  using R = GetShardRequest;
  return Codec<R>::Once(Op::kGetShard, [](Codec<R>& codec) {
    auto parity = [](const R& r) { return r.parity; };
    auto chunk = [](const R& r) { return !r.parity; };
    codec.Value<StepKey>("key", &R::key, Presence::kRequired, &ReadStepKey, &WriteStepKey)
        .Object("group", &R::group, Presence::kRequired, GroupCodec())
        .Bool("parity", &R::parity, Presence::kDefaulted)
        .Int("stripe", &R::stripe, 0, ec::kMaxGroupSize, Presence::kDefaulted)
        .RequiredIf(parity)
        .WriteIf(parity)
        .Int("row", &R::row, 0, ec::kMaxGroupSize, Presence::kDefaulted)
        .RequiredIf(parity)
        .WriteIf(parity)
        .Digest("digest", &R::digest, Presence::kDefaulted)
        .RequiredIf(chunk)
        .WriteIf(chunk)
        .Int("chunk", &R::chunk, 0, ec::kMaxGroupSize, Presence::kDefaulted)
        .RequiredIf(chunk)
        .WriteIf(chunk)
        .Check(&CheckShardOf<R>)
        .Int("index_of", &R::index_of, 0, kMaxNodes - 1)
        .Bool("header_only", &R::header_only, Presence::kOmitted);
  });
}

const Codec<ShardReply>& ShardReplyCodec() {
  using R = ShardReply;
  return Codec<R>::Once("get_shard's answer", [](Codec<R>& codec) {
    codec.Constant("ok", true)
        .Int("length", &R::length, 0, kInt64Max)
        .Digest("xxh3", &R::xxh3)
        .List("contributions", &R::contributions, Presence::kDefaulted, ContributionCodec())
        .Nested<StepIndex>("index", &R::index, &ReadStepIndex, &WriteStepIndex);
  });
}

}  // namespace

const Codec<ec::Group>& GroupCodec() {
  using G = ec::Group;
  return Codec<G>::Once("a group", [](Codec<G>& codec) {
    codec
        .Value<std::vector<int>>("members", &G::members, Presence::kRequired, &ReadMembers,
                                 [](const std::vector<int>& m) { return json(m); })
        .Value<ec::Redundancy::Kind>("code", &G::kind, Presence::kRequired, &ReadCode, &WriteCode)
        .Int("m", &G::m, 1, ec::kMaxGroupSize)
        .Check([](const Codec<G>& c, const G& g) {
          Status s = g.Validate();
          return s.ok() ? s : c.Invalid(": " + s.message());
        });
  });
}

json GroupToJson(const ec::Group& g) { return GroupCodec().Write(g); }

StatusOr<ec::Group> GroupFromJson(const json& j, const std::string& what) {
  StatusOr<ec::Group> g = GroupCodec().Parse(j);
  if (!g.ok()) {
    return InvalidArgumentError(
        what + ": a group is {\"members\": [ranks], \"code\": \"rs\" | \"xor\", \"m\": M} (" +
        g.status().message() + ")");
  }
  return g;
}

json HeldParityToJson(const std::vector<HeldParity>& held) {
  json out = json::array();
  for (const HeldParity& p : held) out.push_back(HeldParityCodec().Write(p));
  return out;
}

StatusOr<std::vector<HeldParity>> HeldParityFromJson(const json& j, const std::string& what) {
  if (!j.is_array() || j.size() > kMaxListEntries) {
    return InvalidArgumentError(what + ": \"parity\" must be a list");
  }
  std::vector<HeldParity> out;
  for (size_t i = 0; i < j.size(); ++i) {
    StatusOr<HeldParity> h = HeldParityCodec().Parse(j[i]);
    if (!h.ok()) {
      return InvalidArgumentError(what + ": \"parity\": " + EntryError(i, h.status().message()));
    }
    out.push_back(std::move(*h));
  }
  return out;
}

json DecodeToJson(const DecodeSource& d) {
  json stripes = json::array();
  for (const StripeSource& s : d.stripes) {
    json shards = json::array();
    for (const ShardSource& sh : s.shards) shards.push_back({sh.index, sh.holder, sh.rank});
    stripes.push_back({s.stripe, std::move(shards)});
  }
  return {{"group", GroupToJson(d.group)}, {"stripes", std::move(stripes)}};
}

// {"group": G, "stripes": [[stripe, [[index, holder, rank], ...]], ...]}:
// positional entries, checked one by one.
StatusOr<DecodeSource> DecodeFromJson(const json& j, const std::string& what) {
  if (!j.is_object() || !j.value("stripes", json()).is_array()) {
    return InvalidArgumentError(what + ": \"decode\" must be {\"group\": G, \"stripes\": [...]}");
  }
  DecodeSource d;
  STRATA_ASSIGN_OR_RETURN(d.group, GroupFromJson(j.value("group", json()), what + ": \"decode\""));
  const int n = static_cast<int>(d.group.members.size());
  FieldError ignored;
  auto in = [&ignored](const json& v, int64_t lo, int64_t hi) {
    return ReadInt(v, lo, hi, &ignored).ok();
  };
  for (size_t i = 0; i < j["stripes"].size(); ++i) {
    const json& s = j["stripes"][i];
    const std::string stripe = ": \"stripes\": " + EntryError(i, "");
    if (!s.is_array() || s.size() != 2 || !in(s[0], 0, n - 1) || !s[1].is_array()) {
      return InvalidArgumentError(what + stripe + "a decoded stripe is [stripe, [shards]]");
    }
    StripeSource out{s[0].get<int>(), {}};
    for (size_t x = 0; x < s[1].size(); ++x) {
      const json& sh = s[1][x];
      if (!sh.is_array() || sh.size() != 3 || !in(sh[0], 0, n - 1) ||
          !in(sh[1], 0, kMaxNodes - 1) || !in(sh[2], kParityRank, kMaxNodes - 1)) {
        return InvalidArgumentError(what + stripe + "shard " + std::to_string(x) +
                                    ": a shard is [index, holder, rank]");
      }
      out.shards.push_back({sh[0].get<int>(), sh[1].get<int>(), sh[2].get<int>()});
    }
    d.stripes.push_back(std::move(out));
  }
  return d;
}

STRATA_WIRE_CODEC(PutShardRequest, PutShardCodec)
STRATA_WIRE_CODEC(PutShardReady, PutShardReadyCodec)
STRATA_WIRE_CODEC(GetShardRequest, GetShardCodec)
STRATA_WIRE_CODEC(ShardReply, ShardReplyCodec)

}  // namespace strata::wire
