// Copyright 2026 The Strata Authors.
//
// Process-wide preemption notices. A signal handler (async-signal-safe: it
// touches only lock-free atomics and calls clock_gettime) counts notices and
// records when the first one arrived; checkpointers compare the count with
// the number they have already served.
#ifndef STRATA_ENGINE_PREEMPTION_H_
#define STRATA_ENGINE_PREEMPTION_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "strata/status.h"

namespace strata {

// Installs the handler for each signal once per process, remembering the
// previous disposition so the handler can chain to it. Thread-safe.
Status InstallPreemptionHandlers(const std::vector<int>& signals);

// Notices received so far. One relaxed atomic load.
uint64_t PreemptionNotices() noexcept;

// Records a notice as the handler does. Async-signal-safe.
void NotePreemption() noexcept;

// CLOCK_MONOTONIC time (ns) of the newest notice, 0 if none.
int64_t LastNoticeMonotonicNs() noexcept;

// From now on every notice also stores the number of notices since this call
// into `*word` (a slot of
// the agent's sync map, so the agent sees the notice even while the training
// loop is inside a long step); nullptr stops it. The word must stay mapped
// until replaced.
void MirrorNoticesTo(std::atomic<uint64_t>* word) noexcept;

}  // namespace strata

#endif  // STRATA_ENGINE_PREEMPTION_H_
