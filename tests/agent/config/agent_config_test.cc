// Copyright 2026 The Strata Authors.
//
// Tests of the agent's own settings (agent/config/config.h): a YAML file, the
// environment and flags, their precedence, the secret and the errors.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/config/config.h"
#include "config_test_util.h"
#include "test_util.h"

namespace strata::agent {
namespace {

using testing::EnvVars;
using testing::ExpectError;
using testing::FakeGetenv;
using testing::FakeReadFile;
using testing::Files;

// ---------------------------------------------------------------------------
// AgentConfig

constexpr std::string_view kSecret = "0123456789abcdef";  // 16 bytes

StatusOr<AgentConfig> Resolve(const AgentFlags& flags, EnvVars env = {}, Files files = {}) {
  return ResolveAgentConfig(flags, FakeGetenv(std::move(env)), FakeReadFile(std::move(files)));
}

AgentFlags MinimalFlags() {
  AgentFlags f;
  f.local_dir = "/local";
  f.secret_file = "/s";
  return f;
}

const Files kSecretFile = {{"/s", std::string(kSecret) + "\n"}};

TEST(AgentConfigTest, Defaults) {
  StatusOr<AgentConfig> c = Resolve(MinimalFlags(), {}, kSecretFile);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->local_dir, "/local");
  EXPECT_EQ(c->listen, (Endpoint{"0.0.0.0", 7701}));
  EXPECT_EQ(c->advertise, (Endpoint{"127.0.0.1", 7701}));
  EXPECT_EQ(c->coordinator, std::nullopt);
  EXPECT_EQ(c->secret, kSecret);
  EXPECT_EQ(c->log_level, "info");
  EXPECT_EQ(c->node_rank, std::nullopt);
  EXPECT_EQ(c->data_streams, 4);
  EXPECT_EQ(c->max_message_bytes, uint64_t{16} << 20);  // the limit calls always had
}

TEST(AgentConfigTest, EverythingFromConfigFile) {
  AgentFlags flags;
  flags.config_file = "/etc/agent.yaml";
  Files files = {{"/etc/agent.yaml",
                  "local-dir: /dev/shm/n1\nlisten: 127.0.0.1:7802\nadvertise: node1:7802\n"
                  "coordinator: tcp://node0:7801\nsecret-file: /etc/secret\nlog-level: debug\n"
                  "node-rank: 1\ndata-streams: 8\nmax-message-bytes: 1048576\n"},
                 {"/etc/secret", std::string(kSecret) + "xyz"}};
  StatusOr<AgentConfig> c = Resolve(flags, {}, files);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->local_dir, "/dev/shm/n1");
  EXPECT_EQ(c->listen, (Endpoint{"127.0.0.1", 7802}));
  EXPECT_EQ(c->advertise, (Endpoint{"node1", 7802}));
  EXPECT_EQ(c->coordinator, (Endpoint{"node0", 7801}));
  EXPECT_EQ(c->secret, std::string(kSecret) + "xyz");
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_EQ(c->node_rank, 1);
  EXPECT_EQ(c->data_streams, 8);
  EXPECT_EQ(c->max_message_bytes, 1048576u);
}

TEST(AgentConfigTest, FlagsBeatEnvironmentBeatFile) {
  Files files = kSecretFile;
  files["/cfg"] =
      "local-dir: /file\nlisten: file:1\ncoordinator: file:2\nlog-level: error\n"
      "advertise: file:3\n";
  EnvVars env = {{"STRATA_LOCAL_DIR", "/env"},
                 {"STRATA_LISTEN", "env:1"},
                 {"STRATA_COORDINATOR", "env:2"},
                 {"STRATA_LOG_LEVEL", "warn"}};
  AgentFlags flags;
  flags.config_file = "/cfg";
  flags.secret_file = "/s";

  StatusOr<AgentConfig> c = Resolve(flags, {}, files);  // file only
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->local_dir, "/file");
  EXPECT_EQ(c->listen.host, "file");
  EXPECT_EQ(c->coordinator->host, "file");
  EXPECT_EQ(c->log_level, "error");

  c = Resolve(flags, env, files);  // env over file
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->local_dir, "/env");
  EXPECT_EQ(c->listen.host, "env");
  EXPECT_EQ(c->coordinator->host, "env");
  EXPECT_EQ(c->log_level, "warn");
  EXPECT_EQ(c->advertise.host, "file");  // not overridden

  flags.local_dir = "/flag";
  flags.listen = "flag:1";
  flags.coordinator = "flag:2";
  flags.log_level = "trace";
  flags.advertise = "flag:3";
  c = Resolve(flags, env, files);  // flags over both
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->local_dir, "/flag");
  EXPECT_EQ(c->listen.host, "flag");
  EXPECT_EQ(c->coordinator->host, "flag");
  EXPECT_EQ(c->log_level, "trace");
  EXPECT_EQ(c->advertise.host, "flag");
}

