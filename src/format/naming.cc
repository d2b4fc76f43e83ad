// Copyright 2026 The Strata Authors.
#include "format/naming.h"

#include <unistd.h>

#include <atomic>
#include <charconv>
#include <climits>
#include <cstdio>
#include <limits>

namespace strata {

std::string StepDirName(int64_t step) { return std::to_string(step); }

std::optional<int64_t> ParseStepDirName(std::string_view name) {
  if (name.empty() || name.size() > 19) return std::nullopt;
  if (name.size() > 1 && name[0] == '0') return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), v);
  if (ec != std::errc() || ptr != name.data() + name.size()) return std::nullopt;
  return v;
}

std::string DataFileName(uint32_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "data-%05u.bin", index);
  return buf;
}

std::optional<uint32_t> ParseDataFileName(std::string_view name) {
  constexpr std::string_view kPrefix = "data-", kSuffix = ".bin";
  if (name.size() != kPrefix.size() + 5 + kSuffix.size()) return std::nullopt;
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  std::string_view digits = name.substr(kPrefix.size(), 5);
  uint32_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  return v;
}

std::string TempDirName(int64_t step) {
  static std::atomic<uint64_t> seq{0};
  return std::string(kTempPrefix) + std::to_string(step) + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(seq.fetch_add(1));
}

bool IsTempName(std::string_view name) { return name.starts_with(kTempPrefix); }

std::string QuarantineDirName(int64_t step, int n) {
  std::string name = StepDirName(step) + std::string(kQuarantineSuffix);
  return n == 0 ? name : name + "-" + std::to_string(n);
}

std::optional<int64_t> ParseQuarantineDirName(std::string_view name) {
  size_t pos = name.find(kQuarantineSuffix);
  if (pos == std::string_view::npos) return std::nullopt;
  std::string_view rest = name.substr(pos + kQuarantineSuffix.size());
  if (!rest.empty()) {
    if (rest[0] != '-' || !ParseStepDirName(rest.substr(1)) || rest == "-0") return std::nullopt;
  }
  return ParseStepDirName(name.substr(0, pos));
}

namespace {

// True iff `s` is well-formed UTF-8 (RFC 3629): no over-long forms, no
// surrogates, nothing above U+10FFFF. Manifests are JSON, which requires it.
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 0x6) {
      len = 2, cp = c & 0x1f;
    } else if ((c >> 4) == 0xe) {
      len = 3, cp = c & 0x0f;
    } else if ((c >> 3) == 0x1e) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 0x2) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

}  // namespace

Status ValidateItemName(std::string_view name) {
  auto bad = [&](std::string_view why) {
    std::string shown(name.substr(0, 64));
    for (char& c : shown) {
      if (c == '\0') c = '?';
    }
    return InvalidArgumentError("item name \"" + shown + (name.size() > 64 ? "..." : "") + "\" " +
                                std::string(why));
  };
  if (name.empty()) return InvalidArgumentError("item name is empty");
  if (name.size() > kMaxItemNameBytes) {
    return bad("is longer than " + std::to_string(kMaxItemNameBytes) + " bytes");
  }
  if (name.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (name.find('/') != std::string_view::npos) return bad("contains '/'");
  if (!IsUtf8(name)) return bad("is not valid UTF-8");
  if (name == "." || name == ".." || name.find("..") != std::string_view::npos) {
    return bad("contains \"..\"");
  }
  return Status::Ok();
}

Status ValidateJobName(std::string_view job) {
  auto bad = [&](const char* why) {
    return InvalidArgumentError("job name \"" + std::string(job.substr(0, 64)) + "\" " + why);
  };
  if (job.empty() || job.size() > 128) return bad("must be 1 to 128 characters");
  if (job == "." || job.find("..") != std::string_view::npos) return bad("must not contain \"..\"");
  for (char c : job) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return bad("may only contain letters, digits, '.', '_' and '-'");
  }
  return Status::Ok();
}

namespace {

std::string WorkerFile(const WorkerFileName& n, std::string_view suffix) {
  return n.job + "-s" + std::to_string(n.step) + "-n" + std::to_string(n.node) + "-w" +
         std::to_string(n.worker) + std::string(suffix);
}

// Parses the decimal number that follows `tag` at the end of `s`
// ("...-n12" with tag "-n"); shrinks `s` to what precedes the tag.
std::optional<int64_t> TakeNumber(std::string_view& s, std::string_view tag) {
  size_t pos = s.rfind(tag);
  if (pos == std::string_view::npos) return std::nullopt;
  std::string_view digits = s.substr(pos + tag.size());
  int64_t v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || p != digits.data() + digits.size() || digits.empty() || v < 0) {
    return std::nullopt;
  }
  s = s.substr(0, pos);
  return v;
}

}  // namespace

std::string MarkerName(const WorkerFileName& n) { return WorkerFile(n, ".restore"); }
std::string SaveFileName(const WorkerFileName& n) { return WorkerFile(n, ".save"); }

std::optional<WorkerFileName> ParseWorkerFileName(std::string_view name, std::string_view suffix) {
  if (!name.ends_with(suffix)) return std::nullopt;
  name.remove_suffix(suffix.size());
  auto worker = TakeNumber(name, "-w");
  auto node = worker ? TakeNumber(name, "-n") : std::nullopt;
  auto step = node ? TakeNumber(name, "-s") : std::nullopt;
  if (!step || *worker > INT_MAX || *node > INT_MAX || !ValidateJobName(name).ok()) {
    return std::nullopt;
  }
  return WorkerFileName{std::string(name), *step, static_cast<int>(*node),
                        static_cast<int>(*worker)};
}

}  // namespace strata
