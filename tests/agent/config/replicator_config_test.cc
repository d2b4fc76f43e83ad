// Copyright 2026 The Strata Authors.
//
// Tests of host:port parsing and of replicator.yaml parsing and validation
// (agent/config/config.h); the messages reach the client's replicator.failed.
#include <gtest/gtest.h>
#include <stdlib.h>

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

StatusOr<ReplicatorConfig> Parse(std::string_view yaml, EnvVars env = {}) {
  testing::SaveFuzzSeed("config", yaml);
  return ParseReplicatorConfig(yaml, FakeGetenv(std::move(env)));
}

// A valid replicator.yaml for 4 nodes, rank 1, with `extra` lines appended.
std::string Base(std::string_view extra = "") {
  return "job-name: run\nframework: orbax\nnode-rank: 1\nnodes: 4\n" + std::string(extra);
}

// A valid replicator.yaml with the line for `key` replaced by `line` (or
// removed when `line` is empty).
std::string BaseWith(std::string_view key, std::string_view line) {
  std::string out;
  for (std::string_view l : {"job-name: run", "framework: orbax", "node-rank: 1", "nodes: 4"}) {
    bool match = l.starts_with(std::string(key) + ":");
    if (!match) out += std::string(l) + "\n";
    if (match && !line.empty()) out += std::string(line) + "\n";
  }
  return out;
}

// ---------------------------------------------------------------------------
// Endpoint

TEST(EndpointTest, ParsesAcceptedForms) {
  struct Case {
    std::string_view text;
    std::string host;
    uint16_t port;
  };
  for (const Case& c : std::vector<Case>{{"localhost:7701", "localhost", 7701},
                                         {"tcp://10.0.0.1:8476", "10.0.0.1", 8476},
                                         {"[::1]:7701", "::1", 7701},
                                         {"tcp://[fe80::1:2]:80", "fe80::1:2", 80},
                                         {"node-3.example_x:1", "node-3.example_x", 1},
                                         {"h:65535", "h", 65535},
                                         {"h:0080", "h", 80}}) {
    StatusOr<Endpoint> hp = ParseEndpoint(c.text);
    ASSERT_TRUE(hp.ok()) << c.text << ": " << hp.status().ToString();
    EXPECT_EQ(hp->host, c.host) << c.text;
    EXPECT_EQ(hp->port, c.port) << c.text;
  }
}

TEST(EndpointTest, RejectsMalformedWithReason) {
  struct Case {
    std::string_view text;
    std::string_view reason;
  };
  for (const Case& c : std::vector<Case>{{"", "missing :port"},
                                         {"host", "missing :port"},
                                         {"host:", "port must be"},
                                         {":7701", "missing host"},
                                         {"host:0", "1..65535"},
                                         {"host:65536", "1..65535"},
                                         {"host:-1", "1..65535"},
                                         {"host:+80", "1..65535"},
                                         {"host: 80", "1..65535"},
                                         {"host:80x", "1..65535"},
                                         {"http://host:80", "only tcp://"},
                                         {"tcp://tcp://h:1", "only tcp://"},
                                         {"::1:80", "brackets"},
                                         {"[::1]", "missing :port"},
                                         {"[::1]80", "missing :port"},
                                         {"[::1:80", "missing ']'"},
                                         {"[]:80", "IPv6"},
                                         {"[zz:1]:80", "IPv6"},
                                         {"[127.0.0.1]:80", "IPv6"},
                                         {"a b:80", "bad host name"},
                                         {"h/x:80", "bad host name"}}) {
    StatusOr<Endpoint> hp = ParseEndpoint(c.text);
    ASSERT_FALSE(hp.ok()) << c.text;
    std::string quoted = "\"" + std::string(c.text) + "\"";
    ExpectError(hp.status(), StatusCode::kInvalidArgument, {quoted, "is not host:port", c.reason});
  }
}

TEST(EndpointTest, ErrorQuotesAtMost64BytesOnOneLine) {
  std::string text = std::string(1000, 'a') + "\n:x";
  StatusOr<Endpoint> hp = ParseEndpoint(text);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.status().message().find("\"" + std::string(64, 'a') + "...\""), std::string::npos)
      << hp.status().message();
  EXPECT_EQ(hp.status().message().find(std::string(65, 'a')), std::string::npos);
  EXPECT_EQ(hp.status().message().find('\n'), std::string::npos);
}

