// Copyright 2026 The Strata Authors.
//
// The agent's calls, as its Server (server.h) hands them over: control
// calls (coordination, status, health, a step's index) on the server's
// workers, long calls (step transfers, maintenance, quarantine) on threads
// of their own with the connection's socket.
#include <poll.h>
#include <sys/statvfs.h>

#include <functional>

#include "agent/agent.h"
#include "format/naming.h"
#include "net/auth.h"
#include "net/frame.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"
#include "util/time_format.h"
#include "wire/data.h"
#include "wire/op.h"

namespace strata::agent {
namespace {

constexpr auto kReplyTimeout = std::chrono::seconds(30);
constexpr auto kStallTimeout = std::chrono::seconds(60);

// Refuses a copy that would not fit, before any byte of it is received:
// filling the RAM disk would make the node's own saves fail.
Status CheckFreeSpace(const std::string& dir, uint64_t bytes, const StepKey& key) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, "statvfs " + dir);
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (bytes + (bytes >> 4) > free_bytes) {  // keep a 1/16 margin
    return ResourceExhaustedError("no room for " + key.ToString() + " in " + dir + ": " +
                                  std::to_string(bytes) + " bytes needed, " +
                                  std::to_string(free_bytes) + " free");
  }
  return Status::Ok();
}

Status SendReply(net::Socket& socket, const json& reply) {
  return net::SendFrame(socket, kFrameReply, reply.dump(), net::DeadlineAfter(kReplyTimeout));
}

}  // namespace

bool Agent::IsLongCall(const std::string& name) {
  std::optional<wire::Op> op = wire::OpFromName(name);
  return op && wire::KindOf(*op) == wire::OpKind::kLong;
}

void Agent::HandleControl(const json& request, Server::Reply reply) {
  StatusOr<wire::Op> op = wire::ParseOp(request);
  if (!op.ok()) return reply(op.status());
  switch (*op) {
    case wire::Op::kGetIndex: {
      StatusOr<wire::GetIndexRequest> r = wire::GetIndexRequest::FromJson(request);
      return reply(r.ok() ? HandleGetIndex(*r) : StatusOr<json>(r.status()));
    }
    case wire::Op::kStatus:
      return reply(StatusJson());
    case wire::Op::kHealth:
      return reply(HealthJson());
    default:
      if (wire::KindOf(*op) == wire::OpKind::kCoordination) {
        return coordinator_.HandleAsync(request, std::move(reply));
      }
      // The server routes long calls to HandleLongCall.
      return reply(InternalError(std::string(wire::OpName(*op)) + " is not a control call"));
  }
}

StatusOr<json> Agent::HandleLongCall(const json& request, net::Socket& socket) {
  STRATA_ASSIGN_OR_RETURN(wire::Op op, wire::ParseOp(request));
  switch (op) {
    case wire::Op::kPutStep: {
      STRATA_ASSIGN_OR_RETURN(wire::PutStepRequest r, wire::PutStepRequest::FromJson(request));
      return HandlePutStep(r, socket);
    }
    case wire::Op::kPutFiles: {
      STRATA_ASSIGN_OR_RETURN(wire::PutFilesRequest r, wire::PutFilesRequest::FromJson(request));
      return HandlePutFiles(r, socket);
    }
    case wire::Op::kFetchStep: {
      STRATA_ASSIGN_OR_RETURN(wire::FetchStepRequest r, wire::FetchStepRequest::FromJson(request));
      return HandleFetchStep(r, socket);
    }
    case wire::Op::kMaintenance:
      return HandleMaintenance(request);
    case wire::Op::kQuarantine:
      return HandleQuarantine(request);
    default:
      return InternalError(std::string(wire::OpName(op)) + " is not a long call");
  }
}

Status Agent::StartServer() {
  Server::Options options;
  options.secret = config_.secret;
  options.workers = 4;
  options.max_request_bytes = static_cast<uint32_t>(config_.max_message_bytes);
  Server::Handlers handlers;
  handlers.is_long = &Agent::IsLongCall;
  handlers.control = [this](const json& request, const std::string&, Server::Reply reply) {
    HandleControl(request, std::move(reply));
  };
  handlers.long_call = [this](const json& request, net::Socket& socket) {
    return HandleLongCall(request, socket);
  };
  STRATA_ASSIGN_OR_RETURN(
      server_, Server::Start(std::move(listener_), std::move(options), std::move(handlers)));
  return Status::Ok();
}

