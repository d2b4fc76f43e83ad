// Copyright 2026 The Strata Authors.
//
// The agent's own configuration: a YAML file, the environment and flags,
// merged (flags > environment > file) and validated. See config.h.
#include <fmt/format.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include "agent/config/config.h"
#include "agent/config/config_yaml.h"

namespace strata::agent {
namespace {

using config_internal::CollectFields;
using config_internal::FieldReader;
using config_internal::Fields;
using config_internal::KindName;
using config_internal::LoadDocument;
using config_internal::NoExceptions;
using config_internal::ParseIntInRange;
using config_internal::Quote;

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
                                               "jax-coordinator",
                                               "secret-file",
                                               "log-level",
                                               "node-rank",
                                               "data-streams",
                                               "max-message-bytes",
                                               "backup",
                                               "backup-interval-steps",
                                               "backup-interval-minutes",
                                               "backup-bandwidth",
                                               "restore-backup",
                                               "grace-seconds",
                                               "metrics",
                                               "redundancy",
                                               "failure-domain",
                                               "tls",
                                               "tls-cert-file",
                                               "tls-key-file",
                                               "tls-ca-file",
                                               "job-name"};

constexpr std::pair<std::string_view, std::string_view> kAgentEnv[] = {
    {"local-dir", "STRATA_LOCAL_DIR"},
    {"listen", "STRATA_LISTEN"},
    {"advertise", "STRATA_ADVERTISE"},
    {"coordinator", "STRATA_COORDINATOR"},
    {"jax-coordinator", "STRATA_JAX_COORDINATOR"},
    {"node-rank", "STRATA_NODE_RANK"},
    {"secret", "STRATA_SECRET"},
    {"secret-file", "STRATA_SECRET_FILE"},
    {"log-level", "STRATA_LOG_LEVEL"},
    {"backup", "STRATA_BACKUP"},
    {"metrics", "STRATA_METRICS"},
    {"redundancy", "STRATA_REDUNDANCY"},
    {"failure-domain", "STRATA_FAILURE_DOMAIN"},
    {"tls", "STRATA_TLS"},
    {"tls-cert-file", "STRATA_TLS_CERT_FILE"},
    {"tls-key-file", "STRATA_TLS_KEY_FILE"},
    {"tls-ca-file", "STRATA_TLS_CA_FILE"},
    {"job-name", "STRATA_JOB_NAME"},
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
  put("jax-coordinator", flags.jax_coordinator);
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
  put_int("grace-seconds", flags.grace_seconds);
  put("metrics", flags.metrics);
  put("redundancy", flags.redundancy);
  put("failure-domain", flags.failure_domain);
  put("job-name", flags.job_name);
  put("tls", flags.tls);
  put("tls-cert-file", flags.tls_cert_file);
  put("tls-key-file", flags.tls_key_file);
  put("tls-ca-file", flags.tls_ca_file);
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

StatusOr<Endpoint> SettingEndpoint(const Setting& s) {
  StatusOr<Endpoint> hp = ParseEndpoint(s.value);
  if (!hp.ok()) return hp.status().WithContext(s.origin);
  return hp;
}

StatusOr<int64_t> SettingInt(const Setting& s, int64_t lo, int64_t hi) {
  StatusOr<int64_t> v = ParseIntInRange(s.value, lo, hi);
  if (!v.ok()) return v.status().WithContext(s.origin);
  return v;
}

// A wildcard listen address is advertised as loopback.
Endpoint DefaultAdvertise(Endpoint listen) {
  if (listen.host == "0.0.0.0") listen.host = "127.0.0.1";
  if (listen.host == "::") listen.host = "::1";
  return listen;
}

Status BuildAddresses(const Settings& settings, AgentConfig* c) {
  if (const Setting* s = FindSetting(settings, "listen")) {
    STRATA_ASSIGN_OR_RETURN(c->listen, SettingEndpoint(*s));
  }
  c->advertise = DefaultAdvertise(c->listen);
  if (const Setting* s = FindSetting(settings, "advertise")) {
    STRATA_ASSIGN_OR_RETURN(c->advertise, SettingEndpoint(*s));
    if (c->advertise.host == "0.0.0.0" || c->advertise.host == "::") {
      return InvalidArgumentError(s->origin + ": " + Quote(s->value) +
                                  " is a wildcard address; peers cannot connect to it");
    }
  }
  if (const Setting* s = FindSetting(settings, "coordinator")) {
    STRATA_ASSIGN_OR_RETURN(c->coordinator, SettingEndpoint(*s));
  }
  if (const Setting* s = FindSetting(settings, "jax-coordinator")) {
    STRATA_ASSIGN_OR_RETURN(c->jax_coordinator, SettingEndpoint(*s));
  }
  if (const Setting* s = FindSetting(settings, "metrics")) {
    STRATA_ASSIGN_OR_RETURN(c->metrics, SettingEndpoint(*s));
  }
  return Status::Ok();
}

StatusOr<std::string> LoadSecret(const Settings& settings, const ReadFileFn& read_file) {
  const Setting* from = FindSetting(settings, "secret");
  std::string secret;
  if (from != nullptr) {
    secret = from->value;
  } else if ((from = FindSetting(settings, "secret-file")) != nullptr) {
    STRATA_RETURN_IF_ERROR(CheckSecretFileMode(from->value).WithContext(from->origin));
    StatusOr<std::string> text = read_file(from->value);
    if (!text.ok()) return text.status().WithContext(from->origin);
    secret = SecretFromFileText(std::move(*text));
  } else {
    return InvalidArgumentError(
        "no secret: pass --secret-file FILE or set STRATA_SECRET or STRATA_SECRET_FILE");
  }
  STRATA_RETURN_IF_ERROR(net::CheckSecret(secret, from->origin));
  return secret;
}

Status BuildJobName(const Settings& settings, AgentConfig* c) {
  const Setting* s = FindSetting(settings, "job-name");
  if (s == nullptr) return Status::Ok();
  const bool ok =
      !s->value.empty() && s->value.size() <= kMaxJobNameBytes &&
      std::all_of(s->value.begin(), s->value.end(), [](char ch) { return ch > 0x20 && ch < 0x7f; });
  if (!ok) {
    return InvalidArgumentError(s->origin + ": " + Quote(s->value) +
                                " is not 1..128 printable bytes without spaces");
  }
  c->job_name = s->value;
  return Status::Ok();
}

Status BuildLimits(const Settings& settings, AgentConfig* c) {
  if (const Setting* s = FindSetting(settings, "node-rank")) {
    STRATA_ASSIGN_OR_RETURN(int64_t rank, SettingInt(*s, 0, wire::kMaxNodes - 1));
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
  if (const Setting* s = FindSetting(settings, "grace-seconds")) {
    STRATA_ASSIGN_OR_RETURN(int64_t g, SettingInt(*s, 1, 86400));
    c->grace = std::chrono::seconds(g);
  }
  return Status::Ok();
}

Status BuildPeerTier(const Settings& settings, AgentConfig* c) {
  if (const Setting* s = FindSetting(settings, "redundancy")) {
    StatusOr<ec::Redundancy> r = ec::Redundancy::Parse(s->value);
    if (!r.ok()) return r.status().WithContext(s->origin);
    c->redundancy = *r;
  }
  if (const Setting* s = FindSetting(settings, "failure-domain")) {
    const bool ok = !s->value.empty() && s->value.size() <= 64 &&
                    std::all_of(s->value.begin(), s->value.end(), [](char ch) {
                      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' ||
                             ch == '_' || ch == '-' || ch == ':' || ch == '/';
                    });
    if (!ok) {
      return InvalidArgumentError(s->origin + ": " + Quote(s->value) +
                                  " is not 1..64 bytes of A-Z a-z 0-9 . _ - : /");
    }
    c->failure_domain = s->value;
  }
  return Status::Ok();
}

// The files go to OpenSSL when the agent starts (its errors name them); here
// only whether they fit the mode.
Status BuildTls(const Settings& settings, AgentConfig* c) {
  if (const Setting* s = FindSetting(settings, "tls")) {
    StatusOr<net::TlsMode> mode = net::ParseTlsMode(s->value);
    if (!mode.ok()) return mode.status().WithContext(s->origin);
    c->tls.mode = *mode;
  }
  const bool certificates = c->tls.mode == net::TlsMode::kCertificates;
  const std::pair<std::string_view, std::string*> files[] = {{"tls-cert-file", &c->tls.cert_file},
                                                             {"tls-key-file", &c->tls.key_file},
                                                             {"tls-ca-file", &c->tls.ca_file}};
  for (const auto& [key, field] : files) {
    const Setting* s = FindSetting(settings, key);
    if (s != nullptr && !certificates) {
      return InvalidArgumentError(s->origin + ": applies only with tls: certificates");
    }
    if (s == nullptr && certificates) {
      return InvalidArgumentError("tls: certificates needs " + std::string(key) +
                                  " (also tls-cert-file, tls-key-file and tls-ca-file)");
    }
    if (s != nullptr) *field = s->value;
  }
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
  STRATA_RETURN_IF_ERROR(BuildPeerTier(settings, &c));
  STRATA_RETURN_IF_ERROR(BuildTls(settings, &c));
  STRATA_RETURN_IF_ERROR(BuildJobName(settings, &c));
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

StatusOr<AgentConfig> ResolveAgentConfig(const AgentFlags& flags, const GetenvFn& getenv,
                                         const ReadFileFn& read_file) {
  return NoExceptions<AgentConfig>("agent configuration",
                                   [&] { return ResolveUnguarded(flags, getenv, read_file); });
}

StatusOr<AgentConfig> ResolveAgentConfig(const AgentFlags& flags) {
  return ResolveAgentConfig(flags, ProcessGetenv(), DefaultReadFile());
}

Endpoint JaxCoordinator(const AgentConfig& c) {
  if (c.jax_coordinator) return *c.jax_coordinator;
  Endpoint hp = c.coordinator ? *c.coordinator : c.advertise;
  hp.port = kDefaultJaxCoordinatorPort;
  return hp;
}

Status CheckSecretFileMode(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::Ok();
  if ((st.st_mode & (S_IROTH | S_IWOTH)) == 0) return Status::Ok();
  return PermissionDeniedError(fmt::format(
      "the secret file {} may be read by every user of this node (mode {:04o}): anyone here "
      "could act as the job. chmod 0600 {} (0640 to share it with a group), and give the job a "
      "new secret if others may have read it",
      path, st.st_mode & 07777, path));
}

std::string SecretFromFileText(std::string text) {
  if (text.ends_with('\n')) text.pop_back();
  if (text.ends_with('\r')) text.pop_back();
  return text;
}

}  // namespace strata::agent
