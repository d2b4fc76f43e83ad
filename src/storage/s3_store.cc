// Copyright 2026 The Strata Authors.
#include "storage/s3_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <pugixml.hpp>
#include <thread>

#include "storage/crc32c.h"
#include "util/logging.h"
#include "util/thread_pool.h"
#include "util/unique_fd.h"

namespace strata::storage {
namespace {

constexpr uint64_t kMinPartBytes = uint64_t{5} << 20;  // S3's minimum (but for the last)
constexpr uint64_t kMaxParts = 10000;
constexpr size_t kCrcBufferBytes = size_t{1} << 20;

std::string FromEnv(const std::string& value, std::initializer_list<const char*> names,
                    const std::string& fallback = "") {
  if (!value.empty()) return value;
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (v != nullptr && *v != '\0') return v;
  }
  return fallback;
}

// CRC32C of bytes [offset, offset + n) of `fd`.
StatusOr<uint32_t> FileCrc32c(int fd, uint64_t offset, uint64_t n) {
  thread_local std::unique_ptr<char[]> buf(new char[kCrcBufferBytes]);
  uint32_t crc = 0;
  while (n > 0) {
    ssize_t r = ::pread(fd, buf.get(), static_cast<size_t>(std::min<uint64_t>(n, kCrcBufferBytes)),
                        static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoToStatus(errno, "read");
    if (r == 0) return DataLossError("the file shrank while being uploaded");
    crc = Crc32c(crc, buf.get(), static_cast<size_t>(r));
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return crc;
}

std::string Xml(const pugi::xml_document& doc) {
  struct Writer : pugi::xml_writer {
    std::string out;
    void write(const void* data, size_t size) override {
      out.append(static_cast<const char*>(data), size);
    }
  } w;
  doc.save(w, "", pugi::format_raw);
  return w.out;
}

// The object size from "Content-Range: bytes 0-99/1234".
std::optional<uint64_t> TotalFromContentRange(const std::string& v) {
  size_t slash = v.rfind('/');
  if (slash == std::string::npos || slash + 1 >= v.size()) return std::nullopt;
  char* end = nullptr;
  uint64_t total = std::strtoull(v.c_str() + slash + 1, &end, 10);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return total;
}

}  // namespace

StatusOr<std::unique_ptr<ObjectStore>> OpenS3Store(const std::string& url,
                                                   const std::string& bucket,
                                                   const std::string& prefix,
                                                   const StoreOptions& options) {
  S3Config c;
  c.url = url;
  c.bucket = bucket;
  c.prefix = prefix;
  c.options = options;
  c.endpoint = FromEnv(options.endpoint, {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
  c.region = FromEnv(options.region, {"AWS_REGION", "AWS_DEFAULT_REGION"}, "us-east-1");
  c.access_key_id = FromEnv(options.access_key_id, {"AWS_ACCESS_KEY_ID"});
  c.secret_access_key = FromEnv(options.secret_access_key, {"AWS_SECRET_ACCESS_KEY"});
  c.session_token = options.access_key_id.empty()
                        ? FromEnv(options.session_token, {"AWS_SESSION_TOKEN"})
                        : options.session_token;
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return FailedPreconditionError(url +
                                   ": no S3 credentials (set AWS_ACCESS_KEY_ID and "
                                   "AWS_SECRET_ACCESS_KEY)");
  }
  if (!c.endpoint.starts_with("http://") && !c.endpoint.starts_with("https://") &&
      !c.endpoint.empty()) {
    return InvalidArgumentError(url + ": S3 endpoint \"" + c.endpoint +
                                "\" is not an http:// or https:// URL");
  }
  if (c.options.part_bytes < kMinPartBytes) c.options.part_bytes = kMinPartBytes;
  c.options.list_page_size = std::min(c.options.list_page_size, 1000);
  return std::unique_ptr<ObjectStore>(new S3Store(std::move(c)));
}

S3Op S3Store::Op(std::string_view name, std::string_view key, std::string_view detail) const {
  const S3Config& c = client_.config();
  return S3Op{c.url, c.bucket, name, key, detail};
}

Status S3Store::PutObject(std::string_view op_name, const std::string& key, const S3Body& body) {
  uint32_t crc;
  if (body.fd >= 0) {
    StatusOr<uint32_t> r = FileCrc32c(body.fd, body.offset, body.size);
    if (!r.ok()) return r.status().WithContext(DescribeOp(Op(op_name, key)));
    crc = *r;
  } else {
    crc = Crc32c(0, body.data.data(), body.data.size());
  }
  S3Request req;
  req.op = Op(op_name, key);
  req.method = "PUT";
  req.object_key = client_.FullKey(key);
  req.headers = {"x-amz-sdk-checksum-algorithm: CRC32C",
                 "x-amz-checksum-crc32c: " + Crc32cBase64(crc)};
  req.body = &body;
  return client_.Call(req).status();
}

Status S3Store::Put(const std::string& key, std::string_view data) {
  Status s = ValidateObjectKey(key);
  if (!s.ok()) return s.WithContext(url() + ": PutObject");
  S3Body body;
  body.data = data;
  body.size = data.size();
  return PutObject("PutObject", key, body);
}

Status S3Store::PutFile(const std::string& key, const std::string& path) {
  Status s = ValidateObjectKey(key);
  if (!s.ok()) return s.WithContext(url() + ": PutObject");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return ErrnoToStatus(errno, DescribeOp(Op("PutObject", key)) + ": open " + path);
  }
  auto size = static_cast<uint64_t>(st.st_size);
  if (size <= client_.config().options.part_bytes) {
    S3Body body;
    body.fd = fd.get();
    body.size = size;
    return PutObject("PutObject", key, body);
  }
  return PutMultipart(key, fd.get(), size);
}

StatusOr<std::string> S3Store::CreateMultipart(const std::string& key) {
  S3Request req;
  req.op = Op("CreateMultipartUpload", key);
  req.method = "POST";
  req.object_key = client_.FullKey(key);
  req.query = {{"uploads", ""}};
  req.headers = {"x-amz-checksum-algorithm: CRC32C"};
  STRATA_ASSIGN_OR_RETURN(S3Response r, client_.Call(req));
  pugi::xml_document doc;
  doc.load_buffer(r.body.data(), r.body.size());
  std::string id = doc.child("InitiateMultipartUploadResult").child_value("UploadId");
  if (id.empty()) return UnavailableError(DescribeOp(req.op) + ": the response has no UploadId");
  return id;
}

Status S3Store::PutMultipart(const std::string& key, int fd, uint64_t size) {
  const StoreOptions& o = client_.config().options;
  uint64_t part = std::max(o.part_bytes, (size + kMaxParts - 1) / kMaxParts);
  size_t parts = static_cast<size_t>((size + part - 1) / part);
  STRATA_ASSIGN_OR_RETURN(std::string upload_id, CreateMultipart(key));
  std::vector<std::string> etags(parts), crcs(parts);
  Status s = RunParallel(parts, o.parallelism, [&](size_t i, const std::atomic<bool>& cancel) {
    std::string detail = "part " + std::to_string(i + 1) + " of " + std::to_string(parts);
    S3Body body;
    body.fd = fd;
    body.offset = i * part;
    body.size = std::min(part, size - body.offset);
    StatusOr<uint32_t> crc = FileCrc32c(fd, body.offset, body.size);
    if (!crc.ok()) return crc.status().WithContext(DescribeOp(Op("UploadPart", key, detail)));
    crcs[i] = Crc32cBase64(*crc);
    S3Request req;
    req.op = Op("UploadPart", key, detail);
    req.method = "PUT";
    req.object_key = client_.FullKey(key);
    req.query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}};
    req.headers = {"x-amz-sdk-checksum-algorithm: CRC32C", "x-amz-checksum-crc32c: " + crcs[i]};
    req.body = &body;
    req.cancel = &cancel;
    STRATA_ASSIGN_OR_RETURN(S3Response r, client_.Call(req));
    etags[i] = r.headers["etag"];
    if (etags[i].empty())
      return UnavailableError(DescribeOp(req.op) + ": the response has no ETag");
    return Status::Ok();
  });
  if (s.ok()) s = CompleteMultipart(key, upload_id, etags, crcs);
  if (!s.ok()) AbortMultipart(key, upload_id);
  return s;
}

