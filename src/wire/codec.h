// Copyright 2026 The Strata Authors.
//
// One codec for every message: a message lists each of its fields once —
// its key, the member it fills, its bounds and whether it must be present —
// and that one list both parses and writes it. Errors have one style,
// INVALID_ARGUMENT naming the message and the field:
//
//   register: "nodes" is missing
//   register: "nodes" must be an integer in 1..100000
//   the plan: "group": a group needs at least 2 members
//
// Integers are range-checked against the bounds given and against the C++
// type of their member before they are converted, so 2^40 never truncates
// into an int. A key present with JSON null is absent. Keys a message does
// not list are ignored: a newer agent may add optional fields.
//
//   const Codec<NoticeRequest>& NoticeCodec() {
//     using R = NoticeRequest;
//     return Codec<R>::Once(Op::kNotice, [](Codec<R>& codec) {
//       codec.Job(&R::job)
//           .Int("node", &R::node, 0, kMaxNodes - 1)
//           .Int("step", &R::step, -1, kInt64Max, Presence::kDefaulted)
//           .Text("origin", &R::origin, Presence::kDefaulted);
//     });
//   }
//   STRATA_WIRE_CODEC(NoticeRequest, NoticeCodec)  // FromJson, ToJson, Fields
//
// Codecs live for the program (fields of one may refer to another). A list
// of messages names the entry it could not read: "\"files\": entry 3: ...".
#ifndef STRATA_WIRE_CODEC_H_
#define STRATA_WIRE_CODEC_H_

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/status.h"
#include "util/hash.h"
#include "wire/op.h"
#include "wire/vocabulary.h"

