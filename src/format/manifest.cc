// Copyright 2026 The Strata Authors.
#include "format/manifest.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

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

// Reads typed fields from a JSON object, naming the field in every error.
class Fields {
 public:
  Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  Status Int(const char* key, int64_t min, int64_t max, int64_t* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Missing(key);
    if (!v->is_number_integer()) return Bad(key, "is not an integer");
    int64_t x;
    if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Bad(key, "is out of range");
      x = static_cast<int64_t>(u);
    } else {
      x = v->get<int64_t>();
    }
    if (x < min || x > max) {
      return Bad(key, "= " + std::to_string(x) + " is outside [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
    }
    *out = x;
    return Status::Ok();
  }

  Status String(const char* key, std::string* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Missing(key);
    if (!v->is_string()) return Bad(key, "is not a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }

  Status Array(const char* key, const json** out) const {
    const json* v = Find(key);
    if (v == nullptr) return Missing(key);
    if (!v->is_array()) return Bad(key, "is not an array");
    *out = v;
    return Status::Ok();
  }

  Status Bad(std::string_view key, std::string_view why) const {
    return DataLossError(where_ + ": field \"" + std::string(key) + "\" " + std::string(why));
  }

 private:
  const json* Find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  Status Missing(const char* key) const {
    return DataLossError(where_ + ": missing field \"" + key + "\"");
  }

  const json& obj_;
  std::string where_;
};

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

Status DecodeFiles(const Fields& top, const std::string& where, StepInfo* info) {
  const json* files = nullptr;
  STRATA_RETURN_IF_ERROR(top.Array("files", &files));
  for (size_t i = 0; i < files->size(); ++i) {
    const json& f = (*files)[i];
    std::string fw = where + ": files[" + std::to_string(i) + "]";
    if (!f.is_object()) return DataLossError(fw + " is not an object");
    Fields ff(f, fw);
    FileInfo fi;
    int64_t size;
    STRATA_RETURN_IF_ERROR(ff.String("name", &fi.name));
    STRATA_RETURN_IF_ERROR(ff.Int("size", 0, INT64_MAX, &size));
    auto index = ParseDataFileName(fi.name);
    if (!index || *index != i)
      return ff.Bad("name", "is not \"" + DataFileName(static_cast<uint32_t>(i)) + "\"");
    fi.size = static_cast<uint64_t>(size);
    info->files.push_back(std::move(fi));
  }
  return Status::Ok();
}

Status DecodeShape(const Fields& f, ItemInfo* out) {
  const json* shape = nullptr;
  STRATA_RETURN_IF_ERROR(f.Array("shape", &shape));
  if (shape->size() > kMaxRank) return f.Bad("shape", "has more than 64 dimensions");
  for (const json& d : *shape) {
    // nlohmann stores non-negative integers as unsigned.
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return f.Bad("shape", "has a dimension that is not a non-negative 64-bit integer");
    }
    out->shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  return Status::Ok();
}

Status DecodeChunks(const Fields& f, uint64_t chunk_size, ItemInfo* out) {
  const json* chunks = nullptr;
  STRATA_RETURN_IF_ERROR(f.Array("chunks", &chunks));
  if (chunks->size() != ChunkCount(out->nbytes, chunk_size)) {
    return f.Bad("chunks", "has " + std::to_string(chunks->size()) + " entries, expected " +
                               std::to_string(ChunkCount(out->nbytes, chunk_size)));
  }
  out->chunk_xxh3.reserve(chunks->size());
  for (size_t i = 0; i < chunks->size(); ++i) {
    const json& c = (*chunks)[i];
    const std::string entry = " (entry " + std::to_string(i) + ")";
    if (!c.is_string()) return f.Bad("chunks", "has an entry that is not a string" + entry);
    auto v = ParseHex64(c.get_ref<const std::string&>());
    if (!v) return f.Bad("chunks", "has an entry that is not 16 hex digits" + entry);
    out->chunk_xxh3.push_back(*v);
  }
  return Status::Ok();
}

Status DecodeItem(const json& item, const std::string& where, const StepInfo& info, ItemInfo* out) {
  if (!item.is_object()) return DataLossError(where + " is not an object");
  Fields f(item, where);
  STRATA_RETURN_IF_ERROR(f.String("name", &out->name));
  Status name_ok = ValidateItemName(out->name);
  if (!name_ok.ok()) return DataLossError(where + ": " + name_ok.message());
  std::string dtype;
  STRATA_RETURN_IF_ERROR(f.String("dtype", &dtype));
  auto dt = ParseDType(dtype);
  if (!dt) return f.Bad("dtype", "\"" + dtype.substr(0, 32) + "\" is not a known dtype");
  out->dtype = *dt;
  STRATA_RETURN_IF_ERROR(DecodeShape(f, out));
  int64_t nbytes, file, offset;
  STRATA_RETURN_IF_ERROR(f.Int("nbytes", 0, INT64_MAX, &nbytes));
  STRATA_RETURN_IF_ERROR(f.Int("file", 0, INT32_MAX, &file));
  STRATA_RETURN_IF_ERROR(f.Int("offset", 0, INT64_MAX, &offset));
  out->nbytes = static_cast<uint64_t>(nbytes);
  out->file = static_cast<uint32_t>(file);
  out->offset = static_cast<uint64_t>(offset);
  auto expected = ShapeBytes(out->dtype, out->shape);
  if (!expected.ok() || *expected != out->nbytes) {
    return f.Bad("nbytes",
                 "does not match dtype " + dtype + " and shape " + ShapeString(out->shape));
  }
  if (out->file >= info.files.size()) {
    return f.Bad("file", "= " + std::to_string(out->file) + " names no file");
  }
  uint64_t end;
  if (__builtin_add_overflow(out->offset, out->nbytes, &end) || end > info.files[out->file].size) {
    return f.Bad("offset", "+ nbytes runs past the end of " + info.files[out->file].name);
  }
  return DecodeChunks(f, info.chunk_size, out);
}

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

Status DecodeBody(const json& doc, const std::string& where, StepInfo* info) {
  if (!doc.is_object()) return DataLossError(where + ": manifest body is not a JSON object");
  Fields top(doc, where);
  std::string format;
  STRATA_RETURN_IF_ERROR(top.String("format", &format));
  if (format != "strata-checkpoint") return top.Bad("format", "is not \"strata-checkpoint\"");
  std::string hash;
  STRATA_RETURN_IF_ERROR(top.String("hash", &hash));
  if (hash != "xxh3-64") return top.Bad("hash", "is not \"xxh3-64\"");
  int64_t chunk_size;
  STRATA_RETURN_IF_ERROR(top.Int("step", 0, INT64_MAX, &info->step));
  STRATA_RETURN_IF_ERROR(top.Int("created_unix_ms", 0, INT64_MAX, &info->created_unix_ms));
  STRATA_RETURN_IF_ERROR(top.Int("chunk_size", kMinChunkSize, kMaxChunkSize, &chunk_size));
  if ((chunk_size & (chunk_size - 1)) != 0) return top.Bad("chunk_size", "is not a power of two");
  info->chunk_size = static_cast<uint64_t>(chunk_size);
  STRATA_RETURN_IF_ERROR(DecodeFiles(top, where, info));
  const json* items = nullptr;
  STRATA_RETURN_IF_ERROR(top.Array("items", &items));
  std::set<std::string_view> names;
  info->items.resize(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    std::string iw = where + ": items[" + std::to_string(i) + "]";
    STRATA_RETURN_IF_ERROR(DecodeItem((*items)[i], iw, *info, &info->items[i]));
    if (!names.insert(info->items[i].name).second) {
      return DataLossError(iw + ": duplicate item name \"" + info->items[i].name + "\"");
    }
  }
  return CheckNoOverlap(*info, where);
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
  std::string body = doc.dump(1);
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
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  std::string where(source);
  if (doc.is_discarded()) return DataLossError(where + ": manifest body is not valid JSON");
  StepInfo info;
  info.format_version = static_cast<uint32_t>(GetLE(bytes, 8, 4));
  STRATA_RETURN_IF_ERROR(DecodeBody(doc, where, &info));
  return info;
}

}  // namespace strata
