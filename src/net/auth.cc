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

constexpr std::string_view kServerLabel = "strata-server";
constexpr std::string_view kClientLabel = "strata-client";
constexpr std::string_view kAuthFailed = "authentication failed";
// How a version refusal begins (the client recognizes it by this).
constexpr std::string_view kVersionMismatch = "protocol version mismatch";

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

void AppendU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t ReadU32(std::string_view p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

Nonce ToNonce(std::string_view bytes) {
  Nonce n;
  std::memcpy(n.data(), bytes.data(), n.size());
  return n;
}

std::string EncodeHello(const Nonce& nonce, std::string_view client_id) {
  std::string hello;
  AppendU32(&hello, kProtocolVersion);
  hello.append(AsView(nonce.data(), nonce.size()));
  hello.append(client_id);
  return hello;
}

// The frame a handshake step received must be of type `want`; an ERROR frame
// from `who` ("server 10.0.0.2:7000") is PERMISSION_DENIED.
Status CheckType(const Frame& frame, uint16_t want, const char* want_name, const std::string& who) {
  if (frame.type == kFrameError && frame.payload.starts_with(kVersionMismatch)) {
    return FailedPreconditionError(who + " refused the connection: " + Quote(frame.payload, 256));
  }
  if (frame.type == kFrameError) {
    return PermissionDeniedError(who + " rejected the handshake: " + Quote(frame.payload));
  }
  if (frame.type != want) {
    return InvalidArgumentError("handshake with " + who + ": expected " + want_name +
                                ", got a frame of type " + std::to_string(frame.type));
  }
  return Status::Ok();
}

// Sends what a handshake step produced: its reply frame, or the ERROR
// frame it asked for (best effort) before failing.
Status SendStep(Socket& socket, uint16_t type, const StatusOr<std::string>& step,
                const std::string& refusal, Deadline deadline) {
  if (!step.ok()) {
    if (!refusal.empty()) SendFrame(socket, kFrameError, refusal, deadline).IgnoreError();
    return step.status();
  }
  return SendFrame(socket, type, *step, deadline);
}

}  // namespace

ServerHandshake::ServerHandshake(std::string_view secret, std::string peer)
    : secret_(secret), who_("client " + std::move(peer)) {}

StatusOr<std::string> ServerHandshake::OnHello(const Frame& frame, std::string* refusal) {
  refusal->clear();
  STRATA_RETURN_IF_ERROR(CheckSecret(secret_));
  STRATA_RETURN_IF_ERROR(CheckType(frame, kFrameHello, "HELLO", who_));
  std::string_view p = frame.payload;
  if (p.size() >= 4 && ReadU32(p) != kProtocolVersion) {
    *refusal = std::string(kVersionMismatch) + ": the caller speaks version " +
               std::to_string(ReadU32(p)) + ", this agent version " +
               std::to_string(kProtocolVersion) + "; run the same Strata release on every node";
    return FailedPreconditionError(who_ + ": " + *refusal);
  }
  std::string problem = p.size() < kHelloFixedSize ? "it has " + std::to_string(p.size()) + " bytes"
                                                   : ClientIdProblem(p.substr(kHelloFixedSize));
  if (!problem.empty()) {
    *refusal = "malformed HELLO";
    return InvalidArgumentError("malformed HELLO from " + who_ + ": " + problem);
  }
  const Nonce client_nonce = ToNonce(p.substr(4));
  client_nonce_.assign(AsView(client_nonce.data(), client_nonce.size()));
  client_id_.assign(p.substr(kHelloFixedSize));
  who_ += " (" + Quote(client_id_) + ")";
  STRATA_ASSIGN_OR_RETURN(Nonce server_nonce, NewNonce());
  server_nonce_.assign(AsView(server_nonce.data(), server_nonce.size()));
  STRATA_ASSIGN_OR_RETURN(Mac server_proof,
                          ComputeMac(secret_, kServerLabel, client_nonce, server_nonce));
  std::string challenge = server_nonce_;
  challenge.append(AsView(server_proof.data(), server_proof.size()));
  return challenge;
}

