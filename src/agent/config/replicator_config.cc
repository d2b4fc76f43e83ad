// Copyright 2026 The Strata Authors.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <utility>

#include "agent/config/config.h"
#include "agent/config/config_yaml.h"
#include "strata/env.h"
#include "util/file_util.h"
namespace strata::agent {
namespace config_internal {

// ---------------------------------------------------------------------------
// Text helpers

// At most `max` bytes of `text`, with every byte outside printable ASCII
// replaced by '?', so the result is one line of plain text.
std::string Sanitize(std::string_view text, size_t max) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (text.size() > max) out += "...";
  return out;
}

// `text` in double quotes, sanitized and truncated to kMaxQuotedBytes.
std::string Quote(std::string_view text) { return "\"" + Sanitize(text, kMaxQuotedBytes) + "\""; }

std::string_view TrimSpace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// Parses `text` as a base-10 integer in [lo, hi]: optional surrounding
// whitespace, an optional sign, digits. The error message quotes the text.
StatusOr<int64_t> ParseIntInRange(std::string_view text, int64_t lo, int64_t hi) {
  std::string_view t = TrimSpace(text);
  std::string_view digits = t;
  if (digits.starts_with('+') || digits.starts_with('-')) digits.remove_prefix(1);
  bool well_formed = !digits.empty() && std::all_of(digits.begin(), digits.end(),
                                                    [](char c) { return c >= '0' && c <= '9'; });
  if (!well_formed) return InvalidArgumentError(Quote(text) + " is not an integer");
  if (t.starts_with('+')) t.remove_prefix(1);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec != std::errc() || end != t.data() + t.size() || value < lo || value > hi) {
    return InvalidArgumentError(Sanitize(TrimSpace(text), kMaxQuotedBytes) + " is out of range " +
                                std::to_string(lo) + ".." + std::to_string(hi));
  }
  return value;
}

// ---------------------------------------------------------------------------
// Environment expansion

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// Variables that may hold credentials are never expanded into a
// replicator.yaml value: the value can end up in client-visible files.
bool IsSensitiveEnvName(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.starts_with("STRATA_")) return true;
  for (std::string_view word : {"SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY"}) {
    if (upper.find(word) != std::string::npos) return true;
  }
  return false;
}

// Finds the variable reference starting at text[i] == '$': sets *name and
// returns the index just past the reference, or i when there is none.
size_t ScanVarRef(std::string_view text, size_t i, std::string_view* name) {
  bool braced = i + 1 < text.size() && text[i + 1] == '{';
  size_t begin = i + (braced ? 2 : 1);
  size_t end = begin;
  if (end < text.size() && IsNameStart(text[end])) {
    while (end < text.size() && IsNameChar(text[end])) ++end;
  }
  if (end == begin) return i;
  if (braced && (end >= text.size() || text[end] != '}')) return i;
  *name = text.substr(begin, end - begin);
  return braced ? end + 1 : end;
}

// Replaces $NAME and ${NAME} by their values ("" when unset).
StatusOr<std::string> ExpandEnv(std::string_view text, const GetenvFn& getenv) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    std::string_view name;
    size_t next = text[i] == '$' ? ScanVarRef(text, i, &name) : i;
    if (next == i) {
      out += text[i++];
      continue;
    }
    if (IsSensitiveEnvName(name)) {
      return InvalidArgumentError("refusing to expand $" + Sanitize(name, kMaxQuotedBytes) +
                                  ", which may hold a secret");
    }
    out += getenv(std::string(name)).value_or("");
    if (out.size() > kMaxConfigFileBytes) {
      return InvalidArgumentError("value is longer than " + std::to_string(kMaxConfigFileBytes) +
                                  " bytes after expanding environment variables");
    }
    i = next;
  }
  return out;
}

// ---------------------------------------------------------------------------
// YAML documents