// A peer sends us a copy: say whether we already have it, then receive the
// files into a temporary directory, verify and commit them, and acknowledge.
StatusOr<json> Agent::HandlePutStep(const wire::PutStepRequest& request, net::Socket& socket) {
  const StepKey& key = request.key;
  const StepIndex& index = request.index;
  auto held = store_->GetIndex(key);
  if (held.ok() && held->digest == index.digest) return wire::PutStepReady{true, {}}.ToJson();
  STRATA_RETURN_IF_ERROR(CheckFreeSpace(config_.local_dir, index.total_bytes, key));
  const bool parallel = request.streams > 1 && index.files.size() > 1;
  STRATA_ASSIGN_OR_RETURN(std::string dir, store_->NewIncomingDir());
  Status s;
  if (parallel) {  // the files arrive on other connections (put_files)
    uint64_t id = transfers_.Begin(dir, index);
    s = SendReply(socket, wire::PutStepReady{false, id}.ToJson());
    if (s.ok()) s = transfers_.Wait(id, kStallTimeout);
    transfers_.End(id);
  } else {
    s = SendReply(socket, wire::PutStepReady{false, {}}.ToJson());
    if (s.ok()) s = RecvStepFiles(socket, dir, index, store_.get());
  }
  if (s.ok()) s = store_->Adopt(dir, key, index);
  if (!s.ok()) {
    env_->RemoveAll(dir).IgnoreError();
    return DataLossError("receiving " + key.ToString() + " from " + socket.peer() + ": " +
                         s.message());
  }
  Log()->info("holding replica {} from {} ({} bytes)", key.ToString(), socket.peer(),
              index.total_bytes);
  if (restoring_) ReportNewCopy(key, index.digest);
  return json{{"committed", true}};
}

// A replica that arrived after this node registered for a restore round:
// without it the round's plan would not know this node holds it (a node
// that left for maintenance replicates its on-demand step while the others
// are already registering).
void Agent::ReportNewCopy(const StepKey& key, uint64_t digest) {
  std::optional<SyncJob> job = CurrentSyncJob();
  if (!job || job->config.job_name != key.job) return;
  wire::AddCopiesRequest req;
  req.job = key.job;
  req.round = job->round;
  req.node = job->config.node_rank;
  req.inventory = {{key.rank, key.step, digest}};
  auto r = CallCoordinator(job->config, req.ToJson(), std::chrono::seconds(5));
  if (!r.ok()) Log()->debug("reporting the copy {}: {}", key.ToString(), r.status().message());
}

// One group of files of a multi-stream put_step: receive them into the
// transfer's directory and tell the waiting put_step.
StatusOr<json> Agent::HandlePutFiles(const wire::PutFilesRequest& request, net::Socket& socket) {
  const uint64_t id = request.transfer;
  std::string dir;
  StepIndex index;
  STRATA_RETURN_IF_ERROR(transfers_.Lookup(id, &dir, &index));
  STRATA_RETURN_IF_ERROR(wire::CheckFilePositions(request.files, index.files.size()));
  StepIndex group = SubIndex(index, request.files);
  Status s = SendReply(socket, {{"ok", true}});
  if (s.ok()) s = RecvStepFiles(socket, dir, group, store_.get());
  transfers_.Finish(id, s.ok() ? group.files.size() : 0, s);
  if (!s.ok()) return DataLossError(s.message());  // closes this connection
  return json{{"received", group.files.size()}};
}

// A peer about to restore from us: the index of our copy.
StatusOr<json> Agent::HandleGetIndex(const wire::GetIndexRequest& request) {
  STRATA_ASSIGN_OR_RETURN(StepIndex index, store_->GetIndex(request.key));
  return wire::IndexReply{std::move(index)}.ToJson();
}

// A peer restores from us: send the index in the reply, then the files —
// all of them, or with "files" (positions in the index) and "digest" one
// group of a multi-stream fetch, of that very copy.
StatusOr<json> Agent::HandleFetchStep(const wire::FetchStepRequest& request, net::Socket& socket) {
  const StepKey& key = request.key;
  STRATA_ASSIGN_OR_RETURN(StepIndex index, store_->GetIndex(key));
  StepIndex send = index;
  if (request.files) {
    if (request.digest != index.digest) {
      return FailedPreconditionError("this node holds another copy of " + key.ToString() +
                                     " than the one asked for");
    }
    STRATA_RETURN_IF_ERROR(wire::CheckFilePositions(*request.files, index.files.size()));
    send = SubIndex(index, *request.files);
  }
  STRATA_RETURN_IF_ERROR(SendReply(socket, wire::IndexReply{index}.ToJson()));
  Status s = SendStepFiles(socket, store_->StepPath(key), send);
  if (!s.ok()) return DataLossError(s.message());  // closes the connection
  Log()->info("served {} to {}", key.ToString(), socket.peer());
  return json{{"closed", true}};  // the data was the answer: no reply frame
}

