// Copyright 2026 The Strata Authors.
#include "wire/coded.h"

#include "util/hash.h"
#include "wire/coordination.h"
#include "wire/op.h"
#include "wire/vocabulary.h"

namespace strata::wire {
namespace {

bool IsInt(const json& v, int64_t lo, int64_t hi) {
  return v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

StatusOr<uint64_t> Hex(const json& j, const char* key, const std::string& what) {
  auto it = j.find(key);
  std::optional<uint64_t> v;
  if (it != j.end() && it->is_string()) v = ParseHex64(it->get<std::string>());
  if (!v) return InvalidArgumentError(what + ": \"" + key + "\" must be 16 hex digits");
  return *v;
}

StatusOr<int64_t> Int(const json& j, const char* key, int64_t lo, int64_t hi,
                      const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || !IsInt(*it, lo, hi)) {
    return InvalidArgumentError(what + ": \"" + key + "\" must be an integer in " +
                                std::to_string(lo) + ".." + std::to_string(hi));
  }
  return it->get<int64_t>();
}

// A boolean field; `absent` when it is missing.
StatusOr<bool> Bool(const json& j, const char* key, bool absent, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end()) return absent;
  if (!it->is_boolean()) return InvalidArgumentError(what + ": \"" + key + "\" must be a boolean");
  return it->get<bool>();
}

StatusOr<StepKey> Key(const json& j, const std::string& what) {
  auto key = StepKeyFromJson(j.value("key", json()));
  if (!key.ok()) return InvalidArgumentError(what + ": \"key\": " + key.status().message());
  return *key;
}

// The stripe, row and chunk of a shard call, within `g`'s layout.
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

std::string Name(Op op) { return OpName(op); }

}  // namespace

json GroupToJson(const ec::Group& g) {
  return {{"members", g.members},
          {"code", g.kind == ec::Redundancy::Kind::kXor ? "xor" : "rs"},
          {"m", g.m}};
}

StatusOr<ec::Group> GroupFromJson(const json& j, const std::string& what) {
  const std::string want = what +
                           ": a group is {\"members\": [ranks], \"code\": \"rs\" | "
                           "\"xor\", \"m\": M}";
  if (!j.is_object() || !j.value("members", json()).is_array() ||
      !j.value("code", json()).is_string() || !IsInt(j.value("m", json()), 1, ec::kMaxGroupSize)) {
    return InvalidArgumentError(want);
  }
  ec::Group g;
  for (const json& r : j["members"]) {
    if (!IsInt(r, 0, kMaxNodes - 1) || g.members.size() >= ec::kMaxGroupSize) {
      return InvalidArgumentError(want);
    }
    g.members.push_back(r.get<int>());
  }
  const std::string code = j["code"].get<std::string>();
  if (code != "rs" && code != "xor") return InvalidArgumentError(want);
  g.kind = code == "xor" ? ec::Redundancy::Kind::kXor : ec::Redundancy::Kind::kRs;
  g.m = j["m"].get<int>();
  Status s = g.Validate();
  if (!s.ok()) return InvalidArgumentError(what + ": " + s.message());
  return g;
}

json HeldParityToJson(const std::vector<HeldParity>& held) {
  json out = json::array();
  for (const HeldParity& p : held) {
    json digests = json::array();
    for (const auto& [rank, digest] : p.digests) digests.push_back({rank, Hex64(digest)});
    out.push_back({{"step", p.step},
                   {"group", GroupToJson(p.group)},
                   {"stripe", p.stripe},
                   {"row", p.row},
                   {"digests", std::move(digests)}});
  }
  return out;
}

