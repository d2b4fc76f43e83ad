// Copyright 2026 The Strata Authors.
#include "agent/config.h"

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

#include "strata/env.h"
#include "util/file_util.h"

namespace strata {
namespace {

constexpr std::string_view kReplicatorWhat = "replicator.yaml";

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

// The top-level entries of a mapping whose keys are in `known`.
struct Fields {
  std::map<std::string, YAML::Node, std::less<>> known;
  std::vector<std::string> unknown;  // sanitized, at most kMaxUnknownKeys
};

// REQUIRES: map.IsMap().
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

// Typed access to the known entries of a mapping. Errors are prefixed
// "<what>: <key>: ". A key that is absent or null reads as nullopt.
class FieldReader {
 public:
  // `getenv` may be null: no environment expansion.
  FieldReader(Fields fields, std::string_view what, const GetenvFn* getenv)
      : fields_(std::move(fields)), what_(what), getenv_(getenv) {}

  bool Has(std::string_view key) const { return fields_.known.contains(key); }

  StatusOr<std::optional<std::string>> String(std::string_view key) const {
    const YAML::Node* node = Find(key);
    if (node == nullptr) return std::optional<std::string>();
    STRATA_ASSIGN_OR_RETURN(std::string text, ScalarText(*node, key));
    return std::optional<std::string>(std::move(text));
  }

  StatusOr<std::optional<int>> Int(std::string_view key, int lo, int hi) const {
    const YAML::Node* node = Find(key);
    if (node == nullptr) return std::optional<int>();
    STRATA_ASSIGN_OR_RETURN(std::string text, ScalarText(*node, key));
    StatusOr<int64_t> value = ParseIntInRange(text, lo, hi);
    if (!value.ok()) return value.status().WithContext(Context(key));
    return std::optional<int>(static_cast<int>(*value));
  }

  StatusOr<std::optional<std::vector<int>>> IntList(std::string_view key, int lo, int hi,
                                                    size_t max_entries) const;

  // "<key> is required" or "<key> has no value", for a required key that
  // reads as nullopt.
  Status Missing(std::string_view key) const {
    return Error(std::string(key) + (Has(key) ? " has no value" : " is required"));
  }

  Status Error(std::string_view message) const {
    return InvalidArgumentError(what_ + ": " + std::string(message));
  }

  std::string Context(std::string_view key) const { return what_ + ": " + std::string(key); }

 private:
  const YAML::Node* Find(std::string_view key) const {
    auto it = fields_.known.find(key);
    return it == fields_.known.end() || it->second.IsNull() ? nullptr : &it->second;
  }

  StatusOr<std::string> ScalarText(const YAML::Node& node, std::string_view key) const {
    if (!node.IsScalar()) {
      return Error(std::string(key) + ": expected a single value, got " + KindName(node));
    }
    if (getenv_ == nullptr) return node.Scalar();
    StatusOr<std::string> text = ExpandEnv(node.Scalar(), *getenv_);
    if (!text.ok()) return text.status().WithContext(Context(key));
    return text;
  }

  Fields fields_;
  std::string what_;
  const GetenvFn* getenv_;
};

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

// Runs `fn`, turning any exception into INVALID_ARGUMENT about `what`.
template <typename T, typename Fn>
StatusOr<T> NoExceptions(std::string_view what, Fn fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string(what) +
                                ": could not be read: " + Sanitize(e.what(), kMaxQuotedBytes));
  } catch (...) {
    return InvalidArgumentError(std::string(what) + ": could not be read");
  }
}

// ---------------------------------------------------------------------------
// replicator.yaml

// clang-format off
constexpr std::string_view kReplicatorKeys[] = {
    "job-name", "framework", "node-rank", "nodes", "workers-per-node",
    "peer-ranks", "peers-per-node", "assume-data-parallelism",
    "backup-interval-minutes", "backup-interval-steps", "master", "master-port"};
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
  STRATA_ASSIGN_OR_RETURN(std::optional<int> nodes, in.Int("nodes", 1, kMaxNodes));
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
    return in.Error("peer-ranks and peers-per-node are both given; give only one");
  }
  return Status::Ok();
}

