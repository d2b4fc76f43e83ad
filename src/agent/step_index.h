// Copyright 2026 The Strata Authors.
//
// StepIndex: what the agent knows about one step directory it holds — every
// file with its size and chunk checksums, and a content digest — so that it
// can verify a copy, send it file by file, and compare copies across nodes
// without reading them.
//
// A Strata checkpoint (a step directory with a valid strata.manifest) needs
// no hashing: its digest is the manifest's ContentDigest and its bytes are
// verified against the manifest's chunk checksums. Any other step (Orbax,
// PyTorch) is hashed in parallel, 16 MiB chunks per file, and its digest is
// a Merkle-style XXH3 over the sorted relative paths, sizes and chunk hashes.
#ifndef STRATA_AGENT_STEP_INDEX_H_
#define STRATA_AGENT_STEP_INDEX_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/catalog.h"
#include "strata/env.h"
#include "strata/status.h"
#include "util/thread_pool.h"

namespace strata::agent {

inline constexpr uint64_t kIndexChunkBytes = 16ull << 20;

struct IndexedFile {
  std::string path;  // relative to the step directory, '/'-separated, no ".."
  uint64_t size = 0;
  std::vector<uint64_t> chunk_xxh3;  // empty for Strata checkpoints
};

struct StepIndex {
  bool strata = false;  // verified through strata.manifest
  uint64_t digest = 0;
  uint64_t total_bytes = 0;
  std::vector<IndexedFile> files;  // sorted by path
};

// A byte range of one file of a step: [offset, offset + length) of the
// file at position `file` of its index.
struct FileRange {
  size_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t end() const { return offset + length; }
  auto operator<=>(const FileRange&) const = default;
};

// The byte ranges of `index`'s files that hold bytes [offset, offset +
// length) of the step read as one stream, its files concatenated in index
// order (a coded step's chunks are cut from that stream). Clipped at the
// stream's end; empty files are skipped.
std::vector<FileRange> StreamSlice(const StepIndex& index, uint64_t offset, uint64_t length);

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

// The index as JSON (the .index files and the peer protocol carry it), and
// back. Decoding checks every field and the shape (chunk counts, total);
// errors are DATA_LOSS prefixed with `source`.
nlohmann::json StepIndexToJson(const StepIndex& index);
StatusOr<StepIndex> StepIndexFromJson(const nlohmann::json& doc, std::string_view source);
std::string EncodeStepIndex(const StepIndex& index);
StatusOr<StepIndex> DecodeStepIndex(std::string_view text, std::string_view source);

// The positions in `index` of the data files of `manifest` (in manifest
// order). DATA_LOSS unless the index lists exactly those files, with the
// manifest's sizes, and the manifest file: a file the manifest does not
// describe would never be verified.
StatusOr<std::vector<size_t>> ManifestDataPositions(const StepIndex& index,
                                                    const StepInfo& manifest);

// OK iff `path` is a relative path of safe components: no "", ".", "..",
// no leading '/', no NUL, at most 4096 bytes, at most 32 components.
Status ValidateRelativePath(std::string_view path);

}  // namespace strata::agent

#endif  // STRATA_AGENT_STEP_INDEX_H_