Status S3Store::CompleteMultipart(const std::string& key, const std::string& upload_id,
                                  const std::vector<std::string>& etags,
                                  const std::vector<std::string>& crcs) {
  pugi::xml_document doc;
  pugi::xml_node root = doc.append_child("CompleteMultipartUpload");
  root.append_attribute("xmlns") = "http://s3.amazonaws.com/doc/2006-03-01/";
  for (size_t i = 0; i < etags.size(); ++i) {
    pugi::xml_node p = root.append_child("Part");
    p.append_child("PartNumber").text() = std::to_string(i + 1).c_str();
    p.append_child("ETag").text() = etags[i].c_str();
    p.append_child("ChecksumCRC32C").text() = crcs[i].c_str();
  }
  std::string xml = Xml(doc);
  S3Body body;
  body.data = xml;
  body.size = xml.size();
  S3Request req;
  req.op = Op("CompleteMultipartUpload", key);
  req.method = "POST";
  req.object_key = client_.FullKey(key);
  req.query = {{"uploadId", upload_id}};
  req.body = &body;
  STRATA_ASSIGN_OR_RETURN(S3Response r, client_.Call(req));
  // S3 may answer 200 and still report an error in the body.
  S3ErrorBody e = ParseS3Error(r.body);
  if (!e.code.empty()) return S3ErrorStatus(req.op, 500, e);
  return Status::Ok();
}

