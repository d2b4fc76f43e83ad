// Copyright 2026 The Strata Authors.
#include "net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <climits>
#include <cstring>

#include "net/frame.h"

namespace strata::net {
namespace {

constexpr size_t kNonceSize = 32;
constexpr size_t kMacSize = 32;  // SHA-256
constexpr size_t kHelloFixedSize = 4 + kNonceSize;
// Bounds every handshake frame, including ERROR reasons.
constexpr uint32_t kMaxAuthPayload = 1024;
constexpr std::string_view kServerLabel = "strata-server";
constexpr std::string_view kClientLabel = "strata-client";
constexpr std::string_view kAuthFailed = "authentication failed";

using Nonce = std::array<unsigned char, kNonceSize>;
using Mac = std::array<unsigned char, kMacSize>;

std::string_view AsView(const unsigned char* p, size_t n) {
  return std::string_view(reinterpret_cast<const char*>(p), n);
}

StatusOr<Nonce> NewNonce() {
  Nonce nonce;
  if (RAND_bytes(nonce.data(), nonce.size()) != 1) {
    return InternalError("authentication: the OpenSSL random generator failed");
  }
  return nonce;
}

// HMAC-SHA256(secret, label | first | second).
StatusOr<Mac> ComputeMac(std::string_view secret, std::string_view label, const Nonce& first,
                         const Nonce& second) {
  std::string message(label);
  message.append(AsView(first.data(), first.size()));
  message.append(AsView(second.data(), second.size()));
  Mac mac;
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(),
           &len) == nullptr ||
      len != mac.size()) {
    return InternalError("authentication: HMAC-SHA256 failed");
  }
  return mac;
}

