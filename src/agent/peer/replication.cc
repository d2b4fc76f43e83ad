// Copyright 2026 The Strata Authors.
#include "agent/peer/replication.h"

#include <algorithm>

#include "agent/metrics/agent_metrics.h"
#include "agent/peer/retention.h"
#include "agent/rpc/step_stream.h"
#include "agent/store/dedup.h"
#include "agent/store/local_dir.h"
#include "agent/store/stream_verify.h"
#include "format/sync_map.h"
#include "net/frame.h"
#include "util/file_util.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

constexpr auto kStallTimeout = std::chrono::seconds(60);
constexpr auto kReportTimeout = std::chrono::seconds(10);
constexpr auto kIdleTick = std::chrono::milliseconds(500);
constexpr auto kMinRetry = std::chrono::milliseconds(500);
constexpr auto kMaxRetry = std::chrono::milliseconds(30000);
// How long a receiver waits for its own step of a data-parallel sender's
// step number before it takes what it holds (AwaitOwnStepForDedup).
constexpr auto kDedupWait = std::chrono::seconds(5);
// Ranges asked for in several streams are cut to at most this size, so one
// large file spreads over the streams.
constexpr uint64_t kRangePiece = 64ull << 20;

}  // namespace

Replication::Replication(Options options, Store* store, Env* env, SteadyClock* clock, Hooks hooks,
                         CodedTier* coded)
    : options_(std::move(options)),
      local_(env, options_.local_dir),
      store_(store),
      env_(env),
      clock_(clock),
      hooks_(std::move(hooks)),
      coded_(coded) {}

Replication::~Replication() { Stop(); }

void Replication::Start() {
  thread_ = std::thread([this] { Main(); });
}

