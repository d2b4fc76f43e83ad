// Copyright 2026 The Strata Authors.
//
// The agent's own state, read back after a restart from a disk that a crash,
// a full disk or another process may have left in any shape: a step's index
// and its seal, a parity shard's header, and the node's sync map (mapped by
// every trainer on the node). Each must load or be refused, never crash; an
// index that loads re-encodes to one that loads the same.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/store/parity_store.h"
#include "agent/store/step_seal.h"
#include "format/step_index.h"
#include "format/sync_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;  // NOLINT(build/namespaces)
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto index = DecodeStepIndex(text, "fuzz");
  if (index.ok()) {
    const std::string encoded = EncodeStepIndex(*index);
    auto again = DecodeStepIndex(encoded, "fuzz re-encoded");
    if (!again.ok() || EncodeStepIndex(*again) != encoded) {
      std::fprintf(stderr, "step index does not survive encode -> decode\n");
      std::abort();
    }
  }
  agent::DecodeSeal(text, 0xabcdef, "fuzz").status().IgnoreError();
  agent::DecodeParityHeader(text, "fuzz").status().IgnoreError();
  // The sync map is a file every process maps: written whole, then opened,
  // then removed (no input leaves a file behind).
  static const std::string path = "/dev/shm/strata-fuzz-sync-map-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) {
    const bool written = size == 0 || ::write(fd, data, size) == static_cast<ssize_t>(size);
    ::close(fd);
    if (written) SyncMap::Open(path).status().IgnoreError();
    ::unlink(path.c_str());
  }
  return 0;
}
