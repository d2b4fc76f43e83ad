// Copyright 2026 The Strata Authors.
#include "storage/s3_client.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <thread>

#include "storage/retry.h"
#include "util/logging.h"

namespace strata::storage {
namespace {

constexpr long kUploadBufferBytes = 1 << 20;    // curl's upload buffer
constexpr long kDownloadBufferBytes = 1 << 19;  // CURL_MAX_READ_SIZE
constexpr size_t kMaxErrorBodyBytes = 64 << 10;
// Bodies are not hashed: TLS protects them in flight and every part and
// object carries a CRC32C that the server checks (s3_store.cc).
constexpr char kUnsignedPayload[] = "UNSIGNED-PAYLOAD";

void GlobalInit() {
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)rc;
}

// curl errors that no retry can fix.
bool IsPermanentCurlError(CURLcode c) {
  switch (c) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_LOGIN_DENIED:
      return true;
    default:
      return false;
  }
}

// Failing before any byte was exchanged: the endpoint is not reachable.
bool IsConnectError(CURLcode c) {
  return c == CURLE_COULDNT_RESOLVE_HOST || c == CURLE_COULDNT_RESOLVE_PROXY ||
         c == CURLE_COULDNT_CONNECT;
}

// The authority of a URL "scheme://authority/..." (the Host header).
std::string Authority(const std::string& url) {
  size_t b = url.find("//");
  b = b == std::string::npos ? 0 : b + 2;
  return url.substr(b, url.find('/', b) - b);
}

// The path of a URL "scheme://authority/path" ("" when it has none).
std::string UrlPath(const std::string& url) {
  size_t b = url.find("//");
  size_t p = url.find('/', b == std::string::npos ? 0 : b + 2);
  return p == std::string::npos ? "" : url.substr(p);
}

// "host:port" without the scheme's default port, as libcurl and botocore
// send (and sign) the Host header.
std::string HostHeader(const std::string& url) {
  std::string authority = Authority(url);
  const std::string default_port = url.starts_with("https://") ? ":443" : ":80";
  if (authority.ends_with(default_port)) authority.resize(authority.size() - default_port.size());
  return authority;
}

std::string HostUrl(const S3Config& c) {
  if (!c.endpoint.empty()) {
    std::string e = c.endpoint;
    while (!e.empty() && e.back() == '/') e.pop_back();
    return e + "/" + c.bucket;
  }
  if (c.bucket.find('.') != std::string::npos) {  // TLS certificates do not cover dotted names
    return "https://s3." + c.region + ".amazonaws.com/" + c.bucket;
  }
  return "https://" + c.bucket + ".s3." + c.region + ".amazonaws.com";
}

}  // namespace

// One easy handle and the state its callbacks use during a transfer.
struct S3Client::Handle {
  CURL* curl = nullptr;
  char errbuf[CURL_ERROR_SIZE] = {};
  ~Handle() {
    if (curl) curl_easy_cleanup(curl);
  }
};

// The outcome of one try.
struct S3Client::Attempt {
  CURLcode curl = CURLE_OK;
  std::string curl_error;  // curl's message and detail
  Status local;            // a failure on our side (file I/O, cancelled): final
  S3Response response;
};

