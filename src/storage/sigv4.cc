// Copyright 2026 The Strata Authors.
#include "storage/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>

namespace strata::storage {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";

void AppendEscaped(std::string* out, unsigned char b) {
  *out += '%';
  *out += kHex[b >> 4];
  *out += kHex[b & 15];
}

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kLower[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kLower[p[i] >> 4];
    out += kLower[p[i] & 15];
  }
  return out;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}

// A header value as SigV4 signs it: trimmed, runs of spaces folded to one.
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += c;
    } else {
      AppendEscaped(&out, u);
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) {
    enc.emplace_back(UriEncode(k, false), UriEncode(v, false));
  }
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

std::string CanonicalRequest(const SigV4Request& r) {
  std::string headers, names;
  for (const auto& [name, value] : r.headers) {  // std::map: sorted by name
    headers += name + ":" + CanonicalHeaderValue(value) + "\n";
    if (!names.empty()) names += ';';
    names += name;
  }
  std::string out(r.method);
  out += "\n" + r.canonical_uri + "\n" + r.canonical_query + "\n" + headers + "\n" + names + "\n";
  out += r.payload_hash;
  return out;
}

std::string SigV4Authorization(const SigV4Credentials& c, const SigV4Request& r) {
  const std::string& amz_date = r.headers.at("x-amz-date");
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + "/" + c.region + "/" + c.service + "/aws4_request";
  const std::string to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Sha256Hex(CanonicalRequest(r));
  std::string key = HmacSha256("AWS4" + c.secret_access_key, date);
  key = HmacSha256(key, c.region);
  key = HmacSha256(key, c.service);
  key = HmacSha256(key, "aws4_request");
  const std::string sig = HmacSha256(key, to_sign);
  std::string names;
  for (const auto& [name, value] : r.headers) {
    if (!names.empty()) names += ';';
    names += name;
  }
  return "AWS4-HMAC-SHA256 Credential=" + c.access_key_id + "/" + scope +
         ", SignedHeaders=" + names +
         ", Signature=" + Hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
}

std::string AmzDateNow() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return Hex(md, len);
}

}  // namespace strata::storage
