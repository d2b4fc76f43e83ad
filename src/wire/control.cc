// Copyright 2026 The Strata Authors.
#include "wire/control.h"

#include "wire/op.h"

namespace strata::wire {
namespace {

// Reads the fields of one object of an answer; the first error names the
// answer and the field. Holds a reference: `j` must outlive the Reader.
class Reader {
 public:
  Reader(const json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) status_ = InvalidArgumentError(what_ + " is not an object");
  }

  template <class T>
  void Get(const char* field, T* out) {
    if (!status_.ok()) return;
    auto it = j_.find(field);
    if (it == j_.end()) {
      status_ = InvalidArgumentError(what_ + ": \"" + field + "\" is missing");
      return;
    }
    Convert(*it, field, out);
  }
  template <class T>
  void Get(const char* field, std::optional<T>* out) {
    if (!status_.ok()) return;
    auto it = j_.find(field);
    if (it == j_.end() || it->is_null()) return;
    T value;
    Convert(*it, field, &value);
    if (status_.ok()) *out = std::move(value);
  }
  // Each element of the array `field` through `read`.
  template <class T, class F>
  void Each(const char* field, std::vector<T>* out, F read) {
    if (!status_.ok()) return;
    auto it = j_.find(field);
    if (it == j_.end() || !it->is_array()) {
      status_ = InvalidArgumentError(what_ + ": \"" + field + "\" must be an array");
      return;
    }
    for (const json& e : *it) {
      StatusOr<T> v = read(e);
      if (!v.ok()) {
        status_ = InvalidArgumentError(what_ + ": \"" + field + "\": " + v.status().message());
        return;
      }
      out->push_back(std::move(*v));
    }
  }
  const Status& status() const { return status_; }

 private:
  template <class T>
  void Convert(const json& v, const char* field, T* out) {
    const bool ok = std::is_same_v<T, std::string> ? v.is_string()
                    : std::is_same_v<T, bool>      ? v.is_boolean()
                    : std::is_floating_point_v<T>  ? v.is_number()
                    : std::is_unsigned_v<T>        ? IsNonNegativeInteger(v)
                    : std::is_integral_v<T>        ? v.is_number_integer()
                                                   : true;
    if (!ok) {
      status_ = InvalidArgumentError(what_ + ": \"" + field + "\" has the wrong type");
      return;
    }
    try {
      *out = v.get<T>();
    } catch (const json::exception& e) {
      status_ = InvalidArgumentError(what_ + ": \"" + field + "\": " + e.what());
    }
  }

  const json& j_;
  const std::string what_;
  Status status_;
};

StatusOr<StatusReply::Held> HeldFromJson(const json& j) {
  Reader r(j, "a held step");
  StatusReply::Held h;
  r.Get("job", &h.job);
  r.Get("rank", &h.rank);
  r.Get("step", &h.step);
  r.Get("bytes", &h.bytes);
  r.Get("digest", &h.digest);
  STRATA_RETURN_IF_ERROR(r.status());
  return h;
}

StatusOr<StatusReply::Parity> ParityFromJson(const json& j) {
  Reader r(j, "a parity shard");
  StatusReply::Parity p;
  r.Get("step", &p.step);
  r.Get("stripe", &p.stripe);
  r.Get("row", &p.row);
  r.Get("bytes", &p.bytes);
  r.Get("complete", &p.complete);
  STRATA_RETURN_IF_ERROR(r.status());
  return p;
}

StatusOr<StatusReply::Rank> RankFromJson(const json& j) {
  Reader r(j, "a rank");
  StatusReply::Rank k;
  r.Get("pid", &k.pid);
  r.Get("step", &k.step);
  r.Get("notices", &k.notices);
  r.Get("ondemand_step", &k.ondemand_step);
  r.Get("save_stall_seconds", &k.save_stall_seconds);
  r.Get("saves", &k.saves);
  STRATA_RETURN_IF_ERROR(r.status());
  return k;
}

}  // namespace

