// Copyright 2026 The Strata Authors.
//
// The agent's replication thread: sends each ingested step to the node's
// peers, reports fully replicated steps to the coordinator (which answers
// with the job-wide watermark) and garbage-collects what everyone has
// replicated past.
#include <algorithm>
#include <thread>

#include "agent/agent.h"
#include "agent/local_dir.h"
#include "net/frame.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "wire/data.h"

namespace strata::agent {
namespace {

constexpr auto kPutTimeout = std::chrono::minutes(30);
constexpr auto kMinRetry = std::chrono::milliseconds(500);
constexpr auto kMaxRetry = std::chrono::milliseconds(30000);

}  // namespace

void Agent::ReplicationMain() {
  auto backoff = kMinRetry;
  std::optional<StepKey> retry;  // the newest step some peer still lacks
  auto retry_at = std::chrono::steady_clock::now();
  MutexLock l(&mu_);
  while (!stopping_) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (!stopping_ && to_replicate_.empty() && cv_.WaitUntil(&mu_, until)) {
    }
    if (stopping_) return;
    std::optional<StepKey> key;
    if (!to_replicate_.empty()) {
      key = to_replicate_.back();  // newest first: older queued steps are superseded
      // ... except the job's on-demand step, which goes before everything.
      const StepKey newest = *key;
      for (const StepKey& k : to_replicate_) {
        if (ondemand_step_ != kNoSyncStep && k.step == ondemand_step_) key = k;
      }
      to_replicate_.clear();
      if (!(*key == newest)) to_replicate_.push_back(newest);
      backoff = kMinRetry;
    } else if (retry && std::chrono::steady_clock::now() >= retry_at) {
      key = retry;
    }
    if (!key || !inc_) {
      l.Unlock();
      RefreshWatermark();
      CollectGarbage();
      l.Lock();
      continue;
    }
    l.Unlock();
    bool all = false;
    try {  // a peer's malformed reply must not end the thread
      all = ReplicateEverywhere(*key);
    } catch (const json::exception& e) {
      Log()->warn("replicating {}: malformed reply: {}", key->ToString(), e.what());
    }
    CollectGarbage();
    l.Lock();
    if (all) {
      retry.reset();
    } else {  // try again later; a peer may be restarting
      retry = key;
      retry_at = std::chrono::steady_clock::now() + backoff;
      backoff = std::min(backoff * 2, kMaxRetry);
    }
  }
}

// Sends `key` to every peer; true when all of them hold it.
bool Agent::ReplicateEverywhere(const StepKey& key) {
  std::vector<int> peers;
  std::map<int, std::string> addresses;
  {
    MutexLock l(&mu_);
    if (!inc_ || key.job != inc_->config.job_name) return true;  // a past incarnation's step
    peers = inc_->peers;
    addresses = inc_->addresses;
  }
  size_t done = 0;
  for (int peer : peers) {
    auto addr = addresses.find(peer);
    Status s = addr == addresses.end()
                   ? UnavailableError("no address for node " + std::to_string(peer))
                   : ReplicateToPeer(key, addr->second);
    if (s.ok()) {
      ++done;
      continue;
    }
    Log()->warn("replicating {} to node {}: {} (will retry)", key.ToString(), peer, s.message());
    MutexLock l(&mu_);
    replication_error_ =
        "replicating " + key.ToString() + " to node " + std::to_string(peer) + ": " + s.message();
  }
  if (done == peers.size()) {
    MutexLock l(&mu_);
    replication_error_.clear();
  }
  if (done < peers.size()) return false;
  ReportReplicated(key);
  return true;
}

// Idle: re-report the newest replicated step; the answer carries the
// job-wide watermark, which moves as the other nodes catch up.
void Agent::RefreshWatermark() {
  std::optional<StepKey> newest;
  {
    MutexLock l(&mu_);
    if (inc_ && newest_replicated_ >= 0) {
      newest = StepKey{inc_->config.job_name, inc_->config.node_rank, newest_replicated_};
    }
  }
  if (newest) ReportReplicated(*newest);
}

Status Agent::ReplicateToPeer(const StepKey& key, const std::string& address) {
  STRATA_ASSIGN_OR_RETURN(Endpoint to, ParseEndpoint(address));
  STRATA_ASSIGN_OR_RETURN(StepIndex index, store_->GetIndex(key));
  STRATA_ASSIGN_OR_RETURN(
      RpcClient client, RpcClient::Connect(to, config_.secret, "node " + std::to_string(key.rank)));
  const auto groups = index.total_bytes >= kMultiStreamMinBytes
                          ? PartitionFiles(index, config_.data_streams)
                          : std::vector<std::vector<size_t>>(1);
  const wire::PutStepRequest put{key, index, static_cast<int>(groups.size())};
  STRATA_ASSIGN_OR_RETURN(json answer, client.Call(put.ToJson(), std::chrono::seconds(30)));
  STRATA_ASSIGN_OR_RETURN(wire::PutStepReady ready, wire::PutStepReady::FromJson(answer));
  if (ready.have) return Status::Ok();  // the peer already holds this copy
  if (ready.transfer) {
    STRATA_RETURN_IF_ERROR(SendGroups(to, key, index, *ready.transfer, groups));
  } else {
    STRATA_RETURN_IF_ERROR(SendStepFiles(client.socket(), store_->StepPath(key), index));
  }
  // The peer verifies and commits, then acknowledges.
  STRATA_ASSIGN_OR_RETURN(net::Frame ack, net::RecvFrame(client.socket(), kMaxControlBytes,
                                                         net::DeadlineAfter(kPutTimeout)));
  json reply = ParseBounded(ack.payload);
  return StatusFromJson(reply, address);
}