TEST(AgentConfigTest, IntegerFlagsBeatFile) {
  AgentFlags flags = MinimalFlags();
  flags.config_file = "/cfg";
  flags.data_streams = 2;
  flags.node_rank = 5;
  flags.max_message_bytes = 1 << 20;
  Files files = kSecretFile;
  files["/cfg"] = "data-streams: 16\nnode-rank: 3\nmax-message-bytes: 2097152\n";
  StatusOr<AgentConfig> c = Resolve(flags, {}, files);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->data_streams, 2);
  EXPECT_EQ(c->node_rank, 5);
  EXPECT_EQ(c->max_message_bytes, 1u << 20);
}

TEST(AgentConfigTest, SecretPrecedence) {
  std::string file_secret = "file-secret-0123456789", env_secret = "env-secret-0123456789",
              flag_secret = "flag-secret-0123456789";
  Files files = {{"/cfg", "local-dir: /l\nsecret-file: /file-secret\n"},
                 {"/file-secret", file_secret},
                 {"/flag-secret", flag_secret + "\n"}};
  AgentFlags flags;
  flags.config_file = "/cfg";
  StatusOr<AgentConfig> c = Resolve(flags, {}, files);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->secret, file_secret);
  c = Resolve(flags, {{"STRATA_SECRET", env_secret}}, files);  // env inline beats file
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->secret, env_secret);
  flags.secret_file = "/flag-secret";  // flag file beats env inline
  c = Resolve(flags, {{"STRATA_SECRET", env_secret}}, files);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->secret, flag_secret);
  flags.secret_file.reset();
  c = Resolve(flags, {{"STRATA_SECRET_FILE", "/flag-secret"}}, files);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->secret, flag_secret);
}

TEST(AgentConfigTest, SecretErrors) {
  AgentFlags flags;
  flags.local_dir = "/l";
  ExpectError(Resolve(flags).status(), StatusCode::kInvalidArgument,
              {"no secret: pass --secret-file FILE or set STRATA_SECRET"});
  Status s = Resolve(flags, {{"STRATA_SECRET", "short"}}).status();
  ExpectError(s, StatusCode::kInvalidArgument,
              {"STRATA_SECRET: the secret is 5 bytes; at least 16 are required"});
  EXPECT_EQ(s.message().find("short"), std::string::npos);
  flags.secret_file = "/s";  // 15 bytes once the newline is stripped
  s = Resolve(flags, {}, {{"/s", "0123456789abcde\r\n"}}).status();
  ExpectError(s, StatusCode::kInvalidArgument, {"--secret-file: the secret is 15 bytes"});
  ExpectError(Resolve(flags).status(), StatusCode::kNotFound, {"--secret-file: /s: no such file"});
  flags.secret_file.reset();
  ExpectError(
      Resolve(flags, {{"STRATA_SECRET", std::string(kSecret)}, {"STRATA_SECRET_FILE", "/s"}})
          .status(),
      StatusCode::kInvalidArgument, {"STRATA_SECRET and STRATA_SECRET_FILE are both set"});
}

