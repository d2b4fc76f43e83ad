// Copyright 2026 The Strata Authors.
#include "format/manifest.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>
#include <vector>

#include "format/naming.h"
#include "util/hash.h"

namespace strata {
namespace {

using json = nlohmann::json;

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLE(std::string_view b, size_t offset, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(b[offset + static_cast<size_t>(i)]);
  }
  return v;
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

Status DecodeHeader(std::string_view bytes, std::string_view source, std::string_view* body) {
  std::string src(source);
  if (bytes.size() < kManifestHeaderSize) {
    return DataLossError(src + ": truncated manifest (" + std::to_string(bytes.size()) +
                         " bytes, header needs " + std::to_string(kManifestHeaderSize) + ")");
  }
  if (bytes.substr(0, 8) != kManifestMagic) {
    return DataLossError(src + ": not a Strata manifest (bad magic)");
  }
  uint32_t version = static_cast<uint32_t>(GetLE(bytes, 8, 4));
  if (version > kFormatVersion) {
    return FailedPreconditionError(src + ": format version " + std::to_string(version) +
                                   " is newer than this Strata supports (" +
                                   std::to_string(kFormatVersion) + ")");
  }
  if (version == 0) return DataLossError(src + ": format version 0 is invalid");
  if (GetLE(bytes, 12, 4) != 0) return DataLossError(src + ": unknown header flags");
  uint64_t body_size = GetLE(bytes, 16, 8);
  if (body_size != bytes.size() - kManifestHeaderSize) {
    return DataLossError(src + ": truncated or padded manifest (header says " +
                         std::to_string(body_size) + " body bytes, file has " +
                         std::to_string(bytes.size() - kManifestHeaderSize) + ")");
  }
  *body = bytes.substr(kManifestHeaderSize);
  if (Xxh3(body->data(), body->size()) != GetLE(bytes, 24, 8)) {
    return DataLossError(src + ": manifest checksum mismatch");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Decoding the body. nlohmann's SAX parser reads it in one pass into the
// fields below, and no JSON document is built: a manifest holds an object
// per item, and making and freeing its nodes was most of a restore's cost
// per item. The checks run in one fixed order (the top-level fields, then
// "files", then each item), so a body with several faults is refused for
// the same one whatever the order of its fields. A field given twice counts
// as its last value, as a JSON document keeps it.
//
// An entry of "files" or "items" is checked as soon as it ends, as far as it
// can be alone; the checks that need the rest of the body (the files, the
// chunk size) run after it. Entries after the first one that fails are not
// kept, so a hostile body of many bad entries costs no memory.

// What a JSON value was, as far as the checks need to know.
enum class Kind : uint8_t { kMissing, kNull, kBool, kInt, kUInt, kFloat, kString, kArray, kObject };

// A field read as one value.
struct Scalar {
  Kind kind = Kind::kMissing;
  int64_t i = 0;   // kInt: negative (nlohmann reads the others as kUInt)
  uint64_t u = 0;  // kUInt
  std::string s;   // kString
};

// Where an error is: "<source>", "<source>: files[2]" or "<source>: items[7]".
struct Where {
  std::string_view source;
  const char* list = nullptr;
  size_t index = 0;

  std::string str() const {
    std::string w(source);
    if (list != nullptr) w += std::string(": ") + list + "[" + std::to_string(index) + "]";
    return w;
  }
  Status Missing(std::string_view key) const {
    return DataLossError(str() + ": missing field \"" + std::string(key) + "\"");
  }
  Status Bad(std::string_view key, std::string_view why) const {
    return DataLossError(str() + ": field \"" + std::string(key) + "\" " + std::string(why));
  }
};

Status CheckInt(const Scalar& v, const Where& where, const char* key, int64_t min, int64_t max,
                int64_t* out) {
  if (v.kind == Kind::kMissing) return where.Missing(key);
  if (v.kind != Kind::kInt && v.kind != Kind::kUInt) return where.Bad(key, "is not an integer");
  if (v.kind == Kind::kUInt && v.u > static_cast<uint64_t>(INT64_MAX)) {
    return where.Bad(key, "is out of range");
  }
  const int64_t x = v.kind == Kind::kUInt ? static_cast<int64_t>(v.u) : v.i;
  if (x < min || x > max) {
    return where.Bad(key, "= " + std::to_string(x) + " is outside [" + std::to_string(min) + ", " +
                              std::to_string(max) + "]");
  }
  *out = x;
  return Status::Ok();
}

Status CheckString(const Scalar& v, const Where& where, const char* key) {
  if (v.kind == Kind::kMissing) return where.Missing(key);
  if (v.kind != Kind::kString) return where.Bad(key, "is not a string");
  return Status::Ok();
}

Status CheckArray(Kind kind, const Where& where, const char* key) {
  if (kind == Kind::kMissing) return where.Missing(key);
  if (kind != Kind::kArray) return where.Bad(key, "is not an array");
  return Status::Ok();
}

// An item's "chunks" as read, as far as the checks after the body need it.
struct ChunksRead {
  Kind kind = Kind::kMissing;
  size_t count = 0;
  std::optional<size_t> bad;  // the first entry that is not 16 hex digits
  bool bad_not_string = false;
};

// One entry of "files" or "items" while it is read.
struct RawEntry {
  Scalar name, size, dtype, nbytes, file, offset;
  Kind shape = Kind::kMissing;
  size_t rank = 0;
  bool bad_dim = false;       // a dimension that is not a non-negative int64
  std::vector<int64_t> dims;  // the first kMaxRank
  ChunksRead chunks;
  std::vector<uint64_t> chunk_xxh3;  // up to the first bad entry
};

// The body as read: the top-level fields, the entries that passed the
// checks they can pass alone, and the first that did not.
struct RawBody {
  Kind root = Kind::kMissing;
  Scalar format, hash, step, created_unix_ms, chunk_size;
  Kind files = Kind::kMissing;
  Status file_error;  // the first entry of "files" that failed
  Kind items = Kind::kMissing;
  std::vector<ChunksRead> item_chunks;  // beside info->items
  Status item_error;                    // the first entry of "items" that failed its own checks
};

// An item's checks that need nothing but the item, in their order.
Status CheckItemAlone(RawEntry& e, const Where& where, ItemInfo* out) {
  STRATA_RETURN_IF_ERROR(CheckString(e.name, where, "name"));
  Status name_ok = ValidateItemName(e.name.s);
  if (!name_ok.ok()) return DataLossError(where.str() + ": " + name_ok.message());
  STRATA_RETURN_IF_ERROR(CheckString(e.dtype, where, "dtype"));
  auto dt = ParseDType(e.dtype.s);
  if (!dt) return where.Bad("dtype", "\"" + e.dtype.s.substr(0, 32) + "\" is not a known dtype");
  STRATA_RETURN_IF_ERROR(CheckArray(e.shape, where, "shape"));
  if (e.rank > kMaxRank) return where.Bad("shape", "has more than 64 dimensions");
  if (e.bad_dim) {
    return where.Bad("shape", "has a dimension that is not a non-negative 64-bit integer");
  }
  int64_t nbytes, file, offset;
  STRATA_RETURN_IF_ERROR(CheckInt(e.nbytes, where, "nbytes", 0, INT64_MAX, &nbytes));
  STRATA_RETURN_IF_ERROR(CheckInt(e.file, where, "file", 0, INT32_MAX, &file));
  STRATA_RETURN_IF_ERROR(CheckInt(e.offset, where, "offset", 0, INT64_MAX, &offset));
  auto expected = ShapeBytes(*dt, e.dims);
  if (!expected.ok() || *expected != static_cast<uint64_t>(nbytes)) {
    return where.Bad("nbytes",
                     "does not match dtype " + e.dtype.s + " and shape " + ShapeString(e.dims));
  }
  out->name = std::move(e.name.s);
  out->dtype = *dt;
  out->shape = std::move(e.dims);
  out->nbytes = static_cast<uint64_t>(nbytes);
  out->file = static_cast<uint32_t>(file);
  out->offset = static_cast<uint64_t>(offset);
  out->chunk_xxh3 = std::move(e.chunk_xxh3);
  return Status::Ok();
}

// The rest of an item's checks, with the files and the chunk size known.
Status CheckItemInStep(const ItemInfo& item, const ChunksRead& chunks, const Where& where,
                       const StepInfo& info) {
  if (item.file >= info.files.size()) {
    return where.Bad("file", "= " + std::to_string(item.file) + " names no file");
  }
  uint64_t end;
  if (__builtin_add_overflow(item.offset, item.nbytes, &end) || end > info.files[item.file].size) {
    return where.Bad("offset", "+ nbytes runs past the end of " + info.files[item.file].name);
  }
  STRATA_RETURN_IF_ERROR(CheckArray(chunks.kind, where, "chunks"));
  const uint64_t expected = ChunkCount(item.nbytes, info.chunk_size);
  if (chunks.count != expected) {
    return where.Bad("chunks", "has " + std::to_string(chunks.count) + " entries, expected " +
                                   std::to_string(expected));
  }
  if (chunks.bad) {
    const std::string entry = " (entry " + std::to_string(*chunks.bad) + ")";
    return where.Bad("chunks", chunks.bad_not_string
                                   ? "has an entry that is not a string" + entry
                                   : "has an entry that is not 16 hex digits" + entry);
  }
  return Status::Ok();
}

enum class Field : uint8_t {
  kOther,
  kFormat,
  kHash,
  kStep,
  kCreated,
  kChunkSize,
  kFiles,
  kItems,
  kName,
  kSize,
  kDtype,
  kShape,
  kNbytes,
  kFile,
  kOffset,
  kChunks,
};

Field TopField(std::string_view key) {
  if (key == "format") return Field::kFormat;
  if (key == "hash") return Field::kHash;
  if (key == "step") return Field::kStep;
  if (key == "created_unix_ms") return Field::kCreated;
  if (key == "chunk_size") return Field::kChunkSize;
  if (key == "files") return Field::kFiles;
  if (key == "items") return Field::kItems;
  return Field::kOther;
}

Field EntryField(std::string_view key) {
  if (key == "name") return Field::kName;
  if (key == "size") return Field::kSize;
  if (key == "dtype") return Field::kDtype;
  if (key == "shape") return Field::kShape;
  if (key == "nbytes") return Field::kNbytes;
  if (key == "file") return Field::kFile;
  if (key == "offset") return Field::kOffset;
  if (key == "chunks") return Field::kChunks;
  return Field::kOther;
}

// Reads the body from the parser's events into a RawBody and `info`. The
// depths it follows: 1 inside the body, 2 inside "files" or "items", 3
// inside one of their entries, 4 inside an item's "shape" or "chunks". Any
// other container is skipped: counted, not looked into, so nesting costs no
// stack and no memory.
class BodyReader final : public json::json_sax_t {
 public:
  BodyReader(std::string_view source, RawBody* body, StepInfo* info)
      : source_(source), body_(body), info_(info) {}

  bool null() override { return Leaf(Kind::kNull); }
  bool boolean(bool) override { return Leaf(Kind::kBool); }
  bool number_integer(number_integer_t v) override {
    if (Scalar* s = At(Kind::kInt, 0, nullptr)) s->i = v;
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (Scalar* s = At(Kind::kUInt, v, nullptr)) s->u = v;
    return true;
  }
  bool number_float(number_float_t, const string_t&) override { return Leaf(Kind::kFloat); }
  bool string(string_t& v) override {
    if (Scalar* s = At(Kind::kString, 0, &v)) s->s = std::move(v);
    return true;
  }
  bool binary(binary_t&) override { return Leaf(Kind::kNull); }  // JSON text has none
  bool start_object(std::size_t) override { return Open(Kind::kObject); }
  bool start_array(std::size_t) override { return Open(Kind::kArray); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    if (skip_ > 0) return true;
    if (depth_ == 1) top_ = TopField(k);
    if (depth_ == 3) field_ = EntryField(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool InFiles() const { return top_ == Field::kFiles; }
  // The entries of the current list already read, and whether one failed.
  size_t ListSize() const { return InFiles() ? info_->files.size() : info_->items.size(); }
  Status& ListError() { return InFiles() ? body_->file_error : body_->item_error; }

  bool Leaf(Kind kind) {
    At(kind, 0, nullptr);
    return true;
  }

  // A value that is not a container: its kind is recorded where it goes;
  // returns its field when that is a Scalar, for the caller to fill.
  Scalar* At(Kind kind, uint64_t u, const std::string* s) {
    if (skip_ > 0) return nullptr;
    if (depth_ == 4) {
      Element(kind, u, s);
      return nullptr;
    }
    return Place(kind);
  }

  // Records that a value of `kind` starts where the parser is (depths 0-3).
  Scalar* Place(Kind kind) {
    switch (depth_) {
      case 0:
        body_->root = kind;
        return nullptr;
      case 1:
        return PlaceTop(kind);
      case 2:
        if (kind != Kind::kObject) {
          Where where{source_, InFiles() ? "files" : "items", ListSize()};
          Fail(DataLossError(where.str() + " is not an object"));
        }
        entry_ = RawEntry();
        return nullptr;
      case 3:
        return PlaceInEntry(kind);
      default:
        return nullptr;
    }
  }

  Scalar* PlaceTop(Kind kind) {
    Scalar* s = nullptr;
    switch (top_) {
      case Field::kFormat:
        s = &body_->format;
        break;
      case Field::kHash:
        s = &body_->hash;
        break;
      case Field::kStep:
        s = &body_->step;
        break;
      case Field::kCreated:
        s = &body_->created_unix_ms;
        break;
      case Field::kChunkSize:
        s = &body_->chunk_size;
        break;
      case Field::kFiles:  // a second "files" replaces the first
        body_->files = kind;
        body_->file_error = Status::Ok();
        info_->files.clear();
        return nullptr;
      case Field::kItems:
        body_->items = kind;
        body_->item_error = Status::Ok();
        body_->item_chunks.clear();
        info_->items.clear();
        return nullptr;
      default:
        return nullptr;
    }
    *s = Scalar();
    s->kind = kind;
    return s;
  }

  Scalar* PlaceInEntry(Kind kind) {
    Scalar* s = nullptr;
    switch (field_) {
      case Field::kName:
        s = &entry_.name;
        break;
      case Field::kSize:
        s = &entry_.size;
        break;
      case Field::kDtype:
        s = &entry_.dtype;
        break;
      case Field::kNbytes:
        s = &entry_.nbytes;
        break;
      case Field::kFile:
        s = &entry_.file;
        break;
      case Field::kOffset:
        s = &entry_.offset;
        break;
      case Field::kShape:
        entry_.shape = kind;
        entry_.rank = 0;
        entry_.bad_dim = false;
        entry_.dims.clear();
        return nullptr;
      case Field::kChunks:
        entry_.chunks = ChunksRead();
        entry_.chunks.kind = kind;
        entry_.chunk_xxh3.clear();
        return nullptr;
      default:
        return nullptr;
    }
    *s = Scalar();
    s->kind = kind;
    return s;
  }

  // One element of an item's "shape" or "chunks".
  void Element(Kind kind, uint64_t u, const std::string* s) {
    if (field_ == Field::kShape) {
      ++entry_.rank;
      if (kind != Kind::kUInt || u > static_cast<uint64_t>(INT64_MAX)) {
        entry_.bad_dim = true;
      } else if (entry_.dims.size() < kMaxRank) {
        entry_.dims.push_back(static_cast<int64_t>(u));
      }
      return;
    }
    const size_t index = entry_.chunks.count++;
    if (entry_.chunks.bad) return;
    std::optional<uint64_t> v;
    if (s != nullptr) v = ParseHex64(*s);
    if (v) {
      entry_.chunk_xxh3.push_back(*v);
    } else {
      entry_.chunks.bad = index;
      entry_.chunks.bad_not_string = s == nullptr;
    }
  }

  // A container starts: followed when it is one of the places above,
  // skipped otherwise.
  bool Open(Kind kind) {
    if (skip_ > 0) {
      ++skip_;
      return true;
    }
    if (depth_ == 4) {
      Element(kind, 0, nullptr);
      skip_ = 1;
      return true;
    }
    Place(kind);
    if (Follows(kind)) {
      ++depth_;
    } else {
      skip_ = 1;
    }
    return true;
  }

  bool Follows(Kind kind) const {
    switch (depth_) {
      case 0:
        return kind == Kind::kObject;
      case 1:
        return kind == Kind::kArray && (top_ == Field::kFiles || top_ == Field::kItems);
      case 2:
        return kind == Kind::kObject;
      case 3:
        return kind == Kind::kArray && top_ == Field::kItems &&
               (field_ == Field::kShape || field_ == Field::kChunks);
      default:
        return false;
    }
  }

  bool Close() {
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    if (--depth_ == 2) EndEntry();
    return true;
  }

  // An entry of "files" or "items" ended: checked as far as it can be
  // alone, and kept unless an earlier one failed.
  void EndEntry() {
    if (!ListError().ok()) return;
    Where where{source_, InFiles() ? "files" : "items", ListSize()};
    if (InFiles()) {
      FileInfo fi;
      Status s = CheckFile(where, &fi);
      if (!s.ok()) return Fail(std::move(s));
      info_->files.push_back(std::move(fi));
      return;
    }
    ItemInfo item;
    Status s = CheckItemAlone(entry_, where, &item);
    if (!s.ok()) return Fail(std::move(s));
    info_->items.push_back(std::move(item));
    body_->item_chunks.push_back(entry_.chunks);
  }

  Status CheckFile(const Where& where, FileInfo* fi) {
    int64_t size;
    STRATA_RETURN_IF_ERROR(CheckString(entry_.name, where, "name"));
    STRATA_RETURN_IF_ERROR(CheckInt(entry_.size, where, "size", 0, INT64_MAX, &size));
    auto index = ParseDataFileName(entry_.name.s);
    if (!index || *index != where.index) {
      return where.Bad("name",
                       "is not \"" + DataFileName(static_cast<uint32_t>(where.index)) + "\"");
    }
    fi->name = std::move(entry_.name.s);
    fi->size = static_cast<uint64_t>(size);
    return Status::Ok();
  }

  // The list's first failed entry; the ones after it are not kept.
  void Fail(Status s) {
    if (ListError().ok()) ListError() = std::move(s);
  }

  const std::string_view source_;
  RawBody* const body_;
  StepInfo* const info_;
  int depth_ = 0;
  uint64_t skip_ = 0;  // containers open in a skipped one, itself included
  Field top_ = Field::kOther;
  Field field_ = Field::kOther;
  RawEntry entry_;
};

Status CheckNoOverlap(const StepInfo& info, const std::string& where) {
  std::vector<const ItemInfo*> sorted;
  for (const auto& it : info.items) {
    if (it.nbytes > 0) sorted.push_back(&it);  // empty items occupy no bytes
  }
  std::sort(sorted.begin(), sorted.end(), [](const ItemInfo* a, const ItemInfo* b) {
    return a->file != b->file ? a->file < b->file : a->offset < b->offset;
  });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const ItemInfo* p = sorted[i - 1];
    const ItemInfo* q = sorted[i];
    if (p->file == q->file && p->offset + p->nbytes > q->offset) {
      return DataLossError(where + ": items \"" + p->name + "\" and \"" + q->name + "\" overlap");
    }
  }
  return Status::Ok();
}

// The checks after the body is read, in their order.
Status CheckBody(const RawBody& body, std::string_view source, StepInfo* info) {
  const Where top{source};
  if (body.root != Kind::kObject) {
    return DataLossError(top.str() + ": manifest body is not a JSON object");
  }
  STRATA_RETURN_IF_ERROR(CheckString(body.format, top, "format"));
  if (body.format.s != "strata-checkpoint")
    return top.Bad("format", "is not \"strata-checkpoint\"");
  STRATA_RETURN_IF_ERROR(CheckString(body.hash, top, "hash"));
  if (body.hash.s != "xxh3-64") return top.Bad("hash", "is not \"xxh3-64\"");
  int64_t chunk_size;
  STRATA_RETURN_IF_ERROR(CheckInt(body.step, top, "step", 0, INT64_MAX, &info->step));
  STRATA_RETURN_IF_ERROR(
      CheckInt(body.created_unix_ms, top, "created_unix_ms", 0, INT64_MAX, &info->created_unix_ms));
  STRATA_RETURN_IF_ERROR(
      CheckInt(body.chunk_size, top, "chunk_size", kMinChunkSize, kMaxChunkSize, &chunk_size));
  if ((chunk_size & (chunk_size - 1)) != 0) return top.Bad("chunk_size", "is not a power of two");
  info->chunk_size = static_cast<uint64_t>(chunk_size);
  STRATA_RETURN_IF_ERROR(CheckArray(body.files, top, "files"));
  STRATA_RETURN_IF_ERROR(body.file_error);
  STRATA_RETURN_IF_ERROR(CheckArray(body.items, top, "items"));
  std::unordered_set<std::string_view> names;
  names.reserve(info->items.size());
  for (size_t i = 0; i < info->items.size(); ++i) {
    const Where where{source, "items", i};
    STRATA_RETURN_IF_ERROR(CheckItemInStep(info->items[i], body.item_chunks[i], where, *info));
    if (!names.insert(info->items[i].name).second) {
      return DataLossError(where.str() + ": duplicate item name \"" + info->items[i].name + "\"");
    }
  }
  STRATA_RETURN_IF_ERROR(body.item_error);
  return CheckNoOverlap(*info, std::string(source));
}

}  // namespace

uint64_t ChunkCount(uint64_t nbytes, uint64_t chunk_size) {
  return nbytes == 0 ? 0 : (nbytes - 1) / chunk_size + 1;
}

StatusOr<uint64_t> ShapeBytes(DType dtype, const std::vector<int64_t>& shape) {
  if (shape.size() > kMaxRank) return InvalidArgumentError("shape has more than 64 dimensions");
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0)
      return InvalidArgumentError("shape " + ShapeString(shape) + " has a negative dimension");
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return uint64_t{0};
  for (int64_t d : shape) {
    if (MulOverflows(n, static_cast<uint64_t>(d), &n) || n > static_cast<uint64_t>(INT64_MAX)) {
      return InvalidArgumentError("shape " + ShapeString(shape) + " overflows");
    }
  }
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string EncodeManifest(const StepInfo& info) {
  json doc;
  doc["format"] = "strata-checkpoint";
  doc["step"] = info.step;
  doc["created_unix_ms"] = info.created_unix_ms;
  doc["chunk_size"] = info.chunk_size;
  doc["hash"] = "xxh3-64";
  json files = json::array();
  for (const auto& f : info.files) files.push_back({{"name", f.name}, {"size", f.size}});
  doc["files"] = std::move(files);
  json items = json::array();
  for (const auto& it : info.items) {
    json chunks = json::array();
    for (uint64_t c : it.chunk_xxh3) chunks.push_back(Hex64(c));
    items.push_back({{"name", it.name},
                     {"dtype", DTypeName(it.dtype)},
                     {"shape", it.shape},
                     {"nbytes", it.nbytes},
                     {"file", it.file},
                     {"offset", it.offset},
                     {"chunks", std::move(chunks)}});
  }
  doc["items"] = std::move(items);
  std::string body = doc.dump();
  body += '\n';
  std::string out(kManifestMagic);
  PutU32(&out, kFormatVersion);
  PutU32(&out, 0);
  PutU64(&out, body.size());
  PutU64(&out, Xxh3(body.data(), body.size()));
  out += body;
  return out;
}

StatusOr<StepInfo> DecodeManifest(std::string_view bytes, std::string_view source) {
  std::string_view body;
  STRATA_RETURN_IF_ERROR(DecodeHeader(bytes, source, &body));
  RawBody raw;
  StepInfo info;
  BodyReader reader(source, &raw, &info);
  if (!json::sax_parse(body.begin(), body.end(), &reader)) {
    return DataLossError(std::string(source) + ": manifest body is not valid JSON");
  }
  info.format_version = static_cast<uint32_t>(GetLE(bytes, 8, 4));
  STRATA_RETURN_IF_ERROR(CheckBody(raw, source, &info));
  return info;
}

}  // namespace strata
