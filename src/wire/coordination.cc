// Copyright 2026 The Strata Authors.
#include "wire/coordination.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "format/naming.h"
#include "util/hash.h"
#include "wire/codec.h"
#include "wire/op.h"

namespace strata::wire {
namespace {

// ---------------------------------------------------------------------------
// The requests, each one list of fields.

// Lists of the requests' own kinds of entries.
std::optional<std::vector<HeldCopy>> ReadCopies(const json& v, FieldError* e) {
  e->want = "a list of [rank, step, \"digest\"]";
  if (!v.is_array() || v.size() > kMaxListEntries) return std::nullopt;
  std::vector<HeldCopy> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& c = v[i];
    e->want = EntryWant("a list of [rank, step, \"digest\"]", i);
    if (!c.is_array() || c.size() != 3) return std::nullopt;
    FieldError ignored;
    StatusOr<int64_t> rank = ReadInt(c[0], 0, kMaxNodes - 1, &ignored);
    StatusOr<int64_t> step = ReadInt(c[1], 0, kInt64Max, &ignored);
    std::optional<uint64_t> digest = ReadHex64(c[2], &ignored);
    if (!rank.ok() || !step.ok() || !digest) return std::nullopt;
    out.push_back({static_cast<int>(*rank), *step, *digest});
  }
  return out;
}

json WriteCopies(const std::vector<HeldCopy>& copies) {
  json out = json::array();
  for (const HeldCopy& c : copies) out.push_back({c.rank, c.step, Hex64(c.digest)});
  return out;
}

std::optional<std::vector<FailedHolder>> ReadFailed(const json& v, FieldError* e) {
  e->want = "a list of [holder, rank, step]";
  if (!v.is_array() || v.size() > kMaxListEntries) return std::nullopt;
  std::vector<FailedHolder> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& b = v[i];
    e->want = EntryWant("a list of [holder, rank, step]", i);
    if (!b.is_array() || b.size() != 3) return std::nullopt;
    FieldError ignored;
    StatusOr<int64_t> holder =
        ReadInt(b[0], std::numeric_limits<int>::min(), kMaxNodes - 1, &ignored);
    StatusOr<int64_t> rank = ReadInt(b[1], kParityRank, kMaxNodes - 1, &ignored);
    StatusOr<int64_t> step =
        ReadInt(b[2], std::numeric_limits<int64_t>::min(), kInt64Max, &ignored);
    if (!holder.ok() || !rank.ok() || !step.ok()) return std::nullopt;
    out.push_back({static_cast<int>(*holder), static_cast<int>(*rank), *step});
  }
  return out;
}

json WriteFailed(const std::vector<FailedHolder>& bad) {
  json out = json::array();
  for (const FailedHolder& b : bad) out.push_back({b.holder, b.rank, b.step});
  return out;
}

std::optional<std::vector<int>> ReadRanks(const json& v, FieldError* e) {
  e->want = "a list of node ranks";
  return ReadInts(v, 0, kMaxNodes - 1, kMaxListEntries, e);
}

json WriteRanks(const std::vector<int>& ranks) { return ranks; }

// Quarantined steps: a list of steps, in any order, repeats allowed.
std::optional<std::set<int64_t>> ReadSteps(const json& v, FieldError* e) {
  e->want = "a list of steps";
  if (!v.is_array() || v.size() > kMaxListEntries) return std::nullopt;
  std::set<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    FieldError ignored;
    StatusOr<int64_t> step = ReadInt(v[i], 0, kInt64Max, &ignored);
    if (!step.ok()) {
      e->want = EntryWant(e->want, i);
      return std::nullopt;
    }
    out.insert(*step);
  }
  return out;
}

json WriteSteps(const std::set<int64_t>& steps) {
  return json(std::vector<int64_t>(steps.begin(), steps.end()));
}

// "wait_ms": how long a call may park, at most a day.
std::optional<std::chrono::milliseconds> ReadWait(const json& v, FieldError* e) {
  if (!IsNonNegativeInteger(v)) {
    e->want = "a non-negative integer";
    return std::nullopt;
  }
  return std::chrono::milliseconds(std::min<uint64_t>(v.get<uint64_t>(), 24ull * 3600 * 1000));
}

json WriteWait(const std::chrono::milliseconds& wait) { return wait.count(); }