std::string KindName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return "a single value";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// Parses the first YAML document in `text`: Null when there is none. `what`
// names the text in errors. (Not YAML::LoadAll: in yaml-cpp 0.7 it loops,
// allocating without bound, on input such as ",": jbeder/yaml-cpp#1040.)
StatusOr<YAML::Node> LoadDocument(std::string_view text, std::string_view what) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    std::string where = e.mark.is_null() ? std::string()
                                         : " at line " + std::to_string(e.mark.line + 1) +
                                               ", column " + std::to_string(e.mark.column + 1);
    return InvalidArgumentError(std::string(what) + ": not valid YAML" + where + ": " +
                                Sanitize(e.msg, kMaxQuotedBytes));
  }
}

StatusOr<Fields> CollectFields(const YAML::Node& map, std::span<const std::string_view> known,
                               std::string_view what) {
  Fields fields;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) {
      return InvalidArgumentError(std::string(what) + ": a key is " + KindName(entry.first) +
                                  ", not a name");
    }
    const std::string& key = entry.first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      if (fields.unknown.size() < kMaxUnknownKeys) {
        fields.unknown.push_back(Sanitize(key, kMaxQuotedBytes));
      }
    } else if (!fields.known.emplace(key, entry.second).second) {
      return InvalidArgumentError(std::string(what) + ": " + key + " is given more than once");
    }
  }
  return fields;
}

StatusOr<std::optional<std::vector<int>>> FieldReader::IntList(std::string_view key, int lo, int hi,
                                                               size_t max_entries) const {
  const YAML::Node* node = Find(key);
  if (node == nullptr) return std::optional<std::vector<int>>();
  if (!node->IsSequence()) {
    return Error(std::string(key) + ": expected a list, got " + KindName(*node));
  }
  if (node->size() > max_entries) {
    return Error(std::string(key) + ": has " + std::to_string(node->size()) +
                 " entries, more than " + std::to_string(max_entries));
  }
  std::vector<int> out;
  for (const YAML::Node& entry : *node) {
    std::string entry_key = std::string(key) + " entry " + std::to_string(out.size() + 1);
    STRATA_ASSIGN_OR_RETURN(std::string text, ScalarText(entry, entry_key));
    StatusOr<int64_t> value = ParseIntInRange(text, lo, hi);
    if (!value.ok()) return value.status().WithContext(Context(entry_key));
    out.push_back(static_cast<int>(*value));
  }
  return std::optional<std::vector<int>>(std::move(out));
}

}  // namespace config_internal

namespace {

using config_internal::CollectFields;
using config_internal::FieldReader;
using config_internal::Fields;
using config_internal::KindName;
using config_internal::LoadDocument;
using config_internal::NoExceptions;
using config_internal::ParseIntInRange;
using config_internal::Quote;
using config_internal::Sanitize;

constexpr std::string_view kReplicatorWhat = "replicator.yaml";

// ---------------------------------------------------------------------------
// replicator.yaml

// clang-format off
constexpr std::string_view kReplicatorKeys[] = {
    "job-name", "framework", "node-rank", "nodes", "workers-per-node",
    "peer-ranks", "peers-per-node", "assume-data-parallelism",
    "backup-interval-minutes", "backup-interval-steps", "master", "master-port",
    "redundancy"};
// clang-format on

Status ValidateJobName(std::string_view name) {
  std::string prefix = "job-name: " + Quote(name);
  if (name.empty()) return InvalidArgumentError("job-name is empty");
  if (name.size() > kMaxJobNameBytes) {
    return InvalidArgumentError(prefix + " is " + std::to_string(name.size()) +
                                " bytes, more than " + std::to_string(kMaxJobNameBytes));
  }
  if (name == "." || name.find("..") != std::string_view::npos) {
    return InvalidArgumentError(prefix + " must not be \".\" or contain \"..\"");
  }
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return InvalidArgumentError(prefix + " may only contain A-Z a-z 0-9 . _ -");
    }
  }
  return Status::Ok();
}

StatusOr<Framework> ParseFramework(std::string_view text) {
  for (Framework f : {Framework::kOrbax, Framework::kPytorchDistributed, Framework::kPytorch}) {
    if (text == FrameworkName(f)) return f;
  }
  return InvalidArgumentError("framework: " + Quote(text) +
                              " is not one of orbax, pytorch.distributed, pytorch");
}