namespace strata::wire {

using json = nlohmann::json;

inline constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
inline constexpr size_t kMaxTextBytes = 4096;
inline constexpr size_t kMaxListEntries = 1 << 20;

// Whether a field must be on the wire, and when it is written.
enum class Presence {
  kRequired,   // parsing fails without it; always written
  kDefaulted,  // absent: the member keeps the default a fresh message has; always written
  kOmitted,    // absent: as kDefaulted; written only when it differs from that default
};

// What a field's reader found wrong: `want` completes "<key> must be ...",
// `detail` (when `want` is empty) follows "<key>: ".
struct FieldError {
  std::string want;
  std::string detail;
};

// Reads one JSON value into a T, or says why it cannot.
template <typename T>
using ReadFn = std::function<std::optional<T>(const json& v, FieldError* error)>;
template <typename T>
using WriteFn = std::function<json(const T& value)>;

// A field as tests see it: they feed every message each field missing,
// mistyped and out of range.
struct FieldInfo {
  std::string key;
  bool required = false;
  enum class Kind { kInteger, kText, kBool, kNumber, kOther } kind = Kind::kOther;
  int64_t lo = 0, hi = 0;   // kInteger: the bounds
  bool any_uint64 = false;  // kInteger: also every uint64_t above hi
};

// The readers and writers of the common kinds of values, for fields and
// for the elements of lists.
StatusOr<int64_t> ReadInt(const json& v, int64_t lo, int64_t hi, FieldError* error);
std::string IntWant(int64_t lo, int64_t hi);
std::optional<uint64_t> ReadHex64(const json& v, FieldError* error);
std::optional<std::string> ReadJobName(const json& v, FieldError* error);
std::optional<StepKey> ReadStepKey(const json& v, FieldError* error);
json WriteStepKey(const StepKey& key);
// A list of at most `max_entries` ints, each in [lo, hi] (within int's
// range); nullopt otherwise (the caller says what it wants), and then
// `error`, when given, says it of the entry that is not.
std::optional<std::vector<int>> ReadInts(const json& v, int64_t lo, int64_t hi,
                                         size_t max_entries = kMaxListEntries,
                                         FieldError* error = nullptr);
// A list of ints (each within int's range).
std::optional<std::vector<int>> ReadIntList(const json& v, FieldError* error);
json WriteIntList(const std::vector<int>& list);
// A step index, its errors (DATA_LOSS) naming `what` and "index".
StatusOr<StepIndex> ReadStepIndex(const json& v, const std::string& what);
json WriteStepIndex(const StepIndex& index);

// What a list reader says of its bad entry (counted from 0): the entry's
// own error ("entry 3: a contribution: \"xxh3\" is missing"), or what the
// list must be ("a list of node ranks (entry 3 is not one)").
inline std::string EntryError(size_t entry, std::string_view why) {
  return "entry " + std::to_string(entry) + ": " + std::string(why);
}
inline std::string EntryWant(std::string_view want, size_t entry) {
  return std::string(want) + " (entry " + std::to_string(entry) + " is not one)";
}

template <typename M>
class Codec;

// The readers and writers every codec shares, one per value type rather
// than one per message (each std::function target type is code of its own).
namespace codec_internal {
// The key's value; null when it is absent or JSON null.
const json* Find(const json& j, const char* key);
// Sets `key` to `value`.
void Put(json* j, const char* key, json value);
template <typename T>
json Plain(const T& v) {
  return json(v);
}
template <typename T>
ReadFn<T> IntReader(int64_t lo, int64_t hi) {
  return [lo, hi](const json& v, FieldError* e) -> std::optional<T> {
    StatusOr<int64_t> n = ReadInt(v, lo, hi, e);
    if (!n.ok()) return std::nullopt;
    return static_cast<T>(*n);
  };
}
std::optional<uint64_t> ReadUnsigned(const json& v, FieldError* e);
ReadFn<std::string> TextReader(size_t max_bytes);
std::optional<double> ReadNumber(const json& v, FieldError* e);
std::optional<bool> ReadBool(const json& v, FieldError* e);
// An object, or a list of objects, with a codec of its own (defined below).
template <typename T>
ReadFn<T> ObjectReader(const Codec<T>& inner);
template <typename T>
WriteFn<T> ObjectWriter(const Codec<T>& inner);
template <typename T>
ReadFn<std::vector<T>> ListReader(const Codec<T>& inner);
template <typename T>
WriteFn<std::vector<T>> ListWriter(const Codec<T>& inner);
}  // namespace codec_internal

// Whether a member can be compared with its default (Presence::kOmitted):
// std::equality_comparable looks no further than a container's operator==.
template <typename T>
struct Comparable : std::bool_constant<std::equality_comparable<T>> {};
template <typename T, typename A>
struct Comparable<std::vector<T, A>> : Comparable<T> {};
template <typename T>
struct Comparable<std::optional<T>> : Comparable<T> {};
template <typename K, typename V, typename C, typename A>
struct Comparable<std::map<K, V, C, A>>
    : std::bool_constant<Comparable<K>::value && Comparable<V>::value> {};

// What every codec has that does not depend on its message: its name, the
// call it is for, and the errors it reports (compiled once, not per message).
class CodecBase {
 public:
  const std::string& name() const { return name_; }

  Status Error(const std::string& key, const std::string& want) const;
  Status Missing(const std::string& key) const;
  Status Invalid(const std::string& text) const;

 protected:
  explicit CodecBase(Op op);
  explicit CodecBase(std::string what) : name_(std::move(what)) {}
  // What a field's reader found wrong, as an error naming `key`.
  Status Failed(const char* key, const FieldError& e) const;
  // "not an object", in the words of a request or of a reply.
  Status NotAnObject() const;
  // Starts a written message: {"op": name} for a request, else {}.
  json Begin() const;

 private:
  std::string name_;
  std::optional<Op> op_;
};

template <typename M>
class Codec : public CodecBase {
 public:
  // A request: errors name the call, and Write adds {"op": name}.
  explicit Codec(Op op) : CodecBase(op) {}
  // A reply or a part of one: errors name `what` ("the plan").
  explicit Codec(std::string what) : CodecBase(std::move(what)) {}
  Codec(const Codec&) = delete;  // fields refer to codecs by address
  Codec& operator=(const Codec&) = delete;