// A secret a person makes up is often guessable; one captured handshake lets
// anyone test guesses offline. Too little randomness is refused, with how
// to make a good one; a made one passes.
TEST(AgentConfigTest, AWeakSecretIsRefused) {
  AgentFlags flags = MinimalFlags();
  flags.secret_file.reset();
  for (const char* weak : {"aaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababababab",
                           "passwordpassword", "1111111122222222"}) {
    Status s = Resolve(flags, {{"STRATA_SECRET", weak}}).status();
    ExpectError(s, StatusCode::kInvalidArgument,
                {"STRATA_SECRET: the secret is too weak", "strata secret new"});
    EXPECT_EQ(s.message().find(weak), std::string::npos) << s.message();  // never repeated
  }
  StatusOr<std::string> made = net::NewSecret();
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(made->size(), 44u);  // 32 bytes, base64
  StatusOr<AgentConfig> c = Resolve(flags, {{"STRATA_SECRET", *made}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(*net::NewSecret(), *made);
}

TEST(AgentConfigTest, OnlyOneTrailingNewlineIsStrippedFromSecretFile) {
  StatusOr<AgentConfig> c = Resolve(MinimalFlags(), {}, {{"/s", std::string(kSecret) + "\n\n"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->secret, std::string(kSecret) + "\n");
}

TEST(AgentConfigTest, EmptyEnvironmentValuesCountAsUnset) {
  EnvVars env = {{"STRATA_LISTEN", ""}, {"STRATA_LOCAL_DIR", ""}};
  StatusOr<AgentConfig> c = Resolve(MinimalFlags(), env, kSecretFile);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen, (Endpoint{"0.0.0.0", 7701}));
  ExpectError(Resolve(AgentFlags(), env, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"no local directory: pass --local-dir DIR"});
}

// jax-init-info.txt's two lines: the rank and the JAX coordination service.
TEST(AgentConfigTest, JaxInitInfoSettings) {
  StatusOr<AgentConfig> c = Resolve(MinimalFlags(), {}, kSecretFile);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->jax_coordinator, std::nullopt);
  // The coordinating agent: its advertised host, port 8476.
  EXPECT_EQ(JaxCoordinator(*c), (Endpoint{"127.0.0.1", 8476}));

  AgentFlags flags = MinimalFlags();
  flags.coordinator = "node0:7701";
  c = Resolve(flags, {{"STRATA_NODE_RANK", "3"}}, kSecretFile);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->node_rank, 3);
  EXPECT_EQ(JaxCoordinator(*c), (Endpoint{"node0", 8476}));

  c = Resolve(flags, {{"STRATA_JAX_COORDINATOR", "10.0.0.1:1234"}}, kSecretFile);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(JaxCoordinator(*c), (Endpoint{"10.0.0.1", 1234}));
  flags.jax_coordinator = "tcp://[fe80::1]:5";
  c = Resolve(flags, {{"STRATA_JAX_COORDINATOR", "10.0.0.1:1234"}}, kSecretFile);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(JaxCoordinator(*c).ToString(), "[fe80::1]:5");

  flags.jax_coordinator = "nohost";
  ExpectError(Resolve(flags, {}, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"--jax-coordinator", "nohost"});
  ExpectError(Resolve(MinimalFlags(), {{"STRATA_NODE_RANK", "-1"}}, kSecretFile).status(),
              StatusCode::kInvalidArgument, {"STRATA_NODE_RANK"});
}

TEST(AgentConfigTest, AdvertiseDefaultsFromListen) {
  struct Case {
    std::string listen;
    Endpoint advertise;
  };
  for (const Case& c : std::vector<Case>{{"0.0.0.0:7000", {"127.0.0.1", 7000}},
                                         {"[::]:7000", {"::1", 7000}},
                                         {"10.0.0.5:7001", {"10.0.0.5", 7001}},
                                         {"node7:7002", {"node7", 7002}}}) {
    AgentFlags flags = MinimalFlags();
    flags.listen = c.listen;
    StatusOr<AgentConfig> config = Resolve(flags, {}, kSecretFile);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    EXPECT_EQ(config->advertise, c.advertise) << c.listen;
  }
}

TEST(AgentConfigTest, BackupSettings) {
  StatusOr<AgentConfig> c = Resolve(MinimalFlags(), {}, kSecretFile);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->backup_url, std::nullopt);  // no backups by default
  EXPECT_EQ(c->backup_bandwidth_mib, 0);

  AgentFlags flags = MinimalFlags();
  flags.config_file = "/etc/agent.yaml";
  Files files = kSecretFile;
  files["/etc/agent.yaml"] =
      "backup: file:///mnt/backup\nbackup-interval-minutes: 30\nbackup-bandwidth: 200\n"
      "restore-backup: 2026-11-21_04-30\n";
  c = Resolve(flags, {{"STRATA_BACKUP", "s3://ckpt/job"}}, files);  // env over file
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->backup_url, "s3://ckpt/job");
  EXPECT_EQ(c->backup_interval_minutes, 30);
  EXPECT_EQ(c->backup_interval_steps, std::nullopt);
  EXPECT_EQ(c->backup_bandwidth_mib, 200);
  EXPECT_EQ(c->restore_backup, "2026-11-21_04-30");

  flags.backup = "file:///flag";
  c = Resolve(flags, {{"STRATA_BACKUP", "s3://ckpt/job"}}, files);  // flag over env
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->backup_url, "file:///flag");

  AgentFlags both = MinimalFlags();
  both.backup_interval_steps = 10;
  both.backup_interval_minutes = 5;
  ExpectError(Resolve(both, {}, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"--backup-interval-steps and --backup-interval-minutes are both set"});
  AgentFlags relative = MinimalFlags();
  relative.backup = "file://relative/dir";
  ExpectError(Resolve(relative, {}, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"--backup: \"file://relative/dir\" is not s3://bucket[/prefix] or file:///"});
  AgentFlags zero = MinimalFlags();
  zero.backup_interval_steps = 0;
  ExpectError(Resolve(zero, {}, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"--backup-interval-steps: 0 is out of range"});
}

