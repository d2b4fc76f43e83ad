// Copyright 2026 The Strata Authors.
//
// The agent's maintenance wiring: its OnDemandSync (ondemand_sync.h) and
// Maintenance (maintenance.h) components, `strata health` and the
// quarantine call of `strata run --agent`.
#include <algorithm>
#include <thread>

#include "agent/agent.h"
#include "agent/rpc/step_stream.h"
#include "agent/store/local_dir.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "util/time_format.h"

namespace strata::agent {
namespace {

// A RAM disk fuller than this is unhealthy: the next save may not fit.
constexpr double kRamBudget = 0.95;
// Replication behind, with an error, for longer than this: unhealthy.
constexpr std::chrono::seconds kReplicationTrouble(60);

}  // namespace

Status Agent::OpenOnDemandSync() {
  OnDemandSync::Hooks hooks;
  hooks.call_coordinator = CoordinatorCaller();
  hooks.coordinator = [this](const ReplicatorConfig& job) { return CoordinatorEndpoint(job); };
  hooks.stopping = [this] { return Stopping(); };
  STRATA_ASSIGN_OR_RETURN(
      sync_, OnDemandSync::Open(JoinPath(store_->root(), std::string(kSyncMapName)), job_group_,
                                trust_, clock_, std::move(hooks)));
  return Status::Ok();
}

void Agent::OpenMaintenance() {
  Maintenance::Parts parts;
  parts.store = store_.get();
  parts.local = &local_;
  parts.replication = replication_.get();
  parts.sync = sync_.get();
  parts.backup = backup_.get();
  parts.parity = parity_.get();
  Maintenance::Hooks hooks;
  hooks.job = [this]() -> std::optional<Maintenance::Job> {
    MutexLock l(&mu_);
    if (!inc_) return std::nullopt;
    return Maintenance::Job{inc_->config.job_name, inc_->config.node_rank, !inc_->peers.empty()};
  };
  hooks.restoring = [this] { return restore_->active(); };
  hooks.stopping = [this] { return Stopping(); };
  maintenance_ = std::make_unique<Maintenance>(
      env_, clock_, JoinPath(store_->root(), std::string(kMaintenanceFile)), parts,
      std::move(hooks));
}

StatusOr<json> Agent::HandleQuarantine(const wire::QuarantineRequest& request) {
  std::optional<SyncJob> job = sync_->job();
  if (!job) {
    return FailedPreconditionError("quarantine of step " + std::to_string(request.step) +
                                   ": the agent of " + config_.local_dir + " has no job yet");
  }
  wire::QuarantineStepRequest req;
  req.job = job->config.job_name;
  req.node = job->config.node_rank;
  req.step = request.step;
  StatusOr<json> reply = CallCoordinator(job->config, req.ToJson(), std::chrono::seconds(10));
  if (reply.ok()) restore_->NoteQuarantined(req.job, req.step);
  return reply;
}

// The first problem found, else the newest maintenance event.
wire::HealthReply Agent::HealthReport() const {
  auto unhealthy = [](const std::string& why) {
    return wire::HealthReply{false, why, std::nullopt};
  };
  std::string failed;
  auto f = ReadFileToString(env_, JoinPath(config_.local_dir, std::string(kFailedFile)), 4096);
  if (f.ok()) failed = *f;
  const double fill = FillOf(config_.local_dir).value_or(0.0);
  if (std::optional<int64_t> since = maintenance_->since()) {
    return unhealthy("A maintenance event is in progress since " + Rfc3339(*since));
  }
  if (!failed.empty()) {
    while (!failed.empty() && failed.back() == '\n') failed.pop_back();
    return unhealthy("The job failed on this node (" + std::string(kFailedFile) + "): " + failed);
  }
  const std::string access = backup_ ? backup_->access() : "ok";
  if (access != "ok" && access != "not checked yet") {
    return unhealthy("The backup " + config_.backup_url.value_or("") +
                     " is unreachable: " + access);
  }
  if (fill > kRamBudget) {
    return unhealthy(
        fmt::format("The RAM disk {} is over budget: {:.0f}% full", config_.local_dir, fill * 100));
  }
  if (std::optional<std::string> trouble = replication_->Trouble(kReplicationTrouble)) {
    return unhealthy(*trouble);
  }
  if (std::optional<wire::MaintenanceEvent> last = maintenance_->last()) {
    return wire::HealthReply{true, "The node had a maintenance event at " + last->time, last};
  }
  return wire::HealthReply{true, "No maintenance event recorded", std::nullopt};
}

}  // namespace strata::agent
