// Copyright 2026 The Strata Authors.
#include "replicator_client.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

namespace toy {
namespace {

namespace fs = std::filesystem;
using strata::Status;

bool WaitFor(const std::function<bool()>& done, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::string Slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string YamlText(const ReplicatorJob& j) {
  std::string y = "job-name: " + j.job + "\nnode-rank: " + std::to_string(j.node_rank) +
                  "\nnodes: " + std::to_string(j.nodes) + "\n";
  if (j.data_parallelism > 0) {
    y += "assume-data-parallelism: " + std::to_string(j.data_parallelism) + "\n";
  }
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
  std::string peers;  // orbax: flow list of explicit peers, spread like the agent's default
  int stride = (j.nodes + j.peers_per_node) / (j.peers_per_node + 1);
  for (int k = 1; k <= j.peers_per_node && k < j.nodes; ++k) {
    peers += (peers.empty() ? "" : ", ") + std::to_string((j.node_rank + k * stride) % j.nodes);
  }
  return "framework: orbax\n" + y + "peer-ranks: [" + peers + "]\n";
}

Status WriteYaml(const fs::path& dir, const ReplicatorJob& j) {
  fs::path yaml = dir / "replicator.yaml";
  if (!WaitFor([&] { return !fs::exists(yaml); }, j.timeout)) {
    return strata::DeadlineExceededError("a stale " + yaml.string() + " never went away");
  }
  fs::path target = j.style == "nemo" ? yaml : dir / "replicator.yaml.tmp";
  std::ofstream(target) << YamlText(j);
  if (j.style != "nemo") fs::rename(target, yaml);
  return Status::Ok();
}

// The markers for this job and node, highest step first.
std::vector<std::pair<int64_t, fs::path>> Markers(const fs::path& dir, const ReplicatorJob& j) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::string prefix = j.job + "-s";
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (!n.starts_with(prefix) || !n.ends_with(".restore")) continue;
    out.emplace_back(std::stoll(n.substr(prefix.size())), e.path());
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

}  // namespace

strata::StatusOr<std::optional<RestorePoint>> Handshake(const std::string& local_dir,
                                                        const ReplicatorJob& j) {
  fs::path dir(local_dir);
  fs::create_directories(dir);
  STRATA_RETURN_IF_ERROR(WriteYaml(dir, j));
  if (!WaitFor([&] { return !fs::exists(dir / "replicator.yaml"); }, j.timeout)) {
    return strata::DeadlineExceededError("the agent never accepted " +
                                         (dir / "replicator.yaml").string());
  }
  // The agent may also fail the job after accepting it (e.g. a rollback it
  // cannot do): replicator.failed is checked while waiting, too.
  const fs::path failed = dir / "replicator.failed";
  auto refused = [&] {
    std::string why = Slurp(failed);
    fs::remove(failed);
    return strata::FailedPreconditionError("the agent refused the job: " + why);
  };
  if (fs::exists(failed)) return refused();
  if (j.style == "nemo" &&
      !WaitFor([&] { return fs::exists(dir / "replicator.prerestore") || fs::exists(failed); },
               j.timeout)) {
    return strata::DeadlineExceededError("no replicator.prerestore in " + local_dir);
  }
  if (!WaitFor([&] { return !Markers(dir, j).empty() || fs::exists(failed); }, j.timeout)) {
    return strata::DeadlineExceededError("no restore marker in " + local_dir);
  }
  if (fs::exists(failed)) return refused();
  auto markers = Markers(dir, j);
  auto [step, marker] = markers.front();
  for (size_t i = 1; i < markers.size(); ++i) fs::remove(markers[i].second);
  if (step == 0 && fs::is_regular_file(fs::symlink_status(marker))) {
    fs::remove(marker);
    return std::optional<RestorePoint>();
  }
  fs::path link = dir / (j.style == "nemo" ? "step=" + std::to_string(step) : std::to_string(step));
  fs::rename(marker, link);
  fs::path target = fs::read_symlink(link);  // relative to the local directory
  return std::optional<RestorePoint>(RestorePoint{(dir / target).parent_path().string(), step});
}

}  // namespace toy
