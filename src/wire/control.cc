// Copyright 2026 The Strata Authors.
#include "wire/control.h"

#include <limits>

#include "wire/codec.h"
#include "wire/op.h"

namespace strata::wire {
namespace {

constexpr int64_t kIntMin = std::numeric_limits<int>::min();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

using Reply = StatusReply;

const Codec<Reply::Held>& HeldCodec() {
  return Codec<Reply::Held>::Once("a held step", [](Codec<Reply::Held>& codec) {
    codec.Text("job", &Reply::Held::job)
        .Int("rank", &Reply::Held::rank, 0, kMaxNodes - 1)
        .Int("step", &Reply::Held::step, kInt64Min, kInt64Max)
        .Unsigned("bytes", &Reply::Held::bytes)
        .Text("digest", &Reply::Held::digest);
  });
}

const Codec<Reply::Parity>& ParityCodec() {
  return Codec<Reply::Parity>::Once("a parity shard", [](Codec<Reply::Parity>& codec) {
    codec.Int("step", &Reply::Parity::step, kInt64Min, kInt64Max)
        .Int("stripe", &Reply::Parity::stripe, kIntMin, kIntMax)
        .Int("row", &Reply::Parity::row, kIntMin, kIntMax)
        .Unsigned("bytes", &Reply::Parity::bytes)
        .Bool("complete", &Reply::Parity::complete);
  });
}

const Codec<Reply::Rank>& RankCodec() {
  return Codec<Reply::Rank>::Once("a rank", [](Codec<Reply::Rank>& codec) {
    codec.Int("pid", &Reply::Rank::pid, kInt64Min, kInt64Max)
        .Int("step", &Reply::Rank::step, kInt64Min, kInt64Max)
        .Unsigned("notices", &Reply::Rank::notices)
        .Int("ondemand_step", &Reply::Rank::ondemand_step, kInt64Min, kInt64Max)
        .Number("save_stall_seconds", &Reply::Rank::save_stall_seconds)
        .Int("saves", &Reply::Rank::saves, kInt64Min, kInt64Max);
  });
}

const Codec<Goodput>& GoodputCodec() {
  return Codec<Goodput>::Once("goodput", [](Codec<Goodput>& codec) {
    codec.Number("elapsed_seconds", &Goodput::elapsed_seconds)
        .Number("productive_seconds", &Goodput::productive_seconds)
        .Number("save_seconds", &Goodput::save_seconds)
        .Number("restore_seconds", &Goodput::restore_seconds)
        .Number("wasted_seconds", &Goodput::wasted_seconds)
        .Number("other_seconds", &Goodput::other_seconds)
        .Number("goodput", &Goodput::goodput)
        .Int("step", &Goodput::step, kInt64Min, kInt64Max)
        .Int("wasted_steps", &Goodput::wasted_steps, kInt64Min, kInt64Max)
        .Int("interruptions", &Goodput::interruptions, kInt64Min, kInt64Max);
  });
}

const Codec<BackupStatus>& BackupStatusCodec() {
  using B = BackupStatus;
  return Codec<B>::Once("status: backup", [](Codec<B>& codec) {
    auto has_newest = [](const B& b) { return b.newest.has_value(); };
    codec.Text("url", &B::url)
        .Text("access", &B::access)
        .Text("uploading", &B::uploading)
        .Text("last_error", &B::last_error)
        .Text("job_error", &B::job_error)
        .Object("newest", &B::newest, BackupCodec())
        .Int("backup_lag_seconds", &B::lag_seconds, kInt64Min, kInt64Max, Presence::kDefaulted)
        .RequiredIf(has_newest)
        .WriteIf(has_newest);
  });
}

// The node's RAM disk, an object of its own on the wire.
Status ReadRamDisk(const Codec<Reply>& c, const json& j, Reply& s) {
  auto it = j.find("ram_disk");
  if (it == j.end() || it->is_null()) return c.Missing("ram_disk");
  if (!it->is_object() || !it->value("tmpfs", json()).is_boolean() ||
      !it->value("huge", json()).is_string()) {
    return c.Error("ram_disk", "{\"tmpfs\": true or false, \"huge\": \"...\"}");
  }
  s.tmpfs = (*it)["tmpfs"].get<bool>();
  s.huge = (*it)["huge"].get<std::string>();
  return Status::Ok();
}

void WriteRamDisk(const Reply& s, json* j) {
  (*j)["ram_disk"] = {{"tmpfs", s.tmpfs}, {"huge", s.huge}};
}

// The job served, its fields at the top level of the answer (present with
// "job").
const Codec<Reply::Job>& JobCodec() {
  using J = Reply::Job;
  return Codec<J>::Once("status", [](Codec<J>& codec) {
    codec.Text("job", &J::name)
        .Int("node", &J::node, kIntMin, kIntMax)
        .Int("nodes", &J::nodes, kIntMin, kIntMax)
        .Value<std::vector<int>>("peers", &J::peers, Presence::kRequired, &ReadIntList,
                                 &WriteIntList)
        .Int("round", &J::round, kInt64Min, kInt64Max)
        .Text("redundancy", &J::redundancy, Presence::kDefaulted)
        .Value<std::vector<int>>("group", &J::group, Presence::kOmitted, &ReadIntList,
                                 &WriteIntList);
  });
}

Status ReadJob(const Codec<Reply>& c, const json& j, Reply& s) {
  (void)c;
  if (!j.contains("job") || j["job"].is_null()) return Status::Ok();
  STRATA_ASSIGN_OR_RETURN(s.job, JobCodec().Parse(j));
  return Status::Ok();
}

void WriteJob(const Reply& s, json* j) {
  if (s.job) j->update(JobCodec().Write(*s.job));
}

const Codec<Reply>& StatusCodec() {
  return Codec<Reply>::Once("status", [](Codec<Reply>& codec) {
    codec.Text("local_dir", &Reply::local_dir)
        .Text("address", &Reply::address)
        .List("steps", &Reply::steps, Presence::kRequired, HeldCodec())
        .Unsigned("ram_bytes", &Reply::ram_bytes)
        .Unsigned("spare_bytes", &Reply::spare_bytes)
        .Unsigned("parity_bytes", &Reply::parity_bytes, Presence::kDefaulted)  // newer agents
        .List("parity", &Reply::parity, Presence::kDefaulted, ParityCodec())
        .WriteIf([](const Reply& s) { return !s.parity.empty(); })
        .Custom({{"ram_disk", true, FieldInfo::Kind::kOther}}, &ReadRamDisk, &WriteRamDisk)
        .Int("watermark", &Reply::watermark, kInt64Min, kInt64Max)
        .Int("newest_replicated", &Reply::newest_replicated, kInt64Min, kInt64Max)
        .Int("newest_ingested", &Reply::newest_ingested, kInt64Min, kInt64Max)
        .Text("last_restore", &Reply::last_restore)
        .Int("restored_step", &Reply::restored_step, kInt64Min, kInt64Max)
        .Text("restore_state", &Reply::restore_state)
        .Unsigned("queued", &Reply::queued)
        .Number("replication_lag_seconds", &Reply::replication_lag_seconds)
        .Custom({{"job", false, FieldInfo::Kind::kText}}, &ReadJob, &WriteJob)
        .Object("backup", &Reply::backup, BackupStatusCodec())
        .List("ranks", &Reply::ranks, Presence::kRequired, RankCodec())
        .Int("training_step", &Reply::training_step, kInt64Min, kInt64Max)
        .Int("ondemand_step", &Reply::ondemand_step, kInt64Min, kInt64Max)
        .Text("maintenance_since", &Reply::maintenance_since)
        .Object("goodput", &Reply::goodput, GoodputCodec());
  });
}

// "grace_ms": at most a day.
std::optional<std::chrono::milliseconds> ReadGrace(const json& v, FieldError* e) {
  if (!v.is_number_integer()) {
    e->want = "an integer";
    return std::nullopt;
  }
  const bool day = !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{24} * 3600 * 1000) &&
                   v.get<int64_t>() >= 0 && v.get<int64_t>() <= int64_t{24} * 3600 * 1000;
  if (!day) {
    e->detail = "grace of " + v.dump() + " ms is not within 0..24 h";
    return std::nullopt;
  }
  return std::chrono::milliseconds(v.get<int64_t>());
}

const Codec<MaintenanceRequest>& MaintenanceCodec() {
  using M = MaintenanceRequest;
  return Codec<M>::Once(Op::kMaintenance, [](Codec<M>& codec) {
    codec
        .Value<std::chrono::milliseconds>(
            "grace_ms", &M::grace, Presence::kDefaulted, &ReadGrace,
            [](const std::chrono::milliseconds& g) { return json(g.count()); })
        .Bool("lose_ram", &M::lose_ram, Presence::kDefaulted)
        .Text("origin", &M::origin, Presence::kDefaulted);
  });
}

const Codec<MaintenanceEvent>& MaintenanceEventCodec() {
  using E = MaintenanceEvent;
  return Codec<E>::Once("a maintenance event", [](Codec<E>& codec) {
    codec.Text("time", &E::time)
        .Int("unix_ms", &E::unix_ms, kInt64Min, kInt64Max)
        .Text("origin", &E::origin)
        .Int("grace_ms", &E::grace_ms, kInt64Min, kInt64Max)
        .Bool("lose_ram", &E::lose_ram)
        .Int("ranks", &E::ranks, kIntMin, kIntMax)
        .Number("ranks_exited_seconds", &E::ranks_exited_seconds)
        .Int("ranks_killed", &E::ranks_killed, kIntMin, kIntMax)
        .Int("sync_step", &E::sync_step, kInt64Min, kInt64Max)
        .Bool("saved", &E::saved)
        .Bool("replicated", &E::replicated)
        .Bool("wiped", &E::wiped)
        .Number("seconds", &E::seconds);
  });
}

const Codec<HealthReply>& HealthCodec() {
  using H = HealthReply;
  return Codec<H>::Once("health", [](Codec<H>& codec) {
    codec.Bool("healthy", &H::healthy)
        .Text("description", &H::description)
        .Object("maintenance", &H::maintenance, MaintenanceEventCodec());
  });
}

const Codec<QuarantineRequest>& QuarantineCodec() {
  return Codec<QuarantineRequest>::Once(Op::kQuarantine, [](Codec<QuarantineRequest>& codec) {
    codec.Int("step", &QuarantineRequest::step, kInt64Min, kInt64Max);
  });
}

const Codec<QuarantineStepReply>& QuarantineStepReplyCodec() {
  return Codec<QuarantineStepReply>::Once(
      "the answer to quarantine_step", [](Codec<QuarantineStepReply>& codec) {
        codec.Text("description", &QuarantineStepReply::description);
      });
}

const Codec<SupervisorRestartRequest>& SupervisorRestartCodec() {
  using S = SupervisorRestartRequest;
  return Codec<S>::Once(Op::kSupervisorRestart, [](Codec<S>& codec) {
    codec.Text("reason", &S::reason)
        .Int("exit_code", &S::exit_code, kIntMin, kIntMax)
        .Check([](const Codec<S>& c, const S& s) {
          if (s.reason == "failed" || s.reason == "planned" || s.reason == "quarantined") {
            return Status::Ok();
          }
          return c.Invalid(": unknown reason \"" + s.reason.substr(0, 32) +
                           "\" (failed, planned or quarantined)");
        });
  });
}

}  // namespace

STRATA_WIRE_CODEC(Goodput, GoodputCodec)
STRATA_WIRE_CODEC(BackupStatus, BackupStatusCodec)
STRATA_WIRE_CODEC(StatusReply, StatusCodec)
STRATA_WIRE_CODEC(MaintenanceRequest, MaintenanceCodec)
STRATA_WIRE_CODEC(MaintenanceEvent, MaintenanceEventCodec)
STRATA_WIRE_CODEC(HealthReply, HealthCodec)
STRATA_WIRE_CODEC(QuarantineRequest, QuarantineCodec)
STRATA_WIRE_CODEC(QuarantineStepReply, QuarantineStepReplyCodec)
STRATA_WIRE_CODEC(SupervisorRestartRequest, SupervisorRestartCodec)

}  // namespace strata::wire
