// Copyright 2026 The Strata Authors.
//
// Configuration of `strata agent`:
//   - ReplicatorConfig: a client's `replicator.yaml`, parsed and validated
//     (see docs/agent-protocol.md). Its error messages are
//     written verbatim into the client-visible `replicator.failed`, so each is
//     one line, starts with "replicator.yaml: ", names the key, and quotes at
//     most kMaxQuotedBytes of the offending text.
//   - AgentConfig: the daemon's own settings, resolved from a YAML file,
//     the environment and command-line flags (flags > environment > file).
//
// Nothing here throws: yaml-cpp exceptions are caught and turned into Status.
// All functions are thread-safe (they only read their arguments), except that
// the convenience overloads read the process environment with std::getenv.
#ifndef STRATA_AGENT_CONFIG_CONFIG_H_
#define STRATA_AGENT_CONFIG_CONFIG_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ec/redundancy.h"
#include "net/endpoint.h"
#include "net/job_key.h"
#include "net/tls.h"
#include "strata/status.h"
#include "wire/vocabulary.h"

namespace strata::agent {

// Looks up an environment variable; nullopt when unset.
using GetenvFn = std::function<std::optional<std::string>(const std::string& name)>;
// Reads a whole file.
using ReadFileFn = std::function<StatusOr<std::string>(const std::string& path)>;

// The process environment (std::getenv).
GetenvFn ProcessGetenv();
// Reads real files (Env::Default()), refusing any larger than
// kMaxConfigFileBytes.
ReadFileFn DefaultReadFile();

// Largest replicator.yaml, agent config file or secret file accepted.
inline constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;
// At most this many bytes of untrusted text are quoted in an error message.
inline constexpr size_t kMaxQuotedBytes = 64;

// ---------------------------------------------------------------------------
// Network addresses

// The one host:port type (net/endpoint.h).
using net::Endpoint;
using net::ParseEndpoint;

// ---------------------------------------------------------------------------
// replicator.yaml

enum class Framework { kOrbax, kPytorchDistributed, kPytorch };

// "orbax", "pytorch.distributed" or "pytorch": the spelling in the yaml.
std::string_view FrameworkName(Framework framework);

// The validated content of a replicator.yaml. Keys in the yaml are spelled
// with hyphens ("job-name"); the field names follow them.
struct ReplicatorConfig {
  // 1..128 bytes of [A-Za-z0-9._-]; not "." or "..", no "..". Safe to use in
  // file names.
  std::string job_name;
  Framework framework = Framework::kOrbax;
  int node_rank = 0;  // 0 <= node_rank < nodes
  int nodes = 1;      // 1..kMaxNodes
  // Explicit peers: distinct, in [0, nodes), never node_rank, at most
  // kMaxPeers. Both unset: no peer replication.
  std::optional<std::vector<int>> peer_ranks;
  // Let the agent pick this many peers: 0..min(kMaxPeers, nodes - 1). Unset
  // when peer_ranks is given: the NeMo plugin writes both, and peer-ranks
  // wins, as with the GKE replicator (a note says so).
  std::optional<int> peers_per_node;
  // Number of identical data-parallel replicas; >= 1 and divides nodes.
  std::optional<int> assume_data_parallelism;
  // How the peer tier protects the job's steps (ec/redundancy.h): copies
  // on the peers, or a code over groups of nodes. Unset: the agent's
  // --redundancy, else copies. A coded redundancy needs at least its group
  // size of nodes, and replaces peer-ranks / peers-per-node (a note says so).
  std::optional<ec::Redundancy> redundancy;
  // Backup cadence; each >= 1, at most one of them is set. A yaml's
  // "backup-interval-minutes: 0" (legacy MaxText's default) leaves both
  // unset, as a yaml without a cadence does (a note says so).
  std::optional<int> backup_interval_minutes;
  std::optional<int> backup_interval_steps;
  int workers_per_node = 1;  // 1..kMaxWorkersPerNode
  // "host:port" (Endpoint::ToString() form), from "tcp://host:port" or
  // "host:port".
  std::optional<std::string> master;
  std::optional<int> master_port;  // 1..65535
  // Top-level keys the agent does not know, truncated to kMaxQuotedBytes, in
  // file order; at most kMaxUnknownKeys are kept. For logging only.
  std::vector<std::string> unknown_keys;
  // How the agent read settings a client wrote differently from what it
  // uses, one line each, for the log at info level.
  std::vector<std::string> notes;
};

inline constexpr int kMaxPeers = 64;
inline constexpr int kMaxWorkersPerNode = 1024;
inline constexpr size_t kMaxJobNameBytes = 128;
inline constexpr size_t kMaxUnknownKeys = 32;

// Parses and validates `yaml_text`. `$VAR` and `${VAR}` in any scalar value
// are replaced by getenv(VAR), or by "" when unset; a `$` not followed by a
// name stays as it is. Because the result can reach client-visible files,
// names that may hold secrets are refused with an error: STRATA_* and any
// containing SECRET, TOKEN, PASSWORD, PASSWD, CREDENTIAL or KEY (in any case).
// Scalars that are exactly a
// base-10 integer (optional sign, surrounding whitespace allowed) are accepted
// for integer keys, quoted or not. Unknown keys are collected, not rejected.
// Errors: INVALID_ARGUMENT, message "replicator.yaml: ..." (one line).
StatusOr<ReplicatorConfig> ParseReplicatorConfig(std::string_view yaml_text,
                                                 const GetenvFn& getenv);
// Same, with the process environment.
StatusOr<ReplicatorConfig> ParseReplicatorConfig(std::string_view yaml_text);

// ---------------------------------------------------------------------------
// The agent's own configuration

inline constexpr uint16_t kDefaultAgentPort = 7701;

struct AgentConfig {
  // The node's RAM-disk checkpoint directory (the client's local directory).
  // Required: --local-dir, STRATA_LOCAL_DIR or `local-dir:`.
  std::string local_dir;
  // Where this agent accepts peer connections. Default 0.0.0.0:7701.
  Endpoint listen{"0.0.0.0", kDefaultAgentPort};
  // The address peers are told to use. Default: `listen` with a wildcard
  // host (0.0.0.0 or ::) replaced by loopback (127.0.0.1 or ::1).
  Endpoint advertise{"127.0.0.1", kDefaultAgentPort};
  // The rank-0 agent's coordination address. Default: unset (then taken from
  // replicator.yaml's master / master-port, or this agent is rank 0).
  std::optional<Endpoint> coordinator;
  // The job's shared secret, at least kMinSecretBytes and random enough
  // (net::CheckSecret). Required: from --secret-file FILE, STRATA_SECRET,
  // STRATA_SECRET_FILE or `secret-file:`; a file others may read is
  // refused. One trailing newline of a secret file is stripped. Never
  // logged.
  std::string secret;
  // The name the job's agents and clients share: it salts the key derived
  // from the secret (net/job_key.h), so the key, and any guess at the
  // secret, serves this job only. Every agent and client of the job gives
  // the same. 1..128 printable bytes. Default "" (a fixed salt).
  std::string job_name;
  // trace, debug, info, warn, error, critical or off. Default "info".
  std::string log_level = "info";
  // This node's rank (its JAX process index): written to jax-init-info.txt
  // before a client starts; replicator.yaml's node-rank is the job's word.
  // Default: unset (then no jax-init-info.txt is written).
  std::optional<int> node_rank;
  // The JAX coordination service's address, line 2 of jax-init-info.txt.
  // Default: the coordinator's host (this agent's advertised host when it
  // coordinates) with port kDefaultJaxCoordinatorPort.
  std::optional<Endpoint> jax_coordinator;
  // Parallel TCP streams per large transfer, 1..kMaxDataStreams. Default 4.
  int data_streams = 4;
  // Largest protocol message accepted, in bytes, 64 KiB..1 GiB.
  // Default 64 MiB.
  uint64_t max_message_bytes = uint64_t{16} << 20;

