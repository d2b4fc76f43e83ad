// Copyright 2026 The Strata Authors.
//
// strata agent: run the per-node replicator. strata status: ask one.
#include <fmt/format.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>

#include "agent/agent.h"
#include "agent/config/config.h"
#include "agent/rpc/client.h"
#include "cli/agent_client.h"
#include "cli/cli.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "wire/control.h"

namespace strata::cli {
namespace {

// SIGTERM drains (the node is going away: the job saves, the agent waits
// for its on-demand step to reach the peers); a second SIGTERM, or SIGINT,
// stops at once.
std::atomic<bool> g_stop{false};
std::atomic<bool> g_drain{false};
void OnStopSignal(int sig) {
  if (sig == SIGTERM && !g_drain.exchange(true)) return;
  g_stop.store(true);
}

void RunAgent(Context& ctx, const agent::AgentFlags& flags) {
  auto config = agent::ResolveAgentConfig(flags);
  if (!config.ok()) {
    ctx.err << "strata agent: " << config.status().message() << "\n";
    ctx.exit_code = 2;
    return;
  }
  SetLogLevel(config->log_level);
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  auto agent = agent::Agent::Start(*config);
  Status s = agent.ok() ? (*agent)->Run(g_stop, &g_drain) : agent.status();
  if (!s.ok()) {
    ctx.err << "strata agent: " << s.message() << "\n";
    ctx.exit_code = 1;
  }
}

void PrintStatus(Context& ctx, const wire::StatusReply& r) {
  ctx.out << fmt::format("agent {}  dir {}\n", r.address, r.local_dir);
  if (r.job) {
    ctx.out << fmt::format("job {}  node {} of {}  round {}  ", r.job->name, r.job->node,
                           r.job->nodes, r.job->round);
    if (r.job->group.empty()) {
      ctx.out << fmt::format("peers {}\n", nlohmann::json(r.job->peers).dump());
    } else {
      ctx.out << fmt::format("{} group {}\n", r.job->redundancy,
                             nlohmann::json(r.job->group).dump());
    }
  } else {
    ctx.out << "no job yet (waiting for replicator.yaml)\n";
  }
  ctx.out << fmt::format("RAM held {}", HumanBytes(r.ram_bytes));
  if (r.parity_bytes > 0) ctx.out << fmt::format(" + parity {}", HumanBytes(r.parity_bytes));
  ctx.out << fmt::format("  newest replicated step {}  job-wide watermark {}  queued {}\n",
                         r.newest_replicated, r.watermark, r.queued);
  ctx.out << "last restore: " << (r.last_restore.empty() ? "none" : r.last_restore);
  if (r.restore_state && *r.restore_state != "done")
    ctx.out << "  (restore " << *r.restore_state << ")";
  ctx.out << "\n";
  if (r.backup) {
    const wire::BackupStatus& b = *r.backup;
    ctx.out << "backup " << b.url << "  access: " << b.access << "\n";
    if (b.newest) {
      ctx.out << fmt::format("  newest committed backup {} (step {}), backup lag {} s\n",
                             b.newest->id, b.newest->step, b.lag_seconds);
    } else {
      ctx.out << "  no committed backup yet\n";
    }
    if (b.uploading) ctx.out << "  uploading " << *b.uploading << "\n";
    if (b.last_error) ctx.out << "  last error: " << *b.last_error << "\n";
    if (b.job_error) ctx.out << "  the job's last backup failure: " << *b.job_error << "\n";
  }
  ctx.out << fmt::format("  {:<24} {:>6} {:>10} {:>10}  {}\n", "JOB", "NODE", "STEP", "SIZE",
                         "DIGEST");
  for (const auto& s : r.steps) {
    ctx.out << fmt::format("  {:<24} {:>6} {:>10} {:>10}  {}\n", s.job, s.rank, s.step,
                           HumanBytes(s.bytes), s.digest);
  }
}

void Status_(Context& ctx, const AgentAddress& address, bool as_json) {
  auto at = ResolveAgent(address, "strata status");
  StatusOr<wire::StatusReply> status =
      at.ok() ? AgentStatus(*at, address.auth, std::chrono::seconds(10), "strata status")
              : StatusOr<wire::StatusReply>(at.status());
  if (!status.ok()) {
    ctx.err << "strata status: " << status.status().message() << "\n";
    ctx.exit_code = 1;
    return;
  }
  if (as_json) {
    ctx.out << status->ToJson().dump(2) << "\n";
  } else {
    PrintStatus(ctx, *status);
  }
}

}  // namespace

void RegisterAgentCommands(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<agent::AgentFlags>();
  CLI::App* agent = app.add_subcommand("agent", "Run the per-node replicator (see docs/agent.md)");
  auto opt = [&](const char* name, std::optional<std::string>& field, const char* help) {
    agent->add_option_function<std::string>(
        name, [&field](const std::string& v) { field = v; }, help);
  };
  opt("--config", flags->config_file, "YAML configuration file");
  opt("--local-dir", flags->local_dir, "The node's RAM-disk checkpoint directory");
  opt("--listen", flags->listen, "HOST:PORT to accept peers on (default 0.0.0.0:7701)");
  opt("--advertise", flags->advertise, "HOST:PORT peers should use (default: --listen)");
  opt("--coordinator", flags->coordinator, "HOST:PORT of the coordinating (rank 0) agent");
  opt("--jax-coordinator", flags->jax_coordinator,
      "HOST:PORT of the JAX coordination service, for jax-init-info.txt (default: the "
      "coordinator's host, port 8476)");
  opt("--secret-file", flags->secret_file,
      "File holding the job's shared secret (or STRATA_SECRET)");
  opt("--log-level", flags->log_level, "trace, debug, info, warn, error");
  auto iopt = [&](const char* name, std::optional<int64_t>& field, const char* help) {
    agent->add_option_function<int64_t>(
        name, [&field](int64_t v) { field = v; }, help);
  };
  iopt("--node-rank", flags->node_rank,
       "This node's rank (JAX process index), written to jax-init-info.txt");
  iopt("--data-streams", flags->data_streams, "Parallel TCP streams per large transfer");
  iopt("--max-message-bytes", flags->max_message_bytes, "Largest protocol message accepted");
  opt("--backup", flags->backup, "Backup URL: s3://bucket/prefix or file:///path (docs/backup.md)");
  iopt("--backup-interval-steps", flags->backup_interval_steps,
       "Back up every K steps when replicator.yaml gives no cadence");
  iopt("--backup-interval-minutes", flags->backup_interval_minutes,
       "Back up every M minutes when replicator.yaml gives no cadence");
  iopt("--grace-seconds", flags->grace_seconds,
       "On SIGTERM, drain for at most this long (default 300)");
  iopt("--backup-bandwidth", flags->backup_bandwidth_mib, "Upload limit in MiB/s (0: none)");
  opt("--metrics", flags->metrics,
      "HOST:PORT to serve Prometheus metrics on (GET /metrics; default: off)");
  opt("--restore-backup", flags->restore_backup,
      "Coordinator: restore this backup id at the job's next start");
  opt("--redundancy", flags->redundancy,
      "The peer tier when replicator.yaml names none: copies (default), xor, xor(N) or "
      "rs(K,M) (docs/agent-design.md, \"Coded redundancy\")");
  opt("--job-name", flags->job_name,
      "The name every agent and client of the job gives: salts the key derived from the "
      "secret, binding it to this job (or STRATA_JOB_NAME; default: none)");
  opt("--failure-domain", flags->failure_domain,
      "This node's rack or other failure domain; coded groups spread over domains");
  opt("--tls", flags->tls,
      "How connections between agents are protected: psk (TLS 1.3 keyed by the job's secret; "
      "default), certificates (TLS 1.3 with --tls-cert-file, --tls-key-file, --tls-ca-file) "
      "or off (plaintext; logged as a warning)");
  opt("--tls-cert-file", flags->tls_cert_file,
      "With --tls certificates: this agent's certificate and chain (PEM)");
  opt("--tls-key-file", flags->tls_key_file, "With --tls certificates: its private key (PEM)");
  opt("--tls-ca-file", flags->tls_ca_file,
      "With --tls certificates: the CA every peer's certificate must chain to (PEM)");
  agent->callback([&ctx, flags] { RunAgent(ctx, *flags); });

  struct StatusArgs {
    AgentAddress address;
    bool json = false;
  };
  auto sargs = std::make_shared<StatusArgs>();
  CLI::App* status =
      app.add_subcommand("status", "Show an agent's job, peers, steps held and replication");
  AddAgentAddressOptions(status, &sargs->address);
  status->add_flag("--json", sargs->json, "Print JSON");
  status->callback([&ctx, sargs] { Status_(ctx, sargs->address, sargs->json); });
}

}  // namespace strata::cli
