// Copyright 2026 The Strata Authors.
#include "wire/data.h"

#include "agent/rpc.h"
#include "util/hash.h"
#include "wire/op.h"

namespace strata::wire {
namespace {

std::string Prefix(Op op) { return std::string(OpName(op)) + ": "; }

StatusOr<const json*> Object(const json& j, Op op) {
  if (!j.is_object()) return InvalidArgumentError(Prefix(op) + "the message is not an object");
  return &j;
}

StatusOr<agent::StepKey> Key(const json& j, Op op) {
  auto key = agent::StepKeyFromJson(j.value("key", json()));
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
      r.index, agent::StepIndexFromJson(j.value("index", json()), "put_step: the peer's index"));
  auto streams = j.find("streams");
  if (streams != j.end()) {
    if (!streams->is_number_integer() || streams->get<int64_t>() < 1 ||
        streams->get<int64_t>() > 64) {
      return InvalidArgumentError(Prefix(Op::kPutStep) + "\"streams\" must be in 1..64");
    }
    r.streams = streams->get<int>();
  }
  return r;
}

json PutStepRequest::ToJson() const {
  return {{"op", OpName(Op::kPutStep)},
          {"key", agent::StepKeyToJson(key)},
          {"index", agent::StepIndexToJson(index)},
          {"streams", streams}};
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
  return r;
}

json PutStepReady::ToJson() const {
  json j = {{"ok", true}, {"have", have}};
  if (transfer) j["transfer"] = *transfer;
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
  STRATA_ASSIGN_OR_RETURN(r.files, Positions(j.value("files", json()), Op::kPutFiles));
  return r;
}

json PutFilesRequest::ToJson() const {
  return {{"op", OpName(Op::kPutFiles)}, {"transfer", transfer}, {"files", files}};
}

StatusOr<GetIndexRequest> GetIndexRequest::FromJson(const json& j) {
  STRATA_RETURN_IF_ERROR(Object(j, Op::kGetIndex).status());
  GetIndexRequest r;
  STRATA_ASSIGN_OR_RETURN(r.key, Key(j, Op::kGetIndex));
  return r;
}

json GetIndexRequest::ToJson() const {
  return {{"op", OpName(Op::kGetIndex)}, {"key", agent::StepKeyToJson(key)}};
}

StatusOr<FetchStepRequest> FetchStepRequest::FromJson(const json& j) {
  STRATA_RETURN_IF_ERROR(Object(j, Op::kFetchStep).status());
  FetchStepRequest r;
  STRATA_ASSIGN_OR_RETURN(r.key, Key(j, Op::kFetchStep));
  auto files = j.find("files");
  if (files != j.end()) {
    STRATA_ASSIGN_OR_RETURN(r.files, Positions(*files, Op::kFetchStep));
    // A group of a multi-stream fetch is served only from the copy asked for.
    r.digest = ParseHex64(j.value("digest", ""));
    if (!r.digest) {
      return InvalidArgumentError(Prefix(Op::kFetchStep) +
                                  "\"digest\" (16 hex digits) must come with \"files\"");
    }
  }
  return r;
}

json FetchStepRequest::ToJson() const {
  json j = {{"op", OpName(Op::kFetchStep)}, {"key", agent::StepKeyToJson(key)}};
  if (digest) j["digest"] = Hex64(*digest);
  if (files) j["files"] = *files;
  return j;
}

StatusOr<IndexReply> IndexReply::FromJson(const json& j) {
  if (!j.is_object()) return InvalidArgumentError("the index reply is not an object");
  IndexReply r;
  STRATA_ASSIGN_OR_RETURN(r.index, agent::StepIndexFromJson(j.value("index", json()), "index"));
  return r;
}

json IndexReply::ToJson() const { return {{"ok", true}, {"index", agent::StepIndexToJson(index)}}; }

}  // namespace strata::wire
