// Copyright 2026 The Strata Authors.
#include "storage/object_store.h"

#include <cctype>

#include "storage/file_store.h"
#include "storage/s3_store.h"

namespace strata::storage {
namespace {

constexpr std::string_view kS3Scheme = "s3://";
constexpr std::string_view kFileScheme = "file://";

// S3 bucket naming rules (the subset that matters for addressing): 3..63
// bytes of [a-z0-9.-], beginning and ending with a letter or digit.
bool ValidBucketName(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-')) {
      return false;
    }
  }
  return std::isalnum(static_cast<unsigned char>(b.front())) &&
         std::isalnum(static_cast<unsigned char>(b.back()));
}

Status CheckOptions(const std::string& url, const StoreOptions& o) {
  if (o.parallelism < 1 || o.max_attempts < 1 || o.part_bytes == 0 || o.list_page_size < 1 ||
      o.initial_backoff.count() < 0 || o.max_backoff < o.initial_backoff) {
    return InvalidArgumentError(url + ": invalid store options (parallelism, max_attempts, " +
                                "part_bytes and list_page_size must be positive, " +
                                "initial_backoff <= max_backoff)");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<ObjectStore>> OpenS3(const std::string& url, const StoreOptions& options) {
  std::string_view rest = std::string_view(url).substr(kS3Scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t slash = rest.find('/');
  std::string bucket(rest.substr(0, slash));
  std::string prefix(slash == std::string_view::npos ? "" : rest.substr(slash + 1));
  if (!ValidBucketName(bucket)) {
    return InvalidArgumentError(url + ": \"" + bucket +
                                "\" is not a valid S3 bucket name (3-63 characters: a-z 0-9 . -)");
  }
  if (!prefix.empty()) {
    Status s = ValidateObjectKey(prefix);
    if (!s.ok()) return InvalidArgumentError(url + ": invalid prefix: " + s.message());
  }
  return OpenS3Store(url, bucket, prefix, options);
}

StatusOr<std::unique_ptr<ObjectStore>> OpenFile(const std::string& url,
                                                const StoreOptions& options) {
  std::string path = url.substr(kFileScheme.size());
  if (path.empty() || path[0] != '/') {
    return InvalidArgumentError(url + ": a file:// URL needs an absolute path (file:///dir)");
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return OpenFileStore(url, path, options);
}

}  // namespace

std::string QuoteKey(std::string_view key) {
  std::string out = "\"";
  for (char c : key) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '"' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

Status ValidateObjectKey(std::string_view key) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("invalid object key " + QuoteKey(key.substr(0, 200)) + ": " +
                                std::string(why));
  };
  if (key.empty()) return bad("empty");
  if (key.size() > 1024) return bad("longer than 1024 bytes");
  for (char c : key) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return bad("contains a control character");
  }
  if (key.front() == '/' || key.back() == '/') return bad("begins or ends with '/'");
  size_t begin = 0;
  while (begin <= key.size()) {
    size_t end = key.find('/', begin);
    if (end == std::string_view::npos) end = key.size();
    std::string_view part = key.substr(begin, end - begin);
    if (part.empty()) return bad("has an empty path component");
    if (part == "." || part == "..") return bad("has a \".\" or \"..\" component");
    if (part.starts_with(kReservedTempPrefix)) {
      return bad("a component begins with the reserved \".strata-tmp-\"");
    }
    begin = end + 1;
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<ObjectStore>> OpenObjectStore(const std::string& url,
                                                       const StoreOptions& options) {
  STRATA_RETURN_IF_ERROR(CheckOptions(url, options));
  if (url.starts_with(kS3Scheme)) return OpenS3(url, options);
  if (url.starts_with(kFileScheme)) return OpenFile(url, options);
  return InvalidArgumentError("\"" + url +
                              "\" is not an object store URL (s3://bucket/prefix or file:///dir)");
}

}  // namespace strata::storage
