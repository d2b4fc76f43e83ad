// Copyright 2026 The Strata Authors.
//
// The agent's records of itself, read back after a restart (agent_state.h):
// state.json, the job it served, and rollback.done, the backup a rollback
// went to. A crash, a full disk or another process may leave them in any
// shape: each must load or be refused, never crash, and a state that loads
// re-encodes to one that loads the same.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/agent_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::agent;  // NOLINT(build/namespaces)
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto state = DecodeAgentState(text, "state.json");
  if (state.ok()) {
    const std::string encoded = EncodeAgentState(*state);
    auto again = DecodeAgentState(encoded, "state.json re-encoded");
    if (!again.ok() || EncodeAgentState(*again) != encoded) {
      std::fprintf(stderr, "state.json does not survive encode -> decode\n");
      std::abort();
    }
  }
  if (auto id = DecodeRollbackRecord(text, "rollback.done"); id.ok() && *id != text) {
    std::fprintf(stderr, "a rollback record that is not its own id\n");
    std::abort();
  }
  return 0;
}