StatusOr<std::string> ServerHandshake::OnProof(const Frame& frame, std::string* refusal) {
  refusal->clear();
  if (server_nonce_.empty()) return FailedPreconditionError(who_ + ": PROOF before HELLO");
  STRATA_RETURN_IF_ERROR(CheckType(frame, kFrameProof, "PROOF", who_));
  STRATA_ASSIGN_OR_RETURN(Mac expected, ComputeMac(secret_, kClientLabel, ToNonce(server_nonce_),
                                                   ToNonce(client_nonce_)));
  if (!MacMatches(expected, frame.payload)) {
    *refusal = std::string(kAuthFailed);
    return PermissionDeniedError(who_ + " could not prove it knows the job secret");
  }
  return client_id_;
}

ClientHandshake::ClientHandshake(std::string_view secret, std::string_view client_id,
                                 std::string peer)
    : secret_(secret), client_id_(client_id), who_("server " + std::move(peer)) {}

StatusOr<std::string> ClientHandshake::Hello() {
  STRATA_RETURN_IF_ERROR(CheckSecret(secret_));
  if (std::string problem = ClientIdProblem(client_id_); !problem.empty()) {
    return InvalidArgumentError("authentication: " + problem);
  }
  STRATA_ASSIGN_OR_RETURN(Nonce nonce, NewNonce());
  client_nonce_.assign(AsView(nonce.data(), nonce.size()));
  return EncodeHello(nonce, client_id_);
}

StatusOr<std::string> ClientHandshake::OnChallenge(const Frame& frame, std::string* refusal) {
  refusal->clear();
  if (client_nonce_.empty()) return FailedPreconditionError(who_ + ": CHALLENGE before HELLO");
  STRATA_RETURN_IF_ERROR(CheckType(frame, kFrameChallenge, "CHALLENGE", who_));
  if (frame.payload.size() != kNonceSize + kMacSize) {
    return InvalidArgumentError("malformed CHALLENGE from " + who_ + ": " +
                                std::to_string(frame.payload.size()) + " bytes");
  }
  const Nonce client_nonce = ToNonce(client_nonce_);
  const Nonce server_nonce = ToNonce(frame.payload);
  STRATA_ASSIGN_OR_RETURN(Mac expected,
                          ComputeMac(secret_, kServerLabel, client_nonce, server_nonce));
  if (!MacMatches(expected, std::string_view(frame.payload).substr(kNonceSize))) {
    *refusal = std::string(kAuthFailed);
    return PermissionDeniedError(who_ +
                                 " could not prove it knows the job secret (the secrets "
                                 "differ, or it is an impostor)");
  }
  STRATA_ASSIGN_OR_RETURN(Mac proof, ComputeMac(secret_, kClientLabel, server_nonce, client_nonce));
  return std::string(AsView(proof.data(), proof.size()));
}

Status ClientHandshake::OnOk(const Frame& frame) const {
  return CheckType(frame, kFrameAuthOk, "OK", who_);
}

Status AuthenticateAsClient(Socket& socket, std::string_view secret, std::string_view client_id,
                            Deadline deadline) {
  ClientHandshake h(secret, client_id, socket.peer());
  STRATA_ASSIGN_OR_RETURN(std::string hello, h.Hello());
  STRATA_RETURN_IF_ERROR(SendFrame(socket, kFrameHello, hello, deadline));
  STRATA_ASSIGN_OR_RETURN(Frame challenge, RecvFrame(socket, kMaxAuthPayload, deadline));
  std::string refusal;
  auto proof = h.OnChallenge(challenge, &refusal);
  STRATA_RETURN_IF_ERROR(SendStep(socket, kFrameProof, proof, refusal, deadline));
  STRATA_ASSIGN_OR_RETURN(Frame ok, RecvFrame(socket, kMaxAuthPayload, deadline));
  return h.OnOk(ok);
}

