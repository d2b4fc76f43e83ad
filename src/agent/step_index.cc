// Copyright 2026 The Strata Authors.
#include "agent/step_index.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <limits>
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
#include "util/json_int.h"

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

// Checksums a file of `size` bytes has in a (non-Strata) index.
uint64_t FileChunkCount(uint64_t size) { return size == 0 ? 0 : (size - 1) / kIndexChunkBytes + 1; }

struct ChunkRef {
  size_t file;
  uint64_t chunk;
};

std::vector<ChunkRef> Chunks(const std::vector<IndexedFile>& files) {
  std::vector<ChunkRef> refs;
  for (size_t f = 0; f < files.size(); ++f) {
    for (uint64_t c = 0; c < FileChunkCount(files[f].size); ++c) refs.push_back({f, c});
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
    (*hashes)[f].resize(FileChunkCount(files[f].size));
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

StatusOr<std::vector<size_t>> ManifestDataPositions(const StepIndex& index,
                                                    const StepInfo& manifest) {
  std::map<std::string_view, size_t> by_path;
  for (size_t p = 0; p < index.files.size(); ++p) by_path[index.files[p].path] = p;
  std::vector<size_t> position(manifest.files.size());
  std::vector<bool> named(index.files.size(), false);
  for (size_t m = 0; m < manifest.files.size(); ++m) {
    const FileInfo& file = manifest.files[m];
    auto it = by_path.find(file.name);
    if (it == by_path.end()) {
      return DataLossError("the manifest's data file " + file.name + " is not in the copy's index");
    }
    if (index.files[it->second].size != file.size) {
      return DataLossError("the index lists " + file.name + " with " +
                           std::to_string(index.files[it->second].size) +
                           " bytes, the manifest with " + std::to_string(file.size));
    }
    position[m] = it->second;
    named[it->second] = true;
  }
  for (size_t p = 0; p < index.files.size(); ++p) {
    if (!named[p] && index.files[p].path != kManifestFileName) {
      return DataLossError(index.files[p].path + " is not a file of the checkpoint's manifest");
    }
  }
  return position;
}

Status ValidateRelativePath(std::string_view path) {
  if (path.empty() || path.size() > 4096 || path.front() == '/' ||
      path.find('\0') != std::string_view::npos) {
    return InvalidArgumentError("unsafe relative path \"" + std::string(path.substr(0, 64)) + "\"");
  }
  size_t parts = 0;
  for (size_t start = 0; start <= path.size(); ++parts) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == ".." || parts >= 32) {
      return InvalidArgumentError("unsafe relative path \"" + std::string(path.substr(0, 64)) +
                                  "\"");
    }
    start = end + 1;
  }
  return Status::Ok();
}

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

std::string EncodeSeal(uint64_t index_digest, const StepIdentity& identity) {
  json files = json::array();
  for (const FileIdentity& f : identity.files) {
    files.push_back({f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns});
  }
  return json{{"index_digest", Hex64(index_digest)},
              {"listed_at_ns", identity.listed_at_ns},
              {"files", std::move(files)}}
      .dump();
}

StatusOr<StepIdentity> DecodeSeal(std::string_view text, uint64_t index_digest,
                                  std::string_view source) {
  const std::string where(source);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("files") || !doc["files"].is_array() ||
      !doc.value("listed_at_ns", json()).is_number_integer() ||
      !doc.value("index_digest", json()).is_string()) {
    return DataLossError(where + ": not a seal");
  }
  if (doc["index_digest"].get<std::string>() != Hex64(index_digest)) {
    return FailedPreconditionError(where + ": sealed for another index");
  }
  StepIdentity out;
  out.listed_at_ns = doc["listed_at_ns"].get<int64_t>();
  for (const json& f : doc["files"]) {
    bool well_formed = f.is_array() && f.size() == 5 && f[0].is_number_unsigned() &&
                       f[1].is_number_unsigned() && f[2].is_number_unsigned() &&
                       f[3].is_number_integer() && f[4].is_number_integer();
    if (!well_formed) return DataLossError(where + ": a malformed file entry");
    out.files.push_back({f[0].get<uint64_t>(), f[1].get<uint64_t>(), f[2].get<uint64_t>(),
                         f[3].get<int64_t>(), f[4].get<int64_t>()});
  }
  return out;
}

nlohmann::json StepIndexToJson(const StepIndex& index) {
  json files = json::array();
  for (const auto& f : index.files) {
    json chunks = json::array();
    for (uint64_t c : f.chunk_xxh3) chunks.push_back(Hex64(c));
    files.push_back({{"path", f.path}, {"size", f.size}, {"chunks", std::move(chunks)}});
  }
  return {{"strata", index.strata},
          {"digest", Hex64(index.digest)},
          {"total_bytes", index.total_bytes},
          {"files", std::move(files)}};
}

std::string EncodeStepIndex(const StepIndex& index) { return StepIndexToJson(index).dump(); }

StatusOr<StepIndex> DecodeStepIndex(std::string_view text, std::string_view source) {
  return StepIndexFromJson(json::parse(text.begin(), text.end(), nullptr, false), source);
}

StatusOr<StepIndex> StepIndexFromJson(const nlohmann::json& doc, std::string_view source) {
  std::string where(source);
  auto bad = [&](const std::string& why) { return DataLossError(where + ": " + why); };
  if (!doc.is_object()) return bad("step index is not a JSON object");
  try {
    StepIndex index;
    index.strata = doc.at("strata").get<bool>();
    auto digest = ParseHex64(doc.at("digest").get<std::string>());
    if (!digest) return bad("bad digest");
    index.digest = *digest;
    index.total_bytes = GetInt<uint64_t>(doc.at("total_bytes"));
    for (const auto& f : doc.at("files")) {
      IndexedFile file{f.at("path").get<std::string>(), GetInt<uint64_t>(f.at("size")), {}};
      STRATA_RETURN_IF_ERROR(ValidateRelativePath(file.path).WithContext(where));
      for (const auto& c : f.at("chunks")) {
        auto h = ParseHex64(c.get<std::string>());
        if (!h) return bad("bad chunk checksum");
        file.chunk_xxh3.push_back(*h);
      }
      // A peer's index drives reads and comparisons: its shape must be exact.
      uint64_t want = index.strata ? 0 : FileChunkCount(file.size);
      if (file.chunk_xxh3.size() != want) {
        return bad(file.path.substr(0, 64) + ": " + std::to_string(file.chunk_xxh3.size()) +
                   " chunk checksums, expected " + std::to_string(want));
      }
      index.files.push_back(std::move(file));
    }
    uint64_t sum = 0;
    for (const auto& f : index.files) {
      if (__builtin_add_overflow(sum, f.size, &sum)) return bad("the files' sizes overflow");
    }
    if (sum != index.total_bytes) return bad("total_bytes does not match the files");
    return index;
  } catch (const json::exception& e) {
    return bad(std::string("malformed step index: ") + e.what());
  }
}

std::vector<FileRange> StreamSlice(const StepIndex& index, uint64_t offset, uint64_t length) {
  std::vector<FileRange> out;
  uint64_t at = 0;  // where the current file starts in the stream
  const uint64_t end = offset + length;
  for (size_t f = 0; f < index.files.size() && at < end; ++f) {
    const uint64_t size = index.files[f].size;
    const uint64_t from = std::max(offset, at), to = std::min(end, at + size);
    if (from < to) out.push_back({f, from - at, to - from});
    at += size;
  }
  return out;
}

}  // namespace strata::agent