void S3Store::AbortMultipart(const std::string& key, const std::string& upload_id) {
  S3Request req;
  req.op = Op("AbortMultipartUpload", key);
  req.method = "DELETE";
  req.object_key = client_.FullKey(key);
  req.query = {{"uploadId", upload_id}};
  Status s = client_.Call(req).status();
  if (!s.ok() && s.code() != StatusCode::kNotFound) {
    Log()->warn("{} (the parts stay billed until a lifecycle rule removes them)", s.message());
  }
}

StatusOr<std::string> S3Store::Get(const std::string& key) {
  Status s = ValidateObjectKey(key);
  if (!s.ok()) return s.WithContext(url() + ": GetObject");
  S3Request req;
  req.op = Op("GetObject", key);
  req.object_key = client_.FullKey(key);
  STRATA_ASSIGN_OR_RETURN(S3Response r, client_.Call(req));
  return std::move(r.body);
}

StatusOr<uint64_t> S3Store::GetFile(const std::string& key, const std::string& path) {
  Status s = ValidateObjectKey(key);
  if (!s.ok()) return s.WithContext(url() + ": GetObject");
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid())
    return ErrnoToStatus(errno, DescribeOp(Op("GetObject", key)) + ": create " + path);
  uint64_t part = client_.config().options.part_bytes;
  S3Request req;
  req.op = Op("GetObject", key);
  req.object_key = client_.FullKey(key);
  req.range = {0, part - 1};
  req.sink_fd = fd.get();
  StatusOr<S3Response> first = client_.Call(req);
  if (first.status().code() == StatusCode::kOutOfRange) {  // an empty object has no byte 0
    req.range.reset();
    first = client_.Call(req);
  }
  if (!first.ok()) return first.status();
  S3Response& r = *first;
  if (r.status != 206) return r.sink_bytes;  // the whole object, length checked
  std::optional<uint64_t> total = TotalFromContentRange(r.headers["content-range"]);
  if (!total) {
    return DataLossError(DescribeOp(req.op) + ": bad Content-Range \"" +
                         r.headers["content-range"] + "\"");
  }
  if (r.sink_bytes != std::min(*total, part)) {
    return DataLossError(DescribeOp(req.op) + ": received " + std::to_string(r.sink_bytes) +
                         " bytes of the first range");
  }
  if (*total > part)
    STRATA_RETURN_IF_ERROR(GetRanges(key, fd.get(), part, *total, r.headers["etag"]));
  return *total;
}

Status S3Store::GetRanges(const std::string& key, int fd, uint64_t from, uint64_t size,
                          const std::string& etag) {
  const StoreOptions& o = client_.config().options;
  uint64_t part = o.part_bytes;
  size_t ranges = static_cast<size_t>((size - from + part - 1) / part);
  return RunParallel(ranges, o.parallelism, [&](size_t i, const std::atomic<bool>& cancel) {
    uint64_t begin = from + i * part;
    uint64_t end = std::min(begin + part, size);  // exclusive
    std::string detail = "bytes " + std::to_string(begin) + "-" + std::to_string(end - 1);
    S3Request req;
    req.op = Op("GetObject", key, detail);
    req.object_key = client_.FullKey(key);
    req.range = {begin, end - 1};
    req.sink_fd = fd;
    req.sink_offset = begin;
    req.cancel = &cancel;
    if (!etag.empty()) req.headers = {"If-Match: " + etag};
    STRATA_ASSIGN_OR_RETURN(S3Response r, client_.Call(req));
    if (r.sink_bytes != end - begin) {
      return DataLossError(DescribeOp(req.op) + ": received " + std::to_string(r.sink_bytes) +
                           " bytes");
    }
    return Status::Ok();
  });
}