namespace {

// What the callbacks of one transfer share.
struct Transfer {
  const S3Request* req = nullptr;
  const S3Body* body = nullptr;  // never null for PUT and POST
  RateLimiter* limiter = nullptr;
  CURL* curl = nullptr;
  S3Response* resp = nullptr;
  Status* local = nullptr;
  uint64_t body_pos = 0;    // next body byte to send
  uint64_t sink_base = 0;   // file offset of the first byte of this response
  uint64_t sink_limit = 0;  // bytes the sink may take (0: any)
  int to_sink = -1;         // -1 unknown, 0 body string, 1 sink file
};

bool Cancelled(const Transfer& t) { return t.req->cancel && t.req->cancel->load(); }

size_t OnRead(char* buf, size_t size, size_t nitems, void* ctx) {
  auto& t = *static_cast<Transfer*>(ctx);
  if (Cancelled(t)) {
    *t.local = CancelledError(DescribeOp(t.req->op) + ": cancelled");
    return CURL_READFUNC_ABORT;
  }
  const S3Body& b = *t.body;
  size_t n = static_cast<size_t>(std::min<uint64_t>(size * nitems, b.size - t.body_pos));
  if (n == 0) return 0;
  if (t.limiter) t.limiter->Acquire(n);
  if (b.fd < 0) {
    std::memcpy(buf, b.data.data() + t.body_pos, n);
  } else {
    size_t done = 0;
    while (done < n) {
      ssize_t r =
          ::pread(b.fd, buf + done, n - done, static_cast<off_t>(b.offset + t.body_pos + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        *t.local = r < 0 ? ErrnoToStatus(errno, DescribeOp(t.req->op) + ": read source")
                         : DataLossError(DescribeOp(t.req->op) +
                                         ": the source file shrank while being uploaded");
        return CURL_READFUNC_ABORT;
      }
      done += static_cast<size_t>(r);
    }
  }
  t.body_pos += n;
  return n;
}

int OnSeek(void* ctx, curl_off_t offset, int origin) {
  auto& t = *static_cast<Transfer*>(ctx);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > t.body->size) {
    return CURL_SEEKFUNC_FAIL;
  }
  t.body_pos = static_cast<uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

size_t OnWrite(char* p, size_t size, size_t nmemb, void* ctx) {
  auto& t = *static_cast<Transfer*>(ctx);
  size_t n = size * nmemb;
  if (Cancelled(t)) {
    *t.local = CancelledError(DescribeOp(t.req->op) + ": cancelled");
    return 0;
  }
  if (t.to_sink < 0) {
    long code = 0;
    curl_easy_getinfo(t.curl, CURLINFO_RESPONSE_CODE, &code);
    t.to_sink = (t.req->sink_fd >= 0 && code >= 200 && code < 300) ? 1 : 0;
    if (t.to_sink == 1 && code == 200 && t.sink_base != t.req->sink_offset) {
      *t.local = DataLossError(DescribeOp(t.req->op) +
                               ": the server ignored the Range of a resumed download");
      return 0;
    }
    if (code != 206) t.sink_limit = 0;
  }
  if (t.to_sink == 0) {
    if (t.resp->body.size() + n > kMaxErrorBodyBytes && t.req->sink_fd >= 0) return n;  // drop
    t.resp->body.append(p, n);
    return n;
  }
  if (t.sink_limit > 0 && t.resp->sink_bytes + n > t.sink_limit) {
    *t.local = DataLossError(DescribeOp(t.req->op) + ": the server sent more bytes than asked for");
    return 0;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(t.req->sink_fd, p + done, n - done,
                         static_cast<off_t>(t.sink_base + t.resp->sink_bytes + done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      *t.local = ErrnoToStatus(errno, DescribeOp(t.req->op) + ": write target file");
      return 0;
    }
    done += static_cast<size_t>(w);
  }
  t.resp->sink_bytes += n;
  return n;
}

size_t OnHeader(char* p, size_t size, size_t nitems, void* ctx) {
  auto& t = *static_cast<Transfer*>(ctx);
  size_t n = size * nitems;
  std::string_view line(p, n);
  if (line.starts_with("HTTP/")) {  // a new response (e.g. after 100 Continue)
    t.resp->headers.clear();
    return n;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front())))
    value.remove_prefix(1);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back())))
    value.remove_suffix(1);
  t.resp->headers[name] = std::string(value);
  return n;
}

}  // namespace

S3Client::S3Client(S3Config config)
    : config_(std::move(config)),
      host_url_(HostUrl(config_)),
      host_(HostHeader(host_url_)),
      base_path_(UrlPath(host_url_)),
      credentials_{config_.access_key_id, config_.secret_access_key, config_.region, "s3"} {
  GlobalInit();
  if (config_.options.upload_bytes_per_second > 0) {
    upload_limiter_ = std::make_unique<RateLimiter>(config_.options.upload_bytes_per_second);
  }
}

S3Client::~S3Client() = default;

