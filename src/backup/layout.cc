// Copyright 2026 The Strata Authors.
#include "backup/layout.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <set>

#include "util/hash.h"
#include "util/json_bounded.h"

namespace strata::backup {
namespace {

using json = nlohmann::json;

constexpr std::string_view kPartFormat = "strata-backup-part";
constexpr std::string_view kCommitFormat = "strata-backup";
constexpr size_t kMaxJobBytes = 256;
constexpr int kMaxSequence = 999999;

// Parses exactly `n` decimal digits at text[*pos], advancing *pos.
bool Digits(std::string_view text, size_t* pos, size_t n, int* out) {
  if (*pos + n > text.size()) return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = text[*pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *pos += n;
  *out = v;
  return true;
}

bool Literal(std::string_view text, size_t* pos, char c) {
  if (*pos >= text.size() || text[*pos] != c) return false;
  ++*pos;
  return true;
}

// The UTC time of the given fields; nullopt unless every field is in range
// (so "2026-02-30" is rejected rather than normalized to March 2).
std::optional<std::time_t> UtcTime(int year, int month, int day, int hour, int minute, int second) {
  if (year < 1970 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  std::time_t t = timegm(&tm);
  std::tm back{};
  if (t < 0 || !gmtime_r(&t, &back) || back.tm_mday != day || back.tm_mon != month - 1)
    return std::nullopt;
  return t;
}

std::string FormatTime(std::time_t t, const char* format) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof buf, format, &tm);
  return std::string(buf, n);
}

// Reads the "format" and "version" fields; a mismatch is an error message.
std::optional<std::string> CheckHeader(const json& doc, std::string_view format) {
  if (!doc.is_object()) return "not a JSON object";
  auto f = doc.find("format");
  if (f == doc.end() || !f->is_string() || f->get<std::string>() != format)
    return "format is not \"" + std::string(format) + "\"";
  auto v = doc.find("version");
  if (v == doc.end() || !v->is_number_integer() || v->get<int64_t>() != kLayoutVersion)
    return "unsupported version (this build reads version " + std::to_string(kLayoutVersion) + ")";
  return std::nullopt;
}

// Strict field readers: they throw json::exception for a missing field or a
// value of the wrong JSON type, and return false for an integer out of
// [lo, hi] (or a float where an integer belongs).
bool IntField(const json& doc, const char* name, int64_t lo, int64_t hi, int64_t* out) {
  const json& v = doc.at(name);
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) return false;
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) return false;
  *out = x;
  return true;
}

bool IntField(const json& doc, const char* name, int lo, int hi, int* out) {
  int64_t x;
  if (!IntField(doc, name, int64_t{lo}, int64_t{hi}, &x)) return false;
  *out = static_cast<int>(x);
  return true;
}