void Replication::Stop() {
  stopped_ = true;
  {
    MutexLock l(&mu_);  // a turn takes its ticket under mu_ once it saw stopped_ false
    sends_.Cancel();    // the send in flight ends at once
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void Replication::Enqueue(const wire::StepKey& key, bool backup_requested) {
  MutexLock l(&mu_);
  if (backup_requested) requested_.insert(key.step);
  newest_ingested_ = std::max(newest_ingested_, key.step);
  ingested_at_[key.step] = clock_->Now();
  // Kept from the watermark's step on (its age is the peer tier's lag, which
  // matters most when replication is stuck), with a bound for a watermark
  // that never moves.
  while (!ingested_at_.empty() &&
         (ingested_at_.begin()->first < watermark_ || ingested_at_.size() > kIngestTimesKept)) {
    ingested_at_.erase(ingested_at_.begin());
  }
  if (!behind_since_) behind_since_ = clock_->Now();
  queue_.push_back(key);
  // Bounded while a send holds the thread: the oldest plain steps go.
  size_t plain = 0;
  for (const wire::StepKey& k : queue_) plain += requested_.count(k.step) == 0;
  if (plain > kMaxQueued) SkipQueued(queue_.back());
  cv_.SignalAll();
}

void Replication::SkipQueued(const wire::StepKey& keep) {
  std::deque<wire::StepKey> kept;
  std::set<wire::StepKey> skipped;
  for (const wire::StepKey& k : queue_) {
    const bool stays = k == keep || requested_.count(k.step) > 0;
    if (!stays) {
      skipped.insert(k);
    } else if (std::find(kept.begin(), kept.end(), k) == kept.end()) {
      kept.push_back(k);
    }
  }
  queue_ = std::move(kept);
  if (skipped.empty()) return;
  metric::SkippedSteps("peer").Add(static_cast<double>(skipped.size()));
  Log()->debug("replication: {} step(s) skipped ({} ... {}): a newer one goes first",
               skipped.size(), skipped.begin()->ToString(), skipped.rbegin()->ToString());
}

void Replication::Forget() {
  MutexLock l(&mu_);
  ++epoch_;
  queue_.clear();
  requested_.clear();
  watermark_ = newest_replicated_ = newest_ingested_ = -1;
  ingested_at_.clear();
  restored_at_.reset();
  restored_step_ = floor_ = previous_floor_ = -1;
  peer_newest_.clear();
  behind_since_.reset();
}

void Replication::Restored(int64_t step) {
  MutexLock l(&mu_);
  if (step >= 0 && newest_ingested_ < 0) restored_at_ = clock_->Now();
  restored_step_ = step;
  // A send still in flight is a past incarnation's: none of this one's
  // begins before it has a target, after this call.
  if (in_flight_ && in_flight_->epoch != epoch_ && in_flight_->key.step != step) {
    Log()->info("the job's start restored step {}: ending the send of {}, a step it left", step,
                in_flight_->key.ToString());
    sends_.Cancel();
  }
}

void Replication::DropQueue() {
  MutexLock l(&mu_);
  queue_.clear();
}

bool Replication::Replicated(int64_t step) const {
  MutexLock l(&mu_);
  return newest_replicated_ >= step;
}

Replication::Progress Replication::progress() const {
  MutexLock l(&mu_);
  Progress p;
  p.watermark = watermark_;
  p.newest_replicated = newest_replicated_;
  p.newest_ingested = newest_ingested_;
  p.queued = queue_.size();
  if (behind_since_) p.lag_seconds = SecondsSince(*clock_, *behind_since_);
  p.own_age_seconds = IngestAge(newest_ingested_);
  if (newest_ingested_ < 0 && restored_at_)
    p.own_age_seconds = SecondsSince(*clock_, *restored_at_);
  p.watermark_age_seconds = IngestAge(watermark_);
  for (const auto& [peer, step] : peer_newest_) {
    if (double age = IngestAge(step); age >= 0) p.peer_lags.emplace_back(peer, age);
  }
  p.error = error_;
  return p;
}

double Replication::IngestAge(int64_t step) const {
  auto at = ingested_at_.find(step);
  return at == ingested_at_.end() ? -1.0 : SecondsSince(*clock_, at->second);
}

std::optional<std::string> Replication::Trouble(std::chrono::seconds after) const {
  MutexLock l(&mu_);
  if (error_.empty() || !behind_since_ || clock_->Now() - *behind_since_ <= after) {
    return std::nullopt;
  }
  return "Peer replication failing for " +
         std::to_string(static_cast<int64_t>(SecondsSince(*clock_, *behind_since_))) +
         " s: " + error_;
}

std::optional<int64_t> Replication::StepToJoin(const std::set<int64_t>& others,
                                               int64_t newest_replicated, int64_t restored,
                                               int64_t newest_queued) {
  if (others.empty()) return std::nullopt;
  const int64_t newest = *others.rbegin();
  if (newest <= std::max(newest_replicated, restored) || newest == newest_queued) {
    return std::nullopt;
  }
  return newest;
}

std::vector<wire::StepKey> Replication::Joinable(const Target& target) const {
  if (!target.group || coded_ == nullptr) return {};
  std::vector<wire::StepKey> out;
  for (int64_t step : coded_->StepsCodedByOthers(target.config.job_name, *target.group)) {
    const wire::StepKey key{target.config.job_name, target.config.node_rank, step};
    if (store_->Has(key)) out.push_back(key);
  }
  return out;
}

std::optional<wire::StepKey> Replication::Next(const std::optional<wire::StepKey>& retry,
                                               SteadyClock::time_point retry_at, int64_t priority,
                                               const std::vector<wire::StepKey>& joinable) {
  if (queue_.empty()) {
    if (retry && clock_->Now() >= retry_at) return retry;
    return std::nullopt;
  }
  // Newest first: older queued steps are superseded ... except the job's
  // on-demand step, which goes before everything, and in a coded group a
  // step the other members code.
  const wire::StepKey newest = queue_.back();
  wire::StepKey key = newest;
  for (const wire::StepKey& k : queue_) {
    if (priority != kNoSyncStep && k.step == priority) key = k;
  }
  // Not while a failed send waits out its backoff: the peer that failed
  // it would be asked again at once.
  const bool backing_off = retry && clock_->Now() < retry_at;
  if (key == newest && !backing_off) {
    std::set<int64_t> others;
    for (const wire::StepKey& k : joinable) {
      if (k.job == newest.job && k.rank == newest.rank) others.insert(k.step);
    }
    if (auto step = StepToJoin(others, newest_replicated_, restored_step_, newest.step)) {
      key.step = *step;
      Log()->debug("coding {}: the group's other members code it (newest held: step {})",
                   key.ToString(), newest.step);
    }
  }
  // Newest first: what stays queued is the newest (when another step goes
  // before it) and the requested steps; the rest are skipped. A requested
  // step whose send failed stays too, though newer steps came.
  std::erase(queue_, key);
  SkipQueued(newest);
  if (retry && !(*retry == key) &&
      std::find(queue_.begin(), queue_.end(), *retry) == queue_.end()) {
    if (requested_.count(retry->step)) {
      queue_.push_front(*retry);
    } else {
      metric::SkippedSteps("peer").Add();  // a failed send the newer one replaces
    }
  }
  return key;
}

void Replication::Main() {
  auto backoff = kMinRetry;
  std::optional<wire::StepKey> retry;  // the newest step some peer still lacks
  auto retry_at = clock_->Now();
  uint64_t retry_epoch = 0;  // the epoch `retry` belongs to
  while (!stopped_) {
    uint64_t epoch;
    {
      MutexLock l(&mu_);
      const auto until = std::chrono::steady_clock::now() + kIdleTick;
      while (!stopped_ && queue_.empty() && cv_.WaitUntil(&mu_, until)) {
      }
      if (stopped_) return;
      epoch = epoch_;
    }
    if (epoch != retry_epoch) {  // forgotten: a past incarnation's step is not retried
      retry.reset();
      retry_epoch = epoch;
      backoff = kMinRetry;
    }
    // The hooks take the agent's lock: asked once per turn, with none held.
    // The epoch, read before, ties this turn to the incarnation they describe.
    const int64_t priority = hooks_.priority_step();
    const std::optional<Target> target = hooks_.target();
    const std::vector<wire::StepKey> joinable =
        target ? Joinable(*target) : std::vector<wire::StepKey>{};
    std::optional<wire::StepKey> key;
    Ticket ticket;
    {
      MutexLock l(&mu_);
      if (epoch_ != epoch) continue;  // forgotten meanwhile: ask again
      if (!queue_.empty()) backoff = kMinRetry;
      key = Next(retry, retry_at, priority, joinable);
      if (key && target) {
        in_flight_ = InFlight{*key, epoch};
        ticket = sends_.Take();
      }
    }
    if (!target) continue;  // between incarnations nothing is sent or collected
    if (!key) {
      RefreshWatermark(*target, epoch);
      CollectGarbage(*target);
      continue;
    }
    bool all = false;
    SteadyClock::time_point failed_at = clock_->Now();
    sending_ = true;
    try {  // a peer's malformed reply must not end the thread
      all = SendEverywhere(*key, *target, epoch, ticket, &failed_at);
    } catch (const json::exception& e) {
      Log()->warn("replicating {}: malformed reply: {}", key->ToString(), e.what());
    }
    sending_ = false;
    {
      MutexLock l(&mu_);
      in_flight_.reset();
    }
    // A send may take minutes: collect for the incarnation served now.
    if (std::optional<Target> now = hooks_.target()) CollectGarbage(*now);
    if (all || !store_->Has(*key)) {  // done, or collected meanwhile: nothing to retry
      // Collected before every peer had it (a requested step too, once its
      // backup is committed): it counts as skipped.
      if (!all) metric::SkippedSteps("peer").Add();
      retry.reset();
      MutexLock l(&mu_);
      requested_.erase(key->step);
    } else {  // try again later; a peer may be restarting
      retry = key;
      retry_at = failed_at + backoff;
      backoff = std::min(backoff * 2, kMaxRetry);
    }
  }
}

bool Replication::SendEverywhere(const wire::StepKey& key, const Target& target, uint64_t epoch,
                                 const Ticket& ticket, SteadyClock::time_point* failed_at) {
  if (key.job != target.config.job_name) return true;  // a past incarnation's step
  const Status failed =
      target.group ? SendCoded(key, target, epoch, ticket) : SendCopies(key, target, epoch, ticket);
  if (!failed.ok()) {
    MutexLock l(&mu_);
    *failed_at = clock_->Now();  // as the failure shows in the progress
    if (epoch != epoch_) {       // ended by Restored(), or failed for a past incarnation
      Log()->info("replicating {}: given up, its incarnation is past ({})", key.ToString(),
                  failed.message());
      return false;
    }
    error_ = "replicating " + key.ToString() + " " + std::string(failed.message());
    return false;
  }
  {
    MutexLock l(&mu_);
    if (epoch != epoch_) return true;  // forgotten meanwhile: nothing to count or report
    error_.clear();
    newest_replicated_ = std::max(newest_replicated_, key.step);
    if (newest_replicated_ >= newest_ingested_) behind_since_.reset();
  }
  // Reported to the job served now, if it is still this step's.
  std::optional<Target> now = hooks_.target();
  if (now && now->config.job_name == key.job) Report(key, *now, epoch);
  return true;
}

// A copy to every peer; the first failure ("to node P: ...").
Status Replication::SendCopies(const wire::StepKey& key, const Target& target, uint64_t epoch,
                               const Ticket& ticket) {
  Status first;
  for (int peer : target.peers) {  // once cancelled, SendToPeer begins nothing
    auto addr = target.addresses.find(peer);
    Status s = addr == target.addresses.end()
                   ? UnavailableError("no address for node " + std::to_string(peer))
                   : SendToPeer(key, addr->second, ticket);
    if (ticket.cancelled()) return CancelledError("copies of " + key.ToString() + ": cancelled");
    if (s.ok()) {
      Counted(addr->second, key.step, epoch);
      continue;
    }
    if (addr != target.addresses.end()) metric::ReplicationFailures(addr->second).Add();
    Log()->warn("replicating {} to node {}: {} (will retry)", key.ToString(), peer, s.message());
    if (first.ok()) {
      first = Status(s.code(), "to node " + std::to_string(peer) + ": " + std::string(s.message()));
    }
  }
  return first;
}

// The step's chunks to the parity holders of its stripes (CodedTier); the
// first failure ("to group G: ...").
Status Replication::SendCoded(const wire::StepKey& key, const Target& target, uint64_t epoch,
                              const Ticket& ticket) {
  if (coded_ == nullptr) return FailedPreconditionError("to a coded group: no coded tier here");
  std::vector<std::string> done;
  Status s = coded_->Contribute(key, *target.group, target.addresses, &done, ticket);
  for (const std::string& address : done) Counted(address, key.step, epoch);
  if (s.ok() || ticket.cancelled()) return s;
  Log()->warn("coding {} for group {}: {} (will retry)", key.ToString(), target.group->ToString(),
              s.message());
  return Status(s.code(), "to group " + target.group->ToString() + ": " + std::string(s.message()));
}

// `peer` holds this node's `step` (a copy, or every chunk it is owed).
void Replication::Counted(const std::string& peer, int64_t step, uint64_t epoch) {
  MutexLock l(&mu_);
  if (epoch != epoch_) return;
  int64_t& newest = peer_newest_[peer];
  newest = std::max(newest, step);
}

StatusOr<RpcClient> Replication::ConnectFor(const Endpoint& to, const wire::StepKey& key,
                                            const Ticket& ticket) {
  if (ticket.cancelled()) return CancelledError("sending " + key.ToString() + ": cancelled");
  STRATA_ASSIGN_OR_RETURN(
      RpcClient client, RpcClient::Connect(to, options_.trust, "node " + std::to_string(key.rank)));
  if (ticket.cancelled()) return CancelledError("sending " + key.ToString() + ": cancelled");
  return client;
}

Status Replication::SendToPeer(const wire::StepKey& key, const std::string& address,
                               const Ticket& ticket) {
  STRATA_ASSIGN_OR_RETURN(Endpoint to, ParseEndpoint(address));
  STRATA_ASSIGN_OR_RETURN(StepIndex index, store_->GetIndex(key));
  STRATA_ASSIGN_OR_RETURN(RpcClient client, ConnectFor(to, key, ticket));
  const net::Cancellation::Registration registered(ticket, client.socket());
  const auto groups = index.total_bytes >= kMultiStreamMinBytes
                          ? PartitionFiles(index, options_.data_streams)
                          : std::vector<std::vector<size_t>>(1);
  const SteadyClock::time_point began = clock_->Now();
  wire::PutStepRequest put;
  put.key = key;
  put.index = index;
  put.streams = static_cast<int>(groups.size());
  put.dedup = true;
  put.range_streams = std::max(1, options_.data_streams);
  if (index.strata) {  // the receiver needs the manifest's ranges to find them
    STRATA_ASSIGN_OR_RETURN(put.ranges, HeldRanges(*store_, key, index));
  }
  STRATA_ASSIGN_OR_RETURN(json answer, client.Call(put.ToJson(), kCallTimeout));
  STRATA_ASSIGN_OR_RETURN(wire::PutStepReady ready, wire::PutStepReady::FromJson(answer));
  if (ready.have) return Status::Ok();  // the peer already holds this copy
  uint64_t sent = index.total_bytes;
  if (ready.need) {  // only what the peer lacks
    sent = 0;
    for (const auto& group : *ready.need) sent += TotalLength(group);
    if (ready.need->size() > 1 && !ready.transfer) {
      return InvalidArgumentError(address + " asked for " + std::to_string(ready.need->size()) +
                                  " range groups of " + key.ToString() + " without a transfer");
    }
    if (ready.need->size() > 1) {
      STRATA_RETURN_IF_ERROR(SendRangeGroups(to, key, index, *ready.transfer, *ready.need, ticket));
    } else if (ready.need->size() == 1) {
      STRATA_RETURN_IF_ERROR(
          SendRanges(client.socket(), store_->StepPath(key), index, ready.need->front()));
    }
  } else if (ready.transfer) {  // a receiver that takes whole files
    STRATA_RETURN_IF_ERROR(SendGroups(to, key, index, *ready.transfer, groups, ticket));
  } else {
    STRATA_RETURN_IF_ERROR(SendStepFiles(client.socket(), store_->StepPath(key), index));
  }
  STRATA_RETURN_IF_ERROR(AwaitCommitted(client.socket(), address));
  metric::ReplicationSeconds(address).Observe(SecondsSince(*clock_, began));
  metric::ReplicationBytes(address).Add(static_cast<double>(sent));
  metric::ReplicationDedupBytes(address).Add(static_cast<double>(index.total_bytes - sent));
  if (sent < index.total_bytes) {
    Log()->debug("replicated {} to {}: sent {} of {} bytes, the rest was held there",
                 key.ToString(), address, sent, index.total_bytes);
  }
  return Status::Ok();
}

// Sends each group of files on its own connection, in parallel.
Status Replication::SendGroups(const Endpoint& to, const wire::StepKey& key, const StepIndex& index,
                               uint64_t transfer, const std::vector<std::vector<size_t>>& groups,
                               const Ticket& ticket) {
  return RunParallel(groups.size(), groups.size(), [&](size_t g, const auto&) {
    STRATA_ASSIGN_OR_RETURN(RpcClient client, ConnectFor(to, key, ticket));
    const net::Cancellation::Registration registered(ticket, client.socket());
    STRATA_RETURN_IF_ERROR(
        client.Call(wire::PutFilesRequest{transfer, groups[g], {}}.ToJson(), kCallTimeout)
            .status());
    STRATA_RETURN_IF_ERROR(
        SendStepFiles(client.socket(), store_->StepPath(key), SubIndex(index, groups[g])));
    return AwaitCommitted(client.socket(), to.ToString());
  });
}

// Sends each group of ranges the receiver asked for on its own connection,
// in parallel.
Status Replication::SendRangeGroups(const Endpoint& to, const wire::StepKey& key,
                                    const StepIndex& index, uint64_t transfer,
                                    const std::vector<std::vector<wire::FileRange>>& need,
                                    const Ticket& ticket) {
  return RunParallel(need.size(), need.size(), [&](size_t g, const auto&) {
    STRATA_ASSIGN_OR_RETURN(RpcClient client, ConnectFor(to, key, ticket));
    const net::Cancellation::Registration registered(ticket, client.socket());
    STRATA_RETURN_IF_ERROR(
        client.Call(wire::PutFilesRequest{transfer, {}, g}.ToJson(), kCallTimeout).status());
    STRATA_RETURN_IF_ERROR(SendRanges(client.socket(), store_->StepPath(key), index, need[g]));
    return AwaitCommitted(client.socket(), to.ToString());
  });
}

void Replication::Report(const wire::StepKey& key, const Target& target, uint64_t epoch) {
  const ReplicatorConfig& c = target.config;
  wire::ReplicatedRequest req;
  req.job = c.job_name;
  req.node = c.node_rank;
  req.step = key.step;
  req.nodes = c.nodes;
  req.dp = c.assume_data_parallelism.value_or(1);
  req.cadence = hooks_.cadence(c);
  if (hooks_.fill_report) hooks_.fill_report(c, &req);
  auto r = hooks_.call_coordinator(c, req.ToJson(), kReportTimeout);
  if (!r.ok()) {
    Log()->warn("reporting step {} replicated: {}", key.step, r.status().message());
    return;
  }
  StatusOr<wire::ReplicatedReply> reply = wire::ReplicatedReply::FromJson(*r);
  if (!reply.ok()) {
    Log()->warn("reply to the report of {} replicated: {}", key.ToString(),
                reply.status().message());
    return;
  }
  hooks_.on_reply(c, req, *reply);
  MutexLock l(&mu_);
  // A watermark learned for a past incarnation could let garbage collection
  // drop a step the new one restores from.
  if (epoch == epoch_) watermark_ = std::max(watermark_, reply->watermark);
}

void Replication::RefreshWatermark(const Target& target, uint64_t epoch) {
  int64_t newest;
  {
    MutexLock l(&mu_);
    if (epoch != epoch_) return;
    newest = newest_replicated_;
  }
  if (newest >= 0) Report({target.config.job_name, target.config.node_rank, newest}, target, epoch);
}

// Between sends the sending thread collects by itself (Main).
void Replication::CollectNow() {
  if (!sending_) return;
  if (std::optional<Target> target = hooks_.target()) CollectGarbage(*target);
}

// Keeps, per node rank of the current job, what StepsToKeep keeps
// (retention.h) with the job-wide watermark (the newest step every node has
// replicated), or the step this start restored if newer, as the floor, and
// the floor before it in this start of the job as the previous one,
// bounded once the RAM disk is options_.bounded_collection_fill full; plus
// anything a client's symlink points to and what the hooks pin. Everything
// else goes, including steps of earlier job names.
void Replication::CollectGarbage(const Target& target) {
  MutexLock gc(&gc_mu_);
  const std::string& job = target.config.job_name;
  const double fill = FillOf(options_.local_dir).value_or(1.0);  // unknown: short
  const bool bounded = fill >= options_.bounded_collection_fill;
  int64_t floor, previous_floor;
  {
    MutexLock l(&mu_);
    floor = std::max(watermark_, restored_step_);
    if (floor > floor_) {
      previous_floor_ = floor_;
      floor_ = floor;
    }
    previous_floor = previous_floor_;
    // Once per floor: with the watermark stuck, collection swings between
    // the two every few saves.
    if (bounded && floor != bounded_floor_) {
      Log()->info(
          "gc: the RAM disk {} is {:.0f}% full and the restore point is step {}: collection "
          "keeps that step, the last one ({}), and the two newest above it until the disk is "
          "below {:.0f}%",
          options_.local_dir, fill * 100, floor,
          previous_floor < 0 ? std::string("none") : std::to_string(previous_floor),
          options_.bounded_collection_fill * 100);
      bounded_floor_ = floor;
    }
  }
  const std::set<wire::StepKey> pinned = hooks_.pins();
  const std::vector<std::string> targets = local_.SymlinkTargets();
  std::map<int, std::set<int64_t>> by_rank;
  auto held = store_->List();
  for (const auto& [key, index] : held) {
    if (key.job == job) by_rank[key.rank].insert(key.step);
  }
  std::map<int, std::set<int64_t>> keep;
  for (const auto& [rank, steps] : by_rank)
    keep[rank] = StepsToKeep(steps, floor, bounded, previous_floor);
  for (const auto& [key, index] : held) {
    // Steps of an earlier job name cannot be restored by this job: they go.
    if (key.job == job && keep[key.rank].count(key.step)) continue;
    if (pinned.count(key)) continue;
    const std::string rel = store_->RelativeStepPath(key);
    if (std::any_of(targets.begin(), targets.end(),
                    [&](const std::string& t) { return t == rel || t.starts_with(rel + "/"); })) {
      continue;  // a client still reads it through a symlink
    }
    Log()->debug("gc: removing {}", key.ToString());
    Status s = store_->Remove(key);
    if (!s.ok()) Log()->warn("gc: {}", s.message());
  }
  if (coded_ != nullptr) coded_->CollectGarbage(job, floor, bounded, previous_floor);
}

// A peer sends us a copy: say whether we already have it, then receive the
// files into a temporary directory, verify and commit them, and acknowledge.
// A sender that offers dedup gets the ranges this node cannot take from the
// steps it holds (ReceiveByContent).
StatusOr<json> Replication::HandlePutStep(const wire::PutStepRequest& request,
                                          net::Socket& socket) {
  const wire::StepKey& key = request.key;
  const StepIndex& index = request.index;
  auto held = store_->GetIndex(key);
  if (held.ok() && held->digest == index.digest) return wire::PutStepReady{true, {}, {}}.ToJson();
  STRATA_RETURN_IF_ERROR(CheckRoomToReceive(options_.local_dir, index.total_bytes, key.ToString()));
  STRATA_ASSIGN_OR_RETURN(std::string dir, store_->NewIncomingDir());
  uint64_t taken = 0;
  Status s = request.dedup ? ReceiveByContent(request, socket, dir, &taken)
                           : ReceiveFiles(request, socket, dir);
  if (s.ok()) s = store_->Adopt(dir, key, index);
  if (!s.ok()) {
    env_->RemoveAll(dir).IgnoreError();
    return DataLossError("receiving " + key.ToString() + " from " + socket.peer() + ": " +
                         s.message());
  }
  if (taken > 0) {
    Log()->info("holding replica {} from {} ({} bytes, {} of them taken from steps held here)",
                key.ToString(), socket.peer(), index.total_bytes, taken);
  } else {
    Log()->info("holding replica {} from {} ({} bytes)", key.ToString(), socket.peer(),
                index.total_bytes);
  }
  hooks_.on_replica(key, index.digest);
  return json{{"committed", true}};
}

// Whole files, on this connection or (several streams) on put_files ones.
Status Replication::ReceiveFiles(const wire::PutStepRequest& request, net::Socket& socket,
                                 const std::string& dir) {
  const StepIndex& index = request.index;
  if (request.streams > 1 && index.files.size() > 1) {  // the files arrive on other connections
    const uint64_t id = transfers_.Begin(dir, index);
    Status s = SendReply(socket, wire::PutStepReady{false, id, {}}.ToJson());
    if (s.ok()) s = transfers_.Wait(id, kStallTimeout);
    transfers_.End(id);
    return s;
  }
  STRATA_RETURN_IF_ERROR(SendReply(socket, wire::PutStepReady{}.ToJson()));
  return RecvStepFiles(socket, dir, index, store_);
}

// The copy's files are made at their final sizes, every offered range found
// in a step held here is copied in (hashed as it is copied), and the sender
// is asked for the rest, in up to `data_streams` groups.
Status Replication::ReceiveByContent(const wire::PutStepRequest& request, net::Socket& socket,
                                     const std::string& dir, uint64_t* taken_bytes) {
  const StepIndex& index = request.index;
  AwaitOwnStepForDedup(request.key);
  STRATA_RETURN_IF_ERROR(CreateStepFiles(dir, index, store_));
  std::vector<wire::FileRange> have;
  wire::RangePlan offered;
  if (request.ranges) {
    offered = *request.ranges;
  } else if (!index.strata) {
    STRATA_ASSIGN_OR_RETURN(offered, PlanRangeChecks(index, nullptr));
  }
  if (!offered.files.empty()) {
    STRATA_ASSIGN_OR_RETURN(Taken taken, TakeHeldRanges(*store_, request.key.job, index, offered,
                                                        dir, options_.data_streams));
    have = std::move(taken.ranges);
    *taken_bytes = taken.bytes;
  }
  const std::vector<wire::FileRange> missing = MissingRanges(index, have);
  const uint64_t bytes = TotalLength(missing);
  // The sender opens one connection per group: as many as both sides allow.
  const int streams =
      bytes >= kMultiStreamMinBytes ? std::min(request.range_streams, options_.data_streams) : 1;
  auto need = PartitionRanges(missing, streams, kRangePiece);
  if (need.size() <= 1) {
    STRATA_RETURN_IF_ERROR(SendReply(socket, wire::PutStepReady{false, {}, need}.ToJson()));
    return need.empty() ? Status::Ok() : RecvRanges(socket, dir, index, need.front());
  }
  const uint64_t id = transfers_.Begin(dir, index, need);
  Status s = SendReply(socket, wire::PutStepReady{false, id, std::move(need)}.ToJson());
  if (s.ok()) s = transfers_.Wait(id, kStallTimeout);
  transfers_.End(id);
  return s;
}

// With data parallelism the peer at this node's position in another
// replica sends a step whose bytes this node's own step of that number
// holds too: when it is not here yet, wait a little for it (the ranks of a
// data-parallel job save each step at about the same time) rather than
// receive it all.
void Replication::AwaitOwnStepForDedup(const wire::StepKey& key) {
  const std::optional<Target> target = hooks_.target();
  if (!target || target->config.job_name != key.job) return;
  const ReplicatorConfig& c = target->config;
  const int dp = c.assume_data_parallelism.value_or(1);
  if (dp <= 1 || c.nodes % dp != 0 || key.rank == c.node_rank) return;
  const int width = c.nodes / dp;
  if (key.rank % width != c.node_rank % width) return;
  const auto until = std::chrono::steady_clock::now() + kDedupWait;
  MutexLock l(&mu_);
  while (!stopped_ && newest_ingested_ < key.step && cv_.WaitUntil(&mu_, until)) {
  }
}

// One group of files (or of ranges) of a multi-stream put_step: receive it
// into the transfer's directory and tell the waiting put_step.
StatusOr<json> Replication::HandlePutFiles(const wire::PutFilesRequest& request,
                                           net::Socket& socket) {
  const uint64_t id = request.transfer;
  std::string dir;
  StepIndex index;
  STRATA_RETURN_IF_ERROR(transfers_.Lookup(id, &dir, &index));
  if (request.group) {
    STRATA_ASSIGN_OR_RETURN(std::vector<wire::FileRange> ranges,
                            transfers_.ClaimGroup(id, *request.group));
    Status s = SendReply(socket, {{"ok", true}});
    if (s.ok()) s = RecvRanges(socket, dir, index, ranges);
    transfers_.Finish(id, s.ok() ? 1 : 0, s);
    if (!s.ok()) {
      return DataLossError("receiving range group " + std::to_string(*request.group) +
                           " of transfer " + std::to_string(id) + " from " + socket.peer() + ": " +
                           s.message());
    }
    return json{{"received", ranges.size()}};
  }
  STRATA_RETURN_IF_ERROR(wire::CheckFilePositions(request.files, index.files.size()));
  StepIndex group = SubIndex(index, request.files);
  Status s = SendReply(socket, {{"ok", true}});
  if (s.ok()) s = RecvStepFiles(socket, dir, group, store_);
  transfers_.Finish(id, s.ok() ? group.files.size() : 0, s);
  if (!s.ok()) {  // closes this connection
    return DataLossError("receiving files of transfer " + std::to_string(id) + " from " +
                         socket.peer() + ": " + s.message());
  }
  return json{{"received", group.files.size()}};
}

// A peer about to restore from us: the index of our copy.
StatusOr<json> Replication::HandleGetIndex(const wire::GetIndexRequest& request) {
  STRATA_ASSIGN_OR_RETURN(StepIndex index, store_->GetIndex(request.key));
  return wire::IndexReply{std::move(index)}.ToJson();
}

// A peer restores from us: send the index in the reply, then the files —
// all of them, or with "files" (positions in the index) and "digest" one
// group of a multi-stream fetch, of that very copy.
StatusOr<json> Replication::HandleFetchStep(const wire::FetchStepRequest& request,
                                            net::Socket& socket) {
  const wire::StepKey& key = request.key;
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
  if (!s.ok()) {  // closes the connection
    return DataLossError("serving " + key.ToString() + " to " + socket.peer() + ": " + s.message());
  }
  Log()->info("served {} to {}", key.ToString(), socket.peer());
  return json{{"closed", true}};  // the data was the answer: no reply frame
}

}  // namespace strata::agent