template <typename R>
Status ReadWaitField(const Codec<R>& c, const json& j, R& r) {
  auto it = j.find("wait_ms");
  if (it == j.end() || it->is_null()) return Status::Ok();
  FieldError e;
  r.wait = ReadWait(*it, &e);
  return r.wait ? Status::Ok() : c.Error("wait_ms", e.want);
}

template <typename R>
void WriteWaitField(const R& r, json* j) {
  if (r.wait) (*j)["wait_ms"] = WriteWait(*r.wait);
}

std::optional<net::Endpoint> ReadEndpoint(const json& v, FieldError* e) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() > kMaxTextBytes) {
    e->want = "host:port";
    return std::nullopt;
  }
  StatusOr<net::Endpoint> endpoint = net::ParseEndpoint(v.get<std::string>());
  if (!endpoint.ok()) {
    e->detail = endpoint.status().message();
    return std::nullopt;
  }
  return *endpoint;
}

std::optional<ec::Redundancy> ReadRedundancy(const json& v, FieldError* e) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() > 64) {
    e->want = "copies, xor, xor(N) or rs(K,M)";
    return std::nullopt;
  }
  StatusOr<ec::Redundancy> parsed = ec::Redundancy::Parse(v.get<std::string>());
  if (!parsed.ok()) {
    e->detail = parsed.status().message();
    return std::nullopt;
  }
  return *parsed;
}

// The backup cadence a node reports, three top-level keys. Advisory: a
// value that is not a positive integer is ignored, as it always was.
template <typename M>
Codec<M>& WithCadence(Codec<M>& codec, Cadence M::*member) {
  static constexpr std::pair<const char*, std::optional<int> Cadence::*> kKeys[] = {
      {"backup_interval_steps", &Cadence::backup_interval_steps},
      {"backup_interval_minutes", &Cadence::backup_interval_minutes},
      {"workers_per_node", &Cadence::workers_per_node}};
  std::vector<FieldInfo> keys;
  for (const auto& [key, field] : kKeys) keys.push_back({key, false, FieldInfo::Kind::kOther});
  return codec.Custom(
      std::move(keys),
      [member](const Codec<M>&, const json& j, M& m) {
        for (const auto& [key, field] : kKeys) {
          auto it = j.find(key);
          if (it == j.end() || !it->is_number_integer() || it->template get<int64_t>() < 1)
            continue;
          (m.*member).*field =
              static_cast<int>(std::min<int64_t>(it->template get<int64_t>(), INT32_MAX));
        }
        return Status::Ok();
      },
      [member](const M& m, json* j) {
        for (const auto& [key, field] : kKeys) {
          if ((m.*member).*field) (*j)[key] = *((m.*member).*field);
        }
      });
}

// A node rank below the job's node count, which the same message gives.
template <typename M>
Status NodeBelow(const Codec<M>& c, const char* key, int node, int nodes) {
  if (node < nodes) return Status::Ok();
  return c.Error(key, IntWant(0, nodes - 1));
}

const Codec<RegisterRequest>& RegisterCodec() {
  using R = RegisterRequest;
  return Codec<R>::Once(Op::kRegister, [](Codec<R>& codec) {
    codec.Job(&R::job)
        .Int("nodes", &R::nodes, 1, kMaxNodes)
        .Int("node", &R::node, 0, kMaxNodes - 1)
        .Int("dp", &R::dp, 1, kMaxNodes)
        .Value<net::Endpoint>("address", &R::address, Presence::kRequired, &ReadEndpoint,
                              [](const net::Endpoint& e) { return json(e.ToString()); })
        .Text("incarnation", &R::incarnation, Presence::kOmitted)
        .Value<std::vector<HeldCopy>>("inventory", &R::inventory, Presence::kDefaulted, &ReadCopies,
                                      &WriteCopies)
        .Value<ec::Redundancy>("redundancy", &R::redundancy, Presence::kDefaulted, &ReadRedundancy,
                               [](const ec::Redundancy& r) { return json(r.ToString()); })
        .WriteIf([](const R& r) { return r.redundancy.coded(); })
        .Text("domain", &R::domain, Presence::kOmitted, 64)
        .Nested<std::vector<HeldParity>>("parity", &R::parity, Presence::kOmitted,
                                         &HeldParityFromJson, &HeldParityToJson)
        .Value<std::set<int64_t>>("quarantined", &R::quarantined, Presence::kOmitted, &ReadSteps,
                                  &WriteSteps)
        .Check([](const Codec<R>& c, const R& r) { return NodeBelow(c, "node", r.node, r.nodes); })
        .Check([](const Codec<R>& c, const R& r) {
          return r.dp <= r.nodes ? Status::Ok() : c.Error("dp", IntWant(1, r.nodes));
        });
    WithCadence(codec, &R::cadence);
  });
}

