// Copyright 2026 The Strata Authors.
#include "cli/agent_client.h"

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "agent/config/config.h"
#include "agent/rpc/client.h"
#include "wire/coordination.h"
#include "wire/op.h"

namespace strata::cli {

void AddAgentAddressOptions(CLI::App* cmd, AgentAddress* a) {
  cmd->add_option("--agent", a->agent, "HOST:PORT of the node's agent (default 127.0.0.1:7701)");
  cmd->add_option("--coordinator", a->coordinator,
                  "HOST:PORT of the job's coordinator; with --node, reach that node's agent");
  cmd->add_option("--node", a->node, "Node rank, with --coordinator");
  cmd->add_option("--job", a->job, "Job name, when the coordinator serves several");
  cmd->add_option("--secret-file", a->secret_file, "File holding the job's shared secret");
}

StatusOr<std::string> ClientSecret(const std::string& secret_file) {
  std::string file = secret_file;
  if (file.empty() && std::getenv("STRATA_SECRET_FILE")) file = std::getenv("STRATA_SECRET_FILE");
  if (!file.empty()) {
    STRATA_ASSIGN_OR_RETURN(std::string text, DefaultReadFile()(file));
    return SecretFromFileText(std::move(text));
  }
  if (const char* s = std::getenv("STRATA_SECRET")) return std::string(s);
  return InvalidArgumentError("no secret: pass --secret-file or set STRATA_SECRET");
}

StatusOr<nlohmann::json> CallAgent(const std::string& address, const std::string& secret_file,
                                   const nlohmann::json& request, std::chrono::milliseconds timeout,
                                   const std::string& client_id) {
  STRATA_ASSIGN_OR_RETURN(agent::Endpoint to, agent::ParseEndpoint(address));
  STRATA_ASSIGN_OR_RETURN(std::string secret, ClientSecret(secret_file));
  auto client = agent::RpcClient::Connect(to, secret, client_id);
  if (!client.ok()) return client.status().WithContext("agent at " + address);
  auto reply = client->Call(request, timeout);
  if (!reply.ok()) return reply.status().WithContext("agent at " + address);
  return reply;
}

StatusOr<wire::StatusReply> AgentStatus(const std::string& address, const std::string& secret_file,
                                        std::chrono::milliseconds timeout,
                                        const std::string& client_id) {
  STRATA_ASSIGN_OR_RETURN(
      nlohmann::json reply,
      CallAgent(address, secret_file, wire::Request(wire::Op::kStatus), timeout, client_id));
  auto status = wire::StatusReply::FromJson(reply);
  if (!status.ok()) return status.status().WithContext("agent at " + address);
  return status;
}

StatusOr<std::string> ResolveAgent(const AgentAddress& a, const std::string& client_id) {
  if (a.coordinator.empty()) {
    if (a.node) return InvalidArgumentError("--node needs --coordinator");
    return a.agent.empty() ? std::string("127.0.0.1:7701") : a.agent;
  }
  if (!a.agent.empty()) return InvalidArgumentError("give --agent or --coordinator, not both");
  if (!a.node) return InvalidArgumentError("--coordinator needs --node RANK");
  wire::NodeAddressRequest req;
  req.node = *a.node;
  if (!a.job.empty()) req.job = a.job;
  STRATA_ASSIGN_OR_RETURN(auto reply, CallAgent(a.coordinator, a.secret_file, req.ToJson(),
                                                std::chrono::seconds(10), client_id));
  return reply.value("address", std::string());
}

}  // namespace strata::cli
