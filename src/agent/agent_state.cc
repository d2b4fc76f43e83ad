// Copyright 2026 The Strata Authors.
#include "agent/agent_state.h"

#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>

#include "backup/layout.h"
#include "util/json_bounded.h"
#include "wire/coded.h"

namespace strata::agent {
namespace {

using json = nlohmann::json;
using wire::Codec;
using wire::FieldError;
using wire::FieldInfo;
using wire::Presence;

constexpr char kWhat[] = "the agent's state";
constexpr int64_t kIntMin = std::numeric_limits<int>::min();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// The fields of `inner`, read from and written into the object of the
// message that holds it (no key of its own).
template <typename M, typename T>
void Flat(Codec<M>* codec, T M::*member, const Codec<T>& inner) {
  codec->Custom(
      inner.fields(),
      [member, &inner](const Codec<M>&, const json& j, M& m) -> Status {
        STRATA_ASSIGN_OR_RETURN(m.*member, inner.Parse(j));
        return Status::Ok();
      },
      [member, &inner](const M& m, json* j) { j->update(inner.Write(m.*member)); });
}

// Any name: one this release does not know reads as orbax, as it always has.
std::optional<Framework> ReadFramework(const json& v, FieldError* e) {
  if (!v.is_string()) {
    e->want = "a string";
    return std::nullopt;
  }
  const std::string& name = v.get_ref<const std::string&>();
  return name == "pytorch"               ? Framework::kPytorch
         : name == "pytorch.distributed" ? Framework::kPytorchDistributed
                                         : Framework::kOrbax;
}

// "dp" is always written (1 when unset) and, read, always set.
std::optional<std::optional<int>> ReadDp(const json& v, FieldError* e) {
  StatusOr<int64_t> n = wire::ReadInt(v, kIntMin, kIntMax, e);
  if (!n.ok()) return std::nullopt;
  return std::optional<int>(static_cast<int>(*n));
}

// "master" is always written ("" when unset).
std::optional<std::optional<std::string>> ReadMaster(const json& v, FieldError* e) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() > wire::kMaxTextBytes) {
    e->want = "a string of at most " + std::to_string(wire::kMaxTextBytes) + " bytes";
    return std::nullopt;
  }
  if (v.get_ref<const std::string&>().empty()) return std::optional<std::string>();
  return std::optional<std::string>(v.get<std::string>());
}

// {"<node rank>": "host:port", ...}
std::optional<std::map<int, std::string>> ReadAddresses(const json& v, FieldError* e) {
  e->want = "an object of \"<node rank>\": \"host:port\"";
  if (!v.is_object() || v.size() > wire::kMaxListEntries) return std::nullopt;
  std::map<int, std::string> out;
  for (const auto& [key, address] : v.items()) {
    int rank = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), rank);
    if (ec != std::errc() || end != key.data() + key.size() || !address.is_string()) {
      return std::nullopt;
    }
    out[rank] = address.get<std::string>();
  }
  return out;
}

json WriteAddresses(const std::map<int, std::string>& addresses) {
  json out = json::object();
  for (const auto& [rank, address] : addresses) out[std::to_string(rank)] = address;
  return out;
}

std::optional<ec::Redundancy> ReadRedundancy(const json& v, FieldError* e) {
  StatusOr<ec::Redundancy> r = v.is_string() ? ec::Redundancy::Parse(v.get<std::string>())
                                             : InvalidArgumentError("a redundancy is a string");
  if (r.ok()) return *r;
  e->detail = r.status().message();
  return std::nullopt;
}

// The steps of a list of integers; a negative one is dropped.
std::optional<std::set<int64_t>> ReadQuarantined(const json& v, FieldError* e) {
  e->want = "a list of steps";
  if (!v.is_array() || v.size() > wire::kMaxListEntries) return std::nullopt;
  std::set<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    FieldError ignored;
    StatusOr<int64_t> n = wire::ReadInt(v[i], wire::kInt64Min, wire::kInt64Max, &ignored);
    if (!n.ok()) {
      e->want = wire::EntryWant(e->want, i);
      return std::nullopt;
    }
    if (*n >= 0) out.insert(*n);
  }
  return out;
}