// Sends each group of files on its own connection, in parallel.
Status Agent::SendGroups(const Endpoint& to, const StepKey& key, const StepIndex& index,
                         uint64_t transfer, const std::vector<std::vector<size_t>>& groups) {
  return RunParallel(groups.size(), groups.size(), [&](size_t g, const auto&) {
    auto client = RpcClient::Connect(to, config_.secret, "node " + std::to_string(key.rank));
    Status s = client.status();
    if (s.ok()) {
      s = client
              ->Call(wire::PutFilesRequest{transfer, groups[g]}.ToJson(), std::chrono::seconds(30))
              .status();
    }
    if (s.ok())
      s = SendStepFiles(client->socket(), store_->StepPath(key), SubIndex(index, groups[g]));
    if (s.ok()) {
      auto done =
          net::RecvFrame(client->socket(), kMaxControlBytes, net::DeadlineAfter(kPutTimeout));
      s = done.ok() ? StatusFromJson(ParseBounded(done->payload), to.ToString()) : done.status();
    }
    return s;
  });
}

void Agent::ReportReplicated(const StepKey& key) {
  std::optional<ReplicatorConfig> c;
  {
    MutexLock l(&mu_);
    newest_replicated_ = std::max(newest_replicated_, key.step);
    if (newest_replicated_ >= newest_ingested_) behind_since_.reset();
    if (inc_) c = inc_->config;
  }
  if (!c) return;
  wire::ReplicatedRequest req;
  req.job = c->job_name;
  req.node = c->node_rank;
  req.step = key.step;
  req.nodes = c->nodes;
  req.dp = c->assume_data_parallelism.value_or(1);
  req.cadence = Cadence(*c);
  auto r = CallCoordinator(*c, req.ToJson(), std::chrono::seconds(10));
  if (!r.ok()) {
    Log()->warn("reporting step {} replicated: {}", key.step, r.status().message());
    return;
  }
  StatusOr<wire::ReplicatedReply> reply = wire::ReplicatedReply::FromJson(*r);
  if (!reply.ok()) {
    Log()->warn("reply to a replication report: {}", reply.status().message());
    return;
  }
  StatusOr<BackupNews> news = BackupNews::From(*reply, c->job_name, c->nodes);
  if (!news.ok()) {
    Log()->warn("reply to a replication report: {}", news.status().message());
    news = BackupNews();
  }
  std::optional<BackupTask> refuse;
  {
    MutexLock l(&mu_);
    // A backup task pins its step before the watermark can move past it.
    if (backup_) {
      backup_->OnNews(*news);
    } else {
      refuse = news->task;
    }
    watermark_ = std::max(watermark_, reply->watermark);
  }
  if (refuse) {  // this agent cannot back up: say so, so the backup ends
    auto call = [this](const ReplicatorConfig& job, const json& request,
                       std::chrono::milliseconds timeout) {
      return CallCoordinator(job, request, timeout);
    };
    ReportBackupPart(
        call, *c, *refuse,
        FailedPreconditionError("node " + std::to_string(c->node_rank) + " has no --backup"));
  }
}

// Keeps, per node rank of the current job, every step at or above the
// job-wide watermark (the newest step every node has replicated) and the
// newest step held; plus anything a client's symlink points to and the step
// being backed up. Everything
// else goes, including steps of earlier job names.
void Agent::CollectGarbage() {
  std::string job;
  int64_t watermark;
  std::set<StepKey> pinned;
  {
    MutexLock l(&mu_);
    if (!inc_) return;
    job = inc_->config.job_name;
    watermark = watermark_;
  }
  if (backup_) pinned = backup_->Pins();
  const std::vector<std::string> targets = SymlinkTargets(config_.local_dir);
  std::map<int, int64_t> newest;
  auto held = store_->List();
  for (const auto& [key, index] : held) {
    if (key.job == job) newest[key.rank] = std::max(newest[key.rank], key.step);
  }
  for (const auto& [key, index] : held) {
    // Steps of an earlier job name cannot be restored by this job: they go.
    if (key.job == job && (key.step >= watermark || key.step == newest[key.rank])) continue;
    if (pinned.count(key)) continue;  // being backed up
    const std::string rel = store_->RelativeStepPath(key);
    if (std::any_of(targets.begin(), targets.end(),
                    [&](const std::string& t) { return t == rel || t.starts_with(rel + "/"); })) {
      continue;  // a client still reads it through a symlink
    }
    Log()->debug("gc: removing {}", key.ToString());
    Status s = store_->Remove(key);
    if (!s.ok()) Log()->warn("gc: {}", s.message());
  }
}

}  // namespace strata::agent