  // An integer member of type T within [lo, hi] (and within T's range).
  template <typename T>
  Codec& Int(const char* key, T M::*member, int64_t lo, int64_t hi,
             Presence presence = Presence::kRequired) {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
    const auto [l, h] = Clamp<T>(lo, hi);
    return Add<T>(key, member, presence, codec_internal::IntReader<T>(l, h),
                  &codec_internal::Plain<T>,
                  {key, presence == Presence::kRequired, FieldInfo::Kind::kInteger, l, h});
  }
  template <typename T>
  Codec& Int(const char* key, std::optional<T> M::*member, int64_t lo, int64_t hi) {
    const auto [l, h] = Clamp<T>(lo, hi);
    return AddOptional<T>(key, member, codec_internal::IntReader<T>(l, h),
                          &codec_internal::Plain<T>, {key, false, FieldInfo::Kind::kInteger, l, h});
  }
  // An optional integer written as null when it has no value (a plan
  // without a step). With Presence::kRequired the key must be there, null
  // or not.
  Codec& NullableInt(const char* key, std::optional<int64_t> M::*member, int64_t lo, int64_t hi,
                     Presence presence = Presence::kDefaulted) {
    required_if_.emplace_back();
    readers_.push_back([key, member, lo, hi, presence](const Codec& c, const json& j, M& m) {
      auto it = j.find(key);
      if (it == j.end()) return presence == Presence::kRequired ? c.Missing(key) : Status::Ok();
      if (it->is_null()) return Status::Ok();
      FieldError e;
      StatusOr<int64_t> n = ReadInt(*it, lo, hi, &e);
      if (!n.ok()) return c.Error(key, e.want + " or null");
      m.*member = *n;
      return Status::Ok();
    });
    writers_.push_back([key, member](const M& m, json* j) {
      (*j)[key] = m.*member ? json(*(m.*member)) : json(nullptr);
    });
    write_if_.emplace_back();
    fields_.push_back({key, presence == Presence::kRequired, FieldInfo::Kind::kInteger, lo, hi});
    return *this;
  }
  // A uint64_t: any JSON integer >= 0 (wire/op.h, IsNonNegativeInteger).
  Codec& Unsigned(const char* key, uint64_t M::*member, Presence presence = Presence::kRequired) {
    return Add<uint64_t>(
        key, member, presence, &codec_internal::ReadUnsigned, &codec_internal::Plain<uint64_t>,
        {key, presence == Presence::kRequired, FieldInfo::Kind::kInteger, 0, kInt64Max, true});
  }
  Codec& Unsigned(const char* key, std::optional<uint64_t> M::*member) {
    return AddOptional<uint64_t>(key, member, &codec_internal::ReadUnsigned,
                                 &codec_internal::Plain<uint64_t>,
                                 {key, false, FieldInfo::Kind::kInteger, 0, kInt64Max, true});
  }
  Codec& Text(const char* key, std::string M::*member, Presence presence = Presence::kRequired,
              size_t max_bytes = kMaxTextBytes) {
    return Add<std::string>(key, member, presence, codec_internal::TextReader(max_bytes),
                            &codec_internal::Plain<std::string>,
                            {key, presence == Presence::kRequired, FieldInfo::Kind::kText});
  }
  Codec& Text(const char* key, std::optional<std::string> M::*member,
              size_t max_bytes = kMaxTextBytes) {
    return AddOptional<std::string>(key, member, codec_internal::TextReader(max_bytes),
                                    &codec_internal::Plain<std::string>,
                                    {key, false, FieldInfo::Kind::kText});
  }
  Codec& Bool(const char* key, bool M::*member, Presence presence = Presence::kRequired) {
    return Add<bool>(key, member, presence, &codec_internal::ReadBool, &codec_internal::Plain<bool>,
                     {key, presence == Presence::kRequired, FieldInfo::Kind::kBool});
  }
  Codec& Number(const char* key, double M::*member, Presence presence = Presence::kRequired) {
    return Add<double>(key, member, presence, &codec_internal::ReadNumber,
                       &codec_internal::Plain<double>,
                       {key, presence == Presence::kRequired, FieldInfo::Kind::kNumber});
  }
  Codec& Number(const char* key, std::optional<double> M::*member) {
    return AddOptional<double>(key, member, &codec_internal::ReadNumber,
                               &codec_internal::Plain<double>,
                               {key, false, FieldInfo::Kind::kNumber});
  }
  // A 64-bit digest as 16 hex digits.
  Codec& Digest(const char* key, uint64_t M::*member, Presence presence = Presence::kRequired);
  Codec& Digest(const char* key, std::optional<uint64_t> M::*member);
  // The job's name, validated as a path component (format/naming.h).
  Codec& Job(std::string M::*member, const char* key = "job") {
    return Add<std::string>(key, member, Presence::kRequired, &ReadJobName,
                            &codec_internal::Plain<std::string>,
                            {key, true, FieldInfo::Kind::kText});
  }
  // Any other value, with its own reader and writer.
  // `kind` says what JSON it is for tests that feed it the wrong kind.
  template <typename T>
  Codec& Value(const char* key, T M::*member, Presence presence, ReadFn<T> read, WriteFn<T> write,
               FieldInfo::Kind kind = FieldInfo::Kind::kOther) {
    return Add<T>(key, member, presence, std::move(read), std::move(write),
                  {key, presence == Presence::kRequired, kind});
  }
  template <typename T>
  Codec& Value(const char* key, std::optional<T> M::*member, ReadFn<T> read, WriteFn<T> write,
               FieldInfo::Kind kind = FieldInfo::Kind::kOther) {
    return AddOptional<T>(key, member, std::move(read), std::move(write), {key, false, kind});
  }
  // A value with a codec of its own that names its errors itself: `read`
  // gets the message's name to prefix them with (GroupFromJson and the like).
  template <typename T>
  Codec& Nested(const char* key, T M::*member, Presence presence,
                std::function<StatusOr<T>(const json&, const std::string& what)> read,
                WriteFn<T> write) {
    required_if_.emplace_back();
    readers_.push_back(
        [key, member, presence, read, at = readers_.size()](const Codec& c, const json& j, M& m) {
          const json* v = codec_internal::Find(j, key);
          if (v == nullptr) return c.Required(at, presence, m) ? c.Missing(key) : Status::Ok();
          STRATA_ASSIGN_OR_RETURN(m.*member, read(*v, c.name()));
          return Status::Ok();
        });
    AddWriter<T>(key, member, presence, std::move(write));
    fields_.push_back({key, presence == Presence::kRequired, FieldInfo::Kind::kOther});
    return *this;
  }
  template <typename T>
  Codec& Nested(const char* key, std::optional<T> M::*member,
                std::function<StatusOr<T>(const json&, const std::string& what)> read,
                WriteFn<T> write) {
    required_if_.emplace_back();
    readers_.push_back([key, member, read](const Codec& c, const json& j, M& m) {
      const json* v = codec_internal::Find(j, key);
      if (v == nullptr) return Status::Ok();
      STRATA_ASSIGN_OR_RETURN(m.*member, read(*v, c.name()));
      return Status::Ok();
    });
    writers_.push_back([key, member, write](const M& m, json* j) {
      if (m.*member) codec_internal::Put(j, key, write(*(m.*member)));
    });
    write_if_.emplace_back();
    fields_.push_back({key, false, FieldInfo::Kind::kOther});
    return *this;
  }
  // Fields that do not map onto one member (keys spread over a nested
  // struct, a value with two meanings): read and written by the two
  // functions, their keys listed in `keys`.
  Codec& Custom(std::vector<FieldInfo> keys,
                std::function<Status(const Codec&, const json&, M&)> read,
                std::function<void(const M&, json*)> write) {
    fields_.insert(fields_.end(), keys.begin(), keys.end());
    required_if_.emplace_back();
    readers_.push_back(std::move(read));
    writers_.push_back(std::move(write));
    write_if_.emplace_back();
    return *this;
  }
  // An object, or a list of objects, each with a codec of its own; an
  // error names this message, the key, then what the inner codec says.
  template <typename T>
  Codec& Object(const char* key, T M::*member, Presence presence, const Codec<T>& inner) {
    return Value<T>(key, member, presence, codec_internal::ObjectReader(inner),
                    codec_internal::ObjectWriter(inner));
  }
  template <typename T>
  Codec& Object(const char* key, std::optional<T> M::*member, const Codec<T>& inner) {
    return Value<T>(key, member, codec_internal::ObjectReader(inner),
                    codec_internal::ObjectWriter(inner));
  }
  template <typename T>
  Codec& List(const char* key, std::vector<T> M::*member, Presence presence,
              const Codec<T>& inner) {
    return Value<std::vector<T>>(key, member, presence, codec_internal::ListReader(inner),
                                 codec_internal::ListWriter(inner));
  }