std::string S3Client::FullKey(std::string_view rel) const {
  if (config_.prefix.empty()) return std::string(rel);
  if (rel.empty()) return config_.prefix + "/";
  return config_.prefix + "/" + std::string(rel);
}

std::string S3Client::Url(const S3Request& req) const {
  std::string url = host_url_ + "/" + UriEncode(req.object_key, /*keep_slash=*/true);
  auto query = req.query;
  std::sort(query.begin(), query.end());
  char sep = '?';
  for (const auto& [k, v] : query) {
    url += sep + UriEncode(k, false) + "=" + UriEncode(v, false);  // "name=" for empty values
    sep = '&';
  }
  return url;
}

std::vector<std::string> S3Client::SignedHeaders(const S3Request& req, uint64_t done) const {
  // Signed (ToSign): Host and every x-amz-*, Content-Type and Content-MD5
  // header; not Range. "Expect:" removes libcurl's "Expect: 100-continue":
  // the body follows the headers at once.
  std::vector<std::string> hdrs = {std::string("x-amz-content-sha256: ") + kUnsignedPayload,
                                   "x-amz-date: " + AmzDateNow()};
  if (!config_.session_token.empty())
    hdrs.push_back("x-amz-security-token: " + config_.session_token);
  hdrs.insert(hdrs.end(), req.headers.begin(), req.headers.end());
  if (req.method == "PUT" || req.method == "POST") {
    hdrs.push_back("Content-Type: application/octet-stream");
  }
  const SigV4Request to_sign = ToSign(req, hdrs);
  hdrs.push_back("Host: " + host_);
  hdrs.push_back("Authorization: " + SigV4Authorization(credentials_, to_sign));
  hdrs.push_back("Expect:");
  if (req.range) {
    hdrs.push_back("Range: bytes=" + std::to_string(req.range->first + done) + "-" +
                   std::to_string(req.range->second));
  }
  return hdrs;
}

std::string S3Client::EncodedPath(const S3Request& req) const {
  return base_path_ + "/" + UriEncode(req.object_key, /*keep_slash=*/true);
}

SigV4Request S3Client::ToSign(const S3Request& req, const std::vector<std::string>& headers) const {
  SigV4Request r;
  r.method = req.method;
  r.canonical_uri = EncodedPath(req);  // as sent (Url)
  r.canonical_query = CanonicalQuery(req.query);
  r.payload_hash = kUnsignedPayload;
  r.headers["host"] = host_;
  for (const auto& h : headers) {
    size_t colon = h.find(':');
    std::string name = h.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name.starts_with("x-amz-") || name == "content-type" || name == "content-md5") {
      size_t v = h.find_first_not_of(' ', colon + 1);
      r.headers[name] = v == std::string::npos ? "" : h.substr(v);
    }
  }
  return r;
}

std::unique_ptr<S3Client::Handle> S3Client::AcquireHandle() {
  {
    MutexLock lock(&pool_mu_);
    if (!pool_.empty()) {
      auto h = std::move(pool_.back());
      pool_.pop_back();
      return h;
    }
  }
  auto h = std::make_unique<Handle>();
  h->curl = curl_easy_init();
  return h;
}

void S3Client::ReleaseHandle(std::unique_ptr<Handle> h) {
  curl_easy_reset(h->curl);  // keeps the connection
  MutexLock lock(&pool_mu_);
  pool_.push_back(std::move(h));
}