bool U64Field(const json& doc, const char* name, uint64_t* out) {
  const json& v = doc.at(name);
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

std::optional<uint64_t> DigestField(const json& doc, const char* name) {
  std::string text = doc.at(name).get<std::string>();
  if (std::any_of(text.begin(), text.end(), [](char c) { return c >= 'A' && c <= 'F'; }))
    return std::nullopt;
  return ParseHex64(text);
}

// Checks `id` is a canonical backup id and `job` a plausible job name.
std::optional<std::string> CheckIdAndJob(const std::string& id, const std::string& job) {
  auto parsed = ParseBackupId(id);
  if (!parsed.ok() || parsed->ToString() != id) return "bad id \"" + id.substr(0, 64) + "\"";
  if (job.empty() || job.size() > kMaxJobBytes) return "bad job name";
  if (std::any_of(job.begin(), job.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }))
    return "bad job name";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> BackupIdOfKey(const std::string& key) {
  size_t slash = key.find('/');
  if (slash == std::string::npos) return std::nullopt;
  std::string id = key.substr(0, slash);
  auto parsed = ParseBackupId(id);
  if (!parsed.ok()) return std::nullopt;
  return id;
}

namespace {

bool IsPartMetaKey(const std::string& id, const std::string& key) {
  std::string_view rest = std::string_view(key).substr(id.size() + 1);
  if (rest.size() < 7 || rest[0] != 'p' || !rest.ends_with(".part")) return false;
  std::string_view digits = rest.substr(1, rest.size() - 6);
  return !digits.empty() &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Reads and decodes the commit object of `id` into `summary`. A commit that
// does not decode sets `problem`; only store errors are returned.
Status ReadSummaryCommit(storage::ObjectStore& store, uint64_t size, BackupSummary* summary) {
  std::string key = CommitKey(summary->id_text);
  if (size > kMaxCommitBytes) {
    summary->problem = store.url() + "/" + key + ": commit object of " + std::to_string(size) +
                       " bytes exceeds " + std::to_string(kMaxCommitBytes);
    return Status::Ok();
  }
  auto commit = ReadCommit(store, summary->id_text);
  if (commit.ok()) {
    summary->complete = true;
    summary->step = commit->step;
    summary->commit = std::move(*commit);
  } else if (commit.status().code() == StatusCode::kDataLoss) {
    summary->problem = commit.status().message();
  } else if (commit.status().code() != StatusCode::kNotFound) {  // deleted since List
    return commit.status();
  }
  return Status::Ok();
}

// The step of an incomplete backup, from the first part metadata object that
// decodes. Store errors other than NOT_FOUND are returned.
Status ReadSummaryStep(storage::ObjectStore& store, const std::vector<storage::ObjectInfo>& objects,
                       BackupSummary* summary) {
  for (const auto& o : objects) {
    if (!IsPartMetaKey(summary->id_text, o.key) || o.size > kMaxPartMetaBytes) continue;
    auto text = store.Get(o.key);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) continue;
      if (text.status().code() == StatusCode::kDataLoss) continue;
      return text.status();
    }
    auto meta = DecodePartMeta(*text, store.url() + "/" + o.key);
    if (meta.ok() && meta->id == summary->id_text) {
      summary->step = meta->step;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace

std::string BackupId::ToString() const {
  std::string s = FormatTime(minute, "%Y-%m-%d_%H-%M");
  if (sequence > 1) s += "." + std::to_string(sequence);
  return s;
}

StatusOr<BackupId> ParseBackupId(std::string_view text) {
  auto bad = [&] {
    return InvalidArgumentError("\"" + std::string(text.substr(0, 64)) +
                                "\" is not a backup id (YYYY-MM-DD_HH-MM[.N])");
  };
  size_t pos = 0;
  int year, month, day, hour, minute;
  if (!Digits(text, &pos, 4, &year) || !Literal(text, &pos, '-') ||
      !Digits(text, &pos, 2, &month) || !Literal(text, &pos, '-') || !Digits(text, &pos, 2, &day) ||
      !Literal(text, &pos, '_') || !Digits(text, &pos, 2, &hour) || !Literal(text, &pos, '-') ||
      !Digits(text, &pos, 2, &minute))
    return bad();
  auto t = UtcTime(year, month, day, hour, minute, 0);
  if (!t) return bad();
  BackupId id;
  id.minute = *t;
  if (pos == text.size()) return id;
  if (!Literal(text, &pos, '.')) return bad();
  std::string_view n = text.substr(pos);
  if (n.empty() || n.size() > 6 || n[0] == '0') return bad();
  auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), id.sequence);
  if (ec != std::errc() || end != n.data() + n.size() || id.sequence < 2) return bad();
  return id;
}

BackupId NewBackupId(std::time_t now, const std::vector<BackupId>& existing) {
  BackupId id;
  id.minute = now - ((now % 60) + 60) % 60;
  std::set<int> taken;
  for (const auto& e : existing)
    if (e.minute == id.minute) taken.insert(e.sequence);
  while (taken.count(id.sequence) && id.sequence < kMaxSequence) ++id.sequence;
  return id;
}

std::string FormatUtcTime(std::time_t t) { return FormatTime(t, "%Y-%m-%dT%H:%M:%SZ"); }

StatusOr<std::time_t> ParseUtcTime(std::string_view text) {
  size_t pos = 0;
  int year, month, day, hour, minute, second;
  bool shape = Digits(text, &pos, 4, &year) && Literal(text, &pos, '-') &&
               Digits(text, &pos, 2, &month) && Literal(text, &pos, '-') &&
               Digits(text, &pos, 2, &day) && Literal(text, &pos, 'T') &&
               Digits(text, &pos, 2, &hour) && Literal(text, &pos, ':') &&
               Digits(text, &pos, 2, &minute) && Literal(text, &pos, ':') &&
               Digits(text, &pos, 2, &second) && Literal(text, &pos, 'Z') && pos == text.size();
  std::optional<std::time_t> t;
  if (shape) t = UtcTime(year, month, day, hour, minute, second);
  if (!t) {
    return InvalidArgumentError("\"" + std::string(text.substr(0, 64)) +
                                "\" is not a UTC time (YYYY-MM-DDTHH:MM:SSZ)");
  }
  return *t;
}

std::string CommitKey(const std::string& id) { return id + "/" + std::string(kCommitObjectName); }

std::string PartMetaKey(const std::string& id, int part) {
  return id + "/p" + std::to_string(part) + ".part";
}

std::string PartDataPrefix(const std::string& id, int part) {
  return id + "/p" + std::to_string(part) + "/";
}

std::string PartDataKey(const std::string& id, int part, const std::string& rel_path) {
  return PartDataPrefix(id, part) + rel_path;
}

std::string EncodePartMeta(const PartMeta& meta) {
  json doc = {{"format", kPartFormat}, {"version", kLayoutVersion},
              {"id", meta.id},         {"job", meta.job},
              {"part", meta.part},     {"step", meta.step},
              {"bytes", meta.bytes},   {"digest", Hex64(meta.digest)},
              {"index", meta.index}};
  return doc.dump(2) + "\n";
}

StatusOr<PartMeta> DecodePartMeta(std::string_view text, std::string_view source) {
  std::string where(source);
  auto bad = [&](const std::string& why) { return DataLossError(where + ": " + why); };
  if (text.size() > kMaxPartMetaBytes) return bad("part metadata larger than the limit");
  json doc = ParseBounded(text);
  if (auto why = CheckHeader(doc, kPartFormat)) return bad("not backup part metadata: " + *why);
  try {
    PartMeta meta;
    meta.id = doc.at("id").get<std::string>();
    meta.job = doc.at("job").get<std::string>();
    if (auto why = CheckIdAndJob(meta.id, meta.job)) return bad(*why);
    if (!IntField(doc, "part", 0, kMaxNodes - 1, &meta.part)) return bad("part out of range");
    if (!IntField(doc, "step", int64_t{0}, std::numeric_limits<int64_t>::max(), &meta.step))
      return bad("step out of range");
    if (!U64Field(doc, "bytes", &meta.bytes)) return bad("bytes out of range");
    auto digest = DigestField(doc, "digest");
    if (!digest) return bad("digest is not 16 lowercase hex digits");
    meta.digest = *digest;
    meta.index = doc.at("index");
    if (!meta.index.is_object()) return bad("index is not a JSON object");
    return meta;
  } catch (const json::exception& e) {
    return bad(std::string("malformed part metadata: ") + e.what());
  }
}

uint64_t Commit::TotalBytes() const {
  uint64_t sum = 0;
  for (const auto& [part, bytes] : part_bytes) sum += bytes;
  return sum;
}

std::string EncodeCommit(const Commit& commit) {
  json sources = json::array();
  for (const auto& [rank, part] : commit.sources) sources.push_back(part);
  json parts = json::array();
  for (const auto& [part, bytes] : commit.part_bytes) {
    auto d = commit.part_digests.find(part);
    uint64_t digest = d == commit.part_digests.end() ? 0 : d->second;
    parts.push_back({{"part", part}, {"bytes", bytes}, {"digest", Hex64(digest)}});
  }
  json doc = {{"format", kCommitFormat},
              {"version", kLayoutVersion},
              {"id", commit.id},
              {"job", commit.job},
              {"step", commit.step},
              {"nodes", commit.nodes},
              {"workers_per_node", commit.workers_per_node},
              {"data_parallelism", commit.data_parallelism},
              {"created", FormatUtcTime(commit.created)},
              {"committed", FormatUtcTime(commit.committed)},
              {"sources", std::move(sources)},
              {"parts", std::move(parts)}};
  if (commit.requested) doc["requested"] = true;
  return doc.dump(2) + "\n";
}

namespace {

// Reads "parts": [{"part", "bytes", "digest"}, ...] in increasing part order.
std::optional<std::string> DecodeParts(const json& doc, Commit* commit) {
  const json& parts = doc.at("parts");
  if (!parts.is_array() || parts.empty()) return "parts is not a non-empty array";
  if (parts.size() > static_cast<size_t>(commit->nodes)) return "more parts than nodes";
  for (size_t i = 0; i < parts.size(); ++i) {
    const json& p = parts[i];
    const std::string at = "parts[" + std::to_string(i) + "]: ";
    int part;
    uint64_t bytes;
    if (!IntField(p, "part", 0, commit->nodes - 1, &part)) return at + "part number out of range";
    if (!U64Field(p, "bytes", &bytes)) return at + "part bytes out of range";
    auto digest = DigestField(p, "digest");
    if (!digest) return at + "part digest is not 16 lowercase hex digits";
    if (!commit->part_bytes.empty() && part <= commit->part_bytes.rbegin()->first)
      return at + "parts are not in increasing order";
    commit->part_bytes[part] = bytes;
    commit->part_digests[part] = *digest;
  }
  return std::nullopt;
}

// Reads "sources": [part of rank 0, part of rank 1, ...], one per node.
std::optional<std::string> DecodeSources(const json& doc, Commit* commit) {
  const json& sources = doc.at("sources");
  if (!sources.is_array() || sources.size() != static_cast<size_t>(commit->nodes))
    return "sources does not name one part per node";
  for (size_t rank = 0; rank < sources.size(); ++rank) {
    if (!sources[rank].is_number_integer()) {
      return "sources[" + std::to_string(rank) + "] is not an integer";
    }
    int64_t part = sources[rank].get<int64_t>();
    if (part < 0 || part >= commit->nodes || !commit->part_bytes.count(static_cast<int>(part)))
      return "node " + std::to_string(rank) + " restores from part " + std::to_string(part) +
             ", which the commit does not list";
    commit->sources[static_cast<int>(rank)] = static_cast<int>(part);
  }
  return std::nullopt;
}

}  // namespace

StatusOr<Commit> DecodeCommit(std::string_view text, std::string_view source) {
  std::string where(source);
  auto bad = [&](const std::string& why) { return DataLossError(where + ": " + why); };
  if (text.size() > kMaxCommitBytes) return bad("commit object larger than the limit");
  json doc = ParseBounded(text);
  if (auto why = CheckHeader(doc, kCommitFormat)) return bad("not a backup commit object: " + *why);
  try {
    Commit c;
    c.id = doc.at("id").get<std::string>();
    c.job = doc.at("job").get<std::string>();
    if (auto why = CheckIdAndJob(c.id, c.job)) return bad(*why);
    if (!IntField(doc, "step", int64_t{0}, std::numeric_limits<int64_t>::max(), &c.step))
      return bad("step out of range");
    if (!IntField(doc, "nodes", 1, kMaxNodes, &c.nodes)) return bad("nodes out of range");
    if (!IntField(doc, "workers_per_node", 1, kMaxWorkersPerNode, &c.workers_per_node))
      return bad("workers_per_node out of range");
    if (!IntField(doc, "data_parallelism", 1, c.nodes, &c.data_parallelism))
      return bad("data_parallelism out of range");
    auto created = ParseUtcTime(doc.at("created").get<std::string>());
    auto committed = ParseUtcTime(doc.at("committed").get<std::string>());
    if (!created.ok() || !committed.ok()) return bad("created/committed is not a UTC time");
    if (*committed < *created) return bad("committed before it was created");
    c.created = *created;
    c.committed = *committed;
    if (auto why = DecodeParts(doc, &c)) return bad(*why);
    if (auto why = DecodeSources(doc, &c)) return bad(*why);
    if (doc.contains("requested")) {
      if (!doc["requested"].is_boolean()) return bad("requested is not a boolean");
      c.requested = doc["requested"].get<bool>();
    }
    return c;
  } catch (const json::exception& e) {
    return bad(std::string("malformed commit object: ") + e.what());
  }
}

StatusOr<Commit> ReadCommit(storage::ObjectStore& store, const std::string& id) {
  std::string key = CommitKey(id);
  STRATA_ASSIGN_OR_RETURN(std::string text, store.Get(key));
  std::string source = store.url() + "/" + key;
  STRATA_ASSIGN_OR_RETURN(Commit commit, DecodeCommit(text, source));
  if (commit.id != id) return DataLossError(source + ": names backup " + commit.id);
  return commit;
}

StatusOr<std::vector<BackupSummary>> ListBackups(storage::ObjectStore& store) {
  STRATA_ASSIGN_OR_RETURN(std::vector<storage::ObjectInfo> objects, store.List(""));
  std::map<std::string, std::vector<storage::ObjectInfo>> by_id;
  for (auto& o : objects) {
    if (auto id = BackupIdOfKey(o.key)) by_id[*id].push_back(std::move(o));
  }
  std::vector<BackupSummary> out;
  for (const auto& [id, objs] : by_id) {
    BackupSummary s;
    s.id = *ParseBackupId(id);
    s.id_text = id;
    for (const auto& o : objs) {
      s.bytes += o.size;
      ++s.objects;
      if (o.key == CommitKey(id)) STRATA_RETURN_IF_ERROR(ReadSummaryCommit(store, o.size, &s));
    }
    if (!s.step) STRATA_RETURN_IF_ERROR(ReadSummaryStep(store, objs, &s));
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const BackupSummary& a, const BackupSummary& b) { return a.id < b.id; });
  return out;
}

}  // namespace strata::backup