TEST(EndpointTest, ToStringBracketsIpv6AndRoundTrips) {
  EXPECT_EQ((Endpoint{"h", 1}).ToString(), "h:1");
  EXPECT_EQ((Endpoint{"::1", 7701}).ToString(), "[::1]:7701");
  for (std::string_view text : {"10.0.0.1:80", "[fe80::2]:9", "example.com:65535"}) {
    StatusOr<Endpoint> hp = ParseEndpoint(text);
    ASSERT_TRUE(hp.ok()) << text;
    EXPECT_EQ(hp->ToString(), text);
  }
}

// ---------------------------------------------------------------------------
// replicator.yaml: accepted documents

TEST(ReplicatorConfigTest, OrbaxStyleFlowListWithoutTrailingNewline) {
  StatusOr<ReplicatorConfig> c = Parse(
      "job-name: my-run\nframework: orbax\nassume-data-parallelism: 2\nnode-rank: 1\n"
      "nodes: 4\npeer-ranks: [0, 3]\nbackup-interval-minutes: 30");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job_name, "my-run");
  EXPECT_EQ(c->framework, Framework::kOrbax);
  EXPECT_EQ(c->node_rank, 1);
  EXPECT_EQ(c->nodes, 4);
  EXPECT_EQ(c->peer_ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(c->peers_per_node, std::nullopt);
  EXPECT_EQ(c->assume_data_parallelism, 2);
  EXPECT_EQ(c->backup_interval_minutes, 30);
  EXPECT_EQ(c->backup_interval_steps, std::nullopt);
  EXPECT_EQ(c->workers_per_node, 1);
  EXPECT_EQ(c->master, std::nullopt);
  EXPECT_EQ(c->master_port, std::nullopt);
  EXPECT_TRUE(c->unknown_keys.empty());
}