StatusOr<Goodput> Goodput::FromJson(const json& j) {
  Reader r(j, "goodput");
  Goodput g;
  r.Get("elapsed_seconds", &g.elapsed_seconds);
  for (const GoodputCategory& c : kGoodputCategories) {
    r.Get((std::string(c.name) + "_seconds").c_str(), &(g.*c.seconds));
  }
  r.Get("goodput", &g.goodput);
  r.Get("step", &g.step);
  r.Get("wasted_steps", &g.wasted_steps);
  r.Get("interruptions", &g.interruptions);
  STRATA_RETURN_IF_ERROR(r.status());
  return g;
}

json Goodput::ToJson() const {
  json j = {{"elapsed_seconds", elapsed_seconds},
            {"goodput", goodput},
            {"step", step},
            {"wasted_steps", wasted_steps},
            {"interruptions", interruptions}};
  for (const GoodputCategory& c : kGoodputCategories)
    j[std::string(c.name) + "_seconds"] = this->*c.seconds;
  return j;
}

namespace {

StatusOr<ReplicatedReply::Backup> NewestFromJson(const json& j) {
  Reader r(j, "status: backup: newest");
  ReplicatedReply::Backup b;
  r.Get("id", &b.id);
  r.Get("step", &b.step);
  r.Get("created", &b.created);
  r.Get("committed", &b.committed);
  STRATA_RETURN_IF_ERROR(r.status());
  return b;
}

}  // namespace

StatusOr<BackupStatus> BackupStatus::FromJson(const json& j) {
  Reader r(j, "status: backup");
  BackupStatus b;
  r.Get("url", &b.url);
  r.Get("access", &b.access);
  r.Get("uploading", &b.uploading);
  r.Get("last_error", &b.last_error);
  r.Get("job_error", &b.job_error);
  STRATA_RETURN_IF_ERROR(r.status());
  if (auto newest = j.find("newest"); newest != j.end()) {
    STRATA_ASSIGN_OR_RETURN(b.newest, NewestFromJson(*newest));
    r.Get("backup_lag_seconds", &b.lag_seconds);
  }
  STRATA_RETURN_IF_ERROR(r.status());
  return b;
}

json BackupStatus::ToJson() const {
  json j = {{"url", url}, {"access", access}};
  if (uploading) j["uploading"] = *uploading;
  if (last_error) j["last_error"] = *last_error;
  if (job_error) j["job_error"] = *job_error;
  if (newest) {
    j["newest"] = {{"id", newest->id},
                   {"step", newest->step},
                   {"created", newest->created},
                   {"committed", newest->committed}};
    j["backup_lag_seconds"] = lag_seconds;
  }
  return j;
}

StatusOr<StatusReply> StatusReply::FromJson(const json& j) {
  Reader r(j, "status");
  StatusReply s;
  r.Get("local_dir", &s.local_dir);
  r.Get("address", &s.address);
  r.Each("steps", &s.steps, HeldFromJson);
  r.Get("ram_bytes", &s.ram_bytes);
  r.Get("spare_bytes", &s.spare_bytes);
  if (j.contains("parity_bytes")) r.Get("parity_bytes", &s.parity_bytes);  // newer agents
  if (j.contains("parity")) r.Each("parity", &s.parity, ParityFromJson);
  r.Get("watermark", &s.watermark);
  r.Get("newest_replicated", &s.newest_replicated);
  r.Get("newest_ingested", &s.newest_ingested);
  r.Get("last_restore", &s.last_restore);
  r.Get("restored_step", &s.restored_step);
  r.Get("restore_state", &s.restore_state);
  r.Get("queued", &s.queued);
  r.Get("replication_lag_seconds", &s.replication_lag_seconds);
  r.Each("ranks", &s.ranks, RankFromJson);
  r.Get("training_step", &s.training_step);
  r.Get("ondemand_step", &s.ondemand_step);
  r.Get("maintenance_since", &s.maintenance_since);
  STRATA_RETURN_IF_ERROR(r.status());
  if (auto g = j.find("goodput"); g != j.end() && !g->is_null()) {
    STRATA_ASSIGN_OR_RETURN(s.goodput, Goodput::FromJson(*g));
  }
  const json ram_disk = j.value("ram_disk", json());
  Reader disk(ram_disk, "status: ram_disk");
  disk.Get("tmpfs", &s.tmpfs);
  disk.Get("huge", &s.huge);
  STRATA_RETURN_IF_ERROR(disk.status());
  if (j.contains("job")) {
    Job job;
    r.Get("job", &job.name);
    r.Get("node", &job.node);
    r.Get("nodes", &job.nodes);
    r.Get("peers", &job.peers);
    r.Get("round", &job.round);
    if (j.contains("redundancy")) r.Get("redundancy", &job.redundancy);
    if (j.contains("group")) r.Get("group", &job.group);
    STRATA_RETURN_IF_ERROR(r.status());
    s.job = std::move(job);
  }
  if (auto backup = j.find("backup"); backup != j.end()) {
    STRATA_ASSIGN_OR_RETURN(s.backup, BackupStatus::FromJson(*backup));
  }
  return s;
}

