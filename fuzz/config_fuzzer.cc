// Copyright 2026 The Strata Authors.
//
// replicator.yaml, as a client (Orbax, MaxText, NeMo) writes it into the
// agent's directory: any text must parse or fail with INVALID_ARGUMENT,
// never throw (yaml-cpp throws on malformed YAML) or crash. ${VAR}
// references see a fixed environment, so a run is repeatable.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "agent/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto getenv = [](const std::string& name) -> std::optional<std::string> {
    if (name == "HOME") return "/home/trainer";
    if (name == "JOB") return "job-1";
    return std::nullopt;
  };
  auto config = strata::agent::ParseReplicatorConfig(text, getenv);
  if (!config.ok() && config.status().code() != strata::StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "replicator.yaml refused with %s, not INVALID_ARGUMENT\n",
                 config.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
