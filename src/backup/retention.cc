// Copyright 2026 The Strata Authors.
#include "backup/retention.h"

#include <algorithm>
#include <charconv>
#include <map>

namespace strata::backup {
namespace {

constexpr int64_t kMaxDuration = int64_t{100} * 366 * 86400;

struct RetentionClass {
  const char* name;
  int RetentionPolicy::*count;
  const char* bucket_format;  // strftime format of the bucket label
};

// In the order reasons list them.
constexpr RetentionClass kClasses[] = {
    {"hourly", &RetentionPolicy::hourly, "%Y-%m-%dT%H"},
    {"daily", &RetentionPolicy::daily, "%Y-%m-%d"},
    {"weekly", &RetentionPolicy::weekly, "%G-W%V"},
    {"monthly", &RetentionPolicy::monthly, "%Y-%m"},
    {"yearly", &RetentionPolicy::yearly, "%Y"},
};

// The bucket label; labels of one class sort in time order (4-digit years).
std::string Bucket(const RetentionClass& c, std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  return std::string(buf, std::strftime(buf, sizeof buf, c.bucket_format, &tm));
}

void AddReason(std::string* reason, const std::string& part) {
  if (!reason->empty()) *reason += ", ";
  *reason += part;
}

// Adds the reasons class `c` keeps backups for. `order` indexes complete
// backups, oldest first.
void ApplyClass(const RetentionClass& c, const RetentionPolicy& policy,
                const std::vector<const BackupSummary*>& order, std::vector<std::string>* reasons) {
  int count = policy.*c.count;
  if (count == 0) return;
  std::map<std::string, std::vector<size_t>> buckets;  // label -> indexes into order, oldest first
  for (size_t i = 0; i < order.size(); ++i) buckets[Bucket(c, order[i]->id.minute)].push_back(i);
  size_t skip = 0;
  if (count != RetentionPolicy::kAlways && buckets.size() > static_cast<size_t>(count))
    skip = buckets.size() - static_cast<size_t>(count);
  for (const auto& [label, members] : buckets) {
    if (skip > 0) {
      --skip;
      continue;
    }
    size_t chosen = policy.prefer_recent ? members.back() : members.front();
    AddReason(&(*reasons)[chosen], std::string(c.name) + " " + label);
  }
}

PruneDecision DecideIncomplete(const BackupSummary& b, const RetentionPolicy& policy,
                               std::time_t now) {
  PruneDecision d{b.id_text, true, "incomplete"};
  if (policy.delete_incomplete_after && now - b.id.minute > *policy.delete_incomplete_after) {
    d.keep = false;
    d.reason = "incomplete, older than " + FormatRetentionDuration(*policy.delete_incomplete_after);
  }
  return d;
}

}  // namespace

Status ValidateRetentionPolicy(const RetentionPolicy& policy) {
  bool any = false;
  for (const auto& c : kClasses) {
    int count = policy.*c.count;
    if (count < 0 && count != RetentionPolicy::kAlways)
      return InvalidArgumentError(std::string(c.name) + " count " + std::to_string(count) +
                                  " is negative");
    any |= count != 0;
  }
  if (!any && !policy.delete_incomplete_after)
    return InvalidArgumentError("no retention class given");
  if (policy.delete_incomplete_after && *policy.delete_incomplete_after <= 0)
    return InvalidArgumentError("the incomplete-backup age limit must be positive");
  return Status::Ok();
}

std::vector<PruneDecision> DecidePrune(const std::vector<BackupSummary>& backups,
                                       const RetentionPolicy& policy, std::time_t now) {
  std::vector<const BackupSummary*> all;
  for (const auto& b : backups) all.push_back(&b);
  std::sort(all.begin(), all.end(), [](auto* a, auto* b) { return a->id < b->id; });

  std::vector<const BackupSummary*> complete;
  for (auto* b : all)
    if (b->complete) complete.push_back(b);
  std::vector<std::string> reasons(complete.size());
  bool any_class = false;
  for (const auto& c : kClasses) any_class |= policy.*c.count != 0;
  for (const auto& c : kClasses) ApplyClass(c, policy, complete, &reasons);
  // Only --delete-incomplete-older-than: complete backups are not touched.
  if (!any_class) {
    for (auto& r : reasons) r = "complete; no retention class given";
  }
  if (!complete.empty() && any_class) AddReason(&reasons.back(), "newest");
  for (size_t i = 0; i < complete.size(); ++i) {
    if (any_class && complete[i]->commit && complete[i]->commit->requested)
      AddReason(&reasons[i], "requested");
  }

  std::vector<PruneDecision> out;
  size_t next_complete = 0;
  for (auto* b : all) {
    if (!b->complete) {
      out.push_back(DecideIncomplete(*b, policy, now));
      continue;
    }
    std::string& reason = reasons[next_complete++];
    bool keep = !reason.empty();
    out.push_back({b->id_text, keep, keep ? std::move(reason) : "not kept by any class"});
  }
  return out;
}

StatusOr<int64_t> ParseRetentionDuration(std::string_view text) {
  auto bad = [&] {
    return InvalidArgumentError("\"" + std::string(text.substr(0, 64)) +
                                "\" is not a duration (e.g. 30m, 12h, 7d, 2w)");
  };
  if (text.size() < 2 || text[0] == '0') return bad();
  int64_t unit = 0;
  switch (text.back()) {
    case 'm':
      unit = 60;
      break;
    case 'h':
      unit = 3600;
      break;
    case 'd':
      unit = 86400;
      break;
    case 'w':
      unit = 7 * 86400;
      break;
    default:
      return bad();
  }
  std::string_view digits = text.substr(0, text.size() - 1);
  int64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n <= 0 ||
      n > kMaxDuration / unit)
    return bad();
  return n * unit;
}

std::string FormatRetentionDuration(int64_t seconds) {
  if (seconds % 86400 == 0) return std::to_string(seconds / 86400) + "d";
  if (seconds % 3600 == 0) return std::to_string(seconds / 3600) + "h";
  if (seconds % 60 == 0) return std::to_string(seconds / 60) + "m";
  return std::to_string(seconds) + "s";
}

}  // namespace strata::backup
