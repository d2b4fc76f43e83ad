// Copyright 2026 The Strata Authors.
#include "agent/node/client_files.h"

#include <map>

#include "agent/metrics/agent_metrics.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

constexpr uint64_t kMaxYamlBytes = 1 << 20;
constexpr auto kLookAtLeastEvery = std::chrono::seconds(1);
// Longer than the longest client timeout (NeMo's 900 s).
constexpr std::chrono::nanoseconds kPendingStartLifetime = std::chrono::minutes(20);

}  // namespace

ClientFiles::ClientFiles(Env* env, SteadyClock* clock, Store* store, const LocalDir* local,
                         Options options)
    : env_(env), clock_(clock), store_(store), local_(local), options_(std::move(options)) {}

std::string ClientFiles::yaml_path() const {
  return JoinPath(local_->path(), std::string(kReplicatorYaml));
}

StatusOr<bool> ClientFiles::Watch() {
  ResumePendingStart();
  STRATA_ASSIGN_OR_RETURN(DirWatcher watcher, DirWatcher::Open(local_->path()));
  watcher_.emplace(std::move(watcher));
  if (watcher_->polling()) {
    Log()->warn("no inotify for {} ({}): rescanning it every second instead", local_->path(),
                watcher_->reason());
  }
  last_look_ = clock_->Now();
  return !watcher_->polling() && env_->Exists(yaml_path());
}

// The previous agent process took a yaml and died before it answered it:
// the client still polls for markers. The yaml goes back (tmp + rename, as
// clients write it) and is taken as if the client had just written it.
void ClientFiles::ResumePendingStart() {
  const std::string& pending = options_.pending_start;
  if (pending.empty() || !env_->Exists(pending)) return;
  const std::string tmp = JoinPath(local_->path(), std::string(kReplicatorYamlTmp));
  if (env_->Exists(yaml_path()) || env_->Exists(tmp)) {  // the client started again: that counts
    EndPendingStart().IgnoreError();
    return;
  }
  // No client waits longer than its timeout (300-900 s): an older start is
  // nobody's, and resuming it would only open a round no one joins.
  if (std::optional<std::chrono::nanoseconds> age = Age(pending);
      age && *age > kPendingStartLifetime) {
    Log()->info("dropping the start left pending in {}: older than any client waits", pending);
    EndPendingStart().IgnoreError();
    return;
  }
  auto text = ReadFileToString(env_, pending, kMaxYamlBytes);
  Status s = text.ok() ? WriteFileAtomic(env_, yaml_path(), *text) : text.status();
  if (!s.ok()) {
    Log()->error("cannot resume the start left pending in {}: {}", pending, s.message());
    return;
  }
  Log()->info("resuming the start the previous agent process left unanswered ({} put back)",
              yaml_path());
}

Status ClientFiles::EndPendingStart() {
  if (options_.pending_start.empty()) return Status::Ok();
  Status s = env_->RemoveFile(options_.pending_start);
  if (s.ok() || s.code() == StatusCode::kNotFound) return Status::Ok();
  Log()->warn("removing {}: {}", options_.pending_start, s.message());
  return s;
}

StatusOr<std::optional<bool>> ClientFiles::Wait(std::chrono::milliseconds timeout) {
  STRATA_ASSIGN_OR_RETURN(auto events, watcher_->Wait(timeout));
  bool yaml = false, changed = false;
  for (const auto& e : events) {
    yaml |= e.name == kReplicatorYaml && (e.closed_write || e.moved_in);
    changed |= e.overflow || e.moved_in || e.created || e.closed_write;
  }
  if (!changed && !yaml && clock_->Now() - last_look_ <= kLookAtLeastEvery) {
    return std::optional<bool>();
  }
  last_look_ = clock_->Now();
  if (watcher_->polling()) yaml = PolledYamlSettled();
  return std::optional<bool>(yaml);
}

// Without inotify no close tells that a client finished writing the yaml:
// it counts as complete once two rescans a second apart find it non-empty
// and unchanged: the same file, size and modification time, or, where the
// Env cannot say (a symlink, an Env without Identify), the same contents.
bool ClientFiles::PolledYamlSettled() {
  std::string seen;
  StatusOr<FileIdentity> id = env_->Identify(yaml_path());
  if (id.ok()) {
    if (id->size > 0) {
      seen = "i:" + std::to_string(id->inode) + ":" + std::to_string(id->size) + ":" +
             std::to_string(id->mtime_ns);
    }
  } else if (id.status().code() != StatusCode::kNotFound) {
    auto text = ReadFileToString(env_, yaml_path(), kMaxYamlBytes);
    if (text.ok() && !text->empty()) seen = "c:" + Hex64(Xxh3(text->data(), text->size()));
  }
  if (seen.empty()) taken_yaml_.clear();  // gone: the next one is new, whatever it holds
  const bool settled = !seen.empty() && seen == polled_yaml_ && seen != taken_yaml_;
  polled_yaml_ = seen;
  if (settled) taken_yaml_ = seen;  // reported once, as inotify reports a close once
  return settled;
}

