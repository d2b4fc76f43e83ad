// Copyright 2026 The Strata Authors.
#include "wire/data.h"

#include "util/hash.h"
#include "wire/op.h"
#include "wire/vocabulary.h"

namespace strata::wire {
namespace {

std::string Prefix(Op op) { return std::string(OpName(op)) + ": "; }

StatusOr<const json*> Object(const json& j, Op op) {
  if (!j.is_object()) return InvalidArgumentError(Prefix(op) + "the message is not an object");
  return &j;
}

StatusOr<StepKey> Key(const json& j, Op op) {
  auto key = StepKeyFromJson(j.value("key", json()));
  if (!key.ok()) return InvalidArgumentError(Prefix(op) + "\"key\": " + key.status().message());
  return *key;
}

// Positions in an index: unsigned and strictly increasing (each file once).
StatusOr<std::vector<size_t>> Positions(const json& files, Op op) {
  const std::string want = Prefix(op) + "\"files\" must be increasing file positions";
  if (!files.is_array()) return InvalidArgumentError(want);
  std::vector<size_t> out;
  out.reserve(files.size());
  for (const json& p : files) {
    if (!IsNonNegativeInteger(p) || (!out.empty() && p.get<uint64_t>() <= out.back())) {
      return InvalidArgumentError(want);
    }
    out.push_back(p.get<size_t>());
  }
  return out;
}

// [[file, offset, length], ...]: ranges of the index's files.
json RangesToJson(const std::vector<FileRange>& ranges) {
  json out = json::array();
  for (const FileRange& r : ranges) out.push_back({r.file, r.offset, r.length});
  return out;
}

StatusOr<std::vector<FileRange>> RangesFromJson(const json& j, const std::string& what) {
  if (!j.is_array()) return InvalidArgumentError(what + " must be a list of byte ranges");
  std::vector<FileRange> out;
  out.reserve(j.size());
  for (const json& r : j) {
    if (!r.is_array() || r.size() != 3 || !IsNonNegativeInteger(r[0]) ||
        !IsNonNegativeInteger(r[1]) || !IsNonNegativeInteger(r[2])) {
      return InvalidArgumentError(what + ": a byte range is [file, offset, length]");
    }
    out.push_back({r[0].get<size_t>(), r[1].get<uint64_t>(), r[2].get<uint64_t>()});
  }
  return out;
}

// The offered ranges of a put_step: [[file, offset, length, "xxh3"], ...],
// each within its file of `index`.
json OfferToJson(const RangePlan& plan) {
  json out = json::array();
  for (size_t f = 0; f < plan.files.size(); ++f) {
    for (const RangeCheck& c : plan.files[f]) {
      out.push_back({f, c.offset, c.length, Hex64(c.xxh3)});
    }
  }
  return out;
}

StatusOr<RangePlan> OfferFromJson(const json& j, const StepIndex& index) {
  const std::string what = Prefix(Op::kPutStep) + "\"ranges\"";
  if (!j.is_array()) return InvalidArgumentError(what + " must be a list");
  RangePlan plan;
  plan.files.resize(index.files.size());
  for (const json& r : j) {
    std::optional<uint64_t> hash;
    if (r.is_array() && r.size() == 4 && r[3].is_string())
      hash = ParseHex64(r[3].get<std::string>());
    if (!hash || !IsNonNegativeInteger(r[0]) || !IsNonNegativeInteger(r[1]) ||
        !IsNonNegativeInteger(r[2])) {
      return InvalidArgumentError(what + ": a range is [file, offset, length, \"xxh3\"]");
    }
    const FileRange range{r[0].get<size_t>(), r[1].get<uint64_t>(), r[2].get<uint64_t>()};
    STRATA_RETURN_IF_ERROR(CheckRanges(index, {range}).WithContext(what));
    plan.files[range.file].push_back({range.offset, range.length, *hash});
  }
  return plan;
}

}  // namespace

Status CheckFilePositions(const std::vector<size_t>& files, size_t count) {
  if (files.size() <= count && (files.empty() || files.back() < count)) return Status::Ok();
  return InvalidArgumentError("\"files\": positions must be below " + std::to_string(count));
}

StatusOr<PutStepRequest> PutStepRequest::FromJson(const json& j) {
  STRATA_RETURN_IF_ERROR(Object(j, Op::kPutStep).status());
  PutStepRequest r;
  STRATA_ASSIGN_OR_RETURN(r.key, Key(j, Op::kPutStep));
  STRATA_ASSIGN_OR_RETURN(
      r.index, StepIndexFromJson(j.value("index", json()), "put_step: the peer's index"));
  auto streams = j.find("streams");
  if (streams != j.end()) {
    if (!streams->is_number_integer() || streams->get<int64_t>() < 1 ||
        streams->get<int64_t>() > 64) {
      return InvalidArgumentError(Prefix(Op::kPutStep) + "\"streams\" must be in 1..64");
    }
    r.streams = streams->get<int>();
  }
  auto dedup = j.find("dedup");
  if (dedup != j.end()) {
    if (!dedup->is_boolean())
      return InvalidArgumentError(Prefix(Op::kPutStep) + "\"dedup\" malformed");
    r.dedup = dedup->get<bool>();
  }
  auto range_streams = j.find("range_streams");
  if (range_streams != j.end()) {
    if (!range_streams->is_number_integer() || range_streams->get<int64_t>() < 1 ||
        range_streams->get<int64_t>() > 64) {
      return InvalidArgumentError(Prefix(Op::kPutStep) + "\"range_streams\" must be in 1..64");
    }
    r.range_streams = range_streams->get<int>();
  }
  auto ranges = j.find("ranges");
  if (ranges != j.end()) {
    STRATA_ASSIGN_OR_RETURN(r.ranges, OfferFromJson(*ranges, r.index));
  }
  return r;
}

json PutStepRequest::ToJson() const {
  json j = {{"op", OpName(Op::kPutStep)},
            {"key", StepKeyToJson(key)},
            {"index", StepIndexToJson(index)},
            {"streams", streams}};
  if (dedup) j["dedup"] = true;
  if (range_streams > 1) j["range_streams"] = range_streams;
  if (ranges) j["ranges"] = OfferToJson(*ranges);
  return j;
}

StatusOr<PutStepReady> PutStepReady::FromJson(const json& j) {
  if (!j.is_object()) return InvalidArgumentError("put_step's answer is not an object");
  PutStepReady r;
  auto have = j.find("have");
  if (have != j.end()) {
    if (!have->is_boolean()) return InvalidArgumentError("put_step's answer: \"have\" malformed");
    r.have = have->get<bool>();
  }
  auto transfer = j.find("transfer");
  if (transfer != j.end()) {
    if (!IsNonNegativeInteger(*transfer)) {
      return InvalidArgumentError("put_step's answer: \"transfer\" malformed");
    }
    r.transfer = transfer->get<uint64_t>();
  }
  auto need = j.find("need");
  if (need != j.end()) {
    if (!need->is_array()) return InvalidArgumentError("put_step's answer: \"need\" malformed");
    r.need.emplace();
    for (const json& group : *need) {
      STRATA_ASSIGN_OR_RETURN(auto ranges, RangesFromJson(group, "put_step's answer: \"need\""));
      r.need->push_back(std::move(ranges));
    }
  }
  return r;
}

json PutStepReady::ToJson() const {
  json j = {{"ok", true}, {"have", have}};
  if (transfer) j["transfer"] = *transfer;
  if (need) {
    j["need"] = json::array();
    for (const auto& group : *need) j["need"].push_back(RangesToJson(group));
  }
  return j;
}

StatusOr<PutFilesRequest> PutFilesRequest::FromJson(const json& j) {
  STRATA_RETURN_IF_ERROR(Object(j, Op::kPutFiles).status());
  PutFilesRequest r;
  auto transfer = j.find("transfer");
  if (transfer == j.end() || !IsNonNegativeInteger(*transfer)) {
    return InvalidArgumentError(Prefix(Op::kPutFiles) + "\"transfer\" must be a transfer id");
  }
  r.transfer = transfer->get<uint64_t>();
  auto group = j.find("group");
  if (group != j.end()) {
    if (!IsNonNegativeInteger(*group)) {
      return InvalidArgumentError(Prefix(Op::kPutFiles) + "\"group\" must be a group number");
    }
    r.group = group->get<size_t>();
    return r;
  }
  STRATA_ASSIGN_OR_RETURN(r.files, Positions(j.value("files", json()), Op::kPutFiles));
  return r;
}

json PutFilesRequest::ToJson() const {
  json j = {{"op", OpName(Op::kPutFiles)}, {"transfer", transfer}};
  if (group) {
    j["group"] = *group;
  } else {
    j["files"] = files;
  }
  return j;
}

StatusOr<GetIndexRequest> GetIndexRequest::FromJson(const json& j) {
  STRATA_RETURN_IF_ERROR(Object(j, Op::kGetIndex).status());
  GetIndexRequest r;
  STRATA_ASSIGN_OR_RETURN(r.key, Key(j, Op::kGetIndex));
  return r;
}

json GetIndexRequest::ToJson() const {
  return {{"op", OpName(Op::kGetIndex)}, {"key", StepKeyToJson(key)}};
}

StatusOr<FetchStepRequest> FetchStepRequest::FromJson(const json& j) {
  STRATA_RETURN_IF_ERROR(Object(j, Op::kFetchStep).status());
  FetchStepRequest r;
  STRATA_ASSIGN_OR_RETURN(r.key, Key(j, Op::kFetchStep));
  auto files = j.find("files");
  if (files != j.end()) {
    STRATA_ASSIGN_OR_RETURN(r.files, Positions(*files, Op::kFetchStep));
    // A group of a multi-stream fetch is served only from the copy asked for.
    auto digest = j.find("digest");
    if (digest != j.end() && digest->is_string()) r.digest = ParseHex64(digest->get<std::string>());
    if (!r.digest) {
      return InvalidArgumentError(Prefix(Op::kFetchStep) +
                                  "\"digest\" (16 hex digits) must come with \"files\"");
    }
  }
  return r;
}

json FetchStepRequest::ToJson() const {
  json j = {{"op", OpName(Op::kFetchStep)}, {"key", StepKeyToJson(key)}};
  if (digest) j["digest"] = Hex64(*digest);
  if (files) j["files"] = *files;
  return j;
}

StatusOr<IndexReply> IndexReply::FromJson(const json& j) {
  if (!j.is_object()) return InvalidArgumentError("the index reply is not an object");
  IndexReply r;
  STRATA_ASSIGN_OR_RETURN(r.index, StepIndexFromJson(j.value("index", json()), "index"));
  return r;
}

json IndexReply::ToJson() const { return {{"ok", true}, {"index", StepIndexToJson(index)}}; }

}  // namespace strata::wire