TEST(ReplicatorConfigTest, NemoStyleBlockListsAndPeersPerNode) {
  StatusOr<ReplicatorConfig> c = Parse(
      "job-name: nemo.job_1\nframework: pytorch.distributed\nnode-rank: 0\nnodes: 8\n"
      "peers-per-node: 2\nbackup-interval-steps: 100\nworkers-per-node: 8\n"
      "master: tcp://10.1.2.3:29500\nmaster-port: 29501\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job_name, "nemo.job_1");
  EXPECT_EQ(c->framework, Framework::kPytorchDistributed);
  EXPECT_EQ(c->peers_per_node, 2);
  EXPECT_EQ(c->peer_ranks, std::nullopt);
  EXPECT_EQ(c->backup_interval_steps, 100);
  EXPECT_EQ(c->workers_per_node, 8);
  EXPECT_EQ(c->master, "10.1.2.3:29500");
  EXPECT_EQ(c->master_port, 29501);
}

// The NeMo plugin's init_high_scale_ckpt(peer_ranks=[...]) writes both, as
// PyYAML's block style: peer-ranks wins, as with the GKE replicator.
TEST(ReplicatorConfigTest, NemoPluginWritesPeerRanksAndPeersPerNode) {
  StatusOr<ReplicatorConfig> c = Parse(
      "job-name: my-job\nframework: pytorch.distributed\nnode-rank: 0\nnodes: 4\n"
      "peers-per-node: 1\nbackup-interval-minutes: 30\npeer-ranks:\n- 1\n- 3\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->peer_ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(c->peers_per_node, std::nullopt);
  ASSERT_EQ(c->notes.size(), 1u);
  EXPECT_EQ(c->notes[0],
            "peer-ranks and peers-per-node are both given: using peer-ranks (2 peers), ignoring "
            "peers-per-node: 1");
}

// The peer tier's code, as a job asks for it: parsed, and refused for a
// job too small to form one group, naming the key.
TEST(ReplicatorConfigTest, RedundancyKey) {
  StatusOr<ReplicatorConfig> c =
      Parse("job-name: j\nframework: orbax\nnode-rank: 0\nnodes: 8\nredundancy: rs(6,2)\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->redundancy.has_value());
  EXPECT_EQ(c->redundancy->ToString(), "rs(6,2)");
  c = Parse("job-name: j\nframework: orbax\nnode-rank: 0\nnodes: 8\nredundancy: xor\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->redundancy->ToString(), "xor(8)");
  c = Parse("job-name: j\nframework: orbax\nnode-rank: 0\nnodes: 8\n");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->redundancy, std::nullopt);  // the agent's, else copies
  ExpectError(Parse("job-name: j\nframework: orbax\nnode-rank: 0\nnodes: 4\nredundancy: rs(6,2)\n")
                  .status(),
              StatusCode::kInvalidArgument,
              {"replicator.yaml: redundancy: rs(6,2) needs groups of 8 nodes; the job has 4"});
  ExpectError(
      Parse("job-name: j\nframework: orbax\nnode-rank: 0\nnodes: 4\nredundancy: raid5\n").status(),
      StatusCode::kInvalidArgument,
      {"replicator.yaml: redundancy \"raid5\": expected copies, xor, xor(N) or rs(K,M)"});
}

// Legacy MaxText writes replicator_backup_interval_minutes, 0 by default:
// the yaml gives no cadence (the agent's --backup-interval-* applies).
TEST(ReplicatorConfigTest, BackupIntervalOfZeroMinutesGivesNoCadence) {
  StatusOr<ReplicatorConfig> c = Parse(Base("backup-interval-minutes: 0"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->backup_interval_minutes, std::nullopt);
  EXPECT_EQ(c->backup_interval_steps, std::nullopt);
  ASSERT_EQ(c->notes.size(), 1u);
  EXPECT_EQ(c->notes[0],
            "backup-interval-minutes: 0: no cadence from the client (the agent's own applies, if "
            "any)");
}

TEST(ReplicatorConfigTest, ListStylesAndTrailingNewlinesAgree) {
  for (std::string_view list :
       {"peer-ranks: [0, 2]", "peer-ranks: [0,2]", "peer-ranks:\n  - 0\n  - 2",
        "peer-ranks:\n- 0\n- 2", "peer-ranks: ['0', \"2\"]"}) {
    for (std::string_view end : {"", "\n", "\n\n"}) {
      std::string yaml = Base(std::string(list) + std::string(end));
      StatusOr<ReplicatorConfig> c = Parse(yaml);
      ASSERT_TRUE(c.ok()) << yaml << "\n" << c.status().ToString();
      EXPECT_EQ(c->peer_ranks, (std::vector<int>{0, 2})) << yaml;
    }
  }
  StatusOr<ReplicatorConfig> c = Parse(Base("peer-ranks: []"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->peer_ranks, std::vector<int>());
}

TEST(ReplicatorConfigTest, FrameworkSpellings) {
  for (Framework f : {Framework::kOrbax, Framework::kPytorchDistributed, Framework::kPytorch}) {
    StatusOr<ReplicatorConfig> c =
        Parse(BaseWith("framework", "framework: " + std::string(FrameworkName(f))));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->framework, f);
  }
  EXPECT_EQ(FrameworkName(Framework::kPytorchDistributed), "pytorch.distributed");
}

TEST(ReplicatorConfigTest, ExpandsEnvironmentVariables) {
  EnvVars env = {{"JOBSET_NAME", "train"}, {"SUFFIX", "7"}, {"NODE_RANK", "2"},
                 {"NNODES", "4"},          {"PEER", "3"},   {"MASTER_ADDR", "10.0.0.9"}};
  StatusOr<ReplicatorConfig> c = Parse(
      "job-name: $JOBSET_NAME-${SUFFIX}\nframework: pytorch\nnode-rank: ${NODE_RANK}\n"
      "nodes: \"$NNODES\"\npeer-ranks: [$PEER]\nmaster: tcp://${MASTER_ADDR}:1234\n",
      env);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job_name, "train-7");
  EXPECT_EQ(c->node_rank, 2);
  EXPECT_EQ(c->nodes, 4);
  EXPECT_EQ(c->peer_ranks, (std::vector<int>{3}));
  EXPECT_EQ(c->master, "10.0.0.9:1234");
}

TEST(ReplicatorConfigTest, UnsetVariableExpandsToEmptyAndFailsValidation) {
  ExpectError(Parse(BaseWith("job-name", "job-name: $JOBSET_NAME")).status(),
              StatusCode::kInvalidArgument, {"replicator.yaml: job-name is empty"});
  ExpectError(Parse(BaseWith("nodes", "nodes: ${NNODES}")).status(), StatusCode::kInvalidArgument,
              {"replicator.yaml: nodes: \"\" is not an integer"});
}

TEST(ReplicatorConfigTest, DollarWithoutNameStaysLiteral) {
  ExpectError(Parse(BaseWith("job-name", "job-name: cost$5${x")).status(),
              StatusCode::kInvalidArgument, {"job-name: \"cost$5${x\" may only contain"});
}

TEST(ReplicatorConfigTest, RefusesToExpandSecretLookingVariables) {
  EnvVars env = {{"STRATA_SECRET", "supersecretvalue123"},
                 {"AWS_SECRET_ACCESS_KEY", "awskey12345"},
                 {"HF_TOKEN", "hf_abcdef"},
                 {"my_api_key", "apikeyvalue"}};
  for (std::string_view var :
       {"STRATA_SECRET", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "my_api_key", "STRATA_LISTEN"}) {
    Status s = Parse(BaseWith("job-name", "job-name: ${" + std::string(var) + "}"), env).status();
    ExpectError(s, StatusCode::kInvalidArgument,
                {"replicator.yaml: job-name: refusing to expand $" + std::string(var)});
    EXPECT_EQ(s.message().find(env.count(std::string(var)) ? env[std::string(var)] : "@"),
              std::string::npos)
        << s.message();
  }
}

TEST(ReplicatorConfigTest, IntegerLookingStringsAreIntegers) {
  StatusOr<ReplicatorConfig> c = Parse(
      "job-name: '12'\nframework: orbax\nnode-rank: ' 3 '\nnodes: \"+4\"\n"
      "workers-per-node: 002\npeers-per-node: '-0'\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job_name, "12");
  EXPECT_EQ(c->node_rank, 3);
  EXPECT_EQ(c->nodes, 4);
  EXPECT_EQ(c->workers_per_node, 2);
  EXPECT_EQ(c->peers_per_node, 0);
}

TEST(ReplicatorConfigTest, RejectsNonIntegersNamingTheKey) {
  for (std::string_view value :
       {"3x", "1e3", "1.5", "4.0", "true", "no", "0x10", "''", "'- 4'", "+-4", "'4 4'", "four"}) {
    std::string yaml = BaseWith("nodes", "nodes: " + std::string(value));
    ExpectError(Parse(yaml).status(), StatusCode::kInvalidArgument,
                {"replicator.yaml: nodes: ", "is not an integer"});
  }
  ExpectError(Parse(BaseWith("nodes", "nodes: 99999999999999999999999")).status(),
              StatusCode::kInvalidArgument,
              {"replicator.yaml: nodes: 99999999999999999999999 is out of range 1..100000"});
}

TEST(ReplicatorConfigTest, RejectsWrongTypes) {
  struct Case {
    std::string yaml;
    std::string_view want;
  };
  for (const Case& c : std::vector<Case>{
           {BaseWith("nodes", "nodes: [4]"), "nodes: expected a single value, got a list"},
           {BaseWith("job-name", "job-name: {a: 1}"),
            "job-name: expected a single value, got a mapping"},
           {Base("peer-ranks: 3"), "peer-ranks: expected a list, got a single value"},
           {Base("peer-ranks: {a: 1}"), "peer-ranks: expected a list, got a mapping"},
           {Base("peer-ranks: [[0]]"), "peer-ranks entry 1: expected a single value, got a list"},
           {Base("peer-ranks: [0, x]"), "peer-ranks entry 2: \"x\" is not an integer"},
           {Base("master: [h, 1]"), "master: expected a single value, got a list"},
           {Base("peer-ranks: &a [0, *a]"),  // a list that contains itself
            "peer-ranks entry 2: expected a single value, got a list"}}) {
    ExpectError(Parse(c.yaml).status(), StatusCode::kInvalidArgument,
                {"replicator.yaml: ", c.want});
  }
}

TEST(ReplicatorConfigTest, CollectsUnknownKeysInOrder) {
  StatusOr<ReplicatorConfig> c =
      Parse(Base("zeta: 1\nalpha: [1]\n" + std::string(100, 'k') + ": x\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->unknown_keys,
            (std::vector<std::string>{"zeta", "alpha", std::string(64, 'k') + "..."}));
  std::string many;
  for (int i = 0; i < 100; ++i) many += "extra" + std::to_string(i) + ": 1\n";
  c = Parse(Base(many));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->unknown_keys.size(), kMaxUnknownKeys);
  EXPECT_EQ(c->unknown_keys.front(), "extra0");
}

// ---------------------------------------------------------------------------
// replicator.yaml: rejected documents

TEST(ReplicatorConfigTest, RejectsEmptyAndNonMappingDocuments) {
  struct Case {
    std::string_view yaml;
    std::string_view want;
  };
  for (const Case& c : std::vector<Case>{
           {"", "replicator.yaml: the document is empty"},
           {"\n\n   \n", "replicator.yaml: the document is empty"},
           {"# only a comment\n", "replicator.yaml: the document is empty"},
           {"null", "replicator.yaml: the document is empty"},
           {"~\n", "replicator.yaml: the document is empty"},
           {"just some text", "replicator.yaml: the document is not a mapping (it is a single"},
           {"42", "replicator.yaml: the document is not a mapping (it is a single"},
           {"- job-name: x\n- nodes: 1\n", "the document is not a mapping (it is a list)"},
           {"[1, 3]", "the document is not a mapping (it is a list)"},
           // yaml-cpp 0.7's LoadAll() allocates without bound on ",".
           {",", "replicator.yaml: the document is empty"}}) {
    ExpectError(Parse(c.yaml).status(), StatusCode::kInvalidArgument, {c.want});
  }
}

TEST(ReplicatorConfigTest, SyntaxErrorsGiveLineAndColumn) {
  struct Case {
    std::string_view yaml;
    std::string_view where;
  };
  for (const Case& c : std::vector<Case>{{"peer-ranks: [1, 3", "line 1, column "},
                                         {"job-name: x\n  bad: indent\n", "line 2, column 6"},
                                         {"job-name: x\nnodes: 4\n- item\n", "line 3, column 1"},
                                         {"job-name: x\nnodes: 4\nk: v: w\n", "line 3, column 5"},
                                         {"{{{{", "line 1"},
                                         {"\t- x", "line 1, column 2"},
                                         {"key: \"a\\qb\"", "line 1"}}) {
    ExpectError(Parse(c.yaml).status(), StatusCode::kInvalidArgument,
                {"replicator.yaml: not valid YAML at ", c.where});
  }
}

TEST(ReplicatorConfigTest, RejectsOversizedInputBeforeParsing) {
  std::string junk(2 << 20, '[');
  ExpectError(Parse(junk).status(), StatusCode::kInvalidArgument,
              {"replicator.yaml: 2097152 bytes, more than 1048576 allowed"});
  std::string just_over = Base() + "# " + std::string(kMaxConfigFileBytes, 'x');
  ExpectError(Parse(just_over).status(), StatusCode::kInvalidArgument, {"more than 1048576"});
  std::string padded = Base() + "# " + std::string(kMaxConfigFileBytes - Base().size() - 2, 'x');
  ASSERT_EQ(padded.size(), kMaxConfigFileBytes);
  EXPECT_TRUE(Parse(padded).ok());
}

// Junk below the size limit is parsed and rejected without crashing; the
// message is one bounded line.
TEST(ReplicatorConfigTest, RejectsMegabyteOfJunk) {
  std::string random(kMaxConfigFileBytes, '\0');
  uint64_t x = 0x9e3779b97f4a7c15;
  for (char& c : random) {
    x = x * 6364136223846793005 + 1442695040888963407;
    c = static_cast<char>(x >> 56);
  }
  for (const std::string& junk :
       {random, std::string(kMaxConfigFileBytes, '['), std::string(kMaxConfigFileBytes, '{'),
        std::string(kMaxConfigFileBytes, '-'),
        std::string(kMaxConfigFileBytes / 2, 'x') + ": y\n"}) {
    Status s = Parse(junk).status();
    ExpectError(s, StatusCode::kInvalidArgument, {"replicator.yaml: "});
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
    EXPECT_LT(s.message().size(), 200u) << s.message();
  }
}

TEST(ReplicatorConfigTest, RejectsDuplicateAndStructuredKeys) {
  ExpectError(Parse(Base("node-rank: 2\n")).status(), StatusCode::kInvalidArgument,
              {"replicator.yaml: node-rank is given more than once"});
  ExpectError(Parse(Base("[a, b]: 1\n")).status(), StatusCode::kInvalidArgument,
              {"replicator.yaml: a key is a list, not a name"});
}

TEST(ReplicatorConfigTest, RequiredKeys) {
  for (std::string_view key : {"job-name", "framework", "nodes", "node-rank"}) {
    ExpectError(Parse(BaseWith(key, "")).status(), StatusCode::kInvalidArgument,
                {"replicator.yaml: " + std::string(key) + " is required"});
    ExpectError(Parse(BaseWith(key, std::string(key) + ":")).status(), StatusCode::kInvalidArgument,
                {"replicator.yaml: " + std::string(key) + " has no value"});
  }
}

TEST(ReplicatorConfigTest, ValidatesJobName) {
  struct Case {
    std::string name;
    std::string_view want;
  };
  for (const Case& c :
       std::vector<Case>{{"../../x", "job-name: \"../../x\" must not be \".\" or contain \"..\""},
                         {".", "job-name: \".\" must not be"},
                         {"..", "job-name: \"..\" must not be"},
                         {"a..b", "job-name: \"a..b\" must not be"},
                         {"a/b", "job-name: \"a/b\" may only contain A-Z a-z 0-9 . _ -"},
                         {"'/abs'", "job-name: \"/abs\" may only contain"},
                         {"'a b'", "job-name: \"a b\" may only contain"},
                         {"\"a\\tb\"", "job-name: \"a?b\" may only contain"},
                         {"\"caf\\u00e9\"", "job-name: \"caf??\" may only contain"},
                         {"''", "job-name is empty"},
                         {std::string(129, 'a'), "is 129 bytes, more than 128"}}) {
    ExpectError(Parse(BaseWith("job-name", "job-name: " + c.name)).status(),
                StatusCode::kInvalidArgument, {"replicator.yaml: ", c.want});
  }
  StatusOr<ReplicatorConfig> c = Parse(BaseWith("job-name", "job-name: " + std::string(128, 'a')));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job_name.size(), 128u);
}

TEST(ReplicatorConfigTest, LongHostileValuesAreTruncatedTo64Bytes) {
  std::string long_name = std::string(5000, 'a') + "/";
  Status s = Parse(BaseWith("job-name", "job-name: " + long_name)).status();
  ExpectError(s, StatusCode::kInvalidArgument,
              {"job-name: \"" + std::string(64, 'a') + "...\" is 5001 bytes"});
  EXPECT_EQ(s.message().find(std::string(65, 'a')), std::string::npos);
  s = Parse(BaseWith("framework", "framework: \"" + std::string(300, 'z') + "\\n\"")).status();
  ExpectError(s, StatusCode::kInvalidArgument, {"framework: \"" + std::string(64, 'z') + "...\""});
  EXPECT_EQ(s.message().find(std::string(65, 'z')), std::string::npos);
}

TEST(ReplicatorConfigTest, ValidatesRanges) {
  struct Case {
    std::string yaml;
    std::string_view want;
  };
  std::string big = "job-name: j\nframework: orbax\nnode-rank: 0\nnodes: 1000\n";
  std::string many_peers = "peer-ranks: [";
  for (int i = 1; i <= 65; ++i) many_peers += std::to_string(i) + (i < 65 ? "," : "]\n");
  for (const Case& c : std::vector<Case>{
           {BaseWith("framework", "framework: tensorflow"),
            "framework: \"tensorflow\" is not one of orbax, pytorch.distributed, pytorch"},
           {BaseWith("framework", "framework: Orbax"), "framework: \"Orbax\" is not one of"},
           {BaseWith("nodes", "nodes: 0"), "nodes: 0 is out of range 1..100000"},
           {BaseWith("nodes", "nodes: 100001"), "nodes: 100001 is out of range 1..100000"},
           {BaseWith("nodes", "nodes: -4"), "nodes: -4 is out of range 1..100000"},
           {BaseWith("node-rank", "node-rank: -1"), "node-rank: -1 is out of range 0..3"},
           {BaseWith("node-rank", "node-rank: 4"), "node-rank: 4 is out of range 0..3"},
           {Base("workers-per-node: 0"), "workers-per-node: 0 is out of range 1..1024"},
           {Base("workers-per-node: 1025"), "workers-per-node: 1025 is out of range 1..1024"},
           {Base("peer-ranks: [4]"), "peer-ranks entry 1: 4 is out of range 0..3"},
           {Base("peer-ranks: [0, -1]"), "peer-ranks entry 2: -1 is out of range 0..3"},
           {Base("peer-ranks: [1]"), "peer-ranks: 1 is this node's own node-rank"},
           {Base("peer-ranks: [0, 2, 0]"), "peer-ranks: 0 is listed more than once"},
           {big + many_peers, "peer-ranks: has 65 entries, more than 64"},
           {Base("peers-per-node: 4"), "peers-per-node: 4 is out of range 0..3"},
           {Base("peers-per-node: -1"), "peers-per-node: -1 is out of range 0..3"},
           {big + "peers-per-node: 65", "peers-per-node: 65 is out of range 0..64"},
           {Base("assume-data-parallelism: 0"), "assume-data-parallelism: 0 is out of range"},
           {Base("assume-data-parallelism: 3"),
            "assume-data-parallelism: 3 does not divide nodes (4)"},
           {Base("backup-interval-minutes: -1"),
            "backup-interval-minutes: -1 is out of range 0..2147483647"},
           {Base("backup-interval-steps: -5"), "backup-interval-steps: -5 is out of range"},
           {Base("backup-interval-minutes: 5\nbackup-interval-steps: 5"),
            "backup-interval-minutes and backup-interval-steps are both given"},
           {Base("master-port: 0"), "master-port: 0 is out of range 1..65535"},
           {Base("master-port: 65536"), "master-port: 65536 is out of range 1..65535"},
           {Base("master: nohost"), "master: \"nohost\" is not host:port: missing :port"},
           {Base("master: http://h:1"), "master: \"http://h:1\" is not host:port: only tcp://"},
           {Base("master: tcp://h:0"), "master: \"tcp://h:0\" is not host:port: the port"}}) {
    ExpectError(Parse(c.yaml).status(), StatusCode::kInvalidArgument,
                {"replicator.yaml: ", c.want});
  }
}

TEST(ReplicatorConfigTest, AcceptsBoundaryValues) {
  StatusOr<ReplicatorConfig> c = Parse(
      "job-name: A-z_0.9\nframework: pytorch\nnode-rank: 99999\nnodes: 100000\n"
      "workers-per-node: 1024\npeers-per-node: 64\nassume-data-parallelism: 100000\n"
      "backup-interval-steps: 1\nmaster: '[::1]:65535'\nmaster-port: 1\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->node_rank, 99999);
  EXPECT_EQ(c->workers_per_node, 1024);
  EXPECT_EQ(c->peers_per_node, 64);
  EXPECT_EQ(c->assume_data_parallelism, 100000);
  EXPECT_EQ(c->master, "[::1]:65535");
  c = Parse("job-name: solo\nframework: orbax\nnode-rank: 0\nnodes: 1\npeers-per-node: 0\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->peers_per_node, 0);
}

TEST(ReplicatorConfigTest, ProcessEnvironmentOverload) {
  ASSERT_EQ(setenv("STRATA_TEST_UNUSED_X", "1", 1), 0);  // refused, never read
  ASSERT_EQ(setenv("AGENT_CONFIG_TEST_JOB", "from-env", 1), 0);
  StatusOr<ReplicatorConfig> c =
      ParseReplicatorConfig(BaseWith("job-name", "job-name: ${AGENT_CONFIG_TEST_JOB}"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job_name, "from-env");
  unsetenv("AGENT_CONFIG_TEST_JOB");
  unsetenv("STRATA_TEST_UNUSED_X");
}

}  // namespace
}  // namespace strata::agent