StatusOr<ReplicatorConfig> ClientFiles::TakeYaml() {
  const std::string path = yaml_path();
  StatusOr<FileIdentity> identity = env_->Identify(path);
  taken_identity_ = identity.ok() ? std::optional(*identity) : std::nullopt;
  auto text = ReadFileToString(env_, path, kMaxYamlBytes);
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) return text.status();
  StatusOr<ReplicatorConfig> parsed =
      text.ok() ? ParseReplicatorConfig(*text) : StatusOr<ReplicatorConfig>(text.status());
  if (!text.ok() && text.status().code() == StatusCode::kResourceExhausted) {
    parsed = InvalidArgumentError("replicator.yaml: larger than 1 MiB");
  }
  yaml_warnings_.clear();
  if (!parsed.ok()) {
    Log()->error("rejecting {}: {}", path, parsed.status().message());
    local_->ClearReports();  // an earlier start's: the client reads them as this one's
    local_->ReportToClient(parsed.status().message(), /*fatal=*/true);
    env_->RemoveFile(path).IgnoreError();
    return parsed.status();
  }
  for (const auto& k : parsed->unknown_keys) {
    yaml_warnings_.push_back(std::string(kReplicatorYaml) + ": ignoring unknown key \"" + k + "\"");
    Log()->warn("{}: ignoring unknown key \"{}\"", path, k);
  }
  if (!options_.pending_start.empty()) {  // before Restore removes the yaml
    Status kept = WriteFileAtomic(env_, options_.pending_start, *text);
    if (!kept.ok()) Log()->warn("keeping {} as the pending start: {}", path, kept.message());
  }
  for (const auto& note : parsed->notes) Log()->info("{}: {}", path, note);
  if (options_.node_rank && *options_.node_rank != parsed->node_rank) {
    const std::string why = fmt::format(
        "{}: node-rank {} differs from this agent's --node-rank {} ({} says {})", kReplicatorYaml,
        parsed->node_rank, *options_.node_rank, kJaxInitInfoFile, *options_.node_rank);
    yaml_warnings_.push_back(why);
    Log()->warn("{}", why);
  }
  return parsed;
}

void ClientFiles::Fail(const Status& why) {
  local_->ReportToClient(std::string(why.message()), /*fatal=*/true);
  env_->RemoveFile(yaml_path()).IgnoreError();
}

void ClientFiles::KeepJaxInitInfo() {
  if (!options_.node_rank) return;
  const std::string& coordinator = options_.jax_coordinator;
  Status s = local_->EnsureJaxInitInfo(*options_.node_rank, coordinator);
  if (!s.ok() && !jax_init_info_failed_) {
    Log()->error("cannot write {}/{}: {}", local_->path(), kJaxInitInfoFile, s.message());
  }
  if (s.ok() && !jax_init_info_written_) {
    Log()->info("{}/{}: process index {}, JAX coordinator {}", local_->path(), kJaxInitInfoFile,
                *options_.node_rank, coordinator);
  }
  jax_init_info_failed_ = !s.ok();
  jax_init_info_written_ |= s.ok();
}

namespace {

// The RAM line logged for a new largest step: the steady state, (3 + 2k) S
// with k peers' copies, (3 + 2 m/k) S with a coded group's parity.
void LogRamNeeded(uint64_t bytes, const ClientFiles::PeerTier& tier) {
  if (tier.redundancy.coded() && tier.k > 0) {
    const double parity = static_cast<double>(tier.redundancy.m) / tier.k;
    const double factor = 3.0 + 2.0 * parity;
    Log()->info(
        "RAM needed for {}-byte steps with {} (k={} in this group): about {:.0f} bytes "
        "({:.2f}x): the client's step in progress, 2 own steps and their parity ({:.2f} of a "
        "step each), {:.2f} more while a shard is rewritten",
        bytes, tier.redundancy.ToString(), tier.k, factor * static_cast<double>(bytes), factor,
        parity, parity);
    return;
  }
  const uint64_t in = tier.peers;  // copies others send here, by symmetry
  Log()->info(
      "RAM needed for {}-byte steps with {} peer(s): about {} bytes ({:.1f}x): the "
      "client's step in progress, 2 own steps and 2 steps per node replicating here",
      bytes, in, (3 + 2 * in) * bytes, 3.0 + 2.0 * static_cast<double>(in));
}

}  // namespace

