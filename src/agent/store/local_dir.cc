// Copyright 2026 The Strata Authors.
#include "agent/store/local_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <climits>

#include "agent/store/store.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

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
Status CreateMarker(Env* env, const std::string& path, const std::string& target) {
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
    STRATA_RETURN_IF_ERROR(env->RemoveFile(path));
  }
}

}  // namespace

LocalDir::LocalDir(Env* env, std::string path) : env_(env), path_(std::move(path)) {}

std::vector<int64_t> LocalDir::CommittedSteps() const {
  std::vector<int64_t> steps;
  auto entries = env_->ListDir(path_);
  if (!entries.ok()) return steps;
  for (const auto& e : *entries) {
    if (e.type != DirEntry::Type::kDirectory) continue;  // symlinks are restore links
    if (auto s = ParseStepDirName(e.name)) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Status LocalDir::Clean(std::string_view keep) const {
  STRATA_ASSIGN_OR_RETURN(auto entries, env_->ListDir(path_));
  for (const auto& e : entries) {
    if (e.name == keep || !IsProtocolLeftover(e)) continue;
    STRATA_RETURN_IF_ERROR(env_->RemoveAll(JoinPath(path_, e.name)));
  }
  return Status::Ok();
}

Status LocalDir::WritePrerestore(std::optional<int64_t> step, const std::string& backup_id) const {
  std::string text = "{}\n";
  if (step) {
    text = "restore-step: " + std::to_string(*step) + "\n";
    if (!backup_id.empty()) text += "restore-backup: " + backup_id + "\n";
  }
  return WriteFileAtomic(env_, JoinPath(path_, std::string(kPrerestoreFile)), text);
}

Status LocalDir::WriteMarkers(const std::string& job, int node, int workers, int64_t step,
                              const std::vector<std::string>& targets) const {
  for (int w = 0; w < workers; ++w) {
    const std::string target = targets.empty() ? "" : targets.at(static_cast<size_t>(w));
    std::string path = JoinPath(path_, MarkerName({job, target.empty() ? 0 : step, node, w}));
    STRATA_RETURN_IF_ERROR(CreateMarker(env_, path, target));
  }
  return env_->SyncDir(path_);
}

Status LocalDir::EnsureJaxInitInfo(int process_index, const std::string& coordinator) const {
  const std::string path = JoinPath(path_, std::string(kJaxInitInfoFile));
  const std::string text = std::to_string(process_index) + "\n" + coordinator + "\n";
  auto now = ReadFileToString(env_, path, 4096);
  if (now.ok() && *now == text) return Status::Ok();
  return WriteFileAtomic(env_, path, text);
}

void LocalDir::ReportToClient(const std::string& message, bool fatal) const {
  std::string errors = JoinPath(path_, std::string(kErrorsFile));
  auto old = ReadFileToString(env_, errors, 1 << 20);
  std::string text = (old.ok() ? *old : "") + message + "\n";
  Status s = WriteFileAtomic(env_, errors, text);
  if (s.ok() && fatal) {
    s = WriteFileAtomic(env_, JoinPath(path_, std::string(kFailedFile)), message + "\n");
  }
  if (!s.ok()) Log()->error("cannot report \"{}\" to the client: {}", message, s.message());
}

void LocalDir::ClearReports() const {
  for (std::string_view name : {kErrorsFile, kFailedFile}) {
    Status s = env_->RemoveFile(JoinPath(path_, std::string(name)));
    if (!s.ok() && s.code() != StatusCode::kNotFound) {
      Log()->warn("removing {}/{}: {}", path_, name, s.message());
    }
  }
}

std::vector<std::string> LocalDir::SymlinkTargets() const {
  std::vector<std::string> targets;
  auto entries = env_->ListDir(path_);
  if (!entries.ok()) return targets;
  for (const auto& e : *entries) {
    if (e.type != DirEntry::Type::kSymlink) continue;
    char buf[4096];
    ssize_t n = ::readlink(JoinPath(path_, e.name).c_str(), buf, sizeof buf - 1);
    if (n > 0) targets.emplace_back(buf, static_cast<size_t>(n));
  }
  return targets;
}

}  // namespace strata::agent
