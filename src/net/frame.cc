// Copyright 2026 The Strata Authors.
#include "net/frame.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>

#include "util/hash.h"

namespace strata::net {
namespace {

// Payloads up to this size go out in one send() together with the header.
constexpr size_t kCoalesceLimit = 64 << 10;

void PutU16(char* p, uint16_t v) {
  p[0] = static_cast<char>(v);
  p[1] = static_cast<char>(v >> 8);
}

void PutU32(char* p, uint32_t v) {
  PutU16(p, static_cast<uint16_t>(v));
  PutU16(p + 2, static_cast<uint16_t>(v >> 16));
}

uint16_t GetU16(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint16_t>(u[0] | (u[1] << 8));
}

uint32_t GetU32(const char* p) { return GetU16(p) | (static_cast<uint32_t>(GetU16(p + 2)) << 16); }

uint32_t HeaderChecksum(const char* header) { return static_cast<uint32_t>(Xxh3(header, 12)); }

}  // namespace

Status ParseFrameHeader(const char* h, uint32_t max_payload, const std::string& peer, Frame* frame,
                        uint32_t* length) {
  if (GetU32(h) != kFrameMagic) {
    return InvalidArgumentError("garbage from " + peer + ": not a Strata frame (it starts " +
                                Quote(std::string_view(h, kFrameHeaderSize)) + ")");
  }
  if (GetU32(h + 12) != HeaderChecksum(h)) {
    return DataLossError("corrupt frame header from " + peer + ": checksum mismatch");
  }
  frame->type = GetU16(h + 4);
  frame->flags = GetU16(h + 6);
  *length = GetU32(h + 8);
  if (*length > max_payload) {
    return InvalidArgumentError(peer + " sent a " + FormatBytes(*length) + " message (frame type " +
                                std::to_string(frame->type) + "); the limit is " +
                                FormatBytes(max_payload));
  }
  return Status::Ok();
}

std::string EncodeFrame(uint16_t type, std::string_view payload, uint16_t flags) {
  const auto header = EncodeFrameHeader(type, flags, static_cast<uint32_t>(payload.size()));
  std::string out(header.data(), header.size());
  out.append(payload);
  return out;
}

std::string FormatBytes(uint64_t n) {
  if (n < 1024) return std::to_string(n) + (n == 1 ? " byte" : " bytes");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n) / 1024;
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.1f %s" : "%.0f %s", v, kUnits[unit]);
  return buf;
}

std::string Quote(std::string_view bytes, size_t max_bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes.substr(0, max_bytes)) {
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  out += '"';
  if (bytes.size() > max_bytes) out += "...";
  return out;
}

std::array<char, kFrameHeaderSize> EncodeFrameHeader(uint16_t type, uint16_t flags,
                                                     uint32_t length) {
  std::array<char, kFrameHeaderSize> h{};
  PutU32(h.data(), kFrameMagic);
  PutU16(h.data() + 4, type);
  PutU16(h.data() + 6, flags);
  PutU32(h.data() + 8, length);
  PutU32(h.data() + 12, HeaderChecksum(h.data()));
  return h;
}

Status SendFrame(Socket& socket, uint16_t type, std::string_view payload, Deadline deadline,
                 uint16_t flags) {
  if (payload.size() > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgumentError("frame to " + socket.peer() + ": a " + FormatBytes(payload.size()) +
                                " payload does not fit in a frame");
  }
  const auto header = EncodeFrameHeader(type, flags, static_cast<uint32_t>(payload.size()));
  if (payload.size() <= kCoalesceLimit) {
    std::string buf(header.data(), header.size());
    buf.append(payload);
    return socket.SendAll(buf.data(), buf.size(), deadline);
  }
  STRATA_RETURN_IF_ERROR(socket.SendAll(header.data(), header.size(), deadline));
  return socket.SendAll(payload.data(), payload.size(), deadline);
}

StatusOr<Frame> RecvFrame(Socket& socket, uint32_t max_payload, Deadline deadline) {
  char header[kFrameHeaderSize];
  STRATA_RETURN_IF_ERROR(socket.RecvAll(header, sizeof header, deadline));
  Frame frame;
  uint32_t length = 0;
  STRATA_RETURN_IF_ERROR(ParseFrameHeader(header, max_payload, socket.peer(), &frame, &length));
  while (frame.payload.size() < length) {
    const size_t have = frame.payload.size();
    const size_t grow = std::min<size_t>(length - have, std::max(kPayloadChunk, have));
    frame.payload.resize(have + grow);
    Status s = socket.RecvAll(frame.payload.data() + have, grow, deadline);
    if (!s.ok()) return s.WithContext("payload of a type " + std::to_string(frame.type) + " frame");
  }
  return frame;
}

}  // namespace strata::net
