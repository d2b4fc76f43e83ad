// Copyright 2026 The Strata Authors.
//
// Mutual authentication of agent connections: each side proves it knows the
// job's shared secret with HMAC-SHA256 over fresh nonces. The secret never
// crosses the wire, and a client checks the server's proof before sending its
// own, so it never answers an impostor. Run it first on every new connection.
//
//   client -> HELLO      u32 version | 32-byte client nonce | client id
//   server -> CHALLENGE  32-byte server nonce |
//                        HMAC(secret, "strata-server" | client nonce | server nonce)
//   client -> PROOF      HMAC(secret, "strata-client" | server nonce | client nonce)
//   server -> OK         empty
// Either side sends an ERROR frame with a reason instead of the next message
// when it rejects the other, and the caller then closes the connection.
// All integers are little-endian; the client id is 1..256 printable ASCII
// bytes (e.g. "node 3"), used only to name the peer in logs.
//
// A caller on the node itself connects to the agent's Unix-domain socket
// instead (Socket::ListenLocal) and proves who it is by its uid, which the
// kernel records (LocalPeer, SO_PEERCRED); no secret is involved:
//
//   client -> LOCAL_HELLO  u32 version | client id
//   server -> OK           empty (or ERROR with the reason)
//
// The server decides from the peer's credentials whether to serve it before
// it reads a byte.
//
// On its own this authenticates the connection's start only; run it inside
// TLS (SecureAsClient/SecureAsServer, net/tls.h) and every later byte is
// encrypted and authenticated too.
//
// The version is that of the whole agent protocol: this handshake, the frames
// and every call's messages (wire/op.h). A server refuses a HELLO of another
// version with an ERROR frame that says both versions, and both sides report
// FAILED_PRECONDITION: agents of different Strata releases do not talk.
//
// Errors: PERMISSION_DENIED when either side fails the check (wrong secret or
// impostor), naming the peer; INVALID_ARGUMENT for a malformed handshake;
// FAILED_PRECONDITION for a protocol version mismatch; the Socket's codes
// (UNAVAILABLE, DEADLINE_EXCEEDED) otherwise. Pass a short deadline so a
// silent peer cannot hold the thread.
#ifndef STRATA_NET_AUTH_H_
#define STRATA_NET_AUTH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/frame.h"
#include "net/socket.h"
#include "net/tls.h"
#include "strata/status.h"

namespace strata::net {

// Bumped whenever the handshake, the frames or a call changes incompatibly.
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kMaxClientIdSize = 256;

// The handshake without I/O, for event loops: each step takes the frame
// received and returns the payload of the frame to send next. On an error,
// *refusal is the reason to send in an ERROR frame before closing (empty:
// close without one). One object per connection.
class ServerHandshake {
 public:
  ServerHandshake(std::string_view secret, std::string peer);
  // HELLO in, CHALLENGE out.
  StatusOr<std::string> OnHello(const Frame& frame, std::string* refusal);
  // PROOF in; the client's id once it proved it knows the secret (then send
  // an empty OK frame).
  StatusOr<std::string> OnProof(const Frame& frame, std::string* refusal);

 private:
  std::string secret_, who_, client_id_, client_nonce_, server_nonce_;
};

class ClientHandshake {
 public:
  ClientHandshake(std::string_view secret, std::string_view client_id, std::string peer);
  StatusOr<std::string> Hello();  // the HELLO payload
  // CHALLENGE in, PROOF out: only once the server proved it knows the secret.
  StatusOr<std::string> OnChallenge(const Frame& frame, std::string* refusal);
  // The server's last frame: OK once it accepted our proof.
  Status OnOk(const Frame& frame) const;

 private:
  std::string secret_, client_id_, who_, client_nonce_;
};

// The most a handshake frame may carry.
inline constexpr uint32_t kMaxAuthPayload = 1024;

// REQUIRES: a freshly connected socket. OK once the server has proved it
// knows `secret` and accepted our proof.
Status AuthenticateAsClient(Socket& socket, std::string_view secret, std::string_view client_id,
                            Deadline deadline);

// REQUIRES: a freshly accepted socket. Returns the client's id once it has
// proved it knows `secret`.
StatusOr<std::string> AuthenticateAsServer(Socket& socket, std::string_view secret,
                                           Deadline deadline);

// The LOCAL_HELLO payload of `client_id`.
StatusOr<std::string> LocalHello(std::string_view client_id);
// The server's side of LOCAL_HELLO from `who` (its credentials, described):
// the client's id, or the reason to refuse (*refusal: what to send in an
// ERROR frame).
StatusOr<std::string> OnLocalHello(const Frame& frame, const std::string& who,
                                   std::string* refusal);
// REQUIRES: a freshly connected Unix-domain socket. OK once the agent has
// accepted this process's credentials.
Status AuthenticateLocally(Socket& socket, std::string_view client_id, Deadline deadline);

// The whole start of an agent connection: TLS as `trust` says (none when it
// is plaintext), then the handshake above inside it, both within `deadline`.
// `server_name` is the host the client dialled.
Status SecureAsClient(Socket& socket, const Trust& trust, std::string_view client_id,
                      const std::string& server_name, Deadline deadline);
StatusOr<std::string> SecureAsServer(Socket& socket, const Trust& trust, Deadline deadline);

}  // namespace strata::net

#endif  // STRATA_NET_AUTH_H_
