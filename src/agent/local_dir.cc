// Copyright 2026 The Strata Authors.
#include "agent/local_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <climits>

#include "agent/store.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

Env* env() { return Env::Default(); }

bool IsClientTempDir(std::string_view name) {
  return name.find(".orbax-checkpoint-tmp") != std::string_view::npos || IsTempName(name) ||
         name.ends_with(".tmp");
}

// Should cleanup remove this entry of the local directory?
bool IsProtocolLeftover(const DirEntry& e) {
  const std::string& n = e.name;
  if (n == kAgentDirName || n == kReplicatorYamlTmp) return false;
  if (n == kPrerestoreFile || n == kErrorsFile || n == kFailedFile) return true;
  if (n.ends_with(".restore") || n.ends_with(".save")) return true;
  if (IsClientTempDir(n)) return true;
  if (ParseStepDirName(n) || n.starts_with("step=")) return true;
  return false;
}

// Creates the marker `path` at once under its final name: a symlink to
// `target` is created atomically, and so is an empty regular file (step 0)
// opened with O_EXCL, which has no content to be seen half-written. Clients
// match markers by any name ending in ".restore", dot-files included, so no
// temporary name may end so (they would take it, and rename it first).
// A stale marker of the same name is replaced.
Status CreateMarker(const std::string& path, const std::string& target) {
  for (int attempt = 0;; ++attempt) {
    if (target.empty()) {
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) return ::close(fd) == 0 ? Status::Ok() : ErrnoToStatus(errno, "close " + path);
    } else if (::symlink(target.c_str(), path.c_str()) == 0) {
      return Status::Ok();
    }
    int err = errno;
    if (err != EEXIST || attempt > 0) {
      return ErrnoToStatus(err,
                           target.empty() ? "create " + path : "symlink " + path + " -> " + target);
    }
    STRATA_RETURN_IF_ERROR(env()->RemoveFile(path));
  }
}

}  // namespace

std::vector<int64_t> CommittedStepDirs(const std::string& local_dir) {
  std::vector<int64_t> steps;
  auto entries = env()->ListDir(local_dir);
  if (!entries.ok()) return steps;
  for (const auto& e : *entries) {
    if (e.type != DirEntry::Type::kDirectory) continue;  // symlinks are restore links
    if (auto s = ParseStepDirName(e.name)) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Status CleanLocalDir(const std::string& local_dir, std::string_view keep) {
  STRATA_ASSIGN_OR_RETURN(auto entries, env()->ListDir(local_dir));
  for (const auto& e : entries) {
    if (e.name == keep || !IsProtocolLeftover(e)) continue;
    STRATA_RETURN_IF_ERROR(env()->RemoveAll(JoinPath(local_dir, e.name)));
  }
  return Status::Ok();
}

Status WritePrerestore(const std::string& local_dir, std::optional<int64_t> step,
                       const std::string& backup_id) {
  std::string text = "{}\n";
  if (step) {
    text = "restore-step: " + std::to_string(*step) + "\n";
    if (!backup_id.empty()) text += "restore-backup: " + backup_id + "\n";
  }
  return WriteFileAtomic(env(), JoinPath(local_dir, std::string(kPrerestoreFile)), text);
}

Status WriteMarkers(const std::string& local_dir, const std::string& job, int node, int workers,
                    int64_t step, const std::vector<std::string>& targets) {
  for (int w = 0; w < workers; ++w) {
    const std::string target = targets.empty() ? "" : targets.at(static_cast<size_t>(w));
    std::string path = JoinPath(local_dir, MarkerName({job, target.empty() ? 0 : step, node, w}));
    STRATA_RETURN_IF_ERROR(CreateMarker(path, target));
  }
  return env()->SyncDir(local_dir);
}

Status EnsureJaxInitInfo(const std::string& local_dir, int process_index,
                         const std::string& coordinator) {
  const std::string path = JoinPath(local_dir, std::string(kJaxInitInfoFile));
  const std::string text = std::to_string(process_index) + "\n" + coordinator + "\n";
  auto now = ReadFileToString(env(), path, 4096);
  if (now.ok() && *now == text) return Status::Ok();
  return WriteFileAtomic(env(), path, text);
}

void ReportToClient(const std::string& local_dir, const std::string& message, bool fatal) {
  std::string errors = JoinPath(local_dir, std::string(kErrorsFile));
  auto old = ReadFileToString(env(), errors, 1 << 20);
  std::string text = (old.ok() ? *old : "") + message + "\n";
  Status s = WriteFileAtomic(env(), errors, text);
  if (s.ok() && fatal) {
    s = WriteFileAtomic(env(), JoinPath(local_dir, std::string(kFailedFile)), message + "\n");
  }
  if (!s.ok()) Log()->error("cannot report \"{}\" to the client: {}", message, s.message());
}

std::vector<std::string> SymlinkTargets(const std::string& local_dir) {
  std::vector<std::string> targets;
  auto entries = env()->ListDir(local_dir);
  if (!entries.ok()) return targets;
  for (const auto& e : *entries) {
    if (e.type != DirEntry::Type::kSymlink) continue;
    char buf[4096];
    ssize_t n = ::readlink(JoinPath(local_dir, e.name).c_str(), buf, sizeof buf - 1);
    if (n > 0) targets.emplace_back(buf, static_cast<size_t>(n));
  }
  return targets;
}

}  // namespace strata::agent