TEST(AgentConfigTest, PeerTierSettings) {
  StatusOr<AgentConfig> c = Resolve(MinimalFlags(), {}, kSecretFile);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->redundancy, std::nullopt);  // copies, unless a job says otherwise
  EXPECT_EQ(c->failure_domain, "");

  AgentFlags flags = MinimalFlags();
  flags.config_file = "/etc/agent.yaml";
  Files files = kSecretFile;
  files["/etc/agent.yaml"] = "redundancy: xor(4)\nfailure-domain: rack-7\n";
  c = Resolve(flags, {{"STRATA_REDUNDANCY", "rs(6,2)"}}, files);  // env over file
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->redundancy->ToString(), "rs(6,2)");
  EXPECT_EQ(c->failure_domain, "rack-7");
  flags.redundancy = "copies";
  flags.failure_domain = "zone-a/rack-2";
  c = Resolve(flags, {{"STRATA_REDUNDANCY", "rs(6,2)"}}, files);  // flag over env
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->redundancy->coded());
  EXPECT_EQ(c->failure_domain, "zone-a/rack-2");

  AgentFlags bad = MinimalFlags();
  bad.redundancy = "rs(300,2)";
  ExpectError(Resolve(bad, {}, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"--redundancy: redundancy \"rs(300,2)\": rs(K,M) needs"});
  bad = MinimalFlags();
  bad.failure_domain = "rack 7";
  ExpectError(Resolve(bad, {}, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"--failure-domain: \"rack 7\" is not 1..64 bytes"});
}

// TLS is on (psk) unless a setting turns it off; certificates need their
// three files, which no other mode takes.
TEST(AgentConfigTest, TlsSettings) {
  StatusOr<AgentConfig> c = Resolve(MinimalFlags(), {}, kSecretFile);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tls.mode, net::TlsMode::kPsk);

  AgentFlags flags = MinimalFlags();
  flags.config_file = "/etc/agent.yaml";
  Files files = kSecretFile;
  files["/etc/agent.yaml"] =
      "tls: certificates\ntls-cert-file: /tls/agent.pem\ntls-key-file: /tls/agent.key\n"
      "tls-ca-file: /tls/ca.pem\n";
  c = Resolve(flags, {{"STRATA_TLS_CA_FILE", "/site/ca.pem"}}, files);  // env over file
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tls.mode, net::TlsMode::kCertificates);
  EXPECT_EQ(c->tls.cert_file, "/tls/agent.pem");
  EXPECT_EQ(c->tls.key_file, "/tls/agent.key");
  EXPECT_EQ(c->tls.ca_file, "/site/ca.pem");

  AgentFlags off = MinimalFlags();
  off.tls = "off";
  c = Resolve(off, {{"STRATA_TLS", "psk"}}, kSecretFile);  // flag over env
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tls.mode, net::TlsMode::kOff);

  AgentFlags bad = MinimalFlags();
  bad.tls = "tls1.2";
  ExpectError(Resolve(bad, {}, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"--tls: TLS mode \"tls1.2\": expected psk, certificates or off"});
  bad = MinimalFlags();
  bad.tls_cert_file = "/tls/agent.pem";
  ExpectError(Resolve(bad, {}, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"--tls-cert-file: applies only with tls: certificates"});
  bad = MinimalFlags();
  bad.tls = "certificates";
  bad.tls_cert_file = "/tls/agent.pem";
  ExpectError(Resolve(bad, {}, kSecretFile).status(), StatusCode::kInvalidArgument,
              {"tls: certificates needs tls-key-file"});
}

