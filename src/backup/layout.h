// Copyright 2026 The Strata Authors.
//
// The layout of backups in an ObjectStore (see docs/backup.md). Below the
// store's URL:
//
//   <id>/strata.backup          the commit object, written last, by the
//                               coordinator, once every part is uploaded and
//                               verified. A backup without it is incomplete
//                               and is never restored from.
//   <id>/p<part>.part           part metadata (JSON: the step index of the
//                               part: files, sizes, XXH3 chunk checksums,
//                               digest), written by the uploading node after
//                               all of the part's files.
//   <id>/p<part>/<rel path>     the files of the part's step directory.
//
// <id> is the UTC minute the backup began, "YYYY-MM-DD_HH-MM"; a second
// backup begun in the same minute gets ".2", a third ".3", and so on.
// A part is one node's checkpoint: part p holds node rank p's data. With
// data parallelism only one replica uploads each column, and the commit
// object maps every node rank to the part it restores from.
//
// Nothing here performs I/O except ListBackups and ReadCommit.
//
// Both JSON objects carry "format" ("strata-backup-part" / "strata-backup")
// and "version" (kLayoutVersion); digests are 16 lowercase hex digits and
// times ISO-8601 UTC ("2026-11-21T04:30:12Z"). Decoders check every field
// they know and ignore fields they do not, so a v1 writer may add optional
// ones; anything incompatible bumps the version.
#ifndef STRATA_BACKUP_LAYOUT_H_
#define STRATA_BACKUP_LAYOUT_H_

#include <cstdint>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/object_store.h"
#include "strata/status.h"

namespace strata::backup {

inline constexpr std::string_view kCommitObjectName = "strata.backup";
inline constexpr int kLayoutVersion = 1;
// Bounds the decoders enforce (and ListBackups checks before a Get).
inline constexpr uint64_t kMaxCommitBytes = uint64_t{16} << 20;
inline constexpr uint64_t kMaxPartMetaBytes = uint64_t{256} << 20;
inline constexpr int kMaxNodes = 1 << 16;
inline constexpr int kMaxWorkersPerNode = 1024;

// A parsed backup id.
struct BackupId {
  std::time_t minute = 0;  // UTC, a multiple of 60
  int sequence = 1;        // 1 for "YYYY-MM-DD_HH-MM", n for ".n" (n >= 2)
  std::string ToString() const;
  auto operator<=>(const BackupId&) const = default;
};

// Parses "YYYY-MM-DD_HH-MM" or "YYYY-MM-DD_HH-MM.N" (N >= 2, no leading
// zeros); anything else is INVALID_ARGUMENT quoting the text.
StatusOr<BackupId> ParseBackupId(std::string_view text);
// The id for a backup begun at `now`: the minute of `now`, with the lowest
// sequence not already in `existing`.
BackupId NewBackupId(std::time_t now, const std::vector<BackupId>& existing);

// "2026-11-21T04:30:12Z", and back (exactly that form, fields in range).
std::string FormatUtcTime(std::time_t t);
StatusOr<std::time_t> ParseUtcTime(std::string_view text);

// Object keys.
std::string CommitKey(const std::string& id);                 // <id>/strata.backup
std::string PartMetaKey(const std::string& id, int part);     // <id>/p<part>.part
std::string PartDataPrefix(const std::string& id, int part);  // <id>/p<part>/
std::string PartDataKey(const std::string& id, int part, const std::string& rel_path);

// The backup id an object key is below ("<id>/..."), or nullopt for keys
// that are not below a backup id (e.g. ".strata-probe/...").
std::optional<std::string> BackupIdOfKey(const std::string& key);

// The part metadata object.
struct PartMeta {
  std::string id;
  std::string job;
  int part = 0;  // the node rank whose checkpoint this is
  int64_t step = 0;
  nlohmann::json index;  // the step index (agent::StepIndexToJson)
  uint64_t bytes = 0;    // total bytes of the part's files
  uint64_t digest = 0;   // content digest of the step (as in the index)
};
std::string EncodePartMeta(const PartMeta& meta);
// Checks every field; errors are DATA_LOSS prefixed with `source`.
StatusOr<PartMeta> DecodePartMeta(std::string_view text, std::string_view source);

// The commit object.
struct Commit {
  std::string id;
  std::string job;
  int64_t step = 0;
  int nodes = 1;
  int workers_per_node = 1;
  int data_parallelism = 1;
  std::time_t created = 0;               // UTC seconds, when the backup began
  std::time_t committed = 0;             // UTC seconds, when this object was written
  std::map<int, int> sources;            // node rank -> part; one entry per node
  std::map<int, uint64_t> part_bytes;    // part -> bytes
  std::map<int, uint64_t> part_digests;  // part -> content digest
  // A client asked for this step's backup (a _BACKUP_REQUESTED file),
  // out of the cadence: `strata prune` never deletes it. Written only when
  // true ("requested": true); absent in older commits.
  bool requested = false;
  uint64_t TotalBytes() const;
};
std::string EncodeCommit(const Commit& commit);
// Checks every field (sources cover [0, nodes), name existing parts);
// errors are DATA_LOSS prefixed with `source`.
StatusOr<Commit> DecodeCommit(std::string_view text, std::string_view source);

// What `strata backups ls` shows of one backup id.
struct BackupSummary {
  BackupId id;
  std::string id_text;
  bool complete = false;         // has a valid commit object
  std::optional<Commit> commit;  // when complete
  std::optional<int64_t> step;   // from the commit, else from any part metadata
  uint64_t bytes = 0;            // sum of the sizes of all objects under <id>/
  uint64_t objects = 0;
  std::string problem;  // why an existing commit object is not valid
};

// Lists every backup in `store`, oldest first. Objects whose first key
// component is not a backup id are ignored.
StatusOr<std::vector<BackupSummary>> ListBackups(storage::ObjectStore& store);

// Reads and decodes the commit object of `id`: NOT_FOUND if absent.
StatusOr<Commit> ReadCommit(storage::ObjectStore& store, const std::string& id);

}  // namespace strata::backup

#endif  // STRATA_BACKUP_LAYOUT_H_
