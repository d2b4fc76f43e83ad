// Copyright 2026 The Strata Authors.
#include "net/endpoint.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace strata::net {
namespace {

constexpr size_t kMaxQuotedBytes = 64;
constexpr size_t kMaxHostNameBytes = 253;

// `text` in double quotes, at most kMaxQuotedBytes of it, with every byte
// outside printable ASCII replaced by '?'.
std::string QuoteAddress(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < kMaxQuotedBytes; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (text.size() > kMaxQuotedBytes) out += "...";
  return out + "\"";
}

bool IsHostNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

bool IsIpv6Char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
}

// Splits "host:port" or "[v6]:port" into the host (brackets removed) and
// the port text; the error says what is wrong.
Status SplitHostPort(std::string_view rest, std::string_view* host, std::string_view* port) {
  if (rest.starts_with('[')) {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return InvalidArgumentError("missing ']'");
    *host = rest.substr(1, close - 1);
    if (host->find(':') == std::string_view::npos ||
        !std::all_of(host->begin(), host->end(), IsIpv6Char)) {
      return InvalidArgumentError("bad IPv6 address");
    }
    if (close + 1 >= rest.size() || rest[close + 1] != ':') {
      return InvalidArgumentError("missing :port");
    }
    *port = rest.substr(close + 2);
    return Status::Ok();
  }
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return InvalidArgumentError("missing :port");
  *host = rest.substr(0, colon);
  *port = rest.substr(colon + 1);
  if (host->find(':') != std::string_view::npos) {
    return InvalidArgumentError("an IPv6 address must be written in brackets");
  }
  if (host->empty()) return InvalidArgumentError("missing host");
  if (host->size() > kMaxHostNameBytes ||
      !std::all_of(host->begin(), host->end(), IsHostNameChar)) {
    return InvalidArgumentError("bad host name");
  }
  return Status::Ok();
}

// The port: decimal digits only, 1..65535.
StatusOr<uint16_t> ParsePort(std::string_view text) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  bool digits_only = !text.empty() && std::all_of(text.begin(), text.end(),
                                                  [](char c) { return c >= '0' && c <= '9'; });
  if (!digits_only || ec != std::errc() || end != text.data() + text.size() || value == 0 ||
      value > 65535) {
    return InvalidArgumentError("the port must be a number in 1..65535");
  }
  return static_cast<uint16_t>(value);
}

StatusOr<Endpoint> Parse(std::string_view text) {
  if (text.starts_with("tcp://")) text.remove_prefix(6);
  if (text.find("://") != std::string_view::npos) {
    return InvalidArgumentError("only tcp:// is supported");
  }
  std::string_view host, port;
  STRATA_RETURN_IF_ERROR(SplitHostPort(text, &host, &port));
  STRATA_ASSIGN_OR_RETURN(uint16_t number, ParsePort(port));
  return Endpoint{std::string(host), number};
}

}  // namespace

std::string Endpoint::ToString() const {
  std::string p = std::to_string(port);
  return host.find(':') == std::string::npos ? host + ":" + p : "[" + host + "]:" + p;
}

StatusOr<Endpoint> ParseEndpoint(std::string_view text) {
  StatusOr<Endpoint> out = Parse(text);
  if (!out.ok()) {
    return InvalidArgumentError(QuoteAddress(text) +
                                " is not host:port: " + out.status().message());
  }
  return out;
}

}  // namespace strata::net
