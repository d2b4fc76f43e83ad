// Copyright 2026 The Strata Authors.
#include "agent/store/store_layout.h"

#include <limits>

#include "format/naming.h"
#include "format/sync_map.h"
#include "util/file_util.h"

namespace strata::agent {
namespace {

std::string RelativeJobDir(const std::string& job) {
  return std::string(kAgentDirName) + "/steps/" + job;
}

}  // namespace

std::string RelativeStepsDir(const std::string& job, int rank) {
  return RelativeJobDir(job) + "/" + std::to_string(rank);
}

StatusOr<std::map<int, std::string>> HeldStepCopies(const std::string& local_dir,
                                                    const std::string& job, int64_t step,
                                                    Env* env) {
  std::map<int, std::string> held;
  const std::string job_dir = JoinPath(local_dir, RelativeJobDir(job));
  if (!ValidateJobName(job).ok() || !env->Exists(job_dir)) return held;
  STRATA_ASSIGN_OR_RETURN(auto ranks, env->ListDir(job_dir));
  for (const auto& r : ranks) {
    auto rank = ParseStepDirName(r.name);
    if (!rank || *rank > std::numeric_limits<int>::max()) continue;
    const std::string dir = JoinPath(local_dir, RelativeStepsDir(job, static_cast<int>(*rank)));
    const std::string step_dir = JoinPath(dir, StepDirName(step));
    if (env->Exists(step_dir) && env->Exists(step_dir + std::string(kStepIndexSuffix))) {
      held[static_cast<int>(*rank)] = dir;
    }
  }
  return held;
}

}  // namespace strata::agent