Status ReadIdentity(const FieldReader& in, ReplicatorConfig* c) {
  STRATA_ASSIGN_OR_RETURN(std::optional<std::string> job, in.String("job-name"));
  if (!job) return in.Missing("job-name");
  Status s = ValidateJobName(*job);
  if (!s.ok()) return in.Error(s.message());
  c->job_name = std::move(*job);
  STRATA_ASSIGN_OR_RETURN(std::optional<std::string> framework, in.String("framework"));
  if (!framework) return in.Missing("framework");
  StatusOr<Framework> f = ParseFramework(*framework);
  if (!f.ok()) return in.Error(f.status().message());
  c->framework = *f;
  return Status::Ok();
}

Status ReadTopology(const FieldReader& in, ReplicatorConfig* c) {
  STRATA_ASSIGN_OR_RETURN(std::optional<int> nodes, in.Int("nodes", 1, wire::kMaxNodes));
  if (!nodes) return in.Missing("nodes");
  c->nodes = *nodes;
  STRATA_ASSIGN_OR_RETURN(std::optional<int> rank, in.Int("node-rank", 0, c->nodes - 1));
  if (!rank) return in.Missing("node-rank");
  c->node_rank = *rank;
  STRATA_ASSIGN_OR_RETURN(std::optional<int> workers,
                          in.Int("workers-per-node", 1, kMaxWorkersPerNode));
  c->workers_per_node = workers.value_or(1);
  return Status::Ok();
}

Status CheckPeerRanks(const FieldReader& in, const std::vector<int>& peers, int node_rank) {
  std::set<int> seen;
  for (int peer : peers) {
    if (peer == node_rank) {
      return in.Error("peer-ranks: " + std::to_string(peer) + " is this node's own node-rank");
    }
    if (!seen.insert(peer).second) {
      return in.Error("peer-ranks: " + std::to_string(peer) + " is listed more than once");
    }
  }
  return Status::Ok();
}

Status ReadPeers(const FieldReader& in, ReplicatorConfig* c) {
  int max_peers = std::min(kMaxPeers, c->nodes - 1);
  STRATA_ASSIGN_OR_RETURN(
      c->peer_ranks, in.IntList("peer-ranks", 0, c->nodes - 1, static_cast<size_t>(kMaxPeers)));
  if (c->peer_ranks) STRATA_RETURN_IF_ERROR(CheckPeerRanks(in, *c->peer_ranks, c->node_rank));
  STRATA_ASSIGN_OR_RETURN(c->peers_per_node, in.Int("peers-per-node", 0, max_peers));
  if (c->peer_ranks && c->peers_per_node) {
    c->notes.push_back("peer-ranks and peers-per-node are both given: using peer-ranks (" +
                       std::to_string(c->peer_ranks->size()) +
                       " peers), ignoring peers-per-node: " + std::to_string(*c->peers_per_node));
    c->peers_per_node.reset();
  }
  return Status::Ok();
}

Status ReadCadence(const FieldReader& in, ReplicatorConfig* c) {
  constexpr int kIntMax = std::numeric_limits<int>::max();
  STRATA_ASSIGN_OR_RETURN(c->assume_data_parallelism,
                          in.Int("assume-data-parallelism", 1, wire::kMaxNodes));
  if (c->assume_data_parallelism && c->nodes % *c->assume_data_parallelism != 0) {
    return in.Error("assume-data-parallelism: " + std::to_string(*c->assume_data_parallelism) +
                    " does not divide nodes (" + std::to_string(c->nodes) + ")");
  }
  STRATA_ASSIGN_OR_RETURN(c->backup_interval_minutes,
                          in.Int("backup-interval-minutes", 0, kIntMax));
  if (c->backup_interval_minutes == 0) {
    c->notes.push_back(
        "backup-interval-minutes: 0: no cadence from the client (the agent's own applies, if any)");
    c->backup_interval_minutes.reset();
  }
  STRATA_ASSIGN_OR_RETURN(c->backup_interval_steps, in.Int("backup-interval-steps", 1, kIntMax));
  if (c->backup_interval_minutes && c->backup_interval_steps) {
    return in.Error(
        "backup-interval-minutes and backup-interval-steps are both given; give only one");
  }
  return Status::Ok();
}