json StatusReply::ToJson() const {
  json held = json::array();
  for (const Held& h : steps) {
    held.push_back({{"job", h.job},
                    {"rank", h.rank},
                    {"step", h.step},
                    {"bytes", h.bytes},
                    {"digest", h.digest}});
  }
  json j = {{"local_dir", local_dir},
            {"address", address},
            {"steps", held},
            {"ram_bytes", ram_bytes},
            {"spare_bytes", spare_bytes},
            {"parity_bytes", parity_bytes},
            {"ram_disk", {{"tmpfs", tmpfs}, {"huge", huge}}},
            {"watermark", watermark},
            {"newest_replicated", newest_replicated},
            {"last_restore", last_restore},
            {"restored_step", restored_step},
            {"queued", queued},
            {"newest_ingested", newest_ingested},
            {"replication_lag_seconds", replication_lag_seconds}};
  if (job) {
    j["job"] = job->name;
    j["node"] = job->node;
    j["nodes"] = job->nodes;
    j["peers"] = job->peers;
    j["round"] = job->round;
    j["redundancy"] = job->redundancy;
    if (!job->group.empty()) j["group"] = job->group;
  }
  if (!parity.empty()) {
    json shards = json::array();
    for (const Parity& p : parity) {
      shards.push_back({{"step", p.step},
                        {"stripe", p.stripe},
                        {"row", p.row},
                        {"bytes", p.bytes},
                        {"complete", p.complete}});
    }
    j["parity"] = std::move(shards);
  }
  if (backup) j["backup"] = backup->ToJson();
  json rank_list = json::array();
  for (const Rank& k : ranks) {
    json rank = {{"pid", k.pid},
                 {"step", k.step},
                 {"notices", k.notices},
                 {"ondemand_step", k.ondemand_step}};
    if (k.save_stall_seconds) rank["save_stall_seconds"] = *k.save_stall_seconds;
    if (k.saves) rank["saves"] = *k.saves;
    rank_list.push_back(rank);
  }
  j["ranks"] = rank_list;
  j["training_step"] = training_step;
  if (ondemand_step) j["ondemand_step"] = *ondemand_step;
  if (maintenance_since) j["maintenance_since"] = *maintenance_since;
  if (restore_state) j["restore_state"] = *restore_state;
  if (goodput) j["goodput"] = goodput->ToJson();
  return j;
}

StatusOr<MaintenanceRequest> MaintenanceRequest::FromJson(const json& j) {
  Reader r(j, "maintenance");
  MaintenanceRequest m;
  std::optional<int64_t> grace_ms;
  std::optional<bool> lose_ram;
  std::optional<std::string> origin;
  r.Get("grace_ms", &grace_ms);
  r.Get("lose_ram", &lose_ram);
  r.Get("origin", &origin);
  STRATA_RETURN_IF_ERROR(r.status());
  if (grace_ms) {
    if (*grace_ms < 0 || *grace_ms > int64_t{24} * 3600 * 1000) {
      return InvalidArgumentError("maintenance: grace of " + std::to_string(*grace_ms) +
                                  " ms is not within 0..24 h");
    }
    m.grace = std::chrono::milliseconds(*grace_ms);
  }
  if (lose_ram) m.lose_ram = *lose_ram;
  if (origin) m.origin = *origin;
  return m;
}

