// Copyright 2026 The Strata Authors.
#include "format/step_index.h"

#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "format/naming.h"
#include "util/hash.h"
#include "util/json_int.h"

namespace strata {

using json = nlohmann::json;

uint64_t IndexChunkCount(uint64_t size) {
  return size == 0 ? 0 : (size - 1) / kIndexChunkBytes + 1;
}

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
  // The entry being read, for an error inside it ("files[3]").
  std::string entry;
  try {
    StepIndex index;
    index.strata = doc.at("strata").get<bool>();
    auto digest = ParseHex64(doc.at("digest").get<std::string>());
    if (!digest) return bad("bad digest");
    index.digest = *digest;
    index.total_bytes = GetInt<uint64_t>(doc.at("total_bytes"));
    const json& files = doc.at("files");
    for (size_t i = 0; i < files.size(); ++i) {
      const json& f = files.at(i);
      entry = "files[" + std::to_string(i) + "]";
      IndexedFile file{f.at("path").get<std::string>(), GetInt<uint64_t>(f.at("size")), {}};
      STRATA_RETURN_IF_ERROR(ValidateRelativePath(file.path).WithContext(where));
      const json& chunks = f.at("chunks");
      for (size_t c = 0; c < chunks.size(); ++c) {
        auto h = ParseHex64(chunks.at(c).get<std::string>());
        if (!h) {
          return bad(entry + " (" + file.path.substr(0, 64) + "): chunk " + std::to_string(c) +
                     ": bad checksum");
        }
        file.chunk_xxh3.push_back(*h);
      }
      // A peer's index drives reads and comparisons: its shape must be exact.
      uint64_t want = index.strata ? 0 : IndexChunkCount(file.size);
      if (file.chunk_xxh3.size() != want) {
        return bad(file.path.substr(0, 64) + ": " + std::to_string(file.chunk_xxh3.size()) +
                   " chunk checksums, expected " + std::to_string(want));
      }
      index.files.push_back(std::move(file));
    }
    entry.clear();
    uint64_t sum = 0;
    for (const auto& f : index.files) {
      if (__builtin_add_overflow(sum, f.size, &sum)) return bad("the files' sizes overflow");
    }
    if (sum != index.total_bytes) return bad("total_bytes does not match the files");
    return index;
  } catch (const json::exception& e) {
    return bad("malformed step index" + (entry.empty() ? "" : " at " + entry) + ": " + e.what());
  }
}

}  // namespace strata
