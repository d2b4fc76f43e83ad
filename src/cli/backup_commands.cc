// Copyright 2026 The Strata Authors.
//
// strata backups ls / strata prune: the backup tier in an object store.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "backup/layout.h"
#include "backup/retention.h"
#include "cli/cli.h"
#include "storage/object_store.h"

namespace strata::cli {
namespace {

using json = nlohmann::json;

struct BackupArgs {
  std::string url;
  bool json = false;
  std::string hourly, daily, weekly, monthly, yearly;
  bool prefer_recent = false;
  bool do_delete = false;
  std::string incomplete_age;
};

// Prints `message` as one line and sets `code`.
void Fail(Context& ctx, const char* command, const std::string& message, int code) {
  ctx.err << "strata " << command << ": " << message << "\n";
  ctx.exit_code = code;
}

// Opens the store and lists it; on error reports it and returns nullptr.
std::unique_ptr<storage::ObjectStore> OpenAndList(Context& ctx, const char* command,
                                                  const std::string& url,
                                                  std::vector<backup::BackupSummary>* backups) {
  auto store = storage::OpenObjectStore(url);
  if (!store.ok()) {
    bool usage = store.status().code() == StatusCode::kInvalidArgument;
    Fail(ctx, command, store.status().message(), usage ? 2 : 1);
    return nullptr;
  }
  auto listed = backup::ListBackups(**store);
  if (!listed.ok()) {
    Fail(ctx, command, listed.status().message(), 1);
    return nullptr;
  }
  *backups = std::move(*listed);
  return std::move(*store);
}

std::string StepText(const backup::BackupSummary& b) {
  return b.step ? std::to_string(*b.step) : "-";
}

json SummaryJson(const backup::BackupSummary& b) {
  json j = {{"id", b.id_text},
            {"step", b.step ? json(*b.step) : json(nullptr)},
            {"bytes", b.bytes},
            {"objects", b.objects},
            {"complete", b.complete}};
  if (!b.problem.empty()) j["problem"] = b.problem;
  if (b.commit) {
    j["job"] = b.commit->job;
    j["nodes"] = b.commit->nodes;
    j["created"] = backup::FormatUtcTime(b.commit->created);
    j["committed"] = backup::FormatUtcTime(b.commit->committed);
    j["requested"] = b.commit->requested;
  }
  return j;
}

void BackupsLs(Context& ctx, const BackupArgs& args) {
  std::vector<backup::BackupSummary> backups;
  if (!OpenAndList(ctx, "backups ls", args.url, &backups)) return;
  if (args.json) {
    json rows = json::array();
    for (const auto& b : backups) rows.push_back(SummaryJson(b));
    ctx.out << rows.dump(2) << "\n";
    return;
  }
  ctx.out << fmt::format("{:<20}  {:>10}  {:>10}  {:>7}  {}\n", "ID", "STEP", "SIZE", "OBJECTS",
                         "STATE");
  for (const auto& b : backups) {
    std::string state = b.complete ? "complete" : "incomplete";
    if (b.commit && b.commit->requested) state += ", requested";
    if (!b.problem.empty()) state += " (" + b.problem + ")";
    ctx.out << fmt::format("{:<20}  {:>10}  {:>10}  {:>7}  {}\n", b.id_text, StepText(b),
                           HumanBytes(b.bytes), b.objects, state);
  }
}

// "--monthly 12" / "--monthly always" -> a policy count; 0 when absent.
StatusOr<int> ParseCount(const char* flag, const std::string& text, bool allow_always) {
  if (text.empty()) return 0;
  if (allow_always && text == "always") return backup::RetentionPolicy::kAlways;
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1) {
    return InvalidArgumentError(std::string(flag) + ": expected a positive count" +
                                (allow_always ? " or 'always'" : "") + ", got '" + text + "'");
  }
  return n;
}

StatusOr<backup::RetentionPolicy> PolicyFromArgs(const BackupArgs& a) {
  backup::RetentionPolicy p;
  STRATA_ASSIGN_OR_RETURN(p.hourly, ParseCount("--hourly", a.hourly, false));
  STRATA_ASSIGN_OR_RETURN(p.daily, ParseCount("--daily", a.daily, false));
  STRATA_ASSIGN_OR_RETURN(p.weekly, ParseCount("--weekly", a.weekly, false));
  STRATA_ASSIGN_OR_RETURN(p.monthly, ParseCount("--monthly", a.monthly, true));
  STRATA_ASSIGN_OR_RETURN(p.yearly, ParseCount("--yearly", a.yearly, true));
  p.prefer_recent = a.prefer_recent;
  if (!a.incomplete_age.empty()) {
    auto age = backup::ParseRetentionDuration(a.incomplete_age);
    if (!age.ok()) return age.status().WithContext("--delete-incomplete-older-than");
    p.delete_incomplete_after = *age;
  }
  STRATA_RETURN_IF_ERROR(backup::ValidateRetentionPolicy(p));
  return p;
}

// Deletes every object of backup `d.id`, the commit object first, so that a
// deletion cut short leaves an incomplete backup, never a complete one with
// parts missing. An incomplete backup that has been committed since the
// listing is left alone (*skipped).
Status DeleteBackup(storage::ObjectStore& store, const backup::BackupSummary& b, bool* skipped) {
  std::string commit_key = backup::CommitKey(b.id_text);
  STRATA_ASSIGN_OR_RETURN(std::vector<storage::ObjectInfo> objects, store.List(b.id_text + "/"));
  *skipped = false;
  if (!b.complete) {
    for (const auto& o : objects) *skipped |= o.key == commit_key;
    if (*skipped) return Status::Ok();
  }
  STRATA_RETURN_IF_ERROR(store.Delete(commit_key));
  for (const auto& o : objects) {
    if (o.key != commit_key) STRATA_RETURN_IF_ERROR(store.Delete(o.key));
  }
  return Status::Ok();
}

struct PruneTally {
  int kept = 0, to_delete = 0, deleted = 0, skipped = 0;
  uint64_t delete_bytes = 0;
};

// Prints one line per decision (or adds it to `rows`) and counts them.
// REQUIRES: decisions[i] is about backups[i].
PruneTally ReportDecisions(Context& ctx, const std::vector<backup::PruneDecision>& decisions,
                           const std::vector<backup::BackupSummary>& backups, json* rows) {
  PruneTally t;
  for (size_t i = 0; i < decisions.size(); ++i) {
    const auto& d = decisions[i];
    const auto& b = backups[i];
    d.keep ? ++t.kept : ++t.to_delete;
    if (!d.keep) t.delete_bytes += b.bytes;
    if (rows) {
      rows->push_back({{"id", d.id},
                       {"keep", d.keep},
                       {"reason", d.reason},
                       {"bytes", b.bytes},
                       {"step", b.step ? json(*b.step) : json(nullptr)}});
    } else {
      ctx.out << fmt::format("{:<6} {:<20} step {:<10} ({})\n", d.keep ? "keep" : "delete", d.id,
                             StepText(b), d.reason);
    }
  }
  return t;
}

// Deletes the backups decided against, in id order; stops at the first error.
Status DeleteDecided(Context& ctx, storage::ObjectStore& store,
                     const std::vector<backup::PruneDecision>& decisions,
                     const std::vector<backup::BackupSummary>& backups, json* rows, PruneTally* t) {
  for (size_t i = 0; i < decisions.size(); ++i) {
    if (decisions[i].keep) continue;
    bool skipped = false;
    STRATA_RETURN_IF_ERROR(DeleteBackup(store, backups[i], &skipped));
    skipped ? ++t->skipped : ++t->deleted;
    if (rows) (*rows)[i]["deleted"] = !skipped;
    if (skipped && !rows)
      ctx.out << "skipped " << decisions[i].id << ": committed since it was listed\n";
  }
  return Status::Ok();
}

void PrintSummary(Context& ctx, const BackupArgs& args, const PruneTally& t) {
  if (!args.do_delete) {
    ctx.out << fmt::format(
        "dry run: would keep {}, delete {} backups ({}); pass --delete to delete\n", t.kept,
        t.to_delete, HumanBytes(t.delete_bytes));
    return;
  }
  ctx.out << fmt::format("kept {}, deleted {} backups ({})", t.kept, t.deleted,
                         HumanBytes(t.delete_bytes));
  if (t.skipped) ctx.out << fmt::format(", skipped {}", t.skipped);
  ctx.out << "\n";
}

void Prune(Context& ctx, const BackupArgs& args) {
  auto policy = PolicyFromArgs(args);
  if (!policy.ok()) return Fail(ctx, "prune", policy.status().message(), 2);
  std::vector<backup::BackupSummary> backups;
  auto store = OpenAndList(ctx, "prune", args.url, &backups);
  if (!store) return;
  // ListBackups and DecidePrune both return id order: decisions[i] is backups[i].
  auto decisions = backup::DecidePrune(backups, *policy, std::time(nullptr));
  json rows = json::array();
  json* json_rows = args.json ? &rows : nullptr;
  PruneTally t = ReportDecisions(ctx, decisions, backups, json_rows);
  if (args.do_delete) {
    Status s = DeleteDecided(ctx, *store, decisions, backups, json_rows, &t);
    if (!s.ok()) return Fail(ctx, "prune", s.message(), 1);
  }
  if (!args.json) return PrintSummary(ctx, args, t);
  json j = {{"url", args.url}, {"delete", args.do_delete}, {"backups", std::move(rows)}};
  ctx.out << j.dump(2) << "\n";
}

}  // namespace