bool ClientFiles::TakeBackupRequest(const std::string& dir, bool* alone) {
  auto entries = env_->ListDir(dir);
  if (!entries.ok()) return false;
  bool found = false;
  for (const auto& e : *entries) found |= e.name == kBackupRequestedFile;
  *alone = found && entries->size() == 1;
  if (!found) return false;
  Status s = env_->RemoveAll(JoinPath(dir, std::string(kBackupRequestedFile)));
  if (!s.ok()) Log()->warn("taking the backup request out of {}: {}", dir, s.message());
  return s.ok();
}

std::vector<wire::StepKey> ClientFiles::Ingest(const ReplicatorConfig& job, const PeerTier& tier,
                                               std::set<int64_t>* requested) {
  if (job.framework == Framework::kPytorch) GatherPytorchSaves(job);
  std::vector<wire::StepKey> ingested;
  for (int64_t step : local_->CommittedSteps()) {
    const wire::StepKey key{job.job_name, job.node_rank, step};
    const std::string dir = JoinPath(local_->path(), std::to_string(step));
    bool alone = false;
    const bool asked = TakeBackupRequest(dir, &alone);
    if (asked && requested != nullptr) requested->insert(step);
    if (alone) {  // a request for a step taken in before: no step to take
      env_->RemoveAll(dir).IgnoreError();
      if (!store_->Has(key)) {
        local_->ReportToClient("a backup of step " + std::to_string(step) +
                                   " was requested, but this node does not hold that step",
                               /*fatal=*/false);
      }
      continue;
    }
    const SteadyClock::time_point began = clock_->Now();
    auto index = store_->Ingest(dir, key);
    if (!index.ok()) {
      Log()->error("{}", index.status().message());
      local_->ReportToClient(std::string(index.status().message()), /*fatal=*/false);
      continue;
    }
    Log()->info("ingested step {} ({} bytes, digest {})", step, index->total_bytes,
                Hex64(index->digest));
    metric::LocalCommitSeconds().Observe(SecondsSince(*clock_, began));
    metric::LocalCommitBytes().Add(static_cast<double>(index->total_bytes));
    if (index->total_bytes > largest_step_bytes_) {
      largest_step_bytes_ = index->total_bytes;
      LogRamNeeded(largest_step_bytes_, tier);
    }
    ingested.push_back(key);
  }
  return ingested;
}

// PyTorch clients write their .save files in place: a file is only taken
// once it has not changed for a second.
std::optional<std::chrono::nanoseconds> ClientFiles::Age(const std::string& path) const {
  StatusOr<FileIdentity> id = env_->Identify(path);
  if (!id.ok()) return std::nullopt;
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  return std::chrono::nanoseconds(now_ns - id->mtime_ns);
}

bool ClientFiles::AllSettled(const std::vector<std::string>& files) const {
  for (const auto& f : files) {
    std::optional<std::chrono::nanoseconds> age = Age(JoinPath(local_->path(), f));
    if (!age || *age < std::chrono::seconds(1)) return false;
  }
  return true;
}

// PyTorch clients write one file per worker, <job>-s<step>-n<node>-w<w>.save;
// once all workers' files of a step are there, they become one step
// directory, published by the commit protocol as every step directory is.
void ClientFiles::GatherPytorchSaves(const ReplicatorConfig& job) {
  const std::string& dir = local_->path();
  auto entries = env_->ListDir(dir);
  if (!entries.ok()) return;
  std::map<int64_t, std::vector<std::string>> by_step;
  for (const auto& e : *entries) {
    auto n = ParseWorkerFileName(e.name, ".save");
    if (n && e.type == DirEntry::Type::kFile && n->job == job.job_name &&
        n->node == job.node_rank) {
      by_step[n->step].push_back(e.name);
    }
  }
  for (const auto& [step, files] : by_step) {
    if (static_cast<int>(files.size()) < job.workers_per_node) continue;
    if (!AllSettled(files)) continue;  // a worker may still be writing
    const std::string tmp = JoinPath(dir, TempDirName(step));
    Status s = env_->CreateDir(tmp);
    for (const auto& f : files) {
      if (s.ok()) s = env_->Rename(JoinPath(dir, f), JoinPath(tmp, f));
    }
    if (s.ok()) s = CommitDir(env_, tmp, JoinPath(dir, std::to_string(step)));
    if (!s.ok()) Log()->error("collecting the .save files of step {}: {}", step, s.message());
  }
}

}  // namespace strata::agent
