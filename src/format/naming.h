// Copyright 2026 The Strata Authors.
//
// Every name Strata puts in a checkpoint directory is built and parsed here,
// so the library, the agent and the CLI can never disagree about one.
//
//   <dir>/<step>/                      committed step (decimal, no padding)
//   <dir>/<step>/strata.manifest       its manifest
//   <dir>/<step>/data-NNNNN.bin        its data files
//   (<dir>/<step>/ itself is flock'ed: shared by its readers, exclusively by
//   a save renaming it away to reuse its files; engine/step_lock.h)
//   <dir>/.strata-tmp-<step>-<pid>-<n> a step being written (never a checkpoint)
//   <dir>/.strata-lock                 held (flock) by the open Checkpointer
//   <dir>/.strata-run.lock             held (flock) by `strata run` (never by
//                                      the Checkpointer it supervises)
//   <dir>/<step>.quarantined[-<n>]     a step `strata run` set aside after a
//                                      crash loop; not a step, not temporary:
//                                      ListSteps and cleanup leave it alone
//
// and the replicator protocol's files in a node's local directory, which the
// agent and the client side (engine/replicator_client.cc) both speak:
//
//   replicator.yaml[.tmp|.taken], replicator.prerestore, replicator.errors,
//   replicator.failed, <job>-s<step>-n<node>-w<worker>.restore|.save
#ifndef STRATA_FORMAT_NAMING_H_
#define STRATA_FORMAT_NAMING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata {

inline constexpr std::string_view kManifestFileName = "strata.manifest";
inline constexpr std::string_view kLockFileName = ".strata-lock";
inline constexpr std::string_view kTempPrefix = ".strata-tmp-";
inline constexpr std::string_view kRunLockFileName = ".strata-run.lock";
inline constexpr std::string_view kQuarantineSuffix = ".quarantined";

// The agent's own files in its directory (kAgentDirName, sync_map.h): the
// incarnation, a rollback that was done, the newest maintenance event, and
// the replicator.yaml of a start taken but not yet answered with markers;
// and the Unix-domain socket the node's own callers reach the agent by.
inline constexpr std::string_view kAgentStateFile = "state.json";
inline constexpr std::string_view kAgentSocketName = "agent.sock";
inline constexpr std::string_view kPendingStartFile = "start.yaml";
inline constexpr std::string_view kRollbackDoneFile = "rollback.done";
inline constexpr std::string_view kMaintenanceFile = "maintenance.json";

inline constexpr std::string_view kReplicatorYaml = "replicator.yaml";
inline constexpr std::string_view kReplicatorYamlTmp = "replicator.yaml.tmp";
// Where the agent sets a taken replicator.yaml aside to tell it from a newer
// one (agent/node/restore.cc); a later start's rename replaces one left by
// an agent that died in between.
inline constexpr std::string_view kReplicatorYamlTaken = "replicator.yaml.taken";
inline constexpr std::string_view kPrerestoreFile = "replicator.prerestore";
inline constexpr std::string_view kErrorsFile = "replicator.errors";
// Line 1 the node's JAX process index, line 2 the JAX coordination service's
// "host:port"; Orbax and MaxText read it before they write replicator.yaml.
inline constexpr std::string_view kJaxInitInfoFile = "jax-init-info.txt";
inline constexpr std::string_view kFailedFile = "replicator.failed";
// An empty file in a step directory by which a client asks the replicator
// for a backup of that step out of the cadence (Orbax 0.12.10:
// ReplicatorCheckpointManager.save(..., backup=True)).
inline constexpr std::string_view kBackupRequestedFile = "_BACKUP_REQUESTED";

// Largest accepted item name, in bytes.
inline constexpr size_t kMaxItemNameBytes = 1024;

std::string StepDirName(int64_t step);
// Accepts only canonical decimal names: digits, no sign, no leading zero
// (except "0"), fits in int64.
std::optional<int64_t> ParseStepDirName(std::string_view name);

std::string DataFileName(uint32_t index);  // "data-00007.bin"
std::optional<uint32_t> ParseDataFileName(std::string_view name);

// A unique temporary directory name for writing `step` in this process.
std::string TempDirName(int64_t step);
bool IsTempName(std::string_view name);

// The name a quarantined `step` is renamed to: "<step>.quarantined" for
// n == 0, "<step>.quarantined-<n>" otherwise (the same step can be set aside
// more than once). Never parses as a step or a temporary name.
std::string QuarantineDirName(int64_t step, int n = 0);
// The step of a quarantine name, or nullopt.
std::optional<int64_t> ParseQuarantineDirName(std::string_view name);

// A job name: 1..128 of [A-Za-z0-9._-], not "." or "..", no "..".
Status ValidateJobName(std::string_view job);

// "<job>-s<step>-n<node>-w<worker>" + suffix (".restore" or ".save").
struct WorkerFileName {
  std::string job;
  int64_t step = 0;
  int node = 0;
  int worker = 0;
};
std::string MarkerName(const WorkerFileName& n);    // ...restore
std::string SaveFileName(const WorkerFileName& n);  // ...save
std::optional<WorkerFileName> ParseWorkerFileName(std::string_view name, std::string_view suffix);

// OK iff `name` is a valid item name: non-empty, at most kMaxItemNameBytes,
// well-formed UTF-8, no '/', no NUL, no ".." anywhere, not ".".
Status ValidateItemName(std::string_view name);

}  // namespace strata

#endif  // STRATA_FORMAT_NAMING_H_
