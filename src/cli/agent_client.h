// Copyright 2026 The Strata Authors.
//
// How the client commands (status, maintenance, health) reach a node's
// agent: on the node itself through its local socket (--agent
// LOCAL_DIR/.strata-agent/agent.sock: the caller's uid is its credential,
// no secret), over the network with --agent HOST:PORT, or through the job's
// coordinator with --coordinator HOST:PORT --node RANK [--job NAME] (both
// with the job's secret).
#ifndef STRATA_CLI_AGENT_CLIENT_H_
#define STRATA_CLI_AGENT_CLIENT_H_

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "net/tls.h"
#include "strata/status.h"
#include "wire/control.h"

namespace CLI {
class App;
}

namespace strata::cli {

// How a client command proves itself to agents, as the agents do: the
// job's secret and the job's TLS mode (net/tls.h).
struct ClientAuth {
  std::string secret_file;  // else STRATA_SECRET_FILE, else STRATA_SECRET
  std::string tls;          // psk, certificates or off; else STRATA_TLS, else psk
  std::string tls_cert_file, tls_key_file, tls_ca_file;  // else STRATA_TLS_*_FILE
  std::string job_name;  // else STRATA_JOB_NAME: salts the key, as the agents' job-name
};

// Adds --secret-file, --job-name, --tls, --tls-cert-file, --tls-key-file,
// --tls-ca-file.
void AddClientAuthOptions(CLI::App* cmd, ClientAuth* a);

// The secret for talking to agents: --secret-file, STRATA_SECRET_FILE or
// STRATA_SECRET.
StatusOr<std::string> ClientSecret(const std::string& secret_file);
// The secret and TLS for talking to agents; errors name the flag or file.
StatusOr<net::Trust> ClientTrust(const ClientAuth& a);

// Whether `address` names an agent's local socket (a path: it has a '/')
// rather than HOST:PORT.
bool IsLocalAgent(const std::string& address);

struct AgentAddress {
  std::string agent;  // HOST:PORT or a socket path; default 127.0.0.1:7701 unless --coordinator
  std::string coordinator;
  std::optional<int> node;
  std::string job;  // needed when the coordinator serves several jobs
  ClientAuth auth;
};

// Adds --agent, --coordinator, --node, --job and the ClientAuth options.
void AddAgentAddressOptions(CLI::App* cmd, AgentAddress* a);

// The agent's HOST:PORT: --agent, or the node's address as the coordinator
// knows it.
StatusOr<std::string> ResolveAgent(const AgentAddress& a, const std::string& client_id);

// One call to the agent at `address` (HOST:PORT with `auth`, or a local
// socket, IsLocalAgent, without); errors name the address.
StatusOr<nlohmann::json> CallAgent(const std::string& address, const ClientAuth& auth,
                                   const nlohmann::json& request, std::chrono::milliseconds timeout,
                                   const std::string& client_id);

// `status` of the agent at `address`, parsed; errors name the address.
StatusOr<wire::StatusReply> AgentStatus(const std::string& address, const ClientAuth& auth,
                                        std::chrono::milliseconds timeout,
                                        const std::string& client_id);

}  // namespace strata::cli

#endif  // STRATA_CLI_AGENT_CLIENT_H_