  // A key written with a constant value and ignored when parsed (a reply's
  // "ok": true).
  Codec& Constant(const char* key, json value) {
    writers_.push_back([key, value](const M&, json* j) { (*j)[key] = value; });
    write_if_.emplace_back();
    return *this;
  }
  // The field listed last is required when `when` holds for the fields
  // read before it (a parity shard's stripe and row).
  Codec& RequiredIf(std::function<bool(const M&)> when) {
    required_if_.back() = std::move(when);
    return *this;
  }
  // Written only when `when` holds (on top of the field's presence).
  Codec& WriteIf(std::function<bool(const M&)> when) {
    write_if_.back() = std::move(when);
    return *this;
  }
  // A check of the whole message once its fields are read (fields that
  // bound each other); it reports through Error().
  Codec& Check(std::function<Status(const Codec&, const M&)> check) {
    checks_.push_back(std::move(check));
    return *this;
  }

  // The codec whose fields `build` lists, built on first use and kept for
  // the program: one per call site, each lambda being a type of its own
  // (the example above).
  template <typename Build>
  static const Codec& Once(Op op, Build build) {
    static const Codec* const kCodec = [&] {
      auto* codec = new Codec(op);
      build(*codec);
      return codec;
    }();
    return *kCodec;
  }
  template <typename Build>
  static const Codec& Once(const char* what, Build build) {
    static const Codec* const kCodec = [&] {
      auto* codec = new Codec(std::string(what));
      build(*codec);
      return codec;
    }();
    return *kCodec;
  }

