// Copyright 2026 The Strata Authors.
//
// The replicator protocol's files in the client's local directory
// (../shared/mission/replicator-protocol.md): building and parsing their
// names, the cleanup before a job is accepted, restore markers, and the
// files through which the agent talks to the client.
#ifndef STRATA_AGENT_LOCAL_DIR_H_
#define STRATA_AGENT_LOCAL_DIR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/naming.h"
#include "strata/status.h"

namespace strata::agent {

// The protocol's file names (kReplicatorYaml, MarkerName, ...) are in
// format/naming.h, shared with the client side in libstrata.

// A committed client step directory: a real directory (not a symlink) whose
// name is a canonical step number.
std::vector<int64_t> CommittedStepDirs(const std::string& local_dir);

// Removes everything in the local directory except the agent's own data and
// `keep` (the new replicator.yaml): restore markers, replicator.prerestore,
// .errors, .failed, temporary directories, step directories and links,
// PyTorch .save files.
Status CleanLocalDir(const std::string& local_dir, std::string_view keep);

// Writes replicator.prerestore atomically: "restore-step: N" (plus
// "restore-backup: ID") or "{}" when there is nothing to restore.
Status WritePrerestore(const std::string& local_dir, std::optional<int64_t> step,
                       const std::string& backup_id = "");

// Creates one marker per worker w: a relative symlink to targets[w]
// (relative to the local directory); with no targets, `workers` empty
// regular files with step 0 (nothing to restore). Each marker is created
// atomically under its final name (never under a temporary name a client
// could match), so a client never sees a half-made one.
Status WriteMarkers(const std::string& local_dir, const std::string& job, int node, int workers,
                    int64_t step, const std::vector<std::string>& targets);

// Makes jax-init-info.txt say "<process_index>\n<coordinator>\n", written
// atomically when it is missing or says anything else. Cleanup keeps it.
Status EnsureJaxInitInfo(const std::string& local_dir, int process_index,
                         const std::string& coordinator);

// Appends a line to replicator.errors; with `fatal`, also writes
// replicator.failed. Never throws the message away silently: failures to
// write are logged.
void ReportToClient(const std::string& local_dir, const std::string& message, bool fatal);

// Paths (relative to the local directory) that symlinks in it point to —
// data a client still uses (e.g. Orbax's renamed marker "<step>").
std::vector<std::string> SymlinkTargets(const std::string& local_dir);

}  // namespace strata::agent

#endif  // STRATA_AGENT_LOCAL_DIR_H_
