// Copyright 2026 The Strata Authors.
//
// The commit protocol, written once and used for every durable artifact:
//   write under a temporary name in the same directory -> fsync the files ->
//   rename to the final name -> fsync the parent directory.
// A reader that sees the final name therefore sees complete, synced data.
#ifndef STRATA_UTIL_FILE_UTIL_H_
#define STRATA_UTIL_FILE_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "strata/env.h"
#include "strata/status.h"

namespace strata {

std::string JoinPath(std::string_view a, std::string_view b);
// "/a/b/c" -> "/a/b"; "c" -> ".".
std::string Dirname(std::string_view path);

// Creates `dir` and any missing parents (mkdir -p). OK if it exists.
Status CreateDirs(Env* env, const std::string& dir);

// Publishes the fully written directory `tmp_dir` as `final_dir` (same parent):
// fsync tmp_dir, rename, fsync the parent.
// REQUIRES: every file inside tmp_dir has been synced; final_dir does not exist.
Status CommitDir(Env* env, const std::string& tmp_dir, const std::string& final_dir);

// Writes `data` to a new file `path` and fsyncs it (no rename: for files
// inside a directory that is itself committed with CommitDir).
Status WriteFileSynced(Env* env, const std::string& path, std::string_view data);

// Replaces `path` atomically with `data` (temp file, fsync, rename, fsync dir).
Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data);

// Reads a whole file; RESOURCE_EXHAUSTED if it is larger than `max_size`.
StatusOr<std::string> ReadFileToString(Env* env, const std::string& path, uint64_t max_size);

}  // namespace strata

#endif  // STRATA_UTIL_FILE_UTIL_H_