Status ParseListPage(std::string_view body, const std::string& full, size_t strip,
                     std::vector<ObjectInfo>* out, std::string* token, bool* truncated) {
  pugi::xml_document doc;
  pugi::xml_node root;
  if (doc.load_buffer(body.data(), body.size())) root = doc.child("ListBucketResult");
  if (!root) return UnavailableError("the response is not a listing");
  for (pugi::xml_node n : root.children("Contents")) {
    std::string k = n.child_value("Key");
    if (k.size() <= strip || k.compare(0, full.size(), full) != 0) continue;
    out->push_back({k.substr(strip), std::strtoull(n.child_value("Size"), nullptr, 10)});
  }
  *token = root.child_value("NextContinuationToken");
  *truncated = std::string_view(root.child_value("IsTruncated")) == "true";
  return Status::Ok();
}

StatusOr<std::vector<ObjectInfo>> S3Store::List(const std::string& prefix) {
  const S3Config& c = client_.config();
  std::string full = client_.FullKey(prefix);
  size_t strip = c.prefix.empty() ? 0 : c.prefix.size() + 1;
  std::vector<ObjectInfo> out;
  std::string token;
  for (int page = 1;; ++page) {
    S3Request req;
    req.op = Op("ListObjectsV2", prefix, page > 1 ? "page " + std::to_string(page) : "");
    req.query = {{"list-type", "2"}, {"max-keys", std::to_string(c.options.list_page_size)}};
    if (!full.empty()) req.query.emplace_back("prefix", full);
    if (!token.empty()) req.query.emplace_back("continuation-token", token);
    STRATA_ASSIGN_OR_RETURN(S3Response r, client_.Call(req));
    bool truncated = false;
    if (!ParseListPage(r.body, full, strip, &out, &token, &truncated).ok()) {
      return UnavailableError(DescribeOp(req.op) + ": the response is not a listing");
    }
    if (!truncated || token.empty()) break;
  }
  std::sort(out.begin(), out.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

Status S3Store::Delete(const std::string& key) {
  Status s = ValidateObjectKey(key);
  if (!s.ok()) return s.WithContext(url() + ": DeleteObject");
  S3Request req;
  req.op = Op("DeleteObject", key);
  req.method = "DELETE";
  req.object_key = client_.FullKey(key);
  StatusOr<S3Response> r = client_.Call(req);
  if (r.ok() || r.status().message().find("(NoSuchKey)") != std::string::npos) return Status::Ok();
  return r.status();
}

// HeadBucket first: a 404 says the bucket is missing. Its 403 has no body to
// tell refused credentials from a missing permission, so then the probe
// object's PUT (whose error body says which) gives the reason. The probe
// proves writes and deletes, and a listing proves reads.
Status S3Store::CheckAccess() {
  S3Request head;
  head.op = Op("HeadBucket", "");
  head.method = "HEAD";
  Status headed = client_.Call(head).status();
  if (!headed.ok() && headed.code() != StatusCode::kPermissionDenied) return headed;
  static std::atomic<uint64_t> seq{0};
  std::string probe =
      ".strata-probe/" + std::to_string(::getpid()) + "-" + std::to_string(seq.fetch_add(1));
  STRATA_RETURN_IF_ERROR(Put(probe, "strata probe"));
  STRATA_RETURN_IF_ERROR(headed);
  STRATA_RETURN_IF_ERROR(Delete(probe));
  S3Request list;
  list.op = Op("ListObjectsV2", "");
  list.query = {{"list-type", "2"}, {"max-keys", "1"}};
  if (!client_.config().prefix.empty()) list.query.emplace_back("prefix", client_.FullKey(""));
  return client_.Call(list).status();
}

}  // namespace strata::storage
