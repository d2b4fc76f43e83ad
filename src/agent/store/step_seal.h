// Copyright 2026 The Strata Authors.
//
// Indexing and verifying a step directory the agent holds, and the seal
// that later proves it unchanged without reading it (the .seal file next to
// a held step's .index). The index itself is format/step_index.h.
#ifndef STRATA_AGENT_STORE_STEP_SEAL_H_
#define STRATA_AGENT_STORE_STEP_SEAL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/step_index.h"
#include "strata/catalog.h"
#include "strata/env.h"
#include "strata/status.h"
#include "util/thread_pool.h"

namespace strata::agent {

// How the files of a step directory were when it was listed, just before
// their bytes were read (BuildStepIndex, VerifyStepIndex): with the index,
// a seal that later proves the bytes unchanged without reading them.
struct StepIdentity {
  int64_t listed_at_ns = 0;         // the file-time clock when the listing began
  std::vector<FileIdentity> files;  // in index order
};

// The functions below read files through `env`.

// Indexes the step directory `dir`. Symlinks, devices and paths that are not
// safe relative names are errors naming the path. With `identity`, records
// how the files were as they were read.
StatusOr<StepIndex> BuildStepIndex(Env* env, const std::string& dir, ThreadPool* pool,
                                   StepIdentity* identity = nullptr);

// What VerifyStepIndex checks. kLayout: exactly the indexed files with the
// indexed sizes and, for a Strata step, a manifest whose content digest is
// the index's. kAll: that and every byte (for data checked otherwise, e.g.
// as it arrived, kLayout is enough).
enum class VerifyScope { kAll, kLayout };

// Checks that `dir` holds exactly the indexed files with the indexed bytes.
// DATA_LOSS names the file (and chunk) that differs.
Status VerifyStepIndex(Env* env, const std::string& dir, const StepIndex& index, ThreadPool* pool,
                       VerifyScope scope = VerifyScope::kAll, StepIdentity* identity = nullptr);

// Proves without reading a byte that `dir` still holds what `sealed`
// recorded when its bytes were last read and checked against `index`: the
// same files, each with the same identity (device, inode, size, mtime,
// ctime), none modified at or after the listing began (a write in the same
// clock tick as the listing would keep its mtime: such a file is never
// proven, as git treats a "racily clean" entry). FAILED_PRECONDITION
// saying what differs; the caller then reads and verifies the bytes.
Status CheckStepIdentity(Env* env, const std::string& dir, const StepIndex& index,
                         const StepIdentity& sealed);

// A seal (the .seal file next to a held step's .index) and back. Decoding
// is FAILED_PRECONDITION for a seal of another index (its digest differs),
// DATA_LOSS prefixed with `source` for a malformed one.
std::string EncodeSeal(uint64_t index_digest, const StepIdentity& identity);
StatusOr<StepIdentity> DecodeSeal(std::string_view text, uint64_t index_digest,
                                  std::string_view source);

}  // namespace strata::agent

#endif  // STRATA_AGENT_STORE_STEP_SEAL_H_