Status ReadCadence(const FieldReader& in, ReplicatorConfig* c) {
  constexpr int kIntMax = std::numeric_limits<int>::max();
  STRATA_ASSIGN_OR_RETURN(c->assume_data_parallelism,
                          in.Int("assume-data-parallelism", 1, kMaxNodes));
  if (c->assume_data_parallelism && c->nodes % *c->assume_data_parallelism != 0) {
    return in.Error("assume-data-parallelism: " + std::to_string(*c->assume_data_parallelism) +
                    " does not divide nodes (" + std::to_string(c->nodes) + ")");
  }
  STRATA_ASSIGN_OR_RETURN(c->backup_interval_minutes,
                          in.Int("backup-interval-minutes", 1, kIntMax));
  STRATA_ASSIGN_OR_RETURN(c->backup_interval_steps, in.Int("backup-interval-steps", 1, kIntMax));
  if (c->backup_interval_minutes && c->backup_interval_steps) {
    return in.Error(
        "backup-interval-minutes and backup-interval-steps are both given; give only one");
  }
  return Status::Ok();
}

Status ReadMaster(const FieldReader& in, ReplicatorConfig* c) {
  STRATA_ASSIGN_OR_RETURN(c->master_port, in.Int("master-port", 1, 65535));
  STRATA_ASSIGN_OR_RETURN(std::optional<std::string> master, in.String("master"));
  if (!master) return Status::Ok();
  StatusOr<HostPort> hp = ParseHostPort(*master);
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
  return c;
}

// ---------------------------------------------------------------------------
// Host and port

bool IsHostNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

bool IsIpv6Char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
}

// Splits "host:port" or "[v6]:port" into the host (brackets removed) and
// the port text; the error says what is wrong.
Status SplitHostPort(std::string_view rest, std::string_view* host, std::string_view* port) {
  if (rest.starts_with('[')) {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return InvalidArgumentError("missing ']'");
    *host = rest.substr(1, close - 1);
    if (host->find(':') == std::string_view::npos ||
        !std::all_of(host->begin(), host->end(), IsIpv6Char)) {
      return InvalidArgumentError("bad IPv6 address");
    }
    if (close + 1 >= rest.size() || rest[close + 1] != ':') {
      return InvalidArgumentError("missing :port");
    }
    *port = rest.substr(close + 2);
    return Status::Ok();
  }
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return InvalidArgumentError("missing :port");
  *host = rest.substr(0, colon);
  *port = rest.substr(colon + 1);
  if (host->find(':') != std::string_view::npos) {
    return InvalidArgumentError("an IPv6 address must be written in brackets");
  }
  if (host->empty()) return InvalidArgumentError("missing host");
  if (host->size() > 253 || !std::all_of(host->begin(), host->end(), IsHostNameChar)) {
    return InvalidArgumentError("bad host name");
  }
  return Status::Ok();
}

