// Copyright 2026 The Strata Authors.
//
// Talking to a real agent of a test Cluster the way a peer does, and the
// small polling and counting helpers the agent tests share.
#ifndef STRATA_TESTS_HARNESS_AGENT_PEER_H_
#define STRATA_TESTS_HARNESS_AGENT_PEER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/rpc/client.h"
#include "cluster.h"

namespace strata::testing {

// Entries of the directory `dir` (0 when it does not exist).
size_t EntriesIn(const std::string& dir);
// `n` pseudo-random bytes, the same for the same seed.
std::string RandomBytes(size_t n, uint32_t seed);

// Node 0's agent of `c`.
agent::Endpoint AgentEndpoint(const Cluster& c);
// An authenticated connection to node 0's agent.
StatusOr<agent::RpcClient> PeerConnect(const Cluster& c);

// Makes node 0's agent of `c` serve `job` as node `rank` of `nodes`: a
// replicator.yaml for it, and a wait until the agent is starting it (its
// restore waits for the other nodes, which never come). An agent takes a
// peer's steps only for the job it serves, never as its own rank.
void ServeJob(const Cluster& c, const std::string& job, int rank, int nodes);

nlohmann::json PutStep(const nlohmann::json& key, const nlohmann::json& index);
nlohmann::json Key(const std::string& job, int rank, int64_t step);

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_AGENT_PEER_H_