TEST(AgentConfigTest, BadValuesNameTheirSource) {
  struct Case {
    EnvVars env;
    AgentFlags flags;
    std::string_view want;
  };
  AgentFlags bad_listen = MinimalFlags();
  bad_listen.listen = "x";
  AgentFlags wildcard = MinimalFlags();
  wildcard.advertise = "0.0.0.0:7701";
  AgentFlags bad_streams = MinimalFlags();
  bad_streams.data_streams = 0;
  AgentFlags bad_rank = MinimalFlags();
  bad_rank.node_rank = -1;
  AgentFlags bad_max = MinimalFlags();
  bad_max.max_message_bytes = 100;
  for (const Case& c : std::vector<Case>{
           {{}, bad_listen, "--listen: \"x\" is not host:port: missing :port"},
           {{{"STRATA_COORDINATOR", "c:99999"}},
            MinimalFlags(),
            "STRATA_COORDINATOR: \"c:99999\" is not host:port"},
           {{{"STRATA_ADVERTISE", "[::1"}}, MinimalFlags(), "STRATA_ADVERTISE: \"[::1\""},
           {{}, wildcard, "--advertise: \"0.0.0.0:7701\" is a wildcard address"},
           {{{"STRATA_LOG_LEVEL", "loud"}},
            MinimalFlags(),
            "STRATA_LOG_LEVEL: \"loud\" is not one of trace, debug, info, warn"},
           {{}, bad_streams, "--data-streams: 0 is out of range 1..64"},
           {{}, bad_rank, "--node-rank: -1 is out of range 0..99999"},
           {{}, bad_max, "--max-message-bytes: 100 is out of range 65536..1073741824"}}) {
    ExpectError(Resolve(c.flags, c.env, kSecretFile).status(), StatusCode::kInvalidArgument,
                {c.want});
  }
}

TEST(AgentConfigTest, ConfigFileErrors) {
  struct Case {
    std::string text;
    std::string_view want;
  };
  for (const Case& c :
       std::vector<Case>{{"lisen: h:1\n", "/cfg: unknown key \"lisen\""},
                         {"secret: inline-secret-is-not-allowed\n", "/cfg: unknown key \"secret\""},
                         {"listen: [h, 1]\n", "/cfg: listen: expected a single value, got a list"},
                         {"listen: x\n", "/cfg: listen: \"x\" is not host:port"},
                         {"data-streams: many\n", "/cfg: data-streams: \"many\" is not an integer"},
                         {"data-streams: 65\n", "/cfg: data-streams: 65 is out of range 1..64"},
                         {"listen: h:1\nlisten: h:2\n", "/cfg: listen is given more than once"},
                         {"- a\n", "/cfg: is a list, not a mapping"},
                         {"listen: [h:1\n", "/cfg: not valid YAML at line 2"}}) {
    AgentFlags flags = MinimalFlags();
    flags.config_file = "/cfg";
    Files files = kSecretFile;
    files["/cfg"] = c.text;
    ExpectError(Resolve(flags, {}, files).status(), StatusCode::kInvalidArgument, {c.want});
  }
  AgentFlags flags = MinimalFlags();
  flags.config_file = "/missing.yaml";
  ExpectError(Resolve(flags, {}, kSecretFile).status(), StatusCode::kNotFound,
              {"--config: /missing.yaml: no such file"});
}

TEST(AgentConfigTest, EmptyConfigFileMeansDefaults) {
  for (std::string_view text : {"", "# nothing\n", "~\n"}) {
    AgentFlags flags = MinimalFlags();
    flags.config_file = "/cfg";
    Files files = kSecretFile;
    files["/cfg"] = std::string(text);
    StatusOr<AgentConfig> c = Resolve(flags, {}, files);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->listen, (Endpoint{"0.0.0.0", 7701}));
  }
}

TEST(AgentConfigTest, RealFilesAndEnvironment) {
  testing::ScratchDir dir("agentcfg");
  testing::WriteFile(dir.Sub("agent.yaml"),
                     "listen: 127.0.0.1:7999\nsecret-file: " + dir.Sub("secret") + "\n");
  testing::WriteSecretFile(dir.Sub("secret"), std::string(kSecret) + "\n");
  AgentFlags flags;
  flags.config_file = dir.Sub("agent.yaml");
  flags.local_dir = dir.path();
  StatusOr<AgentConfig> c = ResolveAgentConfig(flags);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->local_dir, dir.path());
  EXPECT_EQ(c->secret, kSecret);

  flags.config_file = dir.Sub("absent.yaml");
  ExpectError(ResolveAgentConfig(flags).status(), StatusCode::kNotFound, {"absent.yaml"});
}

// A secret file every user of the node may read is no secret: refused,
// with the fix. Group-readable is the operator's choice.
TEST(AgentConfigTest, ASecretFileOthersMayReadIsRefused) {
  testing::ScratchDir dir("agentcfg-mode");
  const std::string path = dir.Sub("secret");
  testing::WriteSecretFile(path, std::string(kSecret) + "\n");
  AgentFlags flags;
  flags.local_dir = dir.path();
  flags.secret_file = path;
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  ExpectError(ResolveAgentConfig(flags).status(), StatusCode::kPermissionDenied,
              {"--secret-file", path, "may be read by every user of this node (mode 0644)",
               "chmod 0600 " + path});
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  StatusOr<AgentConfig> c = ResolveAgentConfig(flags);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->secret, kSecret);
}

}  // namespace
}  // namespace strata::agent
