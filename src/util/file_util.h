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
#include "util/unique_fd.h"

namespace strata {

std::string JoinPath(std::string_view a, std::string_view b);
// "/a/b/c" -> "/a/b"; "c" -> ".".
std::string Dirname(std::string_view path);

// Creates `dir` and any missing parents (mkdir -p), fsyncing the parent of
// each directory it creates. OK if it exists.
Status CreateDirs(Env* env, const std::string& dir);

// Publishes the fully written directory `tmp_dir` as `final_dir` (same parent):
// fsync tmp_dir, rename, fsync the parent.
// REQUIRES: every file inside tmp_dir has been synced; final_dir does not exist.
Status CommitDir(Env* env, const std::string& tmp_dir, const std::string& final_dir);

// Writes `data` to a new file `path` (Env::CreateWritable: ALREADY_EXISTS
// if anything is there) and fsyncs it (no rename: for files inside a
// directory that is itself committed with CommitDir, and the temp files of
// WriteFileAtomic).
Status WriteFileSynced(Env* env, const std::string& path, std::string_view data);

// Publishes the synced file `tmp_file` as `final_file` (same directory):
// rename, fsync the directory. Removes `tmp_file` if the rename fails.
Status CommitFile(Env* env, const std::string& tmp_file, const std::string& final_file);

// A temp name for `path` in its directory: unique in this process and not
// guessable by another (64 random bits), so no one can plant a file or link
// at it beforehand.
std::string TempPathFor(const std::string& path);

// The one way Strata creates a file it is about to write: O_CREAT|O_EXCL|
// O_NOFOLLOW, so that a file, a directory or a symbolic link already at
// `path` (planted by another user of a shared directory) is refused and
// never written through. Returns the descriptor (O_WRONLY, or O_RDWR with
// `read_write`; close-on-exec), created with `mode` (less the umask).
// ALREADY_EXISTS names `path` when anything is there.
StatusOr<int> CreateExclusive(const std::string& path, unsigned mode, bool read_write = false);

// Takes flock(LOCK_EX) on the lock file `path` without waiting (made 0644
// when missing; a symbolic link planted at the name is not followed) and,
// with `write_pid`, writes this process's pid into it, for the error of
// whoever asks next. The lock is held while the descriptor is open. While
// another holds it: FAILED_PRECONDITION "<busy> (pid N holds <path>)".
StatusOr<UniqueFd> LockFileExclusive(const std::string& path, const std::string& busy,
                                     bool write_pid);

// Replaces `path` atomically with `data` (temp file, fsync, rename, fsync dir).
Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data);

// The same protocol for a caller that addresses files relative to an open
// directory `dir_fd` (so that no path is resolved twice and no symbolic link
// is followed): `file_fd`, written under `tmp_name` in that directory, is
// fsynced and closed, renamed to `final_name` and the directory fsynced. On
// failure the temp file is removed. Takes ownership of `file_fd` (closed in
// every case). Errors name the step that failed and `tmp_name`.
Status CommitFileAt(int dir_fd, int file_fd, const std::string& tmp_name,
                    const std::string& final_name);

// Reads a whole file; RESOURCE_EXHAUSTED if it is larger than `max_size`.
StatusOr<std::string> ReadFileToString(Env* env, const std::string& path, uint64_t max_size);

// The type of the filesystem `path` is on (statfs's f_type, a *_MAGIC of
// <linux/magic.h>); 0 when it cannot be read.
unsigned long FilesystemType(const std::string& path);

// Whether `path` is on a filesystem whose pages live only in memory (tmpfs,
// ramfs, hugetlbfs): nothing is written back from them. False when it
// cannot tell.
bool OnMemoryFilesystem(const std::string& path);

}  // namespace strata

#endif  // STRATA_UTIL_FILE_UTIL_H_