void RegisterBackupCommands(CLI::App& app, Context& ctx) {
  auto args = std::make_shared<BackupArgs>();

  CLI::App* backups = app.add_subcommand("backups", "Backups in an object store");
  backups->require_subcommand(1);
  CLI::App* ls = backups->add_subcommand("ls", "List the backups in an object store");
  ls->add_option("URL", args->url, "s3://bucket/prefix or file:///path")->required();
  ls->add_flag("--json", args->json, "Print JSON");
  ls->callback([&ctx, args] { BackupsLs(ctx, *args); });

  CLI::App* prune = app.add_subcommand(
      "prune", "Delete the backups no retention class keeps (a dry run unless --delete)");
  prune->add_option("URL", args->url, "s3://bucket/prefix or file:///path")->required();
  auto count_option = [prune](const char* name, std::string& field, const char* type,
                              const char* help) {
    prune->add_option(name, field, help)->type_name(type);
  };
  count_option("--hourly", args->hourly, "N", "Keep one backup in each of the newest N hours");
  count_option("--daily", args->daily, "N", "Keep one backup in each of the newest N days");
  count_option("--weekly", args->weekly, "N", "Keep one backup in each of the newest N ISO weeks");
  count_option("--monthly", args->monthly, "N|always",
               "Keep one backup in each of the newest N months, or of every month");
  count_option("--yearly", args->yearly, "N|always",
               "Keep one backup in each of the newest N years, or of every year");
  prune->add_flag("--prefer-recent", args->prefer_recent,
                  "Keep the newest backup of each period (default: the oldest)");
  prune->add_flag("--delete", args->do_delete, "Delete (default: only print what would happen)");
  prune
      ->add_option("--delete-incomplete-older-than", args->incomplete_age,
                   "Also delete incomplete backups begun longer ago than this (30m, 12h, 7d, 2w)")
      ->type_name("DURATION");
  prune->add_flag("--json", args->json, "Print JSON");
  prune->callback([&ctx, args] { Prune(ctx, *args); });
}

}  // namespace strata::cli
