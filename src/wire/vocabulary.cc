// Copyright 2026 The Strata Authors.
#include "wire/vocabulary.h"

#include <algorithm>

#include "format/naming.h"

namespace strata::wire {

std::string StepKey::ToString() const {
  return job + "/" + std::to_string(rank) + "/" + std::to_string(step);
}

Status ValidateStepKey(const StepKey& key) {
  STRATA_RETURN_IF_ERROR(ValidateJobName(key.job));
  if (key.rank < 0 || key.rank > 1000000)
    return InvalidArgumentError("bad node rank " + std::to_string(key.rank));
  if (key.step < 0) return InvalidArgumentError("bad step " + std::to_string(key.step));
  return Status::Ok();
}
json StepKeyToJson(const StepKey& key) {
  return {{"job", key.job}, {"rank", key.rank}, {"step", key.step}};
}

StatusOr<StepKey> StepKeyFromJson(const json& j) {
  if (!j.is_object() || !j.contains("job") || !j["job"].is_string() || !j.contains("rank") ||
      !j["rank"].is_number_integer() || !j.contains("step") || !j["step"].is_number_integer()) {
    return InvalidArgumentError("malformed step key");
  }
  // Range-checked as int64 before it becomes an int: 2^40 must not truncate to 0.
  const int64_t rank = j["rank"].get<int64_t>();
  if (rank < 0 || rank >= kMaxNodes) {
    return InvalidArgumentError("step key: rank " + std::to_string(rank) + " is out of range");
  }
  StepKey key{j["job"].get<std::string>(), j["rank"].get<int>(), j["step"].get<int64_t>()};
  STRATA_RETURN_IF_ERROR(ValidateStepKey(key));
  return key;
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

Status CheckRanges(const StepIndex& index, const std::vector<FileRange>& ranges) {
  for (const FileRange& r : ranges) {
    if (r.file >= index.files.size() || r.length > index.files[r.file].size ||
        r.offset > index.files[r.file].size - r.length) {
      return InvalidArgumentError("a byte range [" + std::to_string(r.offset) + ", +" +
                                  std::to_string(r.length) + ") of file " + std::to_string(r.file) +
                                  " is not in the step");
    }
  }
  return Status::Ok();
}

}  // namespace strata::wire