// Constant-time comparison, so timing does not reveal a correct prefix.
bool MacMatches(const Mac& expected, std::string_view received) {
  return received.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

Status CheckSecret(std::string_view secret) {
  if (secret.empty()) return InvalidArgumentError("authentication: the job secret is empty");
  if (secret.size() > INT_MAX)
    return InvalidArgumentError("authentication: the secret is too long");
  return Status::Ok();
}

// Empty if valid, else what is wrong with it.
std::string ClientIdProblem(std::string_view id) {
  if (id.empty()) return "the client id is empty";
  if (id.size() > kMaxClientIdSize) {
    return "the client id has " + std::to_string(id.size()) + " bytes; the limit is " +
           std::to_string(kMaxClientIdSize);
  }
  for (unsigned char c : id) {
    if (c < 0x20 || c >= 0x7f) return "the client id " + Quote(id) + " is not printable ASCII";
  }
  return "";
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(std::string_view p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

Nonce ToNonce(std::string_view bytes) {
  Nonce n;
  std::memcpy(n.data(), bytes.data(), n.size());
  return n;
}

// Receives the next handshake frame, which must be of type `want`. An ERROR
// frame from `who` ("server 10.0.0.2:7000") is PERMISSION_DENIED.
StatusOr<Frame> Expect(Socket& socket, uint16_t want, const char* want_name, const std::string& who,
                       Deadline deadline) {
  STRATA_ASSIGN_OR_RETURN(Frame frame, RecvFrame(socket, kMaxAuthPayload, deadline));
  if (frame.type == kFrameError) {
    return PermissionDeniedError(who + " rejected the handshake: " + Quote(frame.payload));
  }
  if (frame.type != want) {
    return InvalidArgumentError("handshake with " + who + ": expected " + want_name +
                                ", got a frame of type " + std::to_string(frame.type));
  }
  return frame;
}

// Tells the peer why (best effort) and returns `status`.
Status Refuse(Socket& socket, std::string_view reason, Status status, Deadline deadline) {
  SendFrame(socket, kFrameError, reason, deadline).IgnoreError();
  return status;
}

struct Hello {
  Nonce nonce;
  std::string client_id;
};

std::string EncodeHello(const Nonce& nonce, std::string_view client_id) {
  std::string hello;
  PutU32(&hello, kAuthProtocolVersion);
  hello.append(AsView(nonce.data(), nonce.size()));
  hello.append(client_id);
  return hello;
}

// Parses a HELLO payload; on failure the error frame has been sent.
StatusOr<Hello> ParseHello(Socket& socket, std::string_view p, const std::string& who,
                           Deadline deadline) {
  if (p.size() >= 4 && GetU32(p) != kAuthProtocolVersion) {
    std::string reason = "unsupported protocol version " + std::to_string(GetU32(p)) +
                         "; this agent speaks " + std::to_string(kAuthProtocolVersion);
    return Refuse(socket, reason, FailedPreconditionError(who + ": " + reason), deadline);
  }
  std::string problem = p.size() < kHelloFixedSize ? "it has " + std::to_string(p.size()) + " bytes"
                                                   : ClientIdProblem(p.substr(kHelloFixedSize));
  if (!problem.empty()) {
    return Refuse(socket, "malformed HELLO",
                  InvalidArgumentError("malformed HELLO from " + who + ": " + problem), deadline);
  }
  return Hello{ToNonce(p.substr(4)), std::string(p.substr(kHelloFixedSize))};
}

}  // namespace

Status AuthenticateAsClient(Socket& socket, std::string_view secret, std::string_view client_id,
                            Deadline deadline) {
  STRATA_RETURN_IF_ERROR(CheckSecret(secret));
  if (std::string problem = ClientIdProblem(client_id); !problem.empty()) {
    return InvalidArgumentError("authentication: " + problem);
  }
  const std::string who = "server " + socket.peer();
  STRATA_ASSIGN_OR_RETURN(Nonce client_nonce, NewNonce());
  STRATA_RETURN_IF_ERROR(
      SendFrame(socket, kFrameHello, EncodeHello(client_nonce, client_id), deadline));

  STRATA_ASSIGN_OR_RETURN(Frame challenge,
                          Expect(socket, kFrameChallenge, "CHALLENGE", who, deadline));
  if (challenge.payload.size() != kNonceSize + kMacSize) {
    return InvalidArgumentError("malformed CHALLENGE from " + who + ": " +
                                std::to_string(challenge.payload.size()) + " bytes");
  }
  const Nonce server_nonce = ToNonce(challenge.payload);
  STRATA_ASSIGN_OR_RETURN(Mac expected,
                          ComputeMac(secret, kServerLabel, client_nonce, server_nonce));
  if (!MacMatches(expected, std::string_view(challenge.payload).substr(kNonceSize))) {
    return Refuse(
        socket, kAuthFailed,
        PermissionDeniedError(who + " could not prove it knows the job secret (the secrets "
                                    "differ, or it is an impostor)"),
        deadline);
  }
  STRATA_ASSIGN_OR_RETURN(Mac proof, ComputeMac(secret, kClientLabel, server_nonce, client_nonce));
  STRATA_RETURN_IF_ERROR(
      SendFrame(socket, kFrameProof, AsView(proof.data(), proof.size()), deadline));
  return Expect(socket, kFrameAuthOk, "OK", who, deadline).status();
}

StatusOr<std::string> AuthenticateAsServer(Socket& socket, std::string_view secret,
                                           Deadline deadline) {
  STRATA_RETURN_IF_ERROR(CheckSecret(secret));
  std::string who = "client " + socket.peer();
  STRATA_ASSIGN_OR_RETURN(Frame hello_frame, Expect(socket, kFrameHello, "HELLO", who, deadline));
  STRATA_ASSIGN_OR_RETURN(Hello hello, ParseHello(socket, hello_frame.payload, who, deadline));
  who += " (" + Quote(hello.client_id) + ")";

  STRATA_ASSIGN_OR_RETURN(Nonce server_nonce, NewNonce());
  STRATA_ASSIGN_OR_RETURN(Mac server_proof,
                          ComputeMac(secret, kServerLabel, hello.nonce, server_nonce));
  std::string challenge(AsView(server_nonce.data(), server_nonce.size()));
  challenge.append(AsView(server_proof.data(), server_proof.size()));
  STRATA_RETURN_IF_ERROR(SendFrame(socket, kFrameChallenge, challenge, deadline));

  STRATA_ASSIGN_OR_RETURN(Frame proof, Expect(socket, kFrameProof, "PROOF", who, deadline));
  STRATA_ASSIGN_OR_RETURN(Mac expected,
                          ComputeMac(secret, kClientLabel, server_nonce, hello.nonce));
  if (!MacMatches(expected, proof.payload)) {
    return Refuse(socket, kAuthFailed,
                  PermissionDeniedError(who + " could not prove it knows the job secret"),
                  deadline);
  }
  STRATA_RETURN_IF_ERROR(SendFrame(socket, kFrameAuthOk, "", deadline));
  return hello.client_id;
}

}  // namespace strata::net
