// Copyright 2026 The Strata Authors.
//
// Framed messages between agents. Every message is a 16-byte header followed
// by `length` payload bytes. The header, all fields little-endian:
//
//   offset 0  u32 magic     0x46525453 ("STRF" on the wire)
//   offset 4  u16 type      FrameType below; 16 and up belong to the agent
//   offset 6  u16 flags     meaning defined per type; 0 unless stated
//   offset 8  u32 length    payload bytes that follow
//   offset 12 u32 checksum  low 32 bits of XXH3-64 over bytes 0..11
//
// The header checksum lets a receiver reject a corrupt length before trusting
// it. Payloads carry their own checksums where they need one. Bulk data is
// not framed: after a frame that announces N raw bytes, the two sides call
// Socket::SendFile / Socket::RecvToFile (or SendAll / RecvAll) for N bytes.
#ifndef STRATA_NET_FRAME_H_
#define STRATA_NET_FRAME_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/socket.h"
#include "strata/status.h"

namespace strata::net {

inline constexpr uint32_t kFrameMagic = 0x46525453;  // "STRF"
inline constexpr size_t kFrameHeaderSize = 16;

// Types 1..15 are reserved for the connection handshake (auth.h); the agent's
// own messages use kFirstAgentFrameType and up.
enum FrameType : uint16_t {
  kFrameHello = 1,       // client -> server: version, nonce, client id
  kFrameChallenge = 2,   // server -> client: nonce, server proof
  kFrameProof = 3,       // client -> server: client proof
  kFrameAuthOk = 4,      // server -> client: authenticated, empty payload
  kFrameError = 5,       // either way: a human-readable reason, then close
  kFrameLocalHello = 6,  // local client -> server: version, client id (auth.h)
  kFirstAgentFrameType = 16,
};

struct Frame {
  uint16_t type = 0;
  uint16_t flags = 0;
  std::string payload;
};

// The 16 header bytes for a payload of `length` bytes.
std::array<char, kFrameHeaderSize> EncodeFrameHeader(uint16_t type, uint16_t flags,
                                                     uint32_t length);

// Validates the 16 header bytes at `h` received from `peer`: on success
// `frame` has its type and flags and *length is the payload size (at most
// max_payload). The errors are RecvFrame's. For event loops, which read
// the header and the payload themselves.
Status ParseFrameHeader(const char* h, uint32_t max_payload, const std::string& peer, Frame* frame,
                        uint32_t* length);

// Header and payload as one buffer. REQUIRES: payload.size() < 4 GiB.
std::string EncodeFrame(uint16_t type, std::string_view payload, uint16_t flags = 0);

// Sends one frame. INVALID_ARGUMENT if the payload is 4 GiB or more.
Status SendFrame(Socket& socket, uint16_t type, std::string_view payload, Deadline deadline,
                 uint16_t flags = 0);

// A payload's memory grows with the bytes that arrive, from this much,
// doubling: never the whole declared length ahead of the bytes.
inline constexpr size_t kPayloadChunk = 64 << 10;

// Receives one frame whose payload is at most `max_payload` bytes (its
// memory grows as its bytes arrive, kPayloadChunk). Rejects,
// naming the peer, before reading or allocating any payload:
//   INVALID_ARGUMENT  bad magic ("garbage from <peer>") or a payload larger
//                     than max_payload;
//   DATA_LOSS         a header whose checksum does not match.
// Other errors are the Socket's (UNAVAILABLE, DEADLINE_EXCEEDED, ...). After
// any error the stream is out of sync: close the socket.
StatusOr<Frame> RecvFrame(Socket& socket, uint32_t max_payload, Deadline deadline);

// "64 MiB", "2.0 GiB", "17 bytes": sizes in messages.
std::string FormatBytes(uint64_t n);

// Bytes from a peer as a quoted, escaped string ("GET / HTTP/1.1\r\n"), at
// most `max_bytes` of them followed by "...": safe to put in a log line.
std::string Quote(std::string_view bytes, size_t max_bytes = 64);

}  // namespace strata::net

#endif  // STRATA_NET_FRAME_H_