json MaintenanceRequest::ToJson() const {
  return {{"op", OpName(Op::kMaintenance)},
          {"grace_ms", grace.count()},
          {"lose_ram", lose_ram},
          {"origin", origin}};
}

StatusOr<MaintenanceEvent> MaintenanceEvent::FromJson(const json& j) {
  Reader r(j, "a maintenance event");
  MaintenanceEvent e;
  r.Get("time", &e.time);
  r.Get("unix_ms", &e.unix_ms);
  r.Get("origin", &e.origin);
  r.Get("grace_ms", &e.grace_ms);
  r.Get("lose_ram", &e.lose_ram);
  r.Get("ranks", &e.ranks);
  r.Get("ranks_exited_seconds", &e.ranks_exited_seconds);
  r.Get("ranks_killed", &e.ranks_killed);
  r.Get("sync_step", &e.sync_step);
  r.Get("saved", &e.saved);
  r.Get("replicated", &e.replicated);
  r.Get("wiped", &e.wiped);
  r.Get("seconds", &e.seconds);
  STRATA_RETURN_IF_ERROR(r.status());
  return e;
}

json MaintenanceEvent::ToJson() const {
  json j = {{"time", time},
            {"unix_ms", unix_ms},
            {"origin", origin},
            {"grace_ms", grace_ms},
            {"lose_ram", lose_ram},
            {"ranks", ranks},
            {"ranks_exited_seconds", ranks_exited_seconds},
            {"ranks_killed", ranks_killed},
            {"saved", saved},
            {"replicated", replicated},
            {"wiped", wiped},
            {"seconds", seconds}};
  if (sync_step) j["sync_step"] = *sync_step;
  return j;
}

StatusOr<HealthReply> HealthReply::FromJson(const json& j) {
  Reader r(j, "health");
  HealthReply h;
  r.Get("healthy", &h.healthy);
  r.Get("description", &h.description);
  STRATA_RETURN_IF_ERROR(r.status());
  if (auto m = j.find("maintenance"); m != j.end() && !m->is_null()) {
    STRATA_ASSIGN_OR_RETURN(h.maintenance, MaintenanceEvent::FromJson(*m));
  }
  return h;
}

json HealthReply::ToJson() const {
  json j = {{"healthy", healthy}, {"description", description}};
  if (maintenance) j["maintenance"] = maintenance->ToJson();
  return j;
}

StatusOr<QuarantineRequest> QuarantineRequest::FromJson(const json& j) {
  Reader r(j, "quarantine");
  QuarantineRequest q;
  r.Get("step", &q.step);
  STRATA_RETURN_IF_ERROR(r.status());
  return q;
}

json QuarantineRequest::ToJson() const { return {{"op", OpName(Op::kQuarantine)}, {"step", step}}; }

StatusOr<QuarantineStepReply> QuarantineStepReply::FromJson(const json& j) {
  Reader r(j, "the answer to quarantine_step");
  QuarantineStepReply q;
  r.Get("description", &q.description);
  STRATA_RETURN_IF_ERROR(r.status());
  return q;
}

json QuarantineStepReply::ToJson() const { return {{"description", description}}; }

StatusOr<SupervisorRestartRequest> SupervisorRestartRequest::FromJson(const json& j) {
  Reader r(j, "supervisor_restart");
  SupervisorRestartRequest q;
  r.Get("reason", &q.reason);
  r.Get("exit_code", &q.exit_code);
  STRATA_RETURN_IF_ERROR(r.status());
  if (q.reason != "failed" && q.reason != "planned" && q.reason != "quarantined") {
    return InvalidArgumentError("supervisor_restart: unknown reason \"" + q.reason.substr(0, 32) +
                                "\" (failed, planned or quarantined)");
  }
  return q;
}

json SupervisorRestartRequest::ToJson() const {
  return {{"op", OpName(Op::kSupervisorRestart)}, {"reason", reason}, {"exit_code", exit_code}};
}

}  // namespace strata::wire