  StatusOr<M> Parse(const json& j) const {
    if (!j.is_object()) return NotAnObject();
    M m;
    for (const auto& read : readers_) STRATA_RETURN_IF_ERROR(read(*this, j, m));
    for (const auto& check : checks_) STRATA_RETURN_IF_ERROR(check(*this, m));
    return m;
  }

  json Write(const M& m) const {
    json j = Begin();
    for (size_t i = 0; i < writers_.size(); ++i) {
      if (!write_if_[i] || write_if_[i](m)) writers_[i](m, &j);
    }
    return j;
  }

  const std::vector<FieldInfo>& fields() const { return fields_; }

 private:
  using Reader = std::function<Status(const Codec&, const json&, M&)>;
  using Writer = std::function<void(const M&, json*)>;

  template <typename T>
  static std::pair<int64_t, int64_t> Clamp(int64_t lo, int64_t hi) {
    const int64_t tlo = static_cast<int64_t>(std::numeric_limits<T>::min());
    const int64_t thi = std::numeric_limits<T>::max() > static_cast<uint64_t>(kInt64Max)
                            ? kInt64Max
                            : static_cast<int64_t>(std::numeric_limits<T>::max());
    return {std::max(lo, tlo), std::min(hi, thi)};
  }
  template <typename T>
  Codec& Add(const char* key, T M::*member, Presence presence, ReadFn<T> read, WriteFn<T> write,
             FieldInfo info) {
    required_if_.emplace_back();
    readers_.push_back(
        [key, member, presence, read, at = readers_.size()](const Codec& c, const json& j, M& m) {
          const json* v = codec_internal::Find(j, key);
          if (v == nullptr) return c.Required(at, presence, m) ? c.Missing(key) : Status::Ok();
          FieldError e;
          std::optional<T> value = read(*v, &e);
          if (!value) return c.Failed(key, e);
          m.*member = std::move(*value);
          return Status::Ok();
        });
    AddWriter<T>(key, member, presence, std::move(write));
    fields_.push_back(std::move(info));
    return *this;
  }
  template <typename T>
  void AddWriter(const char* key, T M::*member, Presence presence, WriteFn<T> write) {
    if constexpr (Comparable<T>::value) {
      writers_.push_back([key, member, presence, write](const M& m, json* j) {
        if (presence == Presence::kOmitted && m.*member == M().*member) return;
        codec_internal::Put(j, key, write(m.*member));
      });
    } else {
      // kOmitted compares with the default: T needs an operator==.
      if (presence == Presence::kOmitted) std::abort();
      writers_.push_back([key, member, write](const M& m, json* j) {
        codec_internal::Put(j, key, write(m.*member));
      });
    }
    write_if_.emplace_back();
  }
  template <typename T>
  Codec& AddOptional(const char* key, std::optional<T> M::*member, ReadFn<T> read, WriteFn<T> write,
                     FieldInfo info) {
    required_if_.emplace_back();
    readers_.push_back([key, member, read](const Codec& c, const json& j, M& m) {
      const json* v = codec_internal::Find(j, key);
      if (v == nullptr) return Status::Ok();
      FieldError e;
      std::optional<T> value = read(*v, &e);
      if (!value) return c.Failed(key, e);
      m.*member = std::move(*value);
      return Status::Ok();
    });
    writers_.push_back([key, member, write](const M& m, json* j) {
      if (m.*member) codec_internal::Put(j, key, write(*(m.*member)));
    });
    write_if_.emplace_back();
    fields_.push_back(std::move(info));
    return *this;
  }

