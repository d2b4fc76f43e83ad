// Copyright 2026 The Strata Authors.
//
// StepIndex: the description of one step directory an agent holds — every
// file with its size and chunk checksums, and a content digest — so that a
// copy can be verified, sent file by file, and compared across nodes
// without reading it. This file is its format: the agent keeps it as
// <step>.index next to the step (agent/store) and peers exchange it in
// their messages (wire/). Building and verifying an index from a directory
// is agent/store/step_seal.h.
//
// A Strata checkpoint (a step directory with a valid strata.manifest) needs
// no hashing: its digest is the manifest's ContentDigest and its bytes are
// verified against the manifest's chunk checksums. Any other step (Orbax,
// PyTorch) is hashed in parallel, 16 MiB chunks per file, and its digest is
// a Merkle-style XXH3 over the sorted relative paths, sizes and chunk hashes.
#ifndef STRATA_FORMAT_STEP_INDEX_H_
#define STRATA_FORMAT_STEP_INDEX_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/catalog.h"
#include "strata/status.h"

namespace strata {

// A step that is not a Strata checkpoint is hashed in chunks of this size.
inline constexpr uint64_t kIndexChunkBytes = 16ull << 20;
// How many chunk checksums a file of `size` bytes has in such an index.
uint64_t IndexChunkCount(uint64_t size);

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

}  // namespace strata

#endif  // STRATA_FORMAT_STEP_INDEX_H_