const Codec<AwaitPlanRequest>& AwaitPlanCodec() {
  using R = AwaitPlanRequest;
  return Codec<R>::Once(Op::kAwaitPlan, [](Codec<R>& codec) {
    codec.Job(&R::job)
        .Int("round", &R::round, 0, kInt64Max)
        .Int("plan_version", &R::plan_version, 0, kInt64Max, Presence::kDefaulted)
        // -1 (an older sender's "the whole plan") reads as none.
        .Custom(
            {{"node", false, FieldInfo::Kind::kInteger, -1, kMaxNodes - 1}},
            [](const Codec<R>& c, const json& j, R& r) {
              auto it = j.find("node");
              if (it == j.end() || it->is_null()) return Status::Ok();
              FieldError e;
              StatusOr<int64_t> node = ReadInt(*it, -1, kMaxNodes - 1, &e);
              if (!node.ok()) return c.Error("node", e.want);
              if (*node >= 0) r.node = static_cast<int>(*node);
              return Status::Ok();
            },
            [](const R& r, json* j) {
              if (r.node) (*j)["node"] = *r.node;
            })
        .Value<std::vector<int>>("peers", &R::peers, Presence::kDefaulted, &ReadRanks, &WriteRanks)
        .WriteIf([](const R& r) { return r.node.has_value(); })
        .Custom({{"wait_ms", false, FieldInfo::Kind::kInteger, 0, kInt64Max, true}},
                &ReadWaitField<R>, &WriteWaitField<R>);
  });
}

const Codec<ReadyRequest>& ReadyCodec() {
  using R = ReadyRequest;
  return Codec<R>::Once(Op::kReady, [](Codec<R>& codec) {
    codec.Job(&R::job)
        .Int("round", &R::round, 0, kInt64Max)
        .Int("node", &R::node, 0, kMaxNodes - 1)
        .Int("plan_version", &R::plan_version, -1, kInt64Max, Presence::kDefaulted)
        .Bool("ok", &R::ok, Presence::kDefaulted)
        .Value<std::vector<FailedHolder>>("bad", &R::bad, Presence::kDefaulted, &ReadFailed,
                                          &WriteFailed)
        .Custom({{"wait_ms", false, FieldInfo::Kind::kInteger, 0, kInt64Max, true}},
                &ReadWaitField<R>, &WriteWaitField<R>);
  });
}

const Codec<ReplicatedRequest>& ReplicatedCodec() {
  using R = ReplicatedRequest;
  return Codec<R>::Once(Op::kReplicated, [](Codec<R>& codec) {
    codec.Job(&R::job)
        .Int("node", &R::node, 0, kMaxNodes - 1)
        .Int("step", &R::step, -1, kInt64Max, Presence::kDefaulted)
        .Int("nodes", &R::nodes, 1, kMaxNodes)
        .Int("dp", &R::dp, 1, kMaxNodes)
        .Check([](const Codec<R>& c, const R& r) {
          // With the job's size comes its data parallelism, at most its size.
          if (!r.nodes) return Status::Ok();
          if (!r.dp) return c.Missing("dp");
          return *r.dp <= *r.nodes ? Status::Ok() : c.Error("dp", IntWant(1, *r.nodes));
        })
        .Value<std::set<int64_t>>("requested", &R::requested, Presence::kOmitted, &ReadSteps,
                                  &WriteSteps)
        .Value<std::set<int64_t>>("requested_missing", &R::requested_missing, Presence::kOmitted,
                                  &ReadSteps, &WriteSteps);
    WithCadence(codec, &R::cadence);
  });
}

const Codec<BackupDoneRequest>& BackupDoneCodec() {
  using R = BackupDoneRequest;
  return Codec<R>::Once(Op::kBackupDone, [](Codec<R>& codec) {
    codec.Job(&R::job)
        .Int("node", &R::node, 0, kMaxNodes - 1)
        .Text("id", &R::id, Presence::kDefaulted)
        .Int("part", &R::part, 0, kMaxNodes - 1)
        .Int("step", &R::step, -1, kInt64Max, Presence::kDefaulted)
        .Bool("ok", &R::ok, Presence::kDefaulted)
        .Text("error", &R::error, Presence::kDefaulted)
        .WriteIf([](const R& r) { return !r.ok; })
        .Unsigned("bytes", &R::bytes, Presence::kDefaulted)
        .Digest("digest", &R::digest)
        .Bool("step_gone", &R::step_gone, Presence::kOmitted);
  });
}

