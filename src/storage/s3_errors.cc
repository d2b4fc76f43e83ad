// Copyright 2026 The Strata Authors.
#include "storage/s3_errors.h"

#include <cctype>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <pugixml.hpp>

namespace strata::storage {
namespace {

std::string OneLine(std::string_view s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out += std::iscntrl(static_cast<unsigned char>(c)) ? ' ' : c;
  }
  return out;
}

// Seconds since the epoch of an ISO 8601 UTC time in either of S3's forms,
// "2026-11-21T07:45:45Z" or "20261121T074545Z" (fractions are dropped).
std::optional<std::time_t> ParseIsoTime(std::string_view s) {
  std::string digits;
  for (char c : s) {
    if (c == '.') break;
    if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
  }
  if (digits.size() != 14) return std::nullopt;
  std::tm tm{};
  tm.tm_year = std::atoi(digits.substr(0, 4).c_str()) - 1900;
  tm.tm_mon = std::atoi(digits.substr(4, 2).c_str()) - 1;
  tm.tm_mday = std::atoi(digits.substr(6, 2).c_str());
  tm.tm_hour = std::atoi(digits.substr(8, 2).c_str());
  tm.tm_min = std::atoi(digits.substr(10, 2).c_str());
  tm.tm_sec = std::atoi(digits.substr(12, 2).c_str());
  return ::timegm(&tm);
}

std::string ClockSkewMessage(const S3ErrorBody& e) {
  std::string m = "clock skew: the server's time differs from ours by ";
  auto server = ParseIsoTime(e.server_time);
  auto ours = ParseIsoTime(e.request_time);
  if (server && ours) {
    long long d = std::llabs(static_cast<long long>(*server - *ours));
    m += std::to_string(d / 60) + " min " + std::to_string(d % 60) + " s";
  } else {
    m += "more than the 15 minutes allowed";
  }
  if (!e.server_time.empty()) m += " (server " + e.server_time + ", ours " + e.request_time + ")";
  return m + "; fix this machine's clock (NTP) (RequestTimeTooSkewed)";
}

bool IsCredentialError(std::string_view code) {
  return code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
         code == "InvalidToken" || code == "ExpiredToken" || code == "TokenRefreshRequired";
}

}  // namespace

S3ErrorBody ParseS3Error(std::string_view body) {
  S3ErrorBody e;
  pugi::xml_document doc;
  if (!doc.load_buffer(body.data(), body.size())) return e;
  pugi::xml_node err = doc.child("Error");
  if (!err) return e;
  e.code = OneLine(err.child_value("Code"), 64);
  e.message = OneLine(err.child_value("Message"), 200);
  e.server_time = OneLine(err.child_value("ServerTime"), 40);
  e.request_time = OneLine(err.child_value("RequestTime"), 40);
  return e;
}

std::string DescribeOp(const S3Op& op) {
  std::string s = std::string(op.url) + ": " + std::string(op.name);
  if (!op.key.empty()) s += " " + std::string(op.key);
  if (!op.detail.empty()) s += " (" + std::string(op.detail) + ")";
  return s;
}

std::string_view PermissionFor(std::string_view op_name) {
  if (op_name == "PutObject" || op_name == "CreateMultipartUpload" || op_name == "UploadPart" ||
      op_name == "CompleteMultipartUpload") {
    return "s3:PutObject";
  }
  if (op_name == "GetObject" || op_name == "HeadObject") return "s3:GetObject";
  if (op_name == "ListObjectsV2" || op_name == "HeadBucket") return "s3:ListBucket";
  if (op_name == "DeleteObject") return "s3:DeleteObject";
  if (op_name == "AbortMultipartUpload") return "s3:AbortMultipartUpload";
  return "the permission for this request";
}

bool IsRetryableS3Error(long http_status, std::string_view code) {
  return http_status >= 500 || http_status == 429 || code == "SlowDown" ||
         code == "RequestTimeout" || code == "InternalError" || code == "ServiceUnavailable" ||
         code == "BadDigest" || code == "XAmzContentChecksumMismatch";
}

Status S3ErrorStatus(const S3Op& op, long http_status, const S3ErrorBody& error) {
  std::string where = DescribeOp(op);
  const std::string& code = error.code;
  std::string shown = code.empty() ? "HTTP " + std::to_string(http_status) : code;
  if (code == "NoSuchBucket" || (op.name == "HeadBucket" && http_status == 404)) {
    return NotFoundError(where + ": bucket \"" + std::string(op.bucket) +
                         "\" does not exist (NoSuchBucket)");
  }
  if (code == "NoSuchKey" || (code.empty() && http_status == 404)) {
    return NotFoundError(where + ": no such object (" + shown + ")");
  }
  if (code == "NoSuchUpload") {
    return NotFoundError(where + ": the multipart upload no longer exists (NoSuchUpload)");
  }
  if (IsCredentialError(code)) {
    return PermissionDeniedError(
        where + ": credentials refused: " + code +
        " (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY" +
        (code.find("Token") != std::string::npos ? " / AWS_SESSION_TOKEN" : "") + ")");
  }
  if (code == "RequestTimeTooSkewed")
    return PermissionDeniedError(where + ": " + ClockSkewMessage(error));
  if (code == "AccessDenied" || code == "AllAccessDisabled" || http_status == 403) {
    return PermissionDeniedError(where + " refused: " + shown + " (the credentials lack " +
                                 std::string(PermissionFor(op.name)) + " on bucket \"" +
                                 std::string(op.bucket) + "\")");
  }
  if (code == "PreconditionFailed" || http_status == 412) {
    return AbortedError(where + ": the object changed during the download (" + shown + ")");
  }
  if (code == "BadDigest" || code == "XAmzContentChecksumMismatch" || code == "InvalidDigest") {
    return DataLossError(where + ": the server's checksum of the body differs from ours: " +
                         "corrupted in transit or the file changed while uploading (" + code + ")");
  }
  std::string m = where +
                  (http_status >= 500 || http_status == 429 ? ": server error: " : " refused: ") +
                  shown + (error.message.empty() ? "" : " (" + error.message + ")");
  if (http_status >= 500 || http_status == 429 || IsRetryableS3Error(http_status, code)) {
    return UnavailableError(m);
  }
  if (http_status == 416 || code == "InvalidRange") return OutOfRangeError(m);
  if (http_status == 405 || http_status == 501) return UnimplementedError(m);
  if (http_status == 409) return AbortedError(m);
  return InvalidArgumentError(m);
}

}  // namespace strata::storage