// The incarnation survives an agent restart, so a restarted agent keeps
// ingesting and replicating without a new replicator.yaml.
void Agent::SaveState(const Incarnation& inc) {
  const ReplicatorConfig& c = inc.config;
  json addresses = json::object();
  for (const auto& [n, a] : inc.addresses) addresses[std::to_string(n)] = a;
  json j = {{"job", c.job_name},
            {"framework", FrameworkName(c.framework)},
            {"node", c.node_rank},
            {"nodes", c.nodes},
            {"workers", c.workers_per_node},
            {"round", inc.round},
            {"peers", inc.peers},
            {"addresses", addresses},
            {"dp", c.assume_data_parallelism.value_or(1)},
            {"master", c.master.value_or("")}};
  Status s =
      WriteFileAtomic(env_, JoinPath(store_->root(), std::string(kAgentStateFile)), j.dump());
  if (!s.ok()) Log()->warn("saving agent state: {}", s.message());
}

void Agent::LoadState() {
  std::string path = JoinPath(store_->root(), std::string(kAgentStateFile));
  auto text = ReadFileToString(env_, path, 1 << 20);
  if (!text.ok()) return;
  json j = json::parse(*text, nullptr, false);
  try {
    Incarnation inc;
    ReplicatorConfig& c = inc.config;
    c.job_name = j.at("job").get<std::string>();
    std::string fw = j.at("framework").get<std::string>();
    c.framework = fw == "pytorch"               ? Framework::kPytorch
                  : fw == "pytorch.distributed" ? Framework::kPytorchDistributed
                                                : Framework::kOrbax;
    c.node_rank = j.at("node").get<int>();
    c.nodes = j.at("nodes").get<int>();
    c.workers_per_node = j.at("workers").get<int>();
    c.assume_data_parallelism = j.at("dp").get<int>();
    if (!j.at("master").get<std::string>().empty()) c.master = j.at("master").get<std::string>();
    inc.round = j.at("round").get<int64_t>();
    inc.peers = j.at("peers").get<std::vector<int>>();
    for (const auto& [n, a] : j.at("addresses").items()) inc.addresses[std::stoi(n)] = a;
    if (!ValidateJobName(c.job_name).ok()) return;
    Log()->info("resuming job {} as node {} of {}", c.job_name, c.node_rank, c.nodes);
    MutexLock l(&mu_);
    sync_job_ = SyncJob{inc.config, inc.round};
    inc_ = std::move(inc);
  } catch (const std::exception& e) {
    Log()->warn("ignoring {}: {}", path, e.what());
  }
}

json Agent::StatusJson() const {
  json held = json::array();
  for (const auto& [key, index] : store_->List()) {
    held.push_back({{"job", key.job},
                    {"rank", key.rank},
                    {"step", key.step},
                    {"bytes", index.total_bytes},
                    {"digest", Hex64(index.digest)}});
  }
  MutexLock l(&mu_);
  double lag = 0;
  if (behind_since_) {
    lag = std::chrono::duration<double>(std::chrono::steady_clock::now() - *behind_since_).count();
  }
  json j = {{"local_dir", config_.local_dir},
            {"address", listen_.ToString()},
            {"steps", held},
            {"ram_bytes", store_->BytesHeld()},
            {"spare_bytes", store_->SpareBytes()},
            {"ram_disk", {{"tmpfs", ram_disk_.tmpfs}, {"huge", ram_disk_.huge}}},
            {"watermark", watermark_},
            {"newest_replicated", newest_replicated_},
            {"last_restore", last_restore_},
            {"restored_step", restored_step_},
            {"queued", to_replicate_.size()},
            {"newest_ingested", newest_ingested_},
            {"replication_lag_seconds", lag}};
  if (inc_) {
    j["job"] = inc_->config.job_name;
    j["node"] = inc_->config.node_rank;
    j["nodes"] = inc_->config.nodes;
    j["peers"] = inc_->peers;
    j["round"] = inc_->round;
  }
  if (backup_) j["backup"] = backup_->StatusJson();
  // The ranks registered in the sync map, and the job's on-demand step.
  json ranks = json::array();
  for (auto [slot, pid] : LiveRanks()) {
    const SyncSlot& s = sync_map_.slot(slot);
    ranks.push_back({{"pid", pid},
                     {"step", s.current_step.load()},
                     {"notices", s.notices.load()},
                     {"ondemand_step", s.saved_step.load()}});
  }
  j["ranks"] = ranks;
  j["training_step"] = node_step_.load();
  if (ondemand_step_ != kNoSyncStep) j["ondemand_step"] = ondemand_step_;
  if (maintenance_since_) j["maintenance_since"] = Rfc3339(*maintenance_since_);
  return j;
}

}  // namespace strata::agent