const Codec<NodeAddressRequest>& NodeAddressCodec() {
  using R = NodeAddressRequest;
  return Codec<R>::Once(Op::kNodeAddress, [](Codec<R>& codec) {
    // Without a job: the coordinator's only job.
    codec
        .Value<std::string>(
            "job", &R::job, &ReadJobName, [](const std::string& job) { return json(job); },
            FieldInfo::Kind::kText)
        .Int("node", &R::node, 0, kMaxNodes - 1);
  });
}

const Codec<NoticeRequest>& NoticeCodec() {
  using R = NoticeRequest;
  return Codec<R>::Once(Op::kNotice, [](Codec<R>& codec) {
    codec.Job(&R::job)
        .Int("node", &R::node, 0, kMaxNodes - 1)
        .Int("step", &R::step, -1, kInt64Max, Presence::kDefaulted)
        .Text("origin", &R::origin, Presence::kDefaulted);
  });
}

const Codec<SyncRequest>& SyncCodec() {
  using R = SyncRequest;
  return Codec<R>::Once(Op::kSync, [](Codec<R>& codec) {
    codec.Job(&R::job)
        .Int("node", &R::node, 0, kMaxNodes - 1)
        .Int("step", &R::step, -1, kInt64Max, Presence::kDefaulted)
        .Number("rate", &R::rate, Presence::kDefaulted)
        .Unsigned("generation", &R::generation, Presence::kDefaulted)
        .Unsigned("collect", &R::collect, Presence::kDefaulted)
        .Custom({{"wait_ms", false, FieldInfo::Kind::kInteger, 0, kInt64Max, true}},
                &ReadWaitField<R>, &WriteWaitField<R>)
        .Int("round", &R::round, 0, kInt64Max);
  });
}

const Codec<QuarantineStepRequest>& QuarantineStepCodec() {
  using R = QuarantineStepRequest;
  return Codec<R>::Once(Op::kQuarantineStep, [](Codec<R>& codec) {
    codec.Job(&R::job).Int("node", &R::node, 0, kMaxNodes - 1).Int("step", &R::step, 0, kInt64Max);
  });
}

const Codec<AddCopiesRequest>& AddCopiesCodec() {
  using R = AddCopiesRequest;
  return Codec<R>::Once(Op::kAddCopies, [](Codec<R>& codec) {
    codec.Job(&R::job)
        .Int("round", &R::round, 0, kInt64Max)
        .Int("node", &R::node, 0, kMaxNodes - 1)
        .Value<std::vector<HeldCopy>>("inventory", &R::inventory, Presence::kDefaulted, &ReadCopies,
                                      &WriteCopies);
  });
}

}  // namespace

STRATA_WIRE_CODEC(RegisterRequest, RegisterCodec)
STRATA_WIRE_CODEC(AwaitPlanRequest, AwaitPlanCodec)
STRATA_WIRE_CODEC(ReadyRequest, ReadyCodec)
STRATA_WIRE_CODEC(ReplicatedRequest, ReplicatedCodec)
STRATA_WIRE_CODEC(BackupDoneRequest, BackupDoneCodec)
STRATA_WIRE_CODEC(NodeAddressRequest, NodeAddressCodec)
STRATA_WIRE_CODEC(NoticeRequest, NoticeCodec)
STRATA_WIRE_CODEC(SyncRequest, SyncCodec)
STRATA_WIRE_CODEC(QuarantineStepRequest, QuarantineStepCodec)
STRATA_WIRE_CODEC(AddCopiesRequest, AddCopiesCodec)

