// Copyright 2026 The Strata Authors.
#include "agent/store/step_seal.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>

#include "engine/step_io.h"
#include "format/manifest.h"
#include "format/naming.h"
#include "strata/catalog.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/json_bounded.h"
#include "wire/codec.h"

namespace strata::agent {

using json = nlohmann::json;

namespace {

// The clock the kernel stamps file times with (jiffy-grained): a file
// written after a reading of it has a time at or past that reading.
int64_t CoarseRealtimeNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// A regular file found under a step directory, as it was when listed.
struct Listed {
  IndexedFile file;  // path and size; no checksums
  FileIdentity id;
};

// Lists regular files under `root` recursively (relative paths, sorted by
// path). Anything but regular files and directories is an error.
Status ListFilesUnder(Env* env, const std::string& root, const std::string& rel,
                      std::vector<Listed>* out, int depth) {
  if (depth > 32) return InvalidArgumentError(root + "/" + rel + ": directories nested too deep");
  std::string dir = rel.empty() ? root : JoinPath(root, rel);
  STRATA_ASSIGN_OR_RETURN(auto entries, env->ListDir(dir));
  for (const auto& e : entries) {
    std::string child = rel.empty() ? e.name : rel + "/" + e.name;
    std::string full = JoinPath(root, child);
    if (e.type == DirEntry::Type::kDirectory) {
      STRATA_RETURN_IF_ERROR(ListFilesUnder(env, root, child, out, depth + 1));
      continue;
    }
    StatusOr<FileIdentity> id = e.type == DirEntry::Type::kFile
                                    ? env->Identify(full)
                                    : FailedPreconditionError(full + " is not a regular file");
    if (id.status().code() == StatusCode::kFailedPrecondition) {
      return InvalidArgumentError(full + " is not a regular file or directory");
    }
    if (!id.ok()) return id.status();
    out->push_back({{child, id->size, {}}, *id});
  }
  return Status::Ok();
}

// The files under `root`, sorted by path; the identities, if wanted, in
// *identity, with the time the listing began. A file written in the clock
// tick the listing began in could not be proven by a seal later, so when
// identities are wanted such a listing waits for the next tick (a few ms)
// and lists again, up to twice; a file still being written stays unproven.
StatusOr<std::vector<IndexedFile>> ListFiles(Env* env, const std::string& root,
                                             StepIdentity* identity) {
  constexpr int kMaxRelists = 2;
  int64_t listed_at = 0;
  std::vector<Listed> listed;
  for (int attempt = 0;; ++attempt) {
    listed_at = CoarseRealtimeNs();
    listed.clear();
    STRATA_RETURN_IF_ERROR(ListFilesUnder(env, root, "", &listed, 0));
    if (identity == nullptr || attempt == kMaxRelists) break;
    int64_t newest = std::numeric_limits<int64_t>::min();
    for (const Listed& l : listed) newest = std::max(newest, l.id.mtime_ns);
    if (newest < listed_at) break;
    // A file of this very tick: wait for the next one (a few ms). A file
    // stamped in the future (a skewed clock, a copied mtime) is not waited
    // for: it stays unproven, and is read at the next restart.
    constexpr auto kMaxTickWait = std::chrono::milliseconds(50);
    if (newest > listed_at + std::chrono::nanoseconds(kMaxTickWait).count()) break;
    const auto give_up = std::chrono::steady_clock::now() + kMaxTickWait;
    while (CoarseRealtimeNs() <= newest && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::sort(listed.begin(), listed.end(),
            [](const Listed& a, const Listed& b) { return a.file.path < b.file.path; });
  std::vector<IndexedFile> files;
  files.reserve(listed.size());
  if (identity != nullptr) {
    identity->listed_at_ns = listed_at;
    identity->files.clear();
  }
  for (Listed& l : listed) {
    files.push_back(std::move(l.file));
    if (identity != nullptr) identity->files.push_back(l.id);
  }
  return files;
}

struct ChunkRef {
  size_t file;
  uint64_t chunk;
};

std::vector<ChunkRef> Chunks(const std::vector<IndexedFile>& files) {
  std::vector<ChunkRef> refs;
  for (size_t f = 0; f < files.size(); ++f) {
    for (uint64_t c = 0; c < IndexChunkCount(files[f].size); ++c) refs.push_back({f, c});
  }
  return refs;
}

// Hashes every chunk of every file in parallel into `hashes` (one vector per
// file). Each worker reuses one buffer.
Status HashChunks(Env* env, const std::string& dir, const std::vector<IndexedFile>& files,
                  ThreadPool* pool, std::vector<std::vector<uint64_t>>* hashes) {
  std::vector<ChunkRef> refs = Chunks(files);
  hashes->assign(files.size(), {});
  for (size_t f = 0; f < files.size(); ++f) {
    (*hashes)[f].resize(IndexChunkCount(files[f].size));
  }
  std::mutex mu;
  Status first;
  pool->ParallelFor(refs.size(), [&](size_t i) {
    thread_local std::unique_ptr<std::byte[]> buf;
    if (!buf) buf = std::make_unique_for_overwrite<std::byte[]>(kIndexChunkBytes);
    const IndexedFile& f = files[refs[i].file];
    uint64_t off = refs[i].chunk * kIndexChunkBytes;
    uint64_t len = std::min(kIndexChunkBytes, f.size - off);
    std::string path = JoinPath(dir, f.path);
    Status s;
    auto file = env->OpenReadable(path);
    if (file.ok())
      s = (*file)->PRead(off, len, buf.get());
    else
      s = file.status();
    std::lock_guard<std::mutex> l(mu);
    if (!s.ok()) {
      if (first.ok()) first = s;
      return;
    }
    (*hashes)[refs[i].file][refs[i].chunk] = Xxh3(buf.get(), len);
  });
  return first;
}

uint64_t MerkleDigest(const std::vector<IndexedFile>& files) {
  Xxh3Stream h;
  for (const auto& f : files) {
    h.Update(f.path);
    h.UpdateU64(0);
    h.UpdateU64(f.size);
    for (uint64_t c : f.chunk_xxh3) h.UpdateU64(c);
  }
  return h.Digest();
}

// The manifest of the Strata checkpoint in `dir`, if it is one. The
// directory's own name does not matter (it may be a transfer's temp dir).
std::optional<StepInfo> StrataManifest(Env* env, const std::string& dir) {
  std::string path = JoinPath(dir, std::string(kManifestFileName));
  if (!env->Exists(path)) return std::nullopt;
  auto bytes = ReadFileToString(env, path, kMaxManifestBytes);
  if (!bytes.ok()) return std::nullopt;
  auto info = DecodeManifest(*bytes, path);
  if (!info.ok()) return std::nullopt;
  return *info;
}

// A Strata checkpoint: the manifest gives the digest; no hashing needed.
// A directory holding more or other files than its manifest describes is
// hashed like any other step.
bool IndexAsStrata(Env* env, const std::string& dir, StepIndex* index) {
  auto info = StrataManifest(env, dir);
  if (!info) return false;
  index->digest = info->ContentDigest();
  if (!ManifestDataPositions(*index, *info).ok()) return false;
  index->strata = true;
  return true;
}

}  // namespace

StatusOr<StepIndex> BuildStepIndex(Env* env, const std::string& dir, ThreadPool* pool,
                                   StepIdentity* identity) {
  StepIndex index;
  STRATA_ASSIGN_OR_RETURN(index.files, ListFiles(env, dir, identity));
  for (const auto& f : index.files) index.total_bytes += f.size;
  if (IndexAsStrata(env, dir, &index)) return index;
  std::vector<std::vector<uint64_t>> hashes;
  STRATA_RETURN_IF_ERROR(HashChunks(env, dir, index.files, pool, &hashes));
  for (size_t f = 0; f < index.files.size(); ++f) index.files[f].chunk_xxh3 = std::move(hashes[f]);
  index.digest = MerkleDigest(index.files);
  return index;
}

namespace {

// OK iff `present` (a listing of `dir`) names exactly the indexed files with
// the indexed sizes; DATA_LOSS naming the first difference.
Status CheckLayout(const std::string& dir, const std::vector<IndexedFile>& present,
                   const StepIndex& index) {
  if (present.size() != index.files.size()) {
    return DataLossError(dir + " holds " + std::to_string(present.size()) +
                         " files, the index lists " + std::to_string(index.files.size()));
  }
  for (size_t i = 0; i < present.size(); ++i) {
    if (present[i].path != index.files[i].path || present[i].size != index.files[i].size) {
      return DataLossError(JoinPath(dir, index.files[i].path) +
                           " is missing or has the wrong size");
    }
  }
  return Status::Ok();
}

}  // namespace

Status VerifyStepIndex(Env* env, const std::string& dir, const StepIndex& index, ThreadPool* pool,
                       VerifyScope scope, StepIdentity* identity) {
  STRATA_ASSIGN_OR_RETURN(std::vector<IndexedFile> present, ListFiles(env, dir, identity));
  STRATA_RETURN_IF_ERROR(CheckLayout(dir, present, index));
  if (index.strata) {
    auto info = StrataManifest(env, dir);
    if (!info || info->ContentDigest() != index.digest) {
      return DataLossError(dir + ": manifest is unreadable or does not match the recorded digest");
    }
    STRATA_RETURN_IF_ERROR(ManifestDataPositions(index, *info).status().WithContext(dir));
    if (scope == VerifyScope::kLayout) return Status::Ok();
    VerifyReport report;
    VerifyStepData(env, pool, dir, *info, &report);
    if (!report.ok()) return DataLossError(report.problems.front().message);
    return Status::Ok();
  }
  if (scope == VerifyScope::kLayout) return Status::Ok();
  std::vector<std::vector<uint64_t>> hashes;
  STRATA_RETURN_IF_ERROR(HashChunks(env, dir, index.files, pool, &hashes));
  for (size_t f = 0; f < index.files.size(); ++f) {
    for (size_t c = 0; c < hashes[f].size(); ++c) {
      if (hashes[f][c] != index.files[f].chunk_xxh3[c]) {
        return DataLossError(JoinPath(dir, index.files[f].path) + " chunk " + std::to_string(c) +
                             ": checksum mismatch");
      }
    }
  }
  return Status::Ok();
}

Status CheckStepIdentity(Env* env, const std::string& dir, const StepIndex& index,
                         const StepIdentity& sealed) {
  STRATA_ASSIGN_OR_RETURN(std::vector<IndexedFile> present, ListFiles(env, dir, nullptr));
  Status layout = CheckLayout(dir, present, index);
  if (!layout.ok()) return FailedPreconditionError(std::string(layout.message()));
  if (sealed.files.size() != index.files.size()) {
    return FailedPreconditionError(dir + ": the seal lists " + std::to_string(sealed.files.size()) +
                                   " files, the index " + std::to_string(index.files.size()));
  }
  for (size_t i = 0; i < index.files.size(); ++i) {
    const std::string path = JoinPath(dir, index.files[i].path);
    const FileIdentity& was = sealed.files[i];
    if (was.mtime_ns >= sealed.listed_at_ns) {
      return FailedPreconditionError(path + " was modified as it was sealed");
    }
    STRATA_ASSIGN_OR_RETURN(FileIdentity now, env->Identify(path));
    if (!(now == was)) return FailedPreconditionError(path + " changed since it was sealed");
  }
  return Status::Ok();
}

namespace {

// A seal as the file holds it.
struct Seal {
  uint64_t index_digest = 0;
  int64_t listed_at_ns = 0;
  std::vector<FileIdentity> files;
};

// [device, inode, size, mtime_ns, ctime_ns]
std::optional<FileIdentity> ReadFileIdentity(const json& f) {
  const bool well_formed = f.is_array() && f.size() == 5 && f[0].is_number_unsigned() &&
                           f[1].is_number_unsigned() && f[2].is_number_unsigned() &&
                           f[3].is_number_integer() && f[4].is_number_integer();
  if (!well_formed) return std::nullopt;
  return FileIdentity{f[0].get<uint64_t>(), f[1].get<uint64_t>(), f[2].get<uint64_t>(),
                      f[3].get<int64_t>(), f[4].get<int64_t>()};
}

std::optional<std::vector<FileIdentity>> ReadFiles(const json& v, wire::FieldError* e) {
  e->want = "a list of [device, inode, size, mtime_ns, ctime_ns]";
  if (!v.is_array() || v.size() > wire::kMaxListEntries) return std::nullopt;
  std::vector<FileIdentity> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    std::optional<FileIdentity> f = ReadFileIdentity(v[i]);
    if (!f) {
      e->want = wire::EntryWant(e->want, i);
      return std::nullopt;
    }
    out.push_back(*f);
  }
  return out;
}

json WriteFiles(const std::vector<FileIdentity>& files) {
  json out = json::array();
  for (const FileIdentity& f : files) {
    out.push_back({f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns});
  }
  return out;
}

// {"index_digest": "16 hex digits", "listed_at_ns": N, "files": [[device,
// inode, size, mtime_ns, ctime_ns], ...]}, the files in index order.
const wire::Codec<Seal>& SealCodec() {
  return wire::Codec<Seal>::Once("a seal", [](wire::Codec<Seal>& c) {
    c.Digest("index_digest", &Seal::index_digest)
        .Int("listed_at_ns", &Seal::listed_at_ns, wire::kInt64Min, wire::kInt64Max)
        .Value<std::vector<FileIdentity>>("files", &Seal::files, wire::Presence::kRequired,
                                          &ReadFiles, &WriteFiles);
  });
}

}  // namespace

std::string EncodeSeal(uint64_t index_digest, const StepIdentity& identity) {
  return SealCodec().Write({index_digest, identity.listed_at_ns, identity.files}).dump();
}

StatusOr<StepIdentity> DecodeSeal(std::string_view text, uint64_t index_digest,
                                  std::string_view source) {
  const std::string where(source);
  const json doc = ParseBounded(text);
  if (doc.is_discarded()) return DataLossError(where + ": not a seal (not JSON)");
  StatusOr<Seal> seal = SealCodec().Parse(doc);
  if (!seal.ok()) return DataLossError(where + ": " + seal.status().message());
  if (seal->index_digest != index_digest) {
    return FailedPreconditionError(where + ": sealed for another index");
  }
  return StepIdentity{seal->listed_at_ns, std::move(seal->files)};
}

}  // namespace strata::agent
