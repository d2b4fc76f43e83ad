// Copyright 2026 The Strata Authors.
//
// The replicator protocol's files in the client's local directory
// (docs/agent-protocol.md): building and parsing their names, the cleanup
// before a job is accepted, restore markers, and the files through which
// the agent talks to the client.
#ifndef STRATA_AGENT_STORE_LOCAL_DIR_H_
#define STRATA_AGENT_STORE_LOCAL_DIR_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/naming.h"
#include "strata/env.h"
#include "strata/status.h"

namespace strata::agent {

// The protocol's file names (kReplicatorYaml, MarkerName, ...) are in
// format/naming.h, shared with the client side in libstrata.

// Makes sure the local directory `path` is safe for this process (the
// agent, often root) to write, rename and delete in, before anything is
// written there, and returns the job's group (the directory's group: the
// training processes', who write their steps into it and open the sync map).
// Refused, with how to fix it: a `path` that is a symbolic link or not a
// directory, that another user owns or others may write, or that has an
// ancestor another user owns or may write without the sticky bit (each of
// these lets another local user swap what the agent writes through); an
// agent directory (.strata-agent) that is a link, another user's, or
// writable by its group or others. A missing `path` (its parent must exist)
// or agent directory is created. The agent directory is then made mode
// 0750 with the job's group, through its descriptor.
StatusOr<gid_t> SecureLocalDir(const std::string& path);

// The client's local directory, its files read and written through `env`.
// Not thread-safe by itself: the agent's run loop owns the directory, and
// other threads only read it (SymlinkTargets).
class LocalDir {
 public:
  LocalDir(Env* env, std::string path);
  const std::string& path() const { return path_; }

  // The committed client step directories: real directories (not symlinks)
  // whose names are canonical step numbers, in ascending order.
  std::vector<int64_t> CommittedSteps() const;

  // Removes everything in the directory except the agent's own data and
  // `keep` (the new replicator.yaml): restore markers,
  // replicator.prerestore, .errors, .failed, temporary directories, step
  // directories and links, PyTorch .save files.
  Status Clean(std::string_view keep) const;

  // Writes replicator.prerestore atomically: "restore-step: N" (plus
  // "restore-backup: ID") or "{}" when there is nothing to restore.
  Status WritePrerestore(std::optional<int64_t> step, const std::string& backup_id = "") const;

  // Creates one marker per worker w: a relative symlink to targets[w]
  // (relative to the directory); with no targets, `workers` empty regular
  // files with step 0 (nothing to restore). Each marker is created
  // atomically under its final name (never under a temporary name a client
  // could match), so a client never sees a half-made one.
  Status WriteMarkers(const std::string& job, int node, int workers, int64_t step,
                      const std::vector<std::string>& targets) const;

  // Makes jax-init-info.txt say "<process_index>\n<coordinator>\n", written
  // atomically when it is missing or says anything else. Cleanup keeps it.
  Status EnsureJaxInitInfo(int process_index, const std::string& coordinator) const;

  // Appends a line to replicator.errors; with `fatal`, also writes
  // replicator.failed. Never throws the message away silently: failures to
  // write are logged.
  void ReportToClient(const std::string& message, bool fatal) const;
  // Removes replicator.errors and replicator.failed (an earlier start's).
  void ClearReports() const;

  // Paths (relative to the directory) that symlinks in it point to — data a
  // client still uses (e.g. Orbax's renamed marker "<step>").
  std::vector<std::string> SymlinkTargets() const;

 private:
  Env* const env_;
  const std::string path_;
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_STORE_LOCAL_DIR_H_
