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
  cmd->add_option("--agent", a->agent,
                  "The node's agent: its local socket on this node (LOCAL_DIR/.strata-agent/"
                  "agent.sock; no secret needed), or HOST:PORT (default 127.0.0.1:7701)");
  cmd->add_option("--coordinator", a->coordinator,
                  "HOST:PORT of the job's coordinator; with --node, reach that node's agent");
  cmd->add_option("--node", a->node, "Node rank, with --coordinator");
  cmd->add_option("--job", a->job, "Job name, when the coordinator serves several");
  AddClientAuthOptions(cmd, &a->auth);
}

void AddClientAuthOptions(CLI::App* cmd, ClientAuth* a) {
  cmd->add_option("--secret-file", a->secret_file,
                  "File holding the job's shared secret (or STRATA_SECRET_FILE / STRATA_SECRET)");
  cmd->add_option("--job-name", a->job_name,
                  "The job's name as its agents were given it (job-name; or STRATA_JOB_NAME)");
  cmd->add_option("--tls", a->tls,
                  "How the agents protect connections: psk (default), certificates or off (or "
                  "STRATA_TLS); as the agents were started");
  cmd->add_option("--tls-cert-file", a->tls_cert_file,
                  "With --tls certificates: this client's certificate (PEM)");
  cmd->add_option("--tls-key-file", a->tls_key_file, "With --tls certificates: its key (PEM)");
  cmd->add_option("--tls-ca-file", a->tls_ca_file,
                  "With --tls certificates: the CA the agents' certificates chain to (PEM)");
}

namespace {

// `flag`'s value, else the environment variable's, else "".
std::string FlagOrEnv(const std::string& flag, const char* var) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(var);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

StatusOr<net::Trust> ClientTrust(const ClientAuth& a) {
  STRATA_ASSIGN_OR_RETURN(std::string secret, ClientSecret(a.secret_file));
  STRATA_RETURN_IF_ERROR(net::CheckSecret(secret, "the job's secret"));
  net::TlsOptions tls;
  const std::string mode = FlagOrEnv(a.tls, "STRATA_TLS");
  if (!mode.empty()) {
    StatusOr<net::TlsMode> m = net::ParseTlsMode(mode);
    if (!m.ok()) return m.status().WithContext("--tls");
    tls.mode = *m;
  }
  tls.cert_file = FlagOrEnv(a.tls_cert_file, "STRATA_TLS_CERT_FILE");
  tls.key_file = FlagOrEnv(a.tls_key_file, "STRATA_TLS_KEY_FILE");
  tls.ca_file = FlagOrEnv(a.tls_ca_file, "STRATA_TLS_CA_FILE");
  return net::MakeTrust(std::move(secret), tls, FlagOrEnv(a.job_name, "STRATA_JOB_NAME"));
}

StatusOr<std::string> ClientSecret(const std::string& secret_file) {
  std::string file = secret_file;
  if (file.empty() && std::getenv("STRATA_SECRET_FILE")) file = std::getenv("STRATA_SECRET_FILE");
  if (!file.empty()) {
    STRATA_RETURN_IF_ERROR(agent::CheckSecretFileMode(file));
    STRATA_ASSIGN_OR_RETURN(std::string text, agent::DefaultReadFile()(file));
    return agent::SecretFromFileText(std::move(text));
  }
  if (const char* s = std::getenv("STRATA_SECRET")) return std::string(s);
  return InvalidArgumentError("no secret: pass --secret-file or set STRATA_SECRET");
}

bool IsLocalAgent(const std::string& address) { return address.find('/') != std::string::npos; }

StatusOr<nlohmann::json> CallAgent(const std::string& address, const ClientAuth& auth,
                                   const nlohmann::json& request, std::chrono::milliseconds timeout,
                                   const std::string& client_id) {
  StatusOr<agent::RpcClient> client = InternalError("not connected");
  if (IsLocalAgent(address)) {
    client = agent::RpcClient::ConnectLocal(address, client_id);
  } else {
    STRATA_ASSIGN_OR_RETURN(agent::Endpoint to, agent::ParseEndpoint(address));
    STRATA_ASSIGN_OR_RETURN(net::Trust trust, ClientTrust(auth));
    client = agent::RpcClient::Connect(to, trust, client_id);
  }
  if (!client.ok()) return client.status().WithContext("agent at " + address);
  auto reply = client->Call(request, timeout);
  if (!reply.ok()) return reply.status().WithContext("agent at " + address);
  return reply;
}

StatusOr<wire::StatusReply> AgentStatus(const std::string& address, const ClientAuth& auth,
                                        std::chrono::milliseconds timeout,
                                        const std::string& client_id) {
  STRATA_ASSIGN_OR_RETURN(
      nlohmann::json reply,
      CallAgent(address, auth, wire::Request(wire::Op::kStatus), timeout, client_id));
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
  STRATA_ASSIGN_OR_RETURN(auto reply, CallAgent(a.coordinator, a.auth, req.ToJson(),
                                                std::chrono::seconds(10), client_id));
  STRATA_ASSIGN_OR_RETURN(wire::NodeAddressReply where, wire::NodeAddressReply::FromJson(reply));
  return where.address;
}

}  // namespace strata::cli
