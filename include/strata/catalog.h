// Copyright 2026 The Strata Authors.
//
// Read-only queries over a checkpoint directory: which steps exist, what a
// step holds, and whether every byte of it verifies. These take no lock and
// never modify the directory; `strata ls/verify/inspect` are built on them.
// See docs/format.md for the layout they read.
#ifndef STRATA_CATALOG_H_
#define STRATA_CATALOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "strata/env.h"
#include "strata/status.h"
#include "strata/types.h"

namespace strata {

// One item as recorded in a step's manifest.
struct ItemInfo {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
  uint32_t file = 0;                 // index into StepInfo::files
  uint64_t offset = 0;               // byte offset of the item within that file
  std::vector<uint64_t> chunk_xxh3;  // XXH3-64 of each chunk_size slice
};

struct FileInfo {
  std::string name;  // relative to the step directory
  uint64_t size = 0;
};

// A parsed, validated manifest.
struct StepInfo {
  int64_t step = 0;
  uint32_t format_version = 0;
  int64_t created_unix_ms = 0;
  uint64_t chunk_size = 0;
  std::vector<FileInfo> files;
  std::vector<ItemInfo> items;

  uint64_t total_bytes() const;
  // XXH3-64 over the items' names, dtypes, shapes and chunk checksums, in
  // manifest order: a content digest of the whole step that costs no I/O.
  uint64_t ContentDigest() const;
};

// Steps in `dir` that are committed (a decimal directory name with a
// manifest file), ascending. Does not verify them.
StatusOr<std::vector<int64_t>> ListSteps(const std::string& dir, Env* env = Env::Default());

// Reads and validates the manifest of `dir/<step>` (structure only).
StatusOr<StepInfo> ReadStepInfo(const std::string& dir, int64_t step, Env* env = Env::Default());

struct VerifyProblem {
  std::string item;    // empty when the problem is not about one item
  int64_t chunk = -1;  // chunk index within the item, or -1
  std::string message;
};

struct VerifyReport {
  int64_t step = 0;
  uint64_t bytes_verified = 0;
  std::vector<VerifyProblem> problems;  // empty iff the step verifies
  bool ok() const { return problems.empty(); }
};

// Reads every byte of `dir/<step>` and checks it against the manifest.
// Returns a report listing every corrupt chunk; the Status is non-OK only when
// the step cannot be examined at all (no manifest, unreadable manifest).
StatusOr<VerifyReport> VerifyStep(const std::string& dir, int64_t step, int threads = 0,
                                  Env* env = Env::Default());

}  // namespace strata

#endif  // STRATA_CATALOG_H_