S3Client::Attempt S3Client::Once(const S3Request& req, uint64_t done) {
  Attempt a;
  std::unique_ptr<Handle> h = AcquireHandle();
  if (h->curl == nullptr) {
    a.local = InternalError(DescribeOp(req.op) + ": curl_easy_init failed");
    return a;
  }
  CURL* c = h->curl;
  const StoreOptions& o = config_.options;
  Transfer t;
  t.req = &req;
  t.curl = c;
  t.resp = &a.response;
  t.local = &a.local;
  t.sink_base = req.sink_offset + done;
  if (req.range) t.sink_limit = req.range->second + 1 - req.range->first - done;

  std::string url = Url(req);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  if (std::getenv("STRATA_CURL_VERBOSE")) curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
  h->errbuf[0] = '\0';
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout.count()));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>((o.stall_timeout.count() + 999) / 1000)));
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, kDownloadBufferBytes);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnWrite);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);

  const bool upload = req.method == "PUT" || req.method == "POST";
  static const S3Body kEmpty;
  curl_slist* headers = nullptr;
  for (const auto& line : SignedHeaders(req, done)) {
    headers = curl_slist_append(headers, line.c_str());
  }
  if (upload) {
    const S3Body* body = req.body ? req.body : &kEmpty;
    t.body = body;
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body->size));
    curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, kUploadBufferBytes);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, OnRead);
    curl_easy_setopt(c, CURLOPT_READDATA, &t);
    curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, OnSeek);
    curl_easy_setopt(c, CURLOPT_SEEKDATA, &t);
    if (req.method == "POST") curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "POST");
    t.limiter = upload_limiter_.get();
  } else if (req.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (req.method != "GET") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);

  ++requests_;
  a.curl = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.response.status);
  if (a.curl != CURLE_OK) {
    a.curl_error = curl_easy_strerror(a.curl);
    if (h->errbuf[0] != '\0' && a.curl_error != h->errbuf)
      a.curl_error += ": " + std::string(h->errbuf);
  }
  curl_slist_free_all(headers);
  ReleaseHandle(std::move(h));
  return a;
}

StatusOr<S3Response> S3Client::Call(const S3Request& req) {
  const StoreOptions& o = config_.options;
  const std::string endpoint = host_url_.substr(0, host_url_.find('/', host_url_.find("//") + 2));
  uint64_t done = 0;  // bytes of a ranged sink GET already in the file
  for (int attempt = 1;; ++attempt) {
    Attempt a = Once(req, done);
    if (!a.local.ok()) return a.local;
    std::string reason;
    Status final_status;
    if (a.curl != CURLE_OK) {
      if (req.range && req.sink_fd >= 0 && a.response.status == 206) done += a.response.sink_bytes;
      reason = a.curl_error;
      if (IsPermanentCurlError(a.curl)) {
        return UnavailableError(DescribeOp(req.op) + ": " + endpoint + ": " + reason);
      }
      final_status =
          UnavailableError(DescribeOp(req.op) +
                           (IsConnectError(a.curl) ? ": cannot reach " + endpoint + " ("
                                                   : ": transfer with " + endpoint + " failed (") +
                           reason + ") after " + std::to_string(attempt) + " attempts");
    } else if (a.response.status >= 200 && a.response.status < 300) {
      S3Response& r = a.response;
      auto cl = r.headers.find("content-length");
      uint64_t got = (req.sink_fd >= 0 ? r.sink_bytes : r.body.size());
      if (req.method != "HEAD" && cl != r.headers.end() && std::to_string(got) != cl->second) {
        return DataLossError(DescribeOp(req.op) + ": received " + std::to_string(got) +
                             " bytes, Content-Length was " + cl->second);
      }
      r.sink_bytes += done;
      return std::move(r);
    } else {
      S3ErrorBody e = ParseS3Error(a.response.body);
      Status s = S3ErrorStatus(req.op, a.response.status, e);
      if (!IsRetryableS3Error(a.response.status, e.code)) return s;
      reason = std::to_string(a.response.status) + " " +
               (e.code.empty() ? std::string("(no error code)") : e.code);
      final_status =
          Status(s.code(), s.message() + " after " + std::to_string(attempt) + " attempts");
    }
    if (attempt >= o.max_attempts) return final_status;
    auto delay = BackoffDelay(attempt, o.initial_backoff, o.max_backoff);
    Log()->warn("{}: attempt {} of {} failed: {}; retrying in {} ms", DescribeOp(req.op), attempt,
                o.max_attempts, reason, delay.count());
    retries_.fetch_add(1);
    auto until = std::chrono::steady_clock::now() + delay;
    while (std::chrono::steady_clock::now() < until) {
      if (req.cancel && req.cancel->load())
        return CancelledError(DescribeOp(req.op) + ": cancelled");
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          until - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
    }
  }
}

}  // namespace strata::storage
