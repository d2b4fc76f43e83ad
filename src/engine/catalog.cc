// Copyright 2026 The Strata Authors.
#include "strata/catalog.h"

#include <algorithm>

#include "engine/step_io.h"
#include "format/manifest.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/hash.h"

namespace strata {

uint64_t StepInfo::total_bytes() const {
  uint64_t n = 0;
  for (const auto& it : items) n += it.nbytes;
  return n;
}

uint64_t StepInfo::ContentDigest() const {
  Xxh3Stream h;
  for (const auto& it : items) {
    h.Update(it.name);
    h.UpdateU64(0);
    h.Update(DTypeName(it.dtype));
    h.UpdateU64(it.shape.size());
    for (int64_t d : it.shape) h.UpdateU64(static_cast<uint64_t>(d));
    h.UpdateU64(it.nbytes);
    for (uint64_t c : it.chunk_xxh3) h.UpdateU64(c);
  }
  return h.Digest();
}

StatusOr<std::vector<int64_t>> ListSteps(const std::string& dir, Env* env) {
  STRATA_ASSIGN_OR_RETURN(auto entries, env->ListDir(dir));
  std::vector<int64_t> steps;
  for (const auto& e : entries) {
    if (e.type != DirEntry::Type::kDirectory && e.type != DirEntry::Type::kSymlink) continue;
    auto step = ParseStepDirName(e.name);
    if (!step) continue;
    std::string manifest = JoinPath(JoinPath(dir, e.name), std::string(kManifestFileName));
    if (env->Exists(manifest)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

StatusOr<StepInfo> ReadStepInfo(const std::string& dir, int64_t step, Env* env) {
  std::string path = JoinPath(JoinPath(dir, StepDirName(step)), std::string(kManifestFileName));
  STRATA_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(env, path, kMaxManifestBytes));
  STRATA_ASSIGN_OR_RETURN(StepInfo info, DecodeManifest(bytes, path));
  if (info.step != step) {
    return DataLossError(path + ": manifest is for step " + std::to_string(info.step) +
                         ", directory is step " + std::to_string(step));
  }
  return info;
}

StatusOr<VerifyReport> VerifyStep(const std::string& dir, int64_t step, int threads, Env* env) {
  STRATA_ASSIGN_OR_RETURN(StepInfo info, ReadStepInfo(dir, step, env));
  ThreadPool pool(threads > 0 ? threads - 1 : ThreadPool::DefaultThreads() - 1);
  VerifyReport report;
  report.step = step;
  VerifyStepData(env, &pool, JoinPath(dir, StepDirName(step)), info, &report);
  return report;
}

}  // namespace strata