StatusOr<std::vector<HeldParity>> HeldParityFromJson(const json& j, const std::string& what) {
  if (!j.is_array()) return InvalidArgumentError(what + ": \"parity\" must be a list");
  std::vector<HeldParity> out;
  for (const json& p : j) {
    if (!p.is_object()) return InvalidArgumentError(what + ": a parity entry is not an object");
    HeldParity h;
    STRATA_ASSIGN_OR_RETURN(h.step, Int(p, "step", 0, INT64_MAX, what));
    STRATA_ASSIGN_OR_RETURN(h.group, GroupFromJson(p.value("group", json()), what));
    STRATA_ASSIGN_OR_RETURN(int64_t stripe, Int(p, "stripe", 0, ec::kMaxGroupSize - 1, what));
    STRATA_ASSIGN_OR_RETURN(int64_t row, Int(p, "row", 0, ec::kMaxGroupSize - 1, what));
    h.stripe = static_cast<int>(stripe);
    h.row = static_cast<int>(row);
    STRATA_RETURN_IF_ERROR(CheckShard(h.group, h.stripe, h.row, 0, what));
    const json digests = p.value("digests", json());
    if (!digests.is_array()) return InvalidArgumentError(what + ": \"digests\" must be a list");
    for (const json& d : digests) {
      std::optional<uint64_t> digest;
      if (d.is_array() && d.size() == 2 && d[1].is_string()) {
        digest = ParseHex64(d[1].get<std::string>());
      }
      if (!digest || !IsInt(d[0], 0, kMaxNodes - 1) || h.group.Position(d[0].get<int>()) < 0) {
        return InvalidArgumentError(what + ": \"digests\" holds [member rank, \"digest\"]");
      }
      h.digests[d[0].get<int>()] = *digest;
    }
    out.push_back(std::move(h));
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

StatusOr<DecodeSource> DecodeFromJson(const json& j, const std::string& what) {
  if (!j.is_object() || !j.value("stripes", json()).is_array()) {
    return InvalidArgumentError(what + ": \"decode\" is malformed");
  }
  DecodeSource d;
  STRATA_ASSIGN_OR_RETURN(d.group, GroupFromJson(j.value("group", json()), what));
  const int n = static_cast<int>(d.group.members.size());
  for (const json& s : j["stripes"]) {
    if (!s.is_array() || s.size() != 2 || !IsInt(s[0], 0, n - 1) || !s[1].is_array()) {
      return InvalidArgumentError(what + ": a decoded stripe is [stripe, [shards]]");
    }
    StripeSource out{s[0].get<int>(), {}};
    for (const json& sh : s[1]) {
      if (!sh.is_array() || sh.size() != 3 || !IsInt(sh[0], 0, n - 1) ||
          !IsInt(sh[1], 0, kMaxNodes - 1) || !IsInt(sh[2], kParityRank, kMaxNodes - 1)) {
        return InvalidArgumentError(what + ": a shard is [index, holder, rank]");
      }
      out.shards.push_back({sh[0].get<int>(), sh[1].get<int>(), sh[2].get<int>()});
    }
    d.stripes.push_back(std::move(out));
  }
  return d;
}

StatusOr<PutShardRequest> PutShardRequest::FromJson(const json& j) {
  const std::string what = Name(Op::kPutShard);
  if (!j.is_object()) return InvalidArgumentError(what + ": the request is not an object");
  PutShardRequest r;
  STRATA_ASSIGN_OR_RETURN(r.key, Key(j, what));
  STRATA_ASSIGN_OR_RETURN(r.digest, Hex(j, "digest", what));
  STRATA_ASSIGN_OR_RETURN(r.index, StepIndexFromJson(j.value("index", json()), what + ": index"));
  STRATA_ASSIGN_OR_RETURN(r.group, GroupFromJson(j.value("group", json()), what));
  STRATA_ASSIGN_OR_RETURN(int64_t stripe, Int(j, "stripe", 0, ec::kMaxGroupSize, what));
  STRATA_ASSIGN_OR_RETURN(int64_t row, Int(j, "row", 0, ec::kMaxGroupSize, what));
  STRATA_ASSIGN_OR_RETURN(int64_t chunk, Int(j, "chunk", 0, ec::kMaxGroupSize, what));
  r.stripe = static_cast<int>(stripe);
  r.row = static_cast<int>(row);
  r.chunk = static_cast<int>(chunk);
  STRATA_RETURN_IF_ERROR(CheckShard(r.group, r.stripe, r.row, r.chunk, what));
  STRATA_ASSIGN_OR_RETURN(int64_t length, Int(j, "length", 0, INT64_MAX, what));
  r.length = static_cast<uint64_t>(length);
  STRATA_ASSIGN_OR_RETURN(r.xxh3, Hex(j, "xxh3", what));
  return r;
}

json PutShardRequest::ToJson() const {
  return {{"op", OpName(Op::kPutShard)},
          {"key", StepKeyToJson(key)},
          {"digest", Hex64(digest)},
          {"index", StepIndexToJson(index)},
          {"group", GroupToJson(group)},
          {"stripe", stripe},
          {"row", row},
          {"chunk", chunk},
          {"length", length},
          {"xxh3", Hex64(xxh3)}};
}

StatusOr<PutShardReady> PutShardReady::FromJson(const json& j) {
  if (!j.is_object() || !j.value("have", json()).is_boolean()) {
    return InvalidArgumentError("put_shard's answer: \"have\" is missing or malformed");
  }
  return PutShardReady{j["have"].get<bool>()};
}

json PutShardReady::ToJson() const { return {{"ok", true}, {"have", have}}; }

StatusOr<GetShardRequest> GetShardRequest::FromJson(const json& j) {
  const std::string what = Name(Op::kGetShard);
  if (!j.is_object()) return InvalidArgumentError(what + ": the request is not an object");
  GetShardRequest r;
  STRATA_ASSIGN_OR_RETURN(r.key, Key(j, what));
  STRATA_ASSIGN_OR_RETURN(r.group, GroupFromJson(j.value("group", json()), what));
  STRATA_ASSIGN_OR_RETURN(r.parity, Bool(j, "parity", false, what));
  if (r.parity) {
    STRATA_ASSIGN_OR_RETURN(int64_t stripe, Int(j, "stripe", 0, ec::kMaxGroupSize, what));
    STRATA_ASSIGN_OR_RETURN(int64_t row, Int(j, "row", 0, ec::kMaxGroupSize, what));
    r.stripe = static_cast<int>(stripe);
    r.row = static_cast<int>(row);
  } else {
    STRATA_ASSIGN_OR_RETURN(r.digest, Hex(j, "digest", what));
    STRATA_ASSIGN_OR_RETURN(int64_t chunk, Int(j, "chunk", 0, ec::kMaxGroupSize, what));
    r.chunk = static_cast<int>(chunk);
  }
  STRATA_RETURN_IF_ERROR(CheckShard(r.group, r.stripe, r.row, r.chunk, what));
  if (j.contains("index_of")) {
    STRATA_ASSIGN_OR_RETURN(int64_t of, Int(j, "index_of", 0, kMaxNodes - 1, what));
    r.index_of = static_cast<int>(of);
  }
  STRATA_ASSIGN_OR_RETURN(r.header_only, Bool(j, "header_only", false, what));
  return r;
}

json GetShardRequest::ToJson() const {
  json j = {{"op", OpName(Op::kGetShard)},
            {"key", StepKeyToJson(key)},
            {"group", GroupToJson(group)},
            {"parity", parity}};
  if (parity) {
    j["stripe"] = stripe;
    j["row"] = row;
  } else {
    j["digest"] = Hex64(digest);
    j["chunk"] = chunk;
  }
  if (index_of) j["index_of"] = *index_of;
  if (header_only) j["header_only"] = true;
  return j;
}

StatusOr<ShardReply> ShardReply::FromJson(const json& j) {
  const std::string what = "get_shard's answer";
  if (!j.is_object()) return InvalidArgumentError(what + " is not an object");
  ShardReply r;
  STRATA_ASSIGN_OR_RETURN(int64_t length, Int(j, "length", 0, INT64_MAX, what));
  r.length = static_cast<uint64_t>(length);
  STRATA_ASSIGN_OR_RETURN(r.xxh3, Hex(j, "xxh3", what));
  for (const json& c : j.value("contributions", json::array())) {
    if (!c.is_object()) return InvalidArgumentError(what + ": a contribution is not an object");
    Contribution out;
    STRATA_ASSIGN_OR_RETURN(int64_t rank, Int(c, "rank", 0, kMaxNodes - 1, what));
    STRATA_ASSIGN_OR_RETURN(int64_t chunk, Int(c, "chunk", 0, ec::kMaxGroupSize, what));
    STRATA_ASSIGN_OR_RETURN(int64_t clen, Int(c, "length", 0, INT64_MAX, what));
    out.rank = static_cast<int>(rank);
    out.chunk = static_cast<int>(chunk);
    out.length = static_cast<uint64_t>(clen);
    STRATA_ASSIGN_OR_RETURN(out.xxh3, Hex(c, "xxh3", what));
    STRATA_ASSIGN_OR_RETURN(out.step_digest, Hex(c, "digest", what));
    r.contributions.push_back(std::move(out));
  }
  if (j.contains("index")) {
    STRATA_ASSIGN_OR_RETURN(r.index, StepIndexFromJson(j["index"], what + ": index"));
  }
  return r;
}

json ShardReply::ToJson() const {
  json list = json::array();
  for (const Contribution& c : contributions) {
    list.push_back({{"rank", c.rank},
                    {"chunk", c.chunk},
                    {"length", c.length},
                    {"xxh3", Hex64(c.xxh3)},
                    {"digest", Hex64(c.step_digest)}});
  }
  json j = {
      {"ok", true}, {"length", length}, {"xxh3", Hex64(xxh3)}, {"contributions", std::move(list)}};
  if (index) j["index"] = StepIndexToJson(*index);
  return j;
}

}  // namespace strata::wire