namespace {

const Codec<ReplicatedReply::Task>& TaskCodec() {
  using T = ReplicatedReply::Task;
  return Codec<T>::Once("a backup task", [](Codec<T>& codec) {
    codec.Text("id", &T::id)
        .Int("step", &T::step, kInt64Min, kInt64Max)
        .Int("part", &T::part, 0, kMaxNodes - 1);
  });
}

const Codec<ReplicatedReply>& ReplicatedReplyCodec() {
  using R = ReplicatedReply;
  return Codec<R>::Once("the answer to a replication report", [](Codec<R>& codec) {
    codec.Int("watermark", &R::watermark, kInt64Min, kInt64Max, Presence::kDefaulted)
        .Object("newest_backup", &R::newest_backup, BackupCodec())
        .Text("backup_error", &R::backup_error, Presence::kOmitted)
        .Object("backup_task", &R::backup_task, TaskCodec())
        .Value<std::set<int64_t>>("requested", &R::requested, Presence::kOmitted, &ReadSteps,
                                  &WriteSteps);
  });
}

// What a decision says beyond its round is there only with a step.
const Codec<SyncDecision>& SyncDecisionCodec() {
  using D = SyncDecision;
  return Codec<D>::Once("the on-demand step decision", [](Codec<D>& codec) {
    auto decided = [](const D& d) { return d.step.has_value(); };
    codec.Unsigned("generation", &D::generation)
        .Int("round", &D::round, kInt64Min, kInt64Max)
        .Unsigned("collect", &D::collect)
        .Bool("collecting", &D::collecting, Presence::kDefaulted)
        .NullableInt("step", &D::step, kInt64Min, kInt64Max, Presence::kRequired)
        .Int("notice_unix_ms", &D::notice_unix_ms, kInt64Min, kInt64Max, Presence::kDefaulted)
        .WriteIf(decided)
        .Int("notice_step", &D::notice_step, kInt64Min, kInt64Max)
        .WriteIf(decided)
        .Text("origin", &D::origin, Presence::kDefaulted)
        .WriteIf(decided);
  });
}

const Codec<RegisterReply>& RegisterReplyCodec() {
  return Codec<RegisterReply>::Once("the answer to register", [](Codec<RegisterReply>& codec) {
    codec.Int("round", &RegisterReply::round, kInt64Min, kInt64Max);
  });
}

const Codec<NodeAddressReply>& NodeAddressReplyCodec() {
  using R = NodeAddressReply;
  return Codec<R>::Once("the answer to node_address", [](Codec<R>& codec) {
    codec.Text("job", &R::job).Int("node", &R::node, 0, kMaxNodes - 1).Text("address", &R::address);
  });
}

const Codec<BackupDoneReply>& BackupDoneReplyCodec() {
  using R = BackupDoneReply;
  return Codec<R>::Once("the answer to backup_done", [](Codec<R>& codec) {
    codec.Bool("abandoned", &R::abandoned, Presence::kOmitted)
        .Value<bool>(
            "committed", &R::committed,
            [](const json& v, FieldError* e) -> std::optional<bool> {
              if (v.is_boolean()) return v.get<bool>();
              e->want = "true or false";
              return std::nullopt;
            },
            [](const bool& v) { return json(v); }, FieldInfo::Kind::kBool)
        .Bool("committing", &R::committing, Presence::kOmitted);
  });
}

const Codec<AddCopiesReply>& AddCopiesReplyCodec() {
  return Codec<AddCopiesReply>::Once("the answer to add_copies", [](Codec<AddCopiesReply>& codec) {
    codec.Bool("planned", &AddCopiesReply::planned);
  });
}

const Codec<ReadyReply>& ReadyReplyCodec() {
  using R = ReadyReply;
  return Codec<R>::Once("the answer to ready", [](Codec<R>& codec) {
    codec.Bool("go", &R::go, Presence::kOmitted)
        .Bool("replan", &R::replan, Presence::kOmitted)
        .Object("sync", &R::sync, SyncDecisionCodec())
        .Check([](const Codec<R>& c, const R& r) {
          return r.go != r.replan ? Status::Ok() : c.Invalid(" says neither go nor replan");
        });
  });
}

const Codec<Source>& SourceCodec() {
  return Codec<Source>::Once("a source", [](Codec<Source>& codec) {
    codec.Int("source_rank", &Source::source_rank, 0, kMaxNodes - 1)
        .Value<std::vector<int>>(
            "holders", &Source::holders, Presence::kRequired,
            [](const json& v, FieldError* e) {
              e->want = "a list of holders (node ranks, or -1 for the backup)";
              return ReadInts(v, kBackupHolder, kMaxNodes - 1);
            },
            &WriteIntList)
        .Digest("digest", &Source::digest)
        .Nested<DecodeSource>("decode", &Source::decode, &DecodeFromJson, &DecodeToJson);
  });
}

// A node rank as an object key ("3").
std::optional<int> RankKey(const std::string& key) {
  int n = 0;
  auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), n);
  if (ec != std::errc() || end != key.data() + key.size() || n < 0 || n >= kMaxNodes) {
    return std::nullopt;
  }
  return n;
}

