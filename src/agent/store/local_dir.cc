// Copyright 2026 The Strata Authors.
#include "agent/store/local_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>

#include "agent/store/store.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "util/unique_fd.h"

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
    Status s;
    if (target.empty()) {
      StatusOr<int> fd = CreateExclusive(path, 0644);
      if (fd.ok()) return ::close(*fd) == 0 ? Status::Ok() : ErrnoToStatus(errno, "close " + path);
      s = fd.status();
    } else if (::symlink(target.c_str(), path.c_str()) == 0) {
      return Status::Ok();
    } else {
      s = ErrnoToStatus(errno, "symlink " + path + " -> " + target);
    }
    if (s.code() != StatusCode::kAlreadyExists || attempt > 0) return s;
    STRATA_RETURN_IF_ERROR(env->RemoveFile(path));
  }
}

std::string Uid(uid_t uid) { return "uid " + std::to_string(uid); }

// lstat(2) of `path`, creating it as a directory of `mode` when missing.
Status LstatOrCreate(const std::string& path, mode_t mode, struct stat* st) {
  if (::lstat(path.c_str(), st) == 0) return Status::Ok();
  if (errno != ENOENT) return ErrnoToStatus(errno, "stat " + path);
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return ErrnoToStatus(errno, "create the directory " + path);
  }
  if (::lstat(path.c_str(), st) != 0) return ErrnoToStatus(errno, "stat " + path);
  return Status::Ok();
}

// `path` (described by `st`) is a real directory of this process's user.
Status OwnDirectory(const std::string& path, const struct stat& st, const std::string& what,
                    const std::string& fix) {
  const uid_t me = ::geteuid();
  std::string problem;
  if (S_ISLNK(st.st_mode)) {
    problem = "is a symbolic link";
  } else if (!S_ISDIR(st.st_mode)) {
    problem = "is not a directory";
  } else if (st.st_uid != me) {
    problem = "belongs to " + Uid(st.st_uid) + ", not to this agent's user (" + Uid(me) + ")";
  }
  if (problem.empty()) return Status::Ok();
  return FailedPreconditionError(what + " " + path + " " + problem +
                                 ": another local user could steer what the agent writes and "
                                 "deletes there. " +
                                 fix);
}

// Every directory above `path` is root's or this user's and not writable by
// others, or sticky (as /tmp and /dev/shm): no one else can rename `path`
// away and put something of theirs in its place.
Status CheckAncestors(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return ErrnoToStatus(errno, "resolve " + path);
  std::string dir = Dirname(real);
  std::free(real);
  const uid_t me = ::geteuid();
  for (;; dir = Dirname(dir)) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + dir);
    const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if ((st.st_uid != 0 && st.st_uid != me) || (others_write && !(st.st_mode & S_ISVTX))) {
      return FailedPreconditionError(
          "the local directory " + path + " lies in " + dir + ", which " +
          (st.st_uid != 0 && st.st_uid != me ? "belongs to " + Uid(st.st_uid)
                                             : std::string("its group or others may write")) +
          ": another local user could replace the local directory. Put it in a directory "
          "only root (or the agent's user) may change, e.g. /dev/shm/strata or a tmpfs of its "
          "own");
    }
    if (dir == "/") return Status::Ok();
  }
}

// The agent's own directory in the local directory: this user's, mode 0750,
// group `group` (the ranks open the sync map in it and read restored steps).
Status SecureAgentDir(const std::string& local, gid_t group) {
  const std::string dir = JoinPath(local, std::string(kAgentDirName));
  struct stat st;
  STRATA_RETURN_IF_ERROR(LstatOrCreate(dir, 0750, &st));
  STRATA_RETURN_IF_ERROR(
      OwnDirectory(dir, st, "the agent's directory",
                   "Remove it (rm -rf " + dir + ") and let the agent create it again."));
  const UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(errno, "open " + dir);
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, "stat " + dir);
  if (st.st_gid != group && ::fchown(fd.get(), static_cast<uid_t>(-1), group) != 0) {
    return ErrnoToStatus(
        errno, "give " + dir + " to the local directory's group " + std::to_string(group));
  }
  if ((st.st_mode & 07777) != 0750 && ::fchmod(fd.get(), 0750) != 0) {
    return ErrnoToStatus(errno, "chmod 0750 " + dir);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<gid_t> SecureLocalDir(const std::string& path) {
  struct stat st;
  STRATA_RETURN_IF_ERROR(LstatOrCreate(path, 0750, &st));
  const std::string fix =
      "Give it to the agent's user and let only the job's group write it, e.g. `install -d -o " +
      std::to_string(::geteuid()) + " -g JOB_GROUP -m 2770 " + path +
      "` on a fresh path (or remove it and let the agent create it)";
  STRATA_RETURN_IF_ERROR(OwnDirectory(path, st, "the local directory", fix + "."));
  if (st.st_mode & S_IWOTH) {
    return FailedPreconditionError("the local directory " + path +
                                   " is writable by every user (mode " +
                                   fmt::format("{:04o}", st.st_mode & 07777) +
                                   "): another local user could plant files and links the agent "
                                   "would act on. " +
                                   fix + ", or chmod o-w " + path + ".");
  }
  STRATA_RETURN_IF_ERROR(CheckAncestors(path));
  STRATA_RETURN_IF_ERROR(SecureAgentDir(path, st.st_gid));
  return st.st_gid;
}

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
