// Copyright 2026 The Strata Authors.
//
// The bytes an agent's listener reads before anything is authenticated: a
// 16-byte frame header, then a payload, fed to both sides of the mutual
// handshake (HELLO and PROOF on the server, CHALLENGE on the client). Any
// input must be refused cleanly; none may crash or be accepted as proof.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "net/auth.h"
#include "net/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::net;  // NOLINT(build/namespaces)
  if (size < kFrameHeaderSize) return 0;
  Frame frame;
  uint32_t length = 0;
  const char* bytes = reinterpret_cast<const char*>(data);
  if (!ParseFrameHeader(bytes, kMaxAuthPayload, "fuzz", &frame, &length).ok()) return 0;
  frame.payload.assign(bytes + kFrameHeaderSize, size - kFrameHeaderSize);
  std::string refusal;
  ServerHandshake server("fuzz secret", "fuzz peer");
  if (server.OnHello(frame, &refusal).ok()) {
    // The fuzzer cannot know the secret: a proof that passes is a hole.
    if (server.OnProof(frame, &refusal).ok()) {
      std::fprintf(stderr, "the server accepted a proof made without the secret\n");
      std::abort();
    }
  }
  ServerHandshake early("fuzz secret", "fuzz peer");
  early.OnProof(frame, &refusal).status().IgnoreError();
  ClientHandshake client("fuzz secret", "fuzz client", "fuzz peer");
  client.Hello().status().IgnoreError();
  if (client.OnChallenge(frame, &refusal).ok()) {
    std::fprintf(stderr, "the client accepted a challenge made without the secret\n");
    std::abort();
  }
  client.OnOk(frame).IgnoreError();
  return 0;
}
