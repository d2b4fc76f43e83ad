// Copyright 2026 The Strata Authors.
//
// The agent's /metrics endpoint, plain HTTP that anyone who can reach its
// port may call without authenticating: what it reads of a request head
// (the first line's method and path). Any bytes must give an answer, never
// a crash or a read past the head; the path it routes on lies within the
// head's first line.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "agent/metrics/metrics_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view head(reinterpret_cast<const char*>(data), size);
  const strata::agent::HttpRequestLine line = strata::agent::ParseRequestLine(head);
  const std::string_view first = head.substr(0, head.find("\r\n"));
  const auto within = [&](std::string_view part) {
    return part.empty() || (part.data() >= first.data() &&
                            part.data() + part.size() <= first.data() + first.size());
  };
  const int status = strata::agent::AnswerStatus(line);
  if (!within(line.method) || !within(line.path) ||
      (status != 200 && status != 404 && status != 405) ||
      line.path.find('?') != std::string_view::npos) {
    std::fprintf(stderr, "a request line read outside its bounds, or answered %d\n", status);
    std::abort();
  }
  return 0;
}