std::optional<std::map<int, Source>> ReadSources(const json& v, FieldError* e) {
  if (!v.is_object() || v.size() > static_cast<size_t>(kMaxNodes)) {
    e->want = "an object of node rank: source";
    return std::nullopt;
  }
  std::map<int, Source> out;
  for (const auto& [key, src] : v.items()) {
    std::optional<int> rank = RankKey(key);
    if (!rank) {
      e->want = "an object of node rank: source";
      return std::nullopt;
    }
    StatusOr<Source> s = SourceCodec().Parse(src);
    if (!s.ok()) {
      e->detail = "node " + key + ": " + s.status().message();
      return std::nullopt;
    }
    out[*rank] = std::move(*s);
  }
  return out;
}

json WriteSources(const std::map<int, Source>& sources) {
  json out = json::object();
  for (const auto& [rank, s] : sources) out[std::to_string(rank)] = SourceCodec().Write(s);
  return out;
}

std::optional<std::map<int, std::string>> ReadAddresses(const json& v, FieldError* e) {
  e->want = "an object of node rank: \"host:port\"";
  if (!v.is_object() || v.size() > static_cast<size_t>(kMaxNodes)) return std::nullopt;
  std::map<int, std::string> out;
  for (const auto& [key, address] : v.items()) {
    std::optional<int> rank = RankKey(key);
    if (!rank || !address.is_string() || address.get_ref<const std::string&>().size() > 256) {
      return std::nullopt;
    }
    out[*rank] = address.get<std::string>();
  }
  return out;
}

json WriteAddresses(const std::map<int, std::string>& addresses) {
  json out = json::object();
  for (const auto& [rank, a] : addresses) out[std::to_string(rank)] = a;
  return out;
}

const Codec<PlanReply>& PlanReplyCodec() {
  using P = PlanReply;
  return Codec<P>::Once("the plan", [](Codec<P>& codec) {
    codec.Int("round", &P::round, kInt64Min, kInt64Max)
        .Int("plan_version", &P::plan_version, kInt64Min, kInt64Max)
        .NullableInt("step", &P::step, 0, kInt64Max)
        .Value<std::map<int, Source>>("sources", &P::sources, Presence::kDefaulted, &ReadSources,
                                      &WriteSources)
        .Value<std::map<int, std::string>>("addresses", &P::addresses, Presence::kDefaulted,
                                           &ReadAddresses, &WriteAddresses)
        .Text("reason", &P::reason, Presence::kDefaulted)
        .Text("backup", &P::backup, Presence::kOmitted)
        .Text("error", &P::error, Presence::kOmitted)
        .Int("discard_above", &P::discard_above, kInt64Min, kInt64Max)
        .Object("group", &P::group, GroupCodec())
        .Value<std::set<int64_t>>("quarantined", &P::quarantined, Presence::kOmitted, &ReadSteps,
                                  &WriteSteps);
  });
}

}  // namespace

const Codec<ReplicatedReply::Backup>& BackupCodec() {
  using B = ReplicatedReply::Backup;
  return Codec<B>::Once("a backup", [](Codec<B>& codec) {
    codec.Text("id", &B::id)
        .Int("step", &B::step, kInt64Min, kInt64Max)
        .Int("created", &B::created, kInt64Min, kInt64Max)
        .Int("committed", &B::committed, kInt64Min, kInt64Max);
  });
}

STRATA_WIRE_CODEC(ReplicatedReply, ReplicatedReplyCodec)
STRATA_WIRE_CODEC(SyncDecision, SyncDecisionCodec)
STRATA_WIRE_CODEC(RegisterReply, RegisterReplyCodec)
STRATA_WIRE_CODEC(NodeAddressReply, NodeAddressReplyCodec)
STRATA_WIRE_CODEC(BackupDoneReply, BackupDoneReplyCodec)
STRATA_WIRE_CODEC(AddCopiesReply, AddCopiesReplyCodec)
STRATA_WIRE_CODEC(ReadyReply, ReadyReplyCodec)
STRATA_WIRE_CODEC(PlanReply, PlanReplyCodec)

}  // namespace strata::wire