// The job's config as state.json keeps it.
const Codec<ReplicatorConfig>& ConfigCodec() {
  using C = ReplicatorConfig;
  return Codec<C>::Once(kWhat, [](Codec<C>& c) {
    c.Job(&C::job_name)
        .Value<Framework>(
            "framework", &C::framework, Presence::kRequired, &ReadFramework,
            [](const Framework& f) { return json(FrameworkName(f)); }, FieldInfo::Kind::kText)
        .Int("node", &C::node_rank, kIntMin, kIntMax)
        .Int("nodes", &C::nodes, kIntMin, kIntMax)
        .Int("workers", &C::workers_per_node, kIntMin, kIntMax)
        .Value<std::optional<int>>(
            "dp", &C::assume_data_parallelism, Presence::kRequired, &ReadDp,
            [](const std::optional<int>& dp) { return json(dp.value_or(1)); })
        .Value<std::optional<std::string>>(
            "master", &C::master, Presence::kRequired, &ReadMaster,
            [](const std::optional<std::string>& m) { return json(m.value_or("")); });
  });
}

const Codec<Incarnation>& IncarnationCodec() {
  using I = Incarnation;
  return Codec<I>::Once(kWhat, [](Codec<I>& c) {
    Flat(&c, &I::config, ConfigCodec());
    c.Int("round", &I::round, wire::kInt64Min, wire::kInt64Max)
        .Value<std::map<int, std::string>>("addresses", &I::addresses, Presence::kRequired,
                                           &ReadAddresses, &WriteAddresses)
        .Value<std::vector<int>>("peers", &I::peers, Presence::kRequired, &wire::ReadIntList,
                                 &wire::WriteIntList)
        .Value<ec::Redundancy>(
            "redundancy", &I::redundancy, Presence::kDefaulted, &ReadRedundancy,
            [](const ec::Redundancy& r) { return json(r.ToString()); }, FieldInfo::Kind::kText)
        .Object("group", &I::group, wire::GroupCodec())
        // What replication must not go back below (Replication::Restored).
        .Int("restored_step", &I::restored_step, wire::kInt64Min, wire::kInt64Max,
             Presence::kDefaulted);
  });
}

}  // namespace

const Codec<SavedState>& SavedStateCodec() {
  using S = SavedState;
  return Codec<S>::Once(kWhat, [](Codec<S>& c) {
    // The incarnation's fields, then the quarantine's.
    c.Custom(
         IncarnationCodec().fields(),
         [](const Codec<S>&, const json& j, S& s) -> Status {
           STRATA_ASSIGN_OR_RETURN(static_cast<Incarnation&>(s), IncarnationCodec().Parse(j));
           return Status::Ok();
         },
         [](const S& s, json* j) { j->update(IncarnationCodec().Write(s)); })
        // So that a restart of this agent and of the coordinator together
        // does not forget them (Restore::Quarantined).
        .Value<std::set<int64_t>>("quarantined", &S::quarantined, Presence::kOmitted,
                                  &ReadQuarantined,
                                  [](const std::set<int64_t>& q) { return json(q); });
  });
}

std::string EncodeAgentState(const SavedState& s) { return SavedStateCodec().Write(s).dump(); }

StatusOr<SavedState> DecodeAgentState(std::string_view text, const std::string& path) {
  const json j = ParseBounded(text);
  if (j.is_discarded()) return InvalidArgumentError(path + ": not JSON");
  StatusOr<SavedState> s = SavedStateCodec().Parse(j);
  if (!s.ok()) return InvalidArgumentError(path + ": " + s.status().message());
  return s;
}

std::string EncodeRollbackRecord(const std::string& backup_id) { return backup_id; }

StatusOr<std::string> DecodeRollbackRecord(std::string_view text, const std::string& path) {
  auto id = backup::ParseBackupId(text);
  if (!id.ok()) return InvalidArgumentError(path + ": " + id.status().message());
  return std::string(text);
}

}  // namespace strata::agent
