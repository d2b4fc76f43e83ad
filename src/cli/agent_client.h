// Copyright 2026 The Strata Authors.
//
// How the client commands (status, maintenance, health) reach a node's
// agent: directly with --agent HOST:PORT, or through the job's coordinator
// with --coordinator HOST:PORT --node RANK [--job NAME].
#ifndef STRATA_CLI_AGENT_CLIENT_H_
#define STRATA_CLI_AGENT_CLIENT_H_

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "strata/status.h"
#include "wire/control.h"

namespace CLI {
class App;
}

namespace strata::cli {

struct AgentAddress {
  std::string agent;  // HOST:PORT; default 127.0.0.1:7701 unless --coordinator
  std::string coordinator;
  std::optional<int> node;
  std::string job;  // needed when the coordinator serves several jobs
  std::string secret_file;
};

// Adds --agent, --coordinator, --node, --job and --secret-file to `cmd`.
void AddAgentAddressOptions(CLI::App* cmd, AgentAddress* a);

// The secret for talking to agents: --secret-file, STRATA_SECRET_FILE or
// STRATA_SECRET.
StatusOr<std::string> ClientSecret(const std::string& secret_file);

// The agent's HOST:PORT: --agent, or the node's address as the coordinator
// knows it.
StatusOr<std::string> ResolveAgent(const AgentAddress& a, const std::string& client_id);

// One call to the agent at `address`; errors name the address.
StatusOr<nlohmann::json> CallAgent(const std::string& address, const std::string& secret_file,
                                   const nlohmann::json& request, std::chrono::milliseconds timeout,
                                   const std::string& client_id);

// `status` of the agent at `address`, parsed; errors name the address.
StatusOr<wire::StatusReply> AgentStatus(const std::string& address, const std::string& secret_file,
                                        std::chrono::milliseconds timeout,
                                        const std::string& client_id);

}  // namespace strata::cli

#endif  // STRATA_CLI_AGENT_CLIENT_H_