StatusOr<std::string> AuthenticateAsServer(Socket& socket, std::string_view secret,
                                           Deadline deadline) {
  ServerHandshake h(secret, socket.peer());
  std::string refusal;
  STRATA_ASSIGN_OR_RETURN(Frame hello, RecvFrame(socket, kMaxAuthPayload, deadline));
  auto challenge = h.OnHello(hello, &refusal);
  STRATA_RETURN_IF_ERROR(SendStep(socket, kFrameChallenge, challenge, refusal, deadline));
  STRATA_ASSIGN_OR_RETURN(Frame proof, RecvFrame(socket, kMaxAuthPayload, deadline));
  auto id = h.OnProof(proof, &refusal);
  STRATA_RETURN_IF_ERROR(
      SendStep(socket, kFrameAuthOk, id.ok() ? StatusOr<std::string>("") : id, refusal, deadline));
  return id;
}

StatusOr<std::string> LocalHello(std::string_view client_id) {
  if (std::string problem = ClientIdProblem(client_id); !problem.empty()) {
    return InvalidArgumentError("authentication: " + problem);
  }
  std::string hello;
  AppendU32(&hello, kProtocolVersion);
  hello.append(client_id);
  return hello;
}

StatusOr<std::string> OnLocalHello(const Frame& frame, const std::string& who,
                                   std::string* refusal) {
  refusal->clear();
  STRATA_RETURN_IF_ERROR(CheckType(frame, kFrameLocalHello, "LOCAL_HELLO", who));
  std::string_view p = frame.payload;
  if (p.size() >= 4 && ReadU32(p) != kProtocolVersion) {
    *refusal = std::string(kVersionMismatch) + ": the caller speaks version " +
               std::to_string(ReadU32(p)) + ", this agent version " +
               std::to_string(kProtocolVersion) + "; use the strata of the agent's release";
    return FailedPreconditionError(who + ": " + *refusal);
  }
  std::string problem =
      p.size() < 4 ? "it has " + std::to_string(p.size()) + " bytes" : ClientIdProblem(p.substr(4));
  if (!problem.empty()) {
    *refusal = "malformed LOCAL_HELLO";
    return InvalidArgumentError("malformed LOCAL_HELLO from " + who + ": " + problem);
  }
  return std::string(p.substr(4));
}

Status AuthenticateLocally(Socket& socket, std::string_view client_id, Deadline deadline) {
  STRATA_ASSIGN_OR_RETURN(std::string hello, LocalHello(client_id));
  STRATA_RETURN_IF_ERROR(SendFrame(socket, kFrameLocalHello, hello, deadline));
  STRATA_ASSIGN_OR_RETURN(Frame ok, RecvFrame(socket, kMaxAuthPayload, deadline));
  return CheckType(ok, kFrameAuthOk, "OK", "the agent at " + socket.peer());
}

}  // namespace strata::net

namespace strata::net {

Status SecureAsClient(Socket& socket, const Trust& trust, std::string_view client_id,
                      const std::string& server_name, Deadline deadline) {
  if (trust.encrypted()) {
    STRATA_RETURN_IF_ERROR(
        socket.StartTls(trust.tls, TlsStream::Role::kClient, server_name, deadline));
  }
  Status s = AuthenticateAsClient(socket, trust.secret, client_id, deadline);
  if (!trust.encrypted() &&
      (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kInvalidArgument)) {
    return s.WithContext("authenticating in plaintext (TLS is off here: does " + socket.peer() +
                         " require TLS?)");
  }
  return s;
}

StatusOr<std::string> SecureAsServer(Socket& socket, const Trust& trust, Deadline deadline) {
  if (trust.encrypted()) {
    STRATA_RETURN_IF_ERROR(socket.StartTls(trust.tls, TlsStream::Role::kServer, "", deadline));
  }
  return AuthenticateAsServer(socket, trust.secret, deadline);
}

}  // namespace strata::net
