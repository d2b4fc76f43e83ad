// Copyright 2026 The Strata Authors.
#include "wire/data.h"

#include "util/hash.h"
#include "wire/codec.h"
#include "wire/op.h"
#include "wire/vocabulary.h"

namespace strata::wire {
namespace {

// Positions in an index: unsigned and strictly increasing (each file once).
std::optional<std::vector<size_t>> ReadPositions(const json& files, FieldError* e) {
  e->want = "increasing file positions";
  if (!files.is_array() || files.size() > kMaxListEntries) return std::nullopt;
  std::vector<size_t> out;
  out.reserve(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    const json& p = files[i];
    if (!IsNonNegativeInteger(p) || (!out.empty() && p.get<uint64_t>() <= out.back())) {
      e->want = EntryWant(e->want, i);
      return std::nullopt;
    }
    out.push_back(p.get<size_t>());
  }
  return out;
}

json WritePositions(const std::vector<size_t>& files) { return files; }

// [[file, offset, length], ...]: ranges of the index's files, in groups.
std::optional<std::vector<std::vector<FileRange>>> ReadRangeGroups(const json& j, FieldError* e) {
  e->want = "a list of groups of byte ranges [file, offset, length]";
  if (!j.is_array() || j.size() > kMaxListEntries) return std::nullopt;
  std::vector<std::vector<FileRange>> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& group = j[i];
    e->want = EntryWant("a list of groups of byte ranges [file, offset, length]", i);
    if (!group.is_array() || group.size() > kMaxListEntries) return std::nullopt;
    std::vector<FileRange>& ranges = out.emplace_back();
    for (const json& r : group) {
      if (!r.is_array() || r.size() != 3 || !IsNonNegativeInteger(r[0]) ||
          !IsNonNegativeInteger(r[1]) || !IsNonNegativeInteger(r[2])) {
        return std::nullopt;
      }
      ranges.push_back({r[0].get<size_t>(), r[1].get<uint64_t>(), r[2].get<uint64_t>()});
    }
  }
  return out;
}

json WriteRangeGroups(const std::vector<std::vector<FileRange>>& groups) {
  json out = json::array();
  for (const auto& group : groups) {
    json& ranges = out.emplace_back(json::array());
    for (const FileRange& r : group) ranges.push_back({r.file, r.offset, r.length});
  }
  return out;
}

// The offered ranges of a put_step: [[file, offset, length, "xxh3"], ...],
// each within its file of the message's index (read before it).
Status ReadOffer(const Codec<PutStepRequest>& c, const json& j, PutStepRequest& r) {
  auto it = j.find("ranges");
  if (it == j.end() || it->is_null()) return Status::Ok();
  const std::string want = "a list of [file, offset, length, \"xxh3\"]";
  if (!it->is_array() || it->size() > kMaxListEntries) return c.Error("ranges", want);
  RangePlan plan;
  plan.files.resize(r.index.files.size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& e = (*it)[i];
    std::optional<uint64_t> hash;
    if (e.is_array() && e.size() == 4 && e[3].is_string())
      hash = ParseHex64(e[3].get<std::string>());
    if (!hash || !IsNonNegativeInteger(e[0]) || !IsNonNegativeInteger(e[1]) ||
        !IsNonNegativeInteger(e[2])) {
      return c.Error("ranges", EntryWant(want, i));
    }
    const FileRange range{e[0].get<size_t>(), e[1].get<uint64_t>(), e[2].get<uint64_t>()};
    Status inside = CheckRanges(r.index, {range});
    if (!inside.ok()) return c.Invalid(": \"ranges\": " + EntryError(i, inside.message()));
    plan.files[range.file].push_back({range.offset, range.length, *hash});
  }
  r.ranges = std::move(plan);
  return Status::Ok();
}

void WriteOffer(const PutStepRequest& r, json* j) {
  if (!r.ranges) return;
  json out = json::array();
  for (size_t f = 0; f < r.ranges->files.size(); ++f) {
    for (const RangeCheck& c : r.ranges->files[f]) {
      out.push_back({f, c.offset, c.length, Hex64(c.xxh3)});
    }
  }
  (*j)["ranges"] = std::move(out);
}

const Codec<PutStepRequest>& PutStepCodec() {
  using R = PutStepRequest;
  return Codec<R>::Once(Op::kPutStep, [](Codec<R>& codec) {
    codec.Value<StepKey>("key", &R::key, Presence::kRequired, &ReadStepKey, &WriteStepKey)
        .Nested<StepIndex>("index", &R::index, Presence::kRequired, &ReadStepIndex, &WriteStepIndex)
        .Int("streams", &R::streams, 1, 64, Presence::kDefaulted)
        .Bool("dedup", &R::dedup, Presence::kOmitted)
        .Int("range_streams", &R::range_streams, 1, 64, Presence::kOmitted)
        .Custom({{"ranges", false, FieldInfo::Kind::kOther}}, &ReadOffer, &WriteOffer);
  });
}

const Codec<PutStepReady>& PutStepReadyCodec() {
  using R = PutStepReady;
  return Codec<R>::Once("put_step's answer", [](Codec<R>& codec) {
    codec.Constant("ok", true)
        .Bool("have", &R::have, Presence::kDefaulted)
        .Unsigned("transfer", &R::transfer)
        .Value<std::vector<std::vector<FileRange>>>("need", &R::need, &ReadRangeGroups,
                                                    &WriteRangeGroups);
  });
}

const Codec<PutFilesRequest>& PutFilesCodec() {
  using R = PutFilesRequest;
  return Codec<R>::Once(Op::kPutFiles, [](Codec<R>& codec) {
    codec
        .Unsigned("transfer", &R::transfer)
        // A transfer that answered "need" names a group; any other lists files.
        .Int("group", &R::group, 0, kInt64Max)
        .Custom(
            {{"files", false, FieldInfo::Kind::kOther}},
            [](const Codec<R>& c, const json& j, R& r) {
              if (r.group) return Status::Ok();
              auto it = j.find("files");
              if (it == j.end() || it->is_null()) return c.Missing("files");
              FieldError e;
              std::optional<std::vector<size_t>> files = ReadPositions(*it, &e);
              if (!files) return c.Error("files", e.want);
              r.files = std::move(*files);
              return Status::Ok();
            },
            [](const R& r, json* j) {
              if (!r.group) (*j)["files"] = r.files;
            });
  });
}

const Codec<GetIndexRequest>& GetIndexCodec() {
  using R = GetIndexRequest;
  return Codec<R>::Once(Op::kGetIndex, [](Codec<R>& codec) {
    codec.Value<StepKey>("key", &R::key, Presence::kRequired, &ReadStepKey, &WriteStepKey);
  });
}

const Codec<FetchStepRequest>& FetchStepCodec() {
  using R = FetchStepRequest;
  return Codec<R>::Once(Op::kFetchStep, [](Codec<R>& codec) {
    codec.Value<StepKey>("key", &R::key, Presence::kRequired, &ReadStepKey, &WriteStepKey)
        .Digest("digest", &R::digest)
        .Value<std::vector<size_t>>("files", &R::files, &ReadPositions, &WritePositions)
        .Check([](const Codec<R>& c, const R& r) {
          // A group of a multi-stream fetch is served only from the copy asked for.
          if (!r.files || r.digest) return Status::Ok();
          return c.Invalid(": \"digest\" (16 hex digits) must come with \"files\"");
        });
  });
}

const Codec<IndexReply>& IndexReplyCodec() {
  using R = IndexReply;
  return Codec<R>::Once("the index reply", [](Codec<R>& codec) {
    codec.Constant("ok", true)
        .Nested<StepIndex>("index", &R::index, Presence::kRequired, &ReadStepIndex,
                           &WriteStepIndex);
  });
}

}  // namespace

Status CheckFilePositions(const std::vector<size_t>& files, size_t count) {
  if (files.size() <= count && (files.empty() || files.back() < count)) return Status::Ok();
  return InvalidArgumentError("\"files\": positions must be below " + std::to_string(count));
}

STRATA_WIRE_CODEC(PutStepRequest, PutStepCodec)
STRATA_WIRE_CODEC(PutStepReady, PutStepReadyCodec)
STRATA_WIRE_CODEC(PutFilesRequest, PutFilesCodec)
STRATA_WIRE_CODEC(GetIndexRequest, GetIndexCodec)
STRATA_WIRE_CODEC(FetchStepRequest, FetchStepCodec)
STRATA_WIRE_CODEC(IndexReply, IndexReplyCodec)

}  // namespace strata::wire
