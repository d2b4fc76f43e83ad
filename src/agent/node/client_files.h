// Copyright 2026 The Strata Authors.
//
// ClientFiles: the node's side of the client file protocol in the local
// directory (docs/agent-protocol.md), a component of the agent:
//   * watches the directory (inotify, else a rescan every second) and says
//     when a complete replicator.yaml arrived: closed after writing or
//     moved in; without inotify, the same non-empty file seen by two
//     rescans a second apart (the NeMo plugin writes it in place);
//   * reads and validates the yaml; a refused one (or a start that failed)
//     is reported to the client (.failed) and removed;
//   * keeps a copy of a taken yaml (the pending start) until the start is
//     answered: an agent restarted after the yaml was removed, before the
//     markers were written, puts it back and runs the start again (the
//     client, polling for markers, never hears of it);
//   * keeps jax-init-info.txt as --node-rank and --jax-coordinator say;
//   * gathers PyTorch workers' .save files into step directories once all
//     are there and settled, and ingests the job's committed steps into the
//     Store without copying.
// The restore markers and replicator.prerestore are Restore's (restore.h),
// written through the same LocalDir.
//
// Threads: the agent's main loop only (not thread-safe); every file
// operation goes through the Env the Store and LocalDir were opened with.
#ifndef STRATA_AGENT_NODE_CLIENT_FILES_H_
#define STRATA_AGENT_NODE_CLIENT_FILES_H_

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/config/config.h"
#include "agent/node/watcher.h"
#include "agent/store/local_dir.h"
#include "agent/store/store.h"
#include "strata/env.h"
#include "util/clock.h"

namespace strata::agent {

class ClientFiles {
 public:
  struct Options {
    std::optional<int> node_rank;  // --node-rank: keep jax-init-info.txt
    std::string jax_coordinator;   // host:port written there
    std::string pending_start;     // the pending start's file ("": none kept)
  };
  // `store` and `local` must outlive the ClientFiles.
  ClientFiles(Env* env, SteadyClock* clock, Store* store, const LocalDir* local, Options options);
  ClientFiles(const ClientFiles&) = delete;
  ClientFiles& operator=(const ClientFiles&) = delete;

  // Starts watching, after putting back a start a previous agent process
  // left pending (unless the client wrote a new yaml since). Returns whether
  // a yaml written while the agent was down counts as complete now (with
  // inotify; without, the rescans decide).
  StatusOr<bool> Watch();
  // Waits up to `timeout` for the directory to change. nullopt: nothing to
  // look at; else a look is due, and whether a complete yaml arrived. A
  // look is due at least every second: inotify can overflow, and PyTorch
  // .save files arrive as plain writes.
  StatusOr<std::optional<bool>> Wait(std::chrono::milliseconds timeout);
  // No inotify (after Watch): the directory is rescanned every second.
  bool polling() const { return watcher_ && watcher_->polling(); }

  std::string yaml_path() const;
  // The yaml, validated; NOT_FOUND when there is none (already taken).
  // A refused one is removed and the reason written for the client; a
  // valid one is kept as the pending start.
  StatusOr<ReplicatorConfig> TakeYaml();
  // What the last yaml taken asks that the agent does not do as asked (an
  // unknown key, a node-rank other than --node-rank): for replicator.errors,
  // once the directory is clean and before the yaml goes.
  const std::vector<std::string>& yaml_warnings() const { return yaml_warnings_; }
  // The file the last TakeYaml() read (identified before reading it, so a
  // yaml replaced meanwhile never matches); nullopt when the Env cannot
  // tell. Restore removes the yaml only while it is still that file.
  const std::optional<FileIdentity>& taken_yaml_identity() const { return taken_identity_; }
  // The pending start is answered (its markers are about to be written) or
  // over (it failed, or a new yaml replaced it): it is not resumed. An
  // error (the file could not be removed) means it still could be.
  Status EndPendingStart();
  // The start the yaml asked for failed: the client hears why (.failed)
  // and the yaml goes, so it is not taken again.
  void Fail(const Status& why);

  void KeepJaxInitInfo();
  // The job's peer tier, for the RAM estimate logged when a larger step
  // arrives: copies from `peers` nodes, or a coded group's parity (m/k of
  // a step per step, k its group's).
  struct PeerTier {
    ec::Redundancy redundancy;
    size_t peers = 0;
    int k = 0;
  };
  // Ingests `job`'s committed steps (PyTorch .save files gathered first);
  // returns the keys ingested. An ingest that fails is reported to the
  // client (not fatal) and skipped. A step directory holding
  // kBackupRequestedFile asks for a backup of that step: the file is taken
  // out before the step is (it is a message, not checkpoint content: with
  // it, one replica's step would differ from the others'), and the step goes
  // into *requested (may be null). So does a held step whose directory the
  // client made again to hold that file alone (it asked after the agent had
  // taken the step); the directory goes.
  std::vector<wire::StepKey> Ingest(const ReplicatorConfig& job, const PeerTier& tier,
                                    std::set<int64_t>* requested = nullptr);

 private:
  bool PolledYamlSettled();
  // Takes kBackupRequestedFile out of the step directory `dir`: whether it
  // was there; *alone says whether the directory held nothing else.
  bool TakeBackupRequest(const std::string& dir, bool* alone);
  void ResumePendingStart();
  void GatherPytorchSaves(const ReplicatorConfig& job);
  // Since `path` was last modified (wall clock); nullopt when it cannot say.
  std::optional<std::chrono::nanoseconds> Age(const std::string& path) const;
  // None of `files` was modified in the last second.
  bool AllSettled(const std::vector<std::string>& files) const;

  Env* const env_;
  SteadyClock* const clock_;
  Store* const store_;
  const LocalDir* const local_;
  const Options options_;
  std::optional<DirWatcher> watcher_;
  SteadyClock::time_point last_look_{};
  bool jax_init_info_written_ = false;  // logged once
  bool jax_init_info_failed_ = false;   // a failure is logged once, until it clears
  std::string polled_yaml_;             // without inotify: the yaml as the last rescan saw it
  std::string taken_yaml_;              // and as it was when reported complete
  uint64_t largest_step_bytes_ = 0;
  std::vector<std::string> yaml_warnings_;
  std::optional<FileIdentity> taken_identity_;
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_NODE_CLIENT_FILES_H_
