// Copyright 2026 The Strata Authors.
//
// The bytes of a step between agents. A call that moves step data (put_step,
// fetch_step, get_ranges, put_shard, get_shard) is followed by the raw bytes
// of each file or range, in index order, sent with sendfile(2) and received
// straight into the files of an incoming directory, never into a frame.
#ifndef STRATA_AGENT_RPC_STEP_STREAM_H_
#define STRATA_AGENT_RPC_STEP_STREAM_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/store/store.h"
#include "agent/store/stream_verify.h"
#include "format/step_index.h"
#include "net/socket.h"
#include "strata/status.h"
#include "util/unique_fd.h"
#include "wire/vocabulary.h"

namespace strata::agent {

// Refuses `bytes` of step data that would not fit in `dir`'s file system
// with a 1/16 margin, before any of them is received: filling the RAM disk
// would make the node's own saves fail (strata::CheckFreeSpace).
Status CheckRoomToReceive(const std::string& dir, uint64_t bytes, const std::string& what);
// How full `dir`'s file system is, from 0 to 1 (space a non-root user cannot
// take counts as used); none when statvfs fails.
std::optional<double> FillOf(const std::string& dir);
// The deadline of a transfer of step data begun now (30 minutes: a 100 GB
// step over a slow link still fits).
net::Deadline DataDeadline();
// A receiver of step data also gives up once its sender moves no byte for
// this long (net::Socket::set_stall_limit): a sender gone without a reset,
// or cut off, no longer holds what the receiver holds for it (a parity
// shard's lock, a half-written copy, a thread) until the deadline. TCP's
// backoff resends within about twice a cut's length after it began, so a
// transfer across a cut of up to a minute that heals goes on. Senders keep
// only the deadline: a receiver may rightly read nothing for longer (a
// contribution queued behind others for its shard's lock).
inline constexpr std::chrono::seconds kDataStallLimit{120};
// Creates `path` (and its missing parent directories) at its final `size`
// to receive into, from a spare file of `store` where it has one (see
// Store::TakeSpare); the open descriptor, for writing.
StatusOr<UniqueFd> CreateReceiveFile(Store* store, const std::string& path, uint64_t size);
// Creates every file of `index` under `dir` (made by the caller) at its
// final size, nothing written yet (spare files of `store` where it has them).
Status CreateStepFiles(const std::string& dir, const StepIndex& index, Store* store = nullptr);
// Streams the bytes of `ranges` (of the files of `index`, under `dir`), in
// order; ranges of one file are sent through one descriptor when adjacent
// in the list.
Status SendRanges(net::Socket& socket, const std::string& dir, const StepIndex& index,
                  const std::vector<wire::FileRange>& ranges);
// Receives the bytes of `ranges` into the files CreateStepFiles made under
// `dir`, then fdatasyncs them.
Status RecvRanges(net::Socket& socket, const std::string& dir, const StepIndex& index,
                  const std::vector<wire::FileRange>& ranges);

// Streams every file of `index` from `dir`, in index order.
Status SendStepFiles(net::Socket& socket, const std::string& dir, const StepIndex& index);
// Receives the files of `index` into `dir` (created by the caller), into
// spare files of `store` where it has them (see Store::TakeSpare). With a
// `verifier` (for `dir`), each of its checks is submitted as soon as the
// check's last byte has been received.
Status RecvStepFiles(net::Socket& socket, const std::string& dir, const StepIndex& index,
                     Store* store = nullptr, StreamVerifier* verifier = nullptr);
// The callee's last reply after it verified and committed what it got.
Status AwaitCommitted(net::Socket& socket, const std::string& peer);

}  // namespace strata::agent

#endif  // STRATA_AGENT_RPC_STEP_STREAM_H_
