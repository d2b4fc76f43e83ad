// Copyright 2026 The Strata Authors.
#include "wire/codec.h"

#include "format/naming.h"

namespace strata::wire {

std::string IntWant(int64_t lo, int64_t hi) {
  return "an integer in " + std::to_string(lo) + ".." + (hi == kInt64Max ? "" : std::to_string(hi));
}

StatusOr<int64_t> ReadInt(const json& v, int64_t lo, int64_t hi, FieldError* error) {
  // An unsigned JSON integer above int64's range is out of every range;
  // anything else is compared as int64 before it is converted.
  const bool in_range =
      v.is_number_integer() &&
      !(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kInt64Max)) &&
      v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!in_range) {
    error->want = IntWant(lo, hi);
    return InvalidArgumentError(error->want);
  }
  return v.get<int64_t>();
}

std::optional<uint64_t> ReadHex64(const json& v, FieldError* error) {
  std::optional<uint64_t> h = v.is_string() ? ParseHex64(v.get<std::string>()) : std::nullopt;
  if (!h) error->want = "16 hex digits";
  return h;
}

std::optional<std::string> ReadJobName(const json& v, FieldError* error) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() > kMaxTextBytes) {
    error->want = "a string of at most " + std::to_string(kMaxTextBytes) + " bytes";
    return std::nullopt;
  }
  Status valid = ValidateJobName(v.get<std::string>());
  if (!valid.ok()) {
    error->detail = valid.message();
    return std::nullopt;
  }
  return v.get<std::string>();
}

std::optional<StepKey> ReadStepKey(const json& v, FieldError* error) {
  StatusOr<StepKey> key = StepKeyFromJson(v);
  if (key.ok()) return *key;
  error->detail = key.status().message();
  return std::nullopt;
}

json WriteStepKey(const StepKey& key) { return StepKeyToJson(key); }

std::optional<std::vector<int>> ReadInts(const json& v, int64_t lo, int64_t hi, size_t max_entries,
                                         FieldError* error) {
  if (!v.is_array() || v.size() > max_entries) return std::nullopt;
  std::vector<int> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    FieldError ignored;
    StatusOr<int64_t> n = ReadInt(v[i], std::max<int64_t>(lo, std::numeric_limits<int>::min()),
                                  std::min<int64_t>(hi, std::numeric_limits<int>::max()), &ignored);
    if (!n.ok()) {
      if (error != nullptr) error->want = EntryWant(error->want, i);
      return std::nullopt;
    }
    out.push_back(static_cast<int>(*n));
  }
  return out;
}

std::optional<std::vector<int>> ReadIntList(const json& v, FieldError* error) {
  error->want = "a list of integers";
  return ReadInts(v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(),
                  kMaxListEntries, error);
}

json WriteIntList(const std::vector<int>& list) { return list; }

StatusOr<StepIndex> ReadStepIndex(const json& v, const std::string& what) {
  return StepIndexFromJson(v, what + ": \"index\"");
}

json WriteStepIndex(const StepIndex& index) { return StepIndexToJson(index); }

CodecBase::CodecBase(Op op) : name_(OpName(op)), op_(op) {}

Status CodecBase::Error(const std::string& key, const std::string& want) const {
  return Invalid(": \"" + key + "\" must be " + want);
}

Status CodecBase::Missing(const std::string& key) const {
  return Invalid(": \"" + key + "\" is missing");
}

Status CodecBase::Invalid(const std::string& text) const {
  return InvalidArgumentError(name_ + text);
}

Status CodecBase::Failed(const char* key, const FieldError& e) const {
  if (!e.want.empty()) return Error(key, e.want);
  return Invalid(": \"" + std::string(key) + "\": " + e.detail);
}

Status CodecBase::NotAnObject() const {
  return Invalid(op_ ? ": the request is not an object" : " is not an object");
}

json CodecBase::Begin() const {
  json j = json::object();
  if (op_) j["op"] = OpName(*op_);
  return j;
}

namespace codec_internal {

const json* Find(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

void Put(json* j, const char* key, json value) { (*j)[key] = std::move(value); }

std::optional<uint64_t> ReadUnsigned(const json& v, FieldError* e) {
  if (IsNonNegativeInteger(v)) return v.get<uint64_t>();
  e->want = "a non-negative integer";
  return std::nullopt;
}

ReadFn<std::string> TextReader(size_t max_bytes) {
  return [max_bytes](const json& v, FieldError* e) -> std::optional<std::string> {
    if (v.is_string() && v.get_ref<const std::string&>().size() <= max_bytes) {
      return v.get<std::string>();
    }
    e->want = "a string of at most " + std::to_string(max_bytes) + " bytes";
    return std::nullopt;
  };
}

std::optional<double> ReadNumber(const json& v, FieldError* e) {
  if (v.is_number()) return v.get<double>();
  e->want = "a number";
  return std::nullopt;
}

std::optional<bool> ReadBool(const json& v, FieldError* e) {
  if (v.is_boolean()) return v.get<bool>();
  e->want = "true or false";
  return std::nullopt;
}

}  // namespace codec_internal

}  // namespace strata::wire
