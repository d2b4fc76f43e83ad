// Copyright 2026 The Strata Authors.
#include "util/file_util.h"

#include <unistd.h>

#include <atomic>

#include "util/crash_point.h"

namespace strata {

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  std::string out(a);
  if (out.back() != '/') out += '/';
  out += b;
  return out;
}

std::string Dirname(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  auto slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

Status CreateDirs(Env* env, const std::string& dir) {
  if (dir.empty() || dir == "/" || dir == "." || env->Exists(dir)) return Status::Ok();
  STRATA_RETURN_IF_ERROR(CreateDirs(env, Dirname(dir)));
  return env->CreateDir(dir);
}

Status CommitDir(Env* env, const std::string& tmp_dir, const std::string& final_dir) {
  STRATA_RETURN_IF_ERROR(env->SyncDir(tmp_dir));
  CrashPoint("commit.before_rename");
  STRATA_RETURN_IF_ERROR(env->Rename(tmp_dir, final_dir));
  CrashPoint("commit.after_rename");
  return env->SyncDir(Dirname(final_dir));
}

Status WriteFileSynced(Env* env, const std::string& path, std::string_view data) {
  STRATA_ASSIGN_OR_RETURN(auto file, env->OpenWritable(path));
  STRATA_RETURN_IF_ERROR(file->Truncate(0));
  STRATA_RETURN_IF_ERROR(file->PWrite(0, data.data(), data.size()));
  STRATA_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data) {
  static std::atomic<uint64_t> seq{0};
  std::string base = path.substr(path.rfind('/') + 1);  // whole path if no '/'
  std::string tmp =
      JoinPath(Dirname(path), ".strata-tmp-" + base + "-" + std::to_string(::getpid()) + "-" +
                                  std::to_string(seq.fetch_add(1)));
  Status s = WriteFileSynced(env, tmp, data);
  if (s.ok()) s = env->Rename(tmp, path);
  if (!s.ok()) {
    env->RemoveFile(tmp).IgnoreError();
    return s;
  }
  return env->SyncDir(Dirname(path));
}

StatusOr<std::string> ReadFileToString(Env* env, const std::string& path, uint64_t max_size) {
  STRATA_ASSIGN_OR_RETURN(auto file, env->OpenReadable(path));
  STRATA_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size > max_size) {
    return ResourceExhaustedError(path + ": " + std::to_string(size) + " bytes, more than the " +
                                  std::to_string(max_size) + " allowed");
  }
  std::string out(size, '\0');
  STRATA_RETURN_IF_ERROR(file->PRead(0, size, out.data()));
  return out;
}

}  // namespace strata
