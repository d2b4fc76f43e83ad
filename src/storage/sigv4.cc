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

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of the escape "%XX" at s[i], or -1 if there is none there.
int EscapedByte(std::string_view s, size_t i) {
  if (s[i] != '%' || i + 2 >= s.size()) return -1;
  const int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Length of the UTF-8 sequence starting at s[i], or 0 if it is not valid.
size_t Utf8Length(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

void AppendEscaped(std::string* out, unsigned char b) {
  *out += '%';
  *out += kHex[b >> 4];
  *out += kHex[b & 15];
}

// werkzeug's uri_to_iri for one URL part: decodes every %XX except those of
// controls, space, '%', DEL and `keep`; bytes that do not form valid UTF-8
// stay escaped.
std::string DecodeAsIri(std::string_view encoded, std::string_view keep) {
  auto kept = [&](unsigned char b) {
    return b <= 0x20 || b == '%' || b == 0x7F || keep.find(static_cast<char>(b)) != keep.npos;
  };
  std::string out;
  std::string run;  // decoded bytes of the current run of escapes
  auto flush = [&] {
    for (size_t i = 0; i < run.size();) {
      size_t n = Utf8Length(run, i);
      if (n == 0) {
        AppendEscaped(&out, static_cast<unsigned char>(run[i++]));
      } else {
        out.append(run, i, n);
        i += n;
      }
    }
    run.clear();
  };
  for (size_t i = 0; i < encoded.size(); ++i) {
    const int b = EscapedByte(encoded, i);
    if (b >= 0 && !kept(static_cast<unsigned char>(b))) {
      run += static_cast<char>(b);
      i += 2;
      continue;
    }
    flush();
    out += encoded[i];
  }
  flush();
  return out;
}

// The bytes a percent-encoded string stands for.
std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const int b = EscapedByte(s, i);
    if (b >= 0) {
      out += static_cast<char>(b);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Python's urllib.parse.quote(s, safe): escapes all but A-Z a-z 0-9 _ . - ~
// and `safe` (werkzeug passes '%' as safe: a literal '%' stays as it is).
std::string PythonQuote(std::string_view s, std::string_view safe) {
  std::string out;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '_' || c == '.' || c == '-' || c == '~' ||
        safe.find(c) != safe.npos) {
      out += c;
    } else {
      AppendEscaped(&out, u);
    }
  }
  return out;
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

const char* SigV4DialectName(SigV4Dialect d) {
  return d == SigV4Dialect::kAws ? "AWS's" : "the decoded URL's (as moto does)";
}

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

std::string CanonicalUri(std::string_view encoded_path, SigV4Dialect d) {
  if (d == SigV4Dialect::kAws) return std::string(encoded_path);
  // werkzeug's request.url: the decoded path quoted again (get_current_url),
  // then turned into an IRI (uri_to_iri); moto takes urlparse(url).path,
  // which leaves out ";params" of the last segment.
  std::string iri = DecodeAsIri(PythonQuote(PercentDecode(encoded_path), "!$&'()*+,/:;=@%"), "/?#");
  size_t params = iri.find(';', iri.rfind('/') + 1);
  if (params != std::string::npos) iri.resize(params);
  return iri;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query,
                           SigV4Dialect d) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) {
    std::string ek = UriEncode(k, false), ev = UriEncode(v, false);
    if (d == SigV4Dialect::kDecodedUrl) {
      ek = DecodeAsIri(ek, "&=+#");
      ev = DecodeAsIri(ev, "&=+#");
    }
    enc.emplace_back(std::move(ek), std::move(ev));
  }
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

Verdict SignatureVerdict(long http_status) {
  if (http_status >= 500 || http_status == 429) return Verdict::kUnknown;
  if (http_status == 400 || http_status == 401 || http_status == 403) return Verdict::kRefused;
  return Verdict::kAccepted;
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
