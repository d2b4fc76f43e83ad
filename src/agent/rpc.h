// Copyright 2026 The Strata Authors.
//
// Calls between agents (and from `strata status`): a request frame carrying
// JSON {"op": ..., ...} answered by a reply frame carrying JSON {"ok": true,
// ...} or {"ok": false, "code": ..., "error": ...}. Step transfers follow a
// call with the raw bytes of each file of the step, in index order, sent
// with sendfile(2). Every connection is authenticated first (net/auth.h).
#ifndef STRATA_AGENT_RPC_H_
#define STRATA_AGENT_RPC_H_

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/config.h"
#include "agent/step_index.h"
#include "agent/store.h"
#include "agent/stream_verify.h"
#include "net/endpoint.h"
#include "net/socket.h"
#include "strata/status.h"
#include "util/mutex.h"

namespace strata::agent {

class Store;

using json = nlohmann::json;

// Calls the coordinator of `job` (the agent's link): how components reach it.
using CoordinatorCall = std::function<StatusOr<json>(
    const ReplicatorConfig& job, const json& request, std::chrono::milliseconds timeout)>;

inline constexpr uint16_t kFrameCall = 16;
inline constexpr uint16_t kFrameReply = 17;
// Control messages are small; step data never travels in a frame.
inline constexpr uint32_t kMaxControlBytes = 16u << 20;

using net::Endpoint;
using net::ParseEndpoint;

// An authenticated connection to another agent. Used by one thread at a time.
class RpcClient {
 public:
  static StatusOr<RpcClient> Connect(const Endpoint& to, const std::string& secret,
                                     const std::string& client_id,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Sends a call and waits up to `timeout` for its reply. A reply with
  // ok=false becomes a Status with the remote code and message.
  StatusOr<json> Call(const json& request, std::chrono::milliseconds timeout);
  net::Socket& socket() { return socket_; }
  const std::string& peer() const { return peer_; }
  // Whether the last Call got its reply (ok or not): the connection is in
  // step and may carry another call. After a failure to send or receive,
  // close it.
  bool answered() const { return answered_; }

 private:
  net::Socket socket_;
  std::string peer_;
  bool answered_ = false;
};

// Connections kept open between calls, for a caller that calls the same
// agents often (every agent its coordinator): a call takes an idle
// connection to its target or opens one, and gives it back once answered;
// a kept connection that turns out closed is replaced once. Only for calls
// that are safe to repeat (every coordination call is). Thread-safe; a
// connection serves one call at a time.
class RpcPool {
 public:
  explicit RpcPool(std::string secret, size_t max_idle = 4);
  // A call to `to` as `client_id` (see RpcClient::Connect).
  StatusOr<json> Call(const Endpoint& to, const std::string& client_id, const json& request,
                      std::chrono::milliseconds timeout);
  void Clear();  // closes the idle connections

 private:
  std::optional<RpcClient> TakeIdle(const std::string& to);
  void GiveBack(const std::string& to, RpcClient client);

  const std::string secret_;
  const size_t max_idle_;
  Mutex mu_;
  // By "host:port client-id".
  std::map<std::string, std::vector<RpcClient>> idle_ GUARDED_BY(mu_);
};

// Parses JSON from a peer, dropping anything nested deeper than 32 levels
// (copying or printing a value recurses once per level). Never throws; a
// discarded value (is_discarded()) on a syntax error.
json ParseBounded(std::string_view text);

json StatusToJson(const Status& s);
Status StatusFromJson(const json& reply, const std::string& peer);

json StepKeyToJson(const StepKey& key);
StatusOr<StepKey> StepKeyFromJson(const json& j);

// Refuses `bytes` that would not fit in `dir`'s file system with a 1/16
// margin, before any of them is received: filling the RAM disk would make
// the node's own saves fail. RESOURCE_EXHAUSTED naming `what`.
Status CheckFreeSpace(const std::string& dir, uint64_t bytes, const std::string& what);
// The deadline of a transfer of step data begun now (30 minutes: a 100 GB
// step over a slow link still fits).
net::Deadline DataDeadline();
// A long call's reply frame (its first; the call's return value is its last).
Status SendReply(net::Socket& socket, const json& reply);
// The callee's last reply after it verified and committed what it got.
Status AwaitCommitted(net::Socket& socket, const std::string& peer);

// Creates `path` (and its missing parent directories) at its final `size`
// to receive into, from a spare file of `store` where it has one (see
// Store::TakeSpare); the open descriptor, for writing.
StatusOr<int> CreateReceiveFile(Store* store, const std::string& path, uint64_t size);
// Creates every file of `index` under `dir` (made by the caller) at its
// final size, nothing written yet (spare files of `store` where it has them).
Status CreateStepFiles(const std::string& dir, const StepIndex& index, Store* store = nullptr);
// INVALID_ARGUMENT unless every range lies within a file of `index`.
Status CheckRanges(const StepIndex& index, const std::vector<FileRange>& ranges);
// Streams the bytes of `ranges` (of the files of `index`, under `dir`), in
// order; ranges of one file are sent through one descriptor when adjacent
// in the list.
Status SendRanges(net::Socket& socket, const std::string& dir, const StepIndex& index,
                  const std::vector<FileRange>& ranges);
// Receives the bytes of `ranges` into the files CreateStepFiles made under
// `dir`, then fdatasyncs them.
Status RecvRanges(net::Socket& socket, const std::string& dir, const StepIndex& index,
                  const std::vector<FileRange>& ranges);

// Streams every file of `index` from `dir`, in index order.
Status SendStepFiles(net::Socket& socket, const std::string& dir, const StepIndex& index);
// Receives the files of `index` into `dir` (created by the caller), into
// spare files of `store` where it has them (see Store::TakeSpare). With a
// `verifier` (for `dir`), each of its checks is submitted as soon as the
// check's last byte has been received.
Status RecvStepFiles(net::Socket& socket, const std::string& dir, const StepIndex& index,
                     Store* store = nullptr, StreamVerifier* verifier = nullptr);

}  // namespace strata::agent

#endif  // STRATA_AGENT_RPC_H_