  bool Required(size_t reader, Presence presence, const M& m) const {
    return presence == Presence::kRequired || (required_if_[reader] && required_if_[reader](m));
  }

  std::vector<Reader> readers_;
  std::vector<std::function<bool(const M&)>> required_if_;  // by reader
  std::vector<Writer> writers_;
  std::vector<std::function<bool(const M&)>> write_if_;
  std::vector<std::function<Status(const Codec&, const M&)>> checks_;
  std::vector<FieldInfo> fields_;
};

namespace codec_internal {
template <typename T>
ReadFn<T> ObjectReader(const Codec<T>& inner) {
  return [&inner](const json& v, FieldError* e) -> std::optional<T> {
    StatusOr<T> t = inner.Parse(v);
    if (t.ok()) return std::move(*t);
    e->detail = t.status().message();
    return std::nullopt;
  };
}
template <typename T>
WriteFn<T> ObjectWriter(const Codec<T>& inner) {
  return [&inner](const T& t) { return inner.Write(t); };
}
template <typename T>
ReadFn<std::vector<T>> ListReader(const Codec<T>& inner) {
  return [&inner](const json& v, FieldError* e) -> std::optional<std::vector<T>> {
    if (!v.is_array() || v.size() > kMaxListEntries) {
      e->want = "a list";
      return std::nullopt;
    }
    std::vector<T> out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      StatusOr<T> t = inner.Parse(v[i]);
      if (!t.ok()) {
        e->detail = EntryError(i, t.status().message());
        return std::nullopt;
      }
      out.push_back(std::move(*t));
    }
    return out;
  };
}
template <typename T>
WriteFn<std::vector<T>> ListWriter(const Codec<T>& inner) {
  return [&inner](const std::vector<T>& list) {
    json out = json::array();
    for (const T& t : list) out.push_back(inner.Write(t));
    return out;
  };
}
}  // namespace codec_internal

template <typename M>
Codec<M>& Codec<M>::Digest(const char* key, uint64_t M::*member, Presence presence) {
  return Add<uint64_t>(key, member, presence, &ReadHex64,
                       [](const uint64_t& v) { return json(Hex64(v)); },
                       {key, presence == Presence::kRequired, FieldInfo::Kind::kText});
}
template <typename M>
Codec<M>& Codec<M>::Digest(const char* key, std::optional<uint64_t> M::*member) {
  return AddOptional<uint64_t>(key, member, &ReadHex64,
                               [](const uint64_t& v) { return json(Hex64(v)); },
                               {key, false, FieldInfo::Kind::kText});
}

// Defines Message::Fields, FromJson and ToJson through `codec()`.
#define STRATA_WIRE_CODEC(Message, codec)                                         \
  const Codec<Message>& Message::Fields() { return codec(); }                     \
  StatusOr<Message> Message::FromJson(const json& j) { return codec().Parse(j); } \
  json Message::ToJson() const { return codec().Write(*this); }

}  // namespace strata::wire

#endif  // STRATA_WIRE_CODEC_H_