// The peer tier's code. A coded one needs a whole group of nodes, and
// takes the place of the peers a client names.
Status ReadRedundancy(const FieldReader& in, ReplicatorConfig* c) {
  STRATA_ASSIGN_OR_RETURN(std::optional<std::string> text, in.String("redundancy"));
  if (!text) return Status::Ok();
  StatusOr<ec::Redundancy> r = ec::Redundancy::Parse(*text);
  if (!r.ok()) return in.Error(r.status().message());
  if (r->coded() && c->nodes < r->group_size()) {
    return in.Error("redundancy: " + r->ToString() + " needs groups of " +
                    std::to_string(r->group_size()) + " nodes; the job has " +
                    std::to_string(c->nodes));
  }
  c->redundancy = *r;
  return Status::Ok();
}

Status ReadMaster(const FieldReader& in, ReplicatorConfig* c) {
  STRATA_ASSIGN_OR_RETURN(c->master_port, in.Int("master-port", 1, 65535));
  STRATA_ASSIGN_OR_RETURN(std::optional<std::string> master, in.String("master"));
  if (!master) return Status::Ok();
  StatusOr<Endpoint> hp = ParseEndpoint(*master);
  if (!hp.ok()) return hp.status().WithContext(in.Context("master"));
  c->master = hp->ToString();
  return Status::Ok();
}

StatusOr<ReplicatorConfig> ParseReplicatorUnguarded(std::string_view text, const GetenvFn& getenv) {
  std::string what(kReplicatorWhat);
  if (text.size() > kMaxConfigFileBytes) {
    return InvalidArgumentError(what + ": " + std::to_string(text.size()) + " bytes, more than " +
                                std::to_string(kMaxConfigFileBytes) + " allowed");
  }
  STRATA_ASSIGN_OR_RETURN(YAML::Node doc, LoadDocument(text, what));
  if (doc.IsNull()) return InvalidArgumentError(what + ": the document is empty");
  if (!doc.IsMap()) {
    return InvalidArgumentError(what + ": the document is not a mapping (it is " + KindName(doc) +
                                ")");
  }
  STRATA_ASSIGN_OR_RETURN(Fields fields, CollectFields(doc, kReplicatorKeys, what));
  ReplicatorConfig c;
  c.unknown_keys = std::move(fields.unknown);
  FieldReader in(std::move(fields), what, &getenv);
  STRATA_RETURN_IF_ERROR(ReadIdentity(in, &c));
  STRATA_RETURN_IF_ERROR(ReadTopology(in, &c));
  STRATA_RETURN_IF_ERROR(ReadPeers(in, &c));
  STRATA_RETURN_IF_ERROR(ReadCadence(in, &c));
  STRATA_RETURN_IF_ERROR(ReadMaster(in, &c));
  STRATA_RETURN_IF_ERROR(ReadRedundancy(in, &c));
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------
// Public functions

GetenvFn ProcessGetenv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

ReadFileFn DefaultReadFile() {
  return [](const std::string& path) {
    return ReadFileToString(Env::Default(), path, kMaxConfigFileBytes);
  };
}

std::string_view FrameworkName(Framework framework) {
  switch (framework) {
    case Framework::kOrbax:
      return "orbax";
    case Framework::kPytorchDistributed:
      return "pytorch.distributed";
    case Framework::kPytorch:
      return "pytorch";
  }
  return "unknown";
}

StatusOr<ReplicatorConfig> ParseReplicatorConfig(std::string_view yaml_text,
                                                 const GetenvFn& getenv) {
  return NoExceptions<ReplicatorConfig>(
      kReplicatorWhat, [&] { return ParseReplicatorUnguarded(yaml_text, getenv); });
}

StatusOr<ReplicatorConfig> ParseReplicatorConfig(std::string_view yaml_text) {
  return ParseReplicatorConfig(yaml_text, ProcessGetenv());
}

}  // namespace strata::agent