// Parses "[tcp://]host:port" into *out; the error says what is wrong.
Status ParseAddress(std::string_view text, HostPort* out) {
  if (text.starts_with("tcp://")) text.remove_prefix(6);
  if (text.find("://") != std::string_view::npos) {
    return InvalidArgumentError("only tcp:// is supported");
  }
  std::string_view host, port;
  STRATA_RETURN_IF_ERROR(SplitHostPort(text, &host, &port));
  bool digits = !port.empty() &&
                std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  StatusOr<int64_t> n = ParseIntInRange(port, 1, 65535);
  if (!digits || !n.ok()) return InvalidArgumentError("the port must be a number in 1..65535");
  *out = HostPort{std::string(host), static_cast<uint16_t>(*n)};
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Agent configuration: every setting is first gathered as text together with
// where it came from, then the layers are merged and validated.

struct Setting {
  std::string value;
  std::string origin;  // "--listen", "STRATA_LISTEN" or "<file>: listen"
};
using Settings = std::map<std::string, Setting, std::less<>>;

constexpr std::string_view kAgentFileKeys[] = {"local-dir",
                                               "listen",
                                               "advertise",
                                               "coordinator",
                                               "secret-file",
                                               "log-level",
                                               "node-rank",
                                               "data-streams",
                                               "max-message-bytes",
                                               "backup",
                                               "backup-interval-steps",
                                               "backup-interval-minutes",
                                               "backup-bandwidth",
                                               "restore-backup"};

constexpr std::pair<std::string_view, std::string_view> kAgentEnv[] = {
    {"local-dir", "STRATA_LOCAL_DIR"}, {"listen", "STRATA_LISTEN"},
    {"advertise", "STRATA_ADVERTISE"}, {"coordinator", "STRATA_COORDINATOR"},
    {"secret", "STRATA_SECRET"},       {"secret-file", "STRATA_SECRET_FILE"},
    {"log-level", "STRATA_LOG_LEVEL"}, {"backup", "STRATA_BACKUP"},
};

StatusOr<Settings> FileSettings(const std::string& path, const ReadFileFn& read_file) {
  StatusOr<std::string> text = read_file(path);
  if (!text.ok()) return text.status().WithContext("--config");
  if (text->size() > kMaxConfigFileBytes) {
    return InvalidArgumentError(path + ": more than " + std::to_string(kMaxConfigFileBytes) +
                                " bytes");
  }
  STRATA_ASSIGN_OR_RETURN(YAML::Node doc, LoadDocument(*text, path));
  if (doc.IsNull()) return Settings();
  if (!doc.IsMap()) return InvalidArgumentError(path + ": is " + KindName(doc) + ", not a mapping");
  STRATA_ASSIGN_OR_RETURN(Fields fields, CollectFields(doc, kAgentFileKeys, path));
  if (!fields.unknown.empty()) {
    return InvalidArgumentError(path + ": unknown key " + Quote(fields.unknown[0]));
  }
  FieldReader in(std::move(fields), path, nullptr);
  Settings out;
  for (std::string_view key : kAgentFileKeys) {
    STRATA_ASSIGN_OR_RETURN(std::optional<std::string> value, in.String(key));
    if (value) out[std::string(key)] = {std::move(*value), in.Context(key)};
  }
  return out;
}

// Variables set to "" count as unset.
Settings EnvSettings(const GetenvFn& getenv) {
  Settings out;
  for (const auto& [key, var] : kAgentEnv) {
    std::optional<std::string> value = getenv(std::string(var));
    if (value && !value->empty()) out[std::string(key)] = {std::move(*value), std::string(var)};
  }
  return out;
}

Settings FlagSettings(const AgentFlags& flags) {
  Settings out;
  auto put = [&out](std::string_view key, const std::optional<std::string>& value) {
    if (value) out[std::string(key)] = {*value, "--" + std::string(key)};
  };
  auto put_int = [&put](std::string_view key, const std::optional<int64_t>& value) {
    if (value) put(key, std::to_string(*value));
  };
  put("local-dir", flags.local_dir);
  put("listen", flags.listen);
  put("advertise", flags.advertise);
  put("coordinator", flags.coordinator);
  put("secret-file", flags.secret_file);
  put("log-level", flags.log_level);
  put_int("node-rank", flags.node_rank);
  put_int("data-streams", flags.data_streams);
  put_int("max-message-bytes", flags.max_message_bytes);
  put("backup", flags.backup);
  put_int("backup-interval-steps", flags.backup_interval_steps);
  put_int("backup-interval-minutes", flags.backup_interval_minutes);
  put_int("backup-bandwidth", flags.backup_bandwidth_mib);
  put("restore-backup", flags.restore_backup);
  return out;
}

const Setting* FindSetting(const Settings& settings, std::string_view key) {
  auto it = settings.find(key);
  return it == settings.end() ? nullptr : &it->second;
}

// Lays `top` over `*base`. The secret, inline or as a file, is one setting.
Status Overlay(const Settings& top, Settings* base) {
  const Setting* inline_secret = FindSetting(top, "secret");
  const Setting* secret_file = FindSetting(top, "secret-file");
  if (inline_secret != nullptr && secret_file != nullptr) {
    return InvalidArgumentError(inline_secret->origin + " and " + secret_file->origin +
                                " are both set; give the secret one way");
  }
  if (inline_secret != nullptr || secret_file != nullptr) {
    base->erase("secret");
    base->erase("secret-file");
  }
  for (const auto& [key, setting] : top) (*base)[key] = setting;
  return Status::Ok();
}

StatusOr<HostPort> SettingHostPort(const Setting& s) {
  StatusOr<HostPort> hp = ParseHostPort(s.value);
  if (!hp.ok()) return hp.status().WithContext(s.origin);
  return hp;
}

StatusOr<int64_t> SettingInt(const Setting& s, int64_t lo, int64_t hi) {
  StatusOr<int64_t> v = ParseIntInRange(s.value, lo, hi);
  if (!v.ok()) return v.status().WithContext(s.origin);
  return v;
}

// A wildcard listen address is advertised as loopback.
HostPort DefaultAdvertise(HostPort listen) {
  if (listen.host == "0.0.0.0") listen.host = "127.0.0.1";
  if (listen.host == "::") listen.host = "::1";
  return listen;
}

Status BuildAddresses(const Settings& settings, AgentConfig* c) {
  if (const Setting* s = FindSetting(settings, "listen")) {
    STRATA_ASSIGN_OR_RETURN(c->listen, SettingHostPort(*s));
  }
  c->advertise = DefaultAdvertise(c->listen);
  if (const Setting* s = FindSetting(settings, "advertise")) {
    STRATA_ASSIGN_OR_RETURN(c->advertise, SettingHostPort(*s));
    if (c->advertise.host == "0.0.0.0" || c->advertise.host == "::") {
      return InvalidArgumentError(s->origin + ": " + Quote(s->value) +
                                  " is a wildcard address; peers cannot connect to it");
    }
  }
  if (const Setting* s = FindSetting(settings, "coordinator")) {
    STRATA_ASSIGN_OR_RETURN(c->coordinator, SettingHostPort(*s));
  }
  return Status::Ok();
}

StatusOr<std::string> LoadSecret(const Settings& settings, const ReadFileFn& read_file) {
  const Setting* from = FindSetting(settings, "secret");
  std::string secret;
  if (from != nullptr) {
    secret = from->value;
  } else if ((from = FindSetting(settings, "secret-file")) != nullptr) {
    StatusOr<std::string> text = read_file(from->value);
    if (!text.ok()) return text.status().WithContext(from->origin);
    secret = std::move(*text);
    if (secret.ends_with('\n')) secret.pop_back();
    if (secret.ends_with('\r')) secret.pop_back();
  } else {
    return InvalidArgumentError(
        "no secret: pass --secret-file FILE or set STRATA_SECRET or STRATA_SECRET_FILE");
  }
  if (secret.size() < kMinSecretBytes) {
    return InvalidArgumentError(from->origin + ": the secret is " + std::to_string(secret.size()) +
                                " bytes; at least " + std::to_string(kMinSecretBytes) +
                                " are required");
  }
  return secret;
}

Status BuildLimits(const Settings& settings, AgentConfig* c) {
  if (const Setting* s = FindSetting(settings, "node-rank")) {
    STRATA_ASSIGN_OR_RETURN(int64_t rank, SettingInt(*s, 0, kMaxNodes - 1));
    c->node_rank = static_cast<int>(rank);
  }
  if (const Setting* s = FindSetting(settings, "data-streams")) {
    STRATA_ASSIGN_OR_RETURN(int64_t streams, SettingInt(*s, 1, kMaxDataStreams));
    c->data_streams = static_cast<int>(streams);
  }
  if (const Setting* s = FindSetting(settings, "max-message-bytes")) {
    STRATA_ASSIGN_OR_RETURN(int64_t bytes, SettingInt(*s, int64_t{64} << 10, int64_t{1} << 30));
    c->max_message_bytes = static_cast<uint64_t>(bytes);
  }
  return Status::Ok();
}

Status BuildLogLevel(const Settings& settings, AgentConfig* c) {
  const Setting* s = FindSetting(settings, "log-level");
  if (s == nullptr) return Status::Ok();
  for (std::string_view level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (s->value == level) {
      c->log_level = s->value;
      return Status::Ok();
    }
  }
  return InvalidArgumentError(s->origin + ": " + Quote(s->value) +
                              " is not one of trace, debug, info, warn, error, critical, off");
}

Status BuildBackup(const Settings& settings, AgentConfig* c) {
  if (const Setting* s = FindSetting(settings, "backup")) {
    if (!s->value.starts_with("s3://") && !s->value.starts_with("file:///")) {
      return InvalidArgumentError(s->origin + ": " + Quote(s->value) +
                                  " is not s3://bucket[/prefix] or file:///absolute/path");
    }
    c->backup_url = s->value;
  }
  const Setting* steps = FindSetting(settings, "backup-interval-steps");
  const Setting* minutes = FindSetting(settings, "backup-interval-minutes");
  if (steps != nullptr && minutes != nullptr) {
    return InvalidArgumentError(steps->origin + " and " + minutes->origin +
                                " are both set; give one backup cadence");
  }
  if (steps != nullptr) {
    STRATA_ASSIGN_OR_RETURN(int64_t k, SettingInt(*steps, 1, int64_t{1} << 40));
    c->backup_interval_steps = static_cast<int>(std::min<int64_t>(k, INT32_MAX));
  }
  if (minutes != nullptr) {
    STRATA_ASSIGN_OR_RETURN(int64_t m, SettingInt(*minutes, 1, 525600));
    c->backup_interval_minutes = static_cast<int>(m);
  }
  if (const Setting* s = FindSetting(settings, "backup-bandwidth")) {
    STRATA_ASSIGN_OR_RETURN(int64_t mib, SettingInt(*s, 0, 1 << 20));
    c->backup_bandwidth_mib = static_cast<int>(mib);
  }
  if (const Setting* s = FindSetting(settings, "restore-backup")) c->restore_backup = s->value;
  return Status::Ok();
}

StatusOr<AgentConfig> BuildAgentConfig(const Settings& settings, const ReadFileFn& read_file) {
  AgentConfig c;
  const Setting* dir = FindSetting(settings, "local-dir");
  if (dir == nullptr || dir->value.empty()) {
    return InvalidArgumentError(
        "no local directory: pass --local-dir DIR or set STRATA_LOCAL_DIR or local-dir");
  }
  c.local_dir = dir->value;
  STRATA_RETURN_IF_ERROR(BuildAddresses(settings, &c));
  STRATA_ASSIGN_OR_RETURN(c.secret, LoadSecret(settings, read_file));
  STRATA_RETURN_IF_ERROR(BuildLogLevel(settings, &c));
  STRATA_RETURN_IF_ERROR(BuildLimits(settings, &c));
  STRATA_RETURN_IF_ERROR(BuildBackup(settings, &c));
  return c;
}

StatusOr<AgentConfig> ResolveUnguarded(const AgentFlags& flags, const GetenvFn& getenv,
                                       const ReadFileFn& read_file) {
  Settings merged;
  if (flags.config_file) {
    STRATA_ASSIGN_OR_RETURN(merged, FileSettings(*flags.config_file, read_file));
  }
  STRATA_RETURN_IF_ERROR(Overlay(EnvSettings(getenv), &merged));
  STRATA_RETURN_IF_ERROR(Overlay(FlagSettings(flags), &merged));
  return BuildAgentConfig(merged, read_file);
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

std::string HostPort::ToString() const {
  std::string p = std::to_string(port);
  return host.find(':') == std::string::npos ? host + ":" + p : "[" + host + "]:" + p;
}

StatusOr<HostPort> ParseHostPort(std::string_view text) {
  HostPort out;
  Status s = ParseAddress(text, &out);
  if (!s.ok()) return InvalidArgumentError(Quote(text) + " is not host:port: " + s.message());
  return out;
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

StatusOr<AgentConfig> ResolveAgentConfig(const AgentFlags& flags, const GetenvFn& getenv,
                                         const ReadFileFn& read_file) {
  return NoExceptions<AgentConfig>("agent configuration",
                                   [&] { return ResolveUnguarded(flags, getenv, read_file); });
}

StatusOr<AgentConfig> ResolveAgentConfig(const AgentFlags& flags) {
  return ResolveAgentConfig(flags, ProcessGetenv(), DefaultReadFile());
}

}  // namespace strata
