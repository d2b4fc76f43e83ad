// Copyright 2026 The Strata Authors.
//
// The layout of the agent's store below a node's local directory (store.h
// draws it), for the Store and for readers outside the agent process:
// strata.dcp's reader asks it, through the Python binding, where the copies
// of a step the node's agent holds are. Read only; nothing here needs an
// open Store.
#ifndef STRATA_AGENT_STORE_STORE_LAYOUT_H_
#define STRATA_AGENT_STORE_STORE_LAYOUT_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "strata/env.h"
#include "strata/status.h"

namespace strata::agent {

// A held step's StepIndex is <step directory> + this.
inline constexpr std::string_view kStepIndexSuffix = ".index";

// The directory of node `rank`'s steps of `job`, relative to the local
// directory: <kAgentDirName>/steps/<job>/<rank>.
std::string RelativeStepsDir(const std::string& job, int rank);

// Node rank -> <local_dir>/RelativeStepsDir(job, rank) for every node whose
// copy of `step` of `job` is held below `local_dir` (its data directory and
// its index both exist). Empty when the store has no such job.
StatusOr<std::map<int, std::string>> HeldStepCopies(const std::string& local_dir,
                                                    const std::string& job, int64_t step,
                                                    Env* env = Env::Default());

}  // namespace strata::agent

#endif  // STRATA_AGENT_STORE_STORE_LAYOUT_H_
