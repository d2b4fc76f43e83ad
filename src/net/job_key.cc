// Copyright 2026 The Strata Authors.
#include "net/job_key.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

namespace strata::net {
namespace {

// The salt: a label of this derivation, then the job's name.
constexpr std::string_view kSaltLabel = "strata job key v2|";
constexpr uint64_t kScryptMaxMem = 64ull << 20;  // twice what N, r, p take
constexpr size_t kNewSecretBytes = 32;
constexpr size_t kCacheEntries = 16;

// Bits of randomness `s` shows by the spread of its bytes: its length times
// the Shannon entropy of their distribution. A crude upper bound (it cannot
// see words or dates), but it refuses the weak secrets people make: one
// byte repeated, a short pattern, few distinct letters.
double EstimatedBits(std::string_view s) {
  std::array<size_t, 256> count{};
  for (unsigned char c : s) ++count[c];
  double per_byte = 0;
  for (size_t n : count) {
    if (n == 0) continue;
    const double p = static_cast<double>(n) / static_cast<double>(s.size());
    per_byte -= p * std::log2(p);
  }
  return per_byte * static_cast<double>(s.size());
}

std::string Base64(const unsigned char* p, size_t n) {
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  const int len =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), p, static_cast<int>(n));
  out.resize(static_cast<size_t>(len));
  return out;
}

}  // namespace

StatusOr<std::string> DeriveJobKey(std::string_view secret, std::string_view job) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, std::string> cache;  // guarded by mu
  std::pair<std::string, std::string> id{std::string(secret), std::string(job)};
  {
    std::lock_guard<std::mutex> l(mu);
    if (auto it = cache.find(id); it != cache.end()) return it->second;
  }
  const std::string salt = std::string(kSaltLabel) + std::string(job);
  std::string key(kJobKeyBytes, '\0');
  if (EVP_PBE_scrypt(secret.data(), secret.size(),
                     reinterpret_cast<const unsigned char*>(salt.data()), salt.size(), kScryptN,
                     kScryptR, kScryptP, kScryptMaxMem,
                     reinterpret_cast<unsigned char*>(key.data()), key.size()) != 1) {
    return InternalError("deriving the job's key (scrypt) failed");
  }
  std::lock_guard<std::mutex> l(mu);
  if (cache.size() >= kCacheEntries) cache.clear();
  cache.emplace(std::move(id), key);
  return key;
}

Status CheckSecret(std::string_view secret, const std::string& origin) {
  constexpr const char* kHow = "; make one with `strata secret new` (32 random bytes)";
  if (secret.size() < kMinSecretBytes) {
    return InvalidArgumentError(origin + ": the secret is " + std::to_string(secret.size()) +
                                " bytes; at least " + std::to_string(kMinSecretBytes) +
                                " are required" + kHow);
  }
  const double bits = EstimatedBits(secret);
  if (bits < kMinSecretBits) {
    return InvalidArgumentError(origin + ": the secret is too weak to key the job (about " +
                                std::to_string(static_cast<int>(bits)) +
                                " bits of randomness by the spread of its bytes; at least " +
                                std::to_string(static_cast<int>(kMinSecretBits)) +
                                " are required)" + kHow);
  }
  return Status::Ok();
}

StatusOr<std::string> NewSecret() {
  std::array<unsigned char, kNewSecretBytes> bytes;
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return InternalError("the OpenSSL random generator failed");
  }
  return Base64(bytes.data(), bytes.size());
}

}  // namespace strata::net
