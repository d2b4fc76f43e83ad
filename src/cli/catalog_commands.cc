// Copyright 2026 The Strata Authors.
//
// strata ls / verify / inspect: read-only views of a checkpoint directory.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/cli.h"
#include "format/manifest.h"
#include "strata/catalog.h"
#include "util/hash.h"
#include "util/time_format.h"

namespace strata::cli {
namespace {

using json = nlohmann::json;

json ItemJson(const ItemInfo& it, bool with_chunks) {
  json j = {{"name", it.name},
            {"dtype", DTypeName(it.dtype)},
            {"shape", it.shape},
            {"nbytes", it.nbytes},
            {"file", it.file},
            {"offset", it.offset},
            {"chunks", it.chunk_xxh3.size()}};
  if (with_chunks) {
    json c = json::array();
    for (uint64_t h : it.chunk_xxh3) c.push_back(Hex64(h));
    j["chunk_xxh3"] = std::move(c);
  }
  return j;
}

json StepJson(const StepInfo& info, bool with_items) {
  json j = {{"step", info.step},
            {"format_version", info.format_version},
            {"created", Rfc3339(info.created_unix_ms)},
            {"bytes", info.total_bytes()},
            {"items", info.items.size()},
            {"chunk_size", info.chunk_size},
            {"digest", Hex64(info.ContentDigest())}};
  if (with_items) {
    json items = json::array();
    for (const auto& it : info.items) items.push_back(ItemJson(it, true));
    j["items"] = std::move(items);
    json files = json::array();
    for (const auto& f : info.files) files.push_back({{"name", f.name}, {"size", f.size}});
    j["files"] = std::move(files);
  }
  return j;
}

void Ls(Context& ctx, const std::string& dir, bool as_json) {
  auto steps = ListSteps(dir);
  if (!steps.ok()) {
    ctx.err << "strata ls: " << steps.status().message() << "\n";
    ctx.exit_code = 1;
    return;
  }
  json rows = json::array();
  if (!as_json)
    ctx.out << fmt::format("{:>12}  {:>10}  {:>6}  {:<20}  {}\n", "STEP", "SIZE", "ITEMS",
                           "CREATED", "DIGEST");
  for (int64_t step : *steps) {
    auto info = ReadStepInfo(dir, step);
    if (!info.ok()) {
      if (as_json)
        rows.push_back({{"step", step}, {"error", info.status().message()}});
      else
        ctx.out << fmt::format("{:>12}  unreadable: {}\n", step, info.status().message());
      continue;
    }
    if (as_json) {
      rows.push_back(StepJson(*info, false));
    } else {
      ctx.out << fmt::format("{:>12}  {:>10}  {:>6}  {:<20}  {}\n", step,
                             HumanBytes(info->total_bytes()), info->items.size(),
                             Rfc3339(info->created_unix_ms), Hex64(info->ContentDigest()));
    }
  }
  if (as_json) ctx.out << rows.dump(2) << "\n";
}

// Verifies one step; prints its verdict. Returns true iff it verifies.
bool VerifyOne(Context& ctx, const std::string& dir, int64_t step, int threads, json* rows) {
  auto report = VerifyStep(dir, step, threads);
  json row = {{"step", step}};
  bool ok = report.ok() && report->ok();
  if (!report.ok()) {
    row["problems"] = json::array({report.status().message()});
    if (!rows) ctx.out << "step " << step << ": FAILED: " << report.status().message() << "\n";
  } else if (!ok) {
    json problems = json::array();
    for (const auto& p : report->problems) {
      problems.push_back(p.message);
      if (!rows) ctx.out << "step " << step << ": CORRUPT: " << p.message << "\n";
    }
    row["problems"] = std::move(problems);
  } else if (!rows) {
    ctx.out << "step " << step << ": OK (" << HumanBytes(report->bytes_verified) << " verified)\n";
  }
  row["ok"] = ok;
  if (rows) rows->push_back(std::move(row));
  return ok;
}

void Verify(Context& ctx, const std::string& dir, std::optional<int64_t> step, int threads,
            bool as_json) {
  std::vector<int64_t> steps;
  if (step) {
    steps.push_back(*step);
  } else {
    auto listed = ListSteps(dir);
    if (!listed.ok()) {
      ctx.err << "strata verify: " << listed.status().message() << "\n";
      ctx.exit_code = 1;
      return;
    }
    steps = *listed;
  }
  if (steps.empty()) {
    ctx.err << "strata verify: no checkpoint in " << dir << "\n";
    ctx.exit_code = 1;
    return;
  }
  json rows = json::array();
  bool all_ok = true;
  for (int64_t s : steps) all_ok &= VerifyOne(ctx, dir, s, threads, as_json ? &rows : nullptr);
  if (as_json) ctx.out << rows.dump(2) << "\n";
  ctx.exit_code = all_ok ? 0 : 1;
}

void Inspect(Context& ctx, const std::string& dir, int64_t step, bool as_json) {
  auto info = ReadStepInfo(dir, step);
  if (!info.ok()) {
    ctx.err << "strata inspect: " << info.status().message() << "\n";
    ctx.exit_code = 1;
    return;
  }
  if (as_json) {
    ctx.out << StepJson(*info, true).dump(2) << "\n";
    return;
  }
  ctx.out << fmt::format("step {}  format v{}  created {}  {} in {} items  chunk {}  digest {}\n",
                         info->step, info->format_version, Rfc3339(info->created_unix_ms),
                         HumanBytes(info->total_bytes()), info->items.size(),
                         HumanBytes(info->chunk_size), Hex64(info->ContentDigest()));
  for (const auto& f : info->files)
    ctx.out << fmt::format("  file {}  {}\n", f.name, HumanBytes(f.size));
  ctx.out << fmt::format("  {:<32} {:<9} {:<20} {:>10} {:>15} {:>6}\n", "ITEM", "DTYPE", "SHAPE",
                         "BYTES", "FILE:OFFSET", "CHUNKS");
  for (const auto& it : info->items) {
    ctx.out << fmt::format("  {:<32} {:<9} {:<20} {:>10} {:>15} {:>6}\n", it.name,
                           DTypeName(it.dtype), ShapeString(it.shape), it.nbytes,
                           fmt::format("{}:{}", it.file, it.offset), it.chunk_xxh3.size());
  }
}

}  // namespace

void RegisterCatalogCommands(CLI::App& app, Context& ctx) {
  struct Args {
    std::string dir;
    std::optional<int64_t> step;
    int64_t inspect_step = 0;
    int threads = 0;
    bool json = false;
  };
  auto args = std::make_shared<Args>();

  CLI::App* ls = app.add_subcommand("ls", "List the committed steps in a checkpoint directory");
  ls->add_option("DIR", args->dir, "Checkpoint directory")->required();
  ls->add_flag("--json", args->json, "Print JSON");
  ls->callback([&ctx, args] { Ls(ctx, args->dir, args->json); });

  CLI::App* verify = app.add_subcommand(
      "verify",
      "Check every byte of every step (or one) against its checksums; exit 0 iff all verify");
  verify->add_option("DIR", args->dir, "Checkpoint directory")->required();
  verify->add_option("--step", args->step, "Verify only this step");
  verify->add_option("--threads", args->threads, "Reader threads (default: one per CPU)");
  verify->add_flag("--json", args->json, "Print JSON");
  verify->callback([&ctx, args] { Verify(ctx, args->dir, args->step, args->threads, args->json); });

  CLI::App* inspect =
      app.add_subcommand("inspect", "Show a step's manifest: items, dtypes, shapes, layout");
  inspect->add_option("DIR", args->dir, "Checkpoint directory")->required();
  inspect->add_option("--step", args->inspect_step, "Step to inspect")->required();
  inspect->add_flag("--json", args->json, "Print JSON, including every chunk checksum");
  inspect->callback([&ctx, args] { Inspect(ctx, args->dir, args->inspect_step, args->json); });
}

}  // namespace strata::cli