  // The backup tier: "s3://bucket/prefix" or "file:///path". Default: unset
  // (no backups). See docs/backup.md.
  std::optional<std::string> backup_url;
  // Backup cadence used when replicator.yaml gives none; at most one is set.
  std::optional<int> backup_interval_steps;
  std::optional<int> backup_interval_minutes;
  // Upload bandwidth limit in MiB/s; 0 = unlimited (the default).
  int backup_bandwidth_mib = 0;
  // Coordinator only: restore this backup id at the job's next start instead
  // of the newest complete step.
  std::optional<std::string> restore_backup;
  // How long a SIGTERM'd agent drains (the job's on-demand step saved and
  // replicated, the ranks gone) before it exits; `strata maintenance`'s
  // default grace period. Default 300 s, like the platforms' notice.
  std::chrono::seconds grace{300};
  // Where to serve Prometheus metrics (HTTP, GET /metrics). Default: unset
  // (not served). See docs/operations.md.
  std::optional<Endpoint> metrics;
  // The peer tier's redundancy for jobs whose replicator.yaml names none.
  // Default: unset (copies).
  std::optional<ec::Redundancy> redundancy;
  // This node's failure domain (a rack, a switch, a power domain): coded
  // groups spread over domains. 1..64 bytes of A-Z a-z 0-9 . _ - : /.
  // Default: "" (a domain of its own).
  std::string failure_domain;
  // How connections between agents are protected (net/tls.h): "psk" (TLS
  // 1.3 keyed by the job's secret; the default), "certificates" (TLS 1.3
  // with tls-cert-file, tls-key-file and tls-ca-file, all required) or
  // "off" (plaintext, logged as a warning).
  net::TlsOptions tls;
};

// The port of the JAX coordination service when --jax-coordinator gives
// none: the one GKE's checkpointing driver writes into jax-init-info.txt.
inline constexpr int kDefaultJaxCoordinatorPort = 8476;

// The JAX coordination address `c` writes into jax-init-info.txt.
Endpoint JaxCoordinator(const AgentConfig& c);

inline constexpr size_t kMinSecretBytes = net::kMinSecretBytes;

// The secret in a secret file's text: one trailing newline ("\n" or
// "\r\n") stripped. The agent and the client commands read files alike.
std::string SecretFromFileText(std::string text);
// A secret file others on the node may read (or write) is refused, naming
// the file, its mode and the fix; one that does not exist (yet) is left to
// the read to report.
Status CheckSecretFileMode(const std::string& path);
inline constexpr int kMaxDataStreams = 64;

// What a command-line layer parsed; unset fields fall through to the
// environment and then to the config file.
struct AgentFlags {
  std::optional<std::string> config_file;          // --config FILE
  std::optional<std::string> local_dir;            // --local-dir DIR
  std::optional<std::string> listen;               // --listen HOST:PORT
  std::optional<std::string> advertise;            // --advertise HOST:PORT
  std::optional<std::string> coordinator;          // --coordinator HOST:PORT
  std::optional<std::string> jax_coordinator;      // --jax-coordinator HOST:PORT
  std::optional<std::string> secret_file;          // --secret-file FILE
  std::optional<std::string> log_level;            // --log-level LEVEL
  std::optional<int64_t> node_rank;                // --node-rank N
  std::optional<int64_t> data_streams;             // --data-streams N
  std::optional<int64_t> max_message_bytes;        // --max-message-bytes N
  std::optional<std::string> backup;               // --backup URL
  std::optional<int64_t> backup_interval_steps;    // --backup-interval-steps K
  std::optional<int64_t> backup_interval_minutes;  // --backup-interval-minutes M
  std::optional<int64_t> backup_bandwidth_mib;     // --backup-bandwidth MIB_PER_S
  std::optional<std::string> restore_backup;       // --restore-backup ID
  std::optional<int64_t> grace_seconds;            // --grace-seconds S
  std::optional<std::string> metrics;              // --metrics HOST:PORT
  std::optional<std::string> redundancy;           // --redundancy copies|xor(N)|rs(K,M)
  std::optional<std::string> failure_domain;       // --failure-domain NAME
  std::optional<std::string> job_name;             // --job-name NAME
  std::optional<std::string> tls;                  // --tls psk|certificates|off
  std::optional<std::string> tls_cert_file;        // --tls-cert-file PEM
  std::optional<std::string> tls_key_file;         // --tls-key-file PEM
  std::optional<std::string> tls_ca_file;          // --tls-ca-file PEM
};

// Resolves the agent configuration. Sources, lowest precedence first:
//   1. the YAML file flags.config_file (a mapping; keys local-dir, listen,
//      advertise, coordinator, jax-coordinator, secret-file, log-level, node-rank,
//      data-streams, max-message-bytes, backup, backup-interval-steps,
//      backup-interval-minutes, backup-bandwidth, restore-backup,
//      grace-seconds, metrics, redundancy, failure-domain, tls,
//      tls-cert-file, tls-key-file, tls-ca-file, job-name; unknown keys are
//      errors);
//   2. the environment: STRATA_LOCAL_DIR, STRATA_LISTEN, STRATA_ADVERTISE,
//      STRATA_COORDINATOR, STRATA_JAX_COORDINATOR, STRATA_NODE_RANK,
//      STRATA_SECRET, STRATA_SECRET_FILE, STRATA_LOG_LEVEL, STRATA_BACKUP,
//      STRATA_METRICS, STRATA_REDUNDANCY, STRATA_FAILURE_DOMAIN, STRATA_TLS,
//      STRATA_TLS_CERT_FILE, STRATA_TLS_KEY_FILE, STRATA_TLS_CA_FILE,
//      STRATA_JOB_NAME;
//   3. the flags.
// A secret given inline (STRATA_SECRET) or as a file at a higher level
// replaces either form at a lower level; both forms at one level is an error.
// Errors are INVALID_ARGUMENT naming the source ("--listen",
// "STRATA_LISTEN", "<file>: listen"), or the reader's status for files.
StatusOr<AgentConfig> ResolveAgentConfig(const AgentFlags& flags, const GetenvFn& getenv,
                                         const ReadFileFn& read_file);
// Same, with the process environment and real files.
StatusOr<AgentConfig> ResolveAgentConfig(const AgentFlags& flags);

// Calls the coordinator of `job` (at AgentConfig::coordinator, or the agent
// itself when it coordinates) with `request`, waiting up to `timeout`: how
// the agent's components reach it (Agent::CallCoordinator is the one).
using CoordinatorCall = std::function<StatusOr<nlohmann::json>(
    const ReplicatorConfig& job, const nlohmann::json& request, std::chrono::milliseconds timeout)>;

}  // namespace strata::agent

#endif  // STRATA_AGENT_CONFIG_CONFIG_H_
