// Copyright 2026 The Strata Authors.
//
// Internal to the configuration readers (config.cc: replicator.yaml and
// host:port; agent_config.cc: the agent's settings): text and YAML helpers
// both use. Not part of any interface.
#ifndef STRATA_AGENT_CONFIG_CONFIG_YAML_H_
#define STRATA_AGENT_CONFIG_CONFIG_YAML_H_

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/config/config.h"

namespace strata::agent::config_internal {

// At most `max` bytes of `text`, with every byte outside printable ASCII
// replaced by '?', so the result is one line of plain text.
std::string Sanitize(std::string_view text, size_t max);
// `text`, sanitized and truncated to kMaxQuotedBytes, in double quotes.
std::string Quote(std::string_view text);
// A base-10 integer in [lo, hi], surrounding whitespace allowed.
StatusOr<int64_t> ParseIntInRange(std::string_view text, int64_t lo, int64_t hi);
// `text` with $VAR / ${VAR} replaced (see ParseReplicatorConfig).
StatusOr<std::string> ExpandEnv(std::string_view text, const GetenvFn& getenv);
// "a mapping", "a list", ... for messages.
std::string KindName(const YAML::Node& node);
// Parses the first YAML document in `text`: Null when there is none. `what`
// names the text in errors.
StatusOr<YAML::Node> LoadDocument(std::string_view text, std::string_view what);

// The top-level entries of a mapping whose keys are in `known`.
struct Fields {
  std::map<std::string, YAML::Node, std::less<>> known;
  std::vector<std::string> unknown;  // sanitized, at most kMaxUnknownKeys
};

// REQUIRES: map.IsMap().
StatusOr<Fields> CollectFields(const YAML::Node& map, std::span<const std::string_view> known,
                               std::string_view what);

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

}  // namespace strata::agent::config_internal

#endif  // STRATA_AGENT_CONFIG_CONFIG_YAML_H_
