// Copyright 2026 The Strata Authors.
//
// The data calls' messages as typed structs (wire/op.h names the calls):
// a peer pushing a replica (put_step, then put_files on more connections), a
// restoring node fetching a copy (get_index, then fetch_step). The bytes
// themselves follow on the connection, never in a message. As for the
// coordination calls (wire/coordination.h), the receiver parses a request
// once at the edge with FromJson, errors INVALID_ARGUMENT naming the call
// and the field; the sender builds the struct and sends ToJson().
#ifndef STRATA_WIRE_DATA_H_
#define STRATA_WIRE_DATA_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "format/step_index.h"
#include "strata/status.h"
#include "wire/codec.h"
#include "wire/vocabulary.h"

namespace strata::wire {

using json = nlohmann::json;

// put_step: a peer offers its copy of `key` with `index`; with streams > 1
// the files follow on other connections (put_files). With `dedup` the
// sender sends what the receiver answers it needs (PutStepReady::need):
// the receiver takes the rest from the steps it holds (agent/store/dedup.h), by
// the index's chunks, or for a Strata step by `ranges` (its manifest's
// item chunks, per file of the index).
struct PutStepRequest {
  StepKey key;
  StepIndex index;
  int streams = 1;
  bool dedup = false;
  std::optional<RangePlan> ranges = std::nullopt;
  // With dedup: at most how many connections the sender opens for the
  // range groups it is asked for (the receiver may ask for fewer).
  int range_streams = 1;
  static StatusOr<PutStepRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<PutStepRequest>& Fields();
  json ToJson() const;
};

// The receiver's answer to put_step: it holds that copy already, or the
// files may come (on this connection, or as transfer `transfer`). To a
// put_step with `dedup`: `need`, the byte ranges to send, in groups; one
// group comes on this connection, several as transfer `transfer`, group g
// on a put_files of its own; none: the receiver had every byte.
struct PutStepReady {
  bool have = false;
  std::optional<uint64_t> transfer;
  std::optional<std::vector<std::vector<FileRange>>> need = std::nullopt;
  static StatusOr<PutStepReady> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<PutStepReady>& Fields();
  json ToJson() const;
};

// put_files: files `files` (positions in the index, increasing) of transfer
// `transfer` follow on this connection; or, for a transfer that answered
// `need`, the ranges of group `group`.
struct PutFilesRequest {
  uint64_t transfer = 0;
  std::vector<size_t> files;
  std::optional<size_t> group = std::nullopt;
  static StatusOr<PutFilesRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<PutFilesRequest>& Fields();
  json ToJson() const;
};

// get_index: the index of the copy of `key` the agent holds.
struct GetIndexRequest {
  StepKey key;
  static StatusOr<GetIndexRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<GetIndexRequest>& Fields();
  json ToJson() const;
};

// fetch_step: the agent's copy of `key` follows the reply (its index). With
// `files`, only those positions, and only if the copy is the one with
// `digest`.
struct FetchStepRequest {
  StepKey key;
  std::optional<uint64_t> digest;
  std::optional<std::vector<size_t>> files;
  static StatusOr<FetchStepRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<FetchStepRequest>& Fields();
  json ToJson() const;
};

// The reply to get_index and fetch_step: the index of the copy served.
struct IndexReply {
  StepIndex index;
  static StatusOr<IndexReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<IndexReply>& Fields();
  json ToJson() const;
};

// OK iff every position is below `count` (the index's file count).
Status CheckFilePositions(const std::vector<size_t>& files, size_t count);

}  // namespace strata::wire

#endif  // STRATA_WIRE_DATA_H_
