// Copyright 2026 The Strata Authors.
//
// The client side of the replicator protocol. Everything here polls: the
// agent answers through files in the local directory, and a client must not
// depend on inotify semantics of the file system it happens to be on.
#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "format/naming.h"
#include "strata/env.h"
#include "strata/replicator.h"
#include "util/file_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool Exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

// Polls `done` every 10 ms. DEADLINE_EXCEEDED (with `what`) after the job's
// timeout; the status of job.cancelled() when that is not OK.
Status WaitFor(const std::function<bool()>& done, const AgentJob& job, const std::string& what) {
  auto deadline = Clock::now() + job.timeout;
  while (!done()) {
    if (job.cancelled) STRATA_RETURN_IF_ERROR(job.cancelled());
    if (Clock::now() > deadline) return DeadlineExceededError(what);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::Ok();
}

// What the agent wrote into replicator.failed, or why it cannot be read.
std::string FailureReason(const fs::path& p) {
  auto text = ReadFileToString(Env::Default(), p.string(), 64 << 10);
  if (!text.ok()) return "(unreadable: " + text.status().message() + ")";
  std::string s = std::move(*text);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

Status Validate(const AgentJob& j) {
  STRATA_RETURN_IF_ERROR(ValidateJobName(j.job));  // the agent's rule
  if (j.nodes < 1 || j.node_rank < 0 || j.node_rank >= j.nodes) {
    return InvalidArgumentError("job " + j.job + ": node rank " + std::to_string(j.node_rank) +
                                " is not in [0, " + std::to_string(j.nodes) + ")");
  }
  if (j.peers_per_node < 0 || j.assume_data_parallelism < 0 || j.backup_interval_steps < 0 ||
      j.backup_interval_minutes < 0) {
    return InvalidArgumentError("job " + j.job + ": a negative count in the agent job");
  }
  if (j.timeout.count() < 0) {
    return InvalidArgumentError("job " + j.job + ": the agent timeout is negative");
  }
  if (j.style != "orbax" && j.style != "nemo") {
    return InvalidArgumentError("job " + j.job + ": unknown client style '" + j.style +
                                "' (orbax or nemo)");
  }
  return Status::Ok();
}

std::string YamlText(const AgentJob& j) {
  std::string y = "job-name: " + j.job + "\nnode-rank: " + std::to_string(j.node_rank) +
                  "\nnodes: " + std::to_string(j.nodes) + "\n";
  if (j.assume_data_parallelism > 0) {
    y += "assume-data-parallelism: " + std::to_string(j.assume_data_parallelism) + "\n";
  }
  if (!j.redundancy.empty()) y += "redundancy: " + j.redundancy + "\n";
  std::string cadence;  // NeMo always writes one; 30 minutes is its default
  if (j.backup_interval_steps > 0) {
    cadence = "backup-interval-steps: " + std::to_string(j.backup_interval_steps);
  } else if (j.backup_interval_minutes > 0 || j.style == "nemo") {
    cadence = "backup-interval-minutes: " +
              std::to_string(j.backup_interval_minutes > 0 ? j.backup_interval_minutes : 30);
  }
  if (j.style == "nemo") {  // block style, in place, peers-per-node, no trailing newline
    return "framework: pytorch.distributed\n" + y +
           "peers-per-node: " + std::to_string(j.peers_per_node) + "\n" + cadence;
  }
  if (!cadence.empty()) y += cadence + "\n";
  std::string peers;  // explicit peers, spread like the agent's default
  int stride = (j.nodes + j.peers_per_node) / (j.peers_per_node + 1);
  for (int k = 1; k <= j.peers_per_node && k < j.nodes; ++k) {
    peers += (peers.empty() ? "" : ", ") + std::to_string((j.node_rank + k * stride) % j.nodes);
  }
  return "framework: orbax\n" + y + "peer-ranks: [" + peers + "]\n";
}

Status WriteYaml(const fs::path& dir, const AgentJob& j) {
  fs::path yaml = dir / kReplicatorYaml;
  STRATA_RETURN_IF_ERROR(WaitFor([&] { return !Exists(yaml); }, j,
                                 "a stale " + yaml.string() + " was never taken by an agent"));
  // Written exactly as the clients write it (orbax: a temporary file renamed
  // into place; nemo: in place), not with the commit protocol: the agent
  // must take what the real clients write, and this client exists to prove it.
  fs::path target = j.style == "nemo" ? yaml : dir / kReplicatorYamlTmp;
  {
    std::ofstream f(target, std::ios::trunc);
    f << YamlText(j);
    f.close();
    if (!f) return ErrnoToStatus(errno, "write " + target.string());
  }
  std::error_code ec;
  if (target != yaml) fs::rename(target, yaml, ec);
  if (ec) return ErrnoToStatus(ec.value(), "rename " + target.string() + " -> " + yaml.string());
  return Status::Ok();
}

// The markers for this job and node, highest step first.
std::vector<std::pair<int64_t, fs::path>> Markers(const fs::path& dir, const AgentJob& j) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    auto m = ParseWorkerFileName(it->path().filename().string(), ".restore");
    if (m && m->job == j.job && m->node == j.node_rank) out.emplace_back(m->step, it->path());
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

}  // namespace

StatusOr<std::optional<RestorePoint>> AgentHandshake(const std::string& local_dir,
                                                     const AgentJob& j) {
  STRATA_RETURN_IF_ERROR(Validate(j));
  const fs::path dir(local_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return ErrnoToStatus(ec.value(), "create " + local_dir);
  STRATA_RETURN_IF_ERROR(WriteYaml(dir, j));
  const fs::path yaml = dir / kReplicatorYaml;
  Status accepted = WaitFor(
      [&] { return !Exists(yaml); }, j,
      "no agent accepted " + yaml.string() + " within " + std::to_string(j.timeout.count()) + " s");
  if (!accepted.ok()) {
    fs::remove(yaml, ec);  // ours, never taken: the next attempt must not find it stale
    return accepted;
  }
  // The agent may fail the job after accepting it (e.g. a rollback it cannot
  // do), so replicator.failed is checked while waiting, too.
  const fs::path failed = dir / kFailedFile;
  auto refused = [&] {
    std::string why = FailureReason(failed);
    fs::remove(failed, ec);
    return FailedPreconditionError("the agent refused job " + j.job + " in " + local_dir + ": " +
                                   why);
  };
  if (j.style == "nemo") {
    STRATA_RETURN_IF_ERROR(WaitFor([&] { return Exists(dir / kPrerestoreFile) || Exists(failed); },
                                   j, "no " + std::string(kPrerestoreFile) + " in " + local_dir));
  }
  STRATA_RETURN_IF_ERROR(WaitFor([&] { return !Markers(dir, j).empty() || Exists(failed); }, j,
                                 "no restore marker for job " + j.job + " node " +
                                     std::to_string(j.node_rank) + " in " + local_dir));
  if (Exists(failed)) return refused();
  auto markers = Markers(dir, j);
  auto [step, marker] = markers.front();
  for (size_t i = 1; i < markers.size(); ++i) fs::remove(markers[i].second, ec);
  if (step == 0 && fs::is_regular_file(fs::symlink_status(marker, ec))) {
    fs::remove(marker, ec);
    return std::optional<RestorePoint>();
  }
  const fs::path link = dir / (j.style == "nemo" ? "step=" + StepDirName(step) : StepDirName(step));
  fs::rename(marker, link, ec);
  if (ec) return ErrnoToStatus(ec.value(), "rename " + marker.string() + " -> " + link.string());
  fs::path target = fs::read_symlink(link, ec);  // relative to the local directory
  if (ec) return ErrnoToStatus(ec.value(), "read marker " + link.string());
  return std::optional<RestorePoint>(RestorePoint{(dir / target).parent_path().string(), step});
}

}  // namespace strata
