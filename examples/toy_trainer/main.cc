// Copyright 2026 The Strata Authors.
//
// toy-trainer: a deterministic training loop that uses libstrata the way a
// real trainer does. Its output lines are a contract the tests and the demo
// read:
//   fresh start | restored step=S
//   ondemand checkpoint step=S
//   final step=N digest=<16 hex digits>
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <thread>

#include "model.h"
#include "strata/checkpointer.h"
#include "strata/cuda.h"

namespace {

struct Flags {
  std::string dir;
  int64_t steps = 100;
  int64_t save_interval_steps = 0;
  double save_interval_seconds = 0;
  int state_mb = 64;
  int step_ms = 0;
  uint64_t seed = 1;
  int max_to_keep = 2;
  bool exit_after_ondemand = false;
  bool sync = false;
  bool stager = false;     // save through CudaStager: straight into the step's files
  std::string replicator;  // "", "orbax" or "nemo": talk to the node agent
  std::string poison;      // a file naming steps that make the trainer fail
  strata::AgentJob job;
};

void Say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// Restores the newest valid checkpoint into `model`; returns the first step
// to train, or -1 on an error that should stop the trainer.
int64_t RestoreOrStartFresh(strata::Checkpointer& ckpt, toy::Model& model) {
  auto into = model.MutableItems();
  auto restored = ckpt.RestoreInto(into);
  if (restored.ok()) {
    Say("restored step=" + std::to_string(*restored));
    return *restored + 1;
  }
  if (restored.status().code() == strata::StatusCode::kNotFound) {
    Say("fresh start");
    return 1;
  }
  std::fprintf(stderr, "toy-trainer: %s\n", restored.status().ToString().c_str());
  return -1;
}

// Whether `step` is poisoned by the file `path`: it lists steps, one per
// line, and a line "next" poisons the next step any trainer restores (the
// first to restore one records it in `path`.step, which wins races by
// O_EXCL). Stands for a checkpoint whose contents break every rank (NaNs, a
// bad data-loader state), so that tests can drive the supervisor's crash
// loop; with an empty `path` nothing is poisoned.
bool Poisoned(const std::string& path, int64_t step) {
  if (path.empty()) return false;
  std::ifstream in(path);
  bool next = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "next") next = true;
    if (line == std::to_string(step)) return true;
  }
  if (!next) return false;
  const std::string claim = path + ".step";
  int fd = ::open(claim.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    std::string text = std::to_string(step) + "\n";
    bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    return ok;
  }
  for (int i = 0; i < 100; ++i) {  // another trainer is writing its claim
    std::ifstream c(claim);
    std::string line;
    if (std::getline(c, line) && !line.empty()) return line == std::to_string(step);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Returns true when the trainer should exit now (after an on-demand save).
// With a stager the state is copied straight into the step's files (the
// path strata.torch and C++ trainers with GPUs take; here host buffers).
bool MaybeSave(strata::Checkpointer& ckpt, strata::CudaStager* stager, const toy::Model& model,
               int64_t step) {
  if (!ckpt.ShouldSave(step)) return false;
  auto items = model.Items();
  strata::StatusOr<strata::SaveResult> result = strata::SaveResult{};
  if (stager != nullptr) {
    std::vector<strata::DeviceItem> host;
    for (const strata::Item& it : items) {
      host.push_back({it.name, it.dtype, it.shape, it.data, it.size, -1, nullptr});
    }
    result = stager->Save(step, host);
  } else {
    result = ckpt.Save(step, items);
  }
  if (!result.ok()) {
    std::fprintf(stderr, "toy-trainer: save failed, training continues: %s\n",
                 result.status().ToString().c_str());
    return false;
  }
  if (result->on_demand) Say("ondemand checkpoint step=" + std::to_string(step));
  return result->should_exit;
}

int Run(const Flags& f) {
  strata::CheckpointerOptions opts;
  opts.save_interval_steps = f.save_interval_steps;
  opts.save_interval_seconds = f.save_interval_seconds;
  opts.max_to_keep = f.max_to_keep;
  opts.exit_after_ondemand = f.exit_after_ondemand;
  opts.async = !f.sync;
  if (!f.replicator.empty()) opts.agent_job = f.job;  // the agent decides what to restore
  auto ckpt = strata::Checkpointer::Open(f.dir, opts);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "toy-trainer: %s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<strata::CudaStager> stager;
  if (f.stager) {
    strata::CudaStagerOptions so;
    so.allow_host_only = true;
    auto opened = strata::CudaStager::Open(ckpt->get(), so);
    if (!opened.ok()) {
      std::fprintf(stderr, "toy-trainer: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    stager = std::move(*opened);
  }
  toy::Model model(f.seed, f.state_mb);
  int64_t first = RestoreOrStartFresh(**ckpt, model);
  if (first < 0) return 1;
  if (first > 1 && Poisoned(f.poison, first - 1)) {
    std::fprintf(stderr, "toy-trainer: step %" PRId64 " is poisoned (%s): exiting 1\n", first - 1,
                 f.poison.c_str());
    return 1;
  }
  for (int64_t step = first; step <= f.steps; ++step) {
    model.Train(step);
    if (f.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.step_ms));
    if (MaybeSave(**ckpt, stager.get(), model, step)) {
      return strata::kExitAfterOnDemand;  // not finished
    }
  }
  strata::Status s = (*ckpt)->Wait();
  if (!s.ok()) std::fprintf(stderr, "toy-trainer: last save failed: %s\n", s.ToString().c_str());
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016" PRIx64, model.Digest());
  Say("final step=" + std::to_string(model.step()) + " digest=" + digest);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  f.job.job = "toy";
  CLI::App app("toy-trainer: a deterministic trainer that checkpoints with libstrata");
  app.add_option("--dir", f.dir, "Checkpoint directory (the node's RAM disk)")->required();
  app.add_option("--steps", f.steps, "Train until this step")->capture_default_str();
  app.add_option("--save-interval-steps", f.save_interval_steps, "Save every K steps (0: off)")
      ->capture_default_str();
  app.add_option("--save-interval-seconds", f.save_interval_seconds,
                 "Save every S seconds (0: off)")
      ->capture_default_str();
  app.add_option("--state-mb", f.state_mb, "Size of the model state in MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--step-ms", f.step_ms, "Extra sleep per step, standing for accelerator time")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of the initial state and data")->capture_default_str();
  app.add_option("--max-to-keep", f.max_to_keep, "Checkpoints to keep (0: all)")
      ->capture_default_str();
  app.add_flag("--exit-after-ondemand", f.exit_after_ondemand,
               "Exit 75 (restart me) after the on-demand checkpoint that follows a notice");
  app.add_flag("--sync", f.sync, "Save synchronously (default: async)");
  app.add_flag("--stager", f.stager,
               "Save through CudaStager (host buffers): straight into the step's files");
  app.add_option("--replicator", f.replicator,
                 "Restore through the node agent, speaking the protocol like this client")
      ->check(CLI::IsMember({"orbax", "nemo"}));
  app.add_option("--job", f.job.job, "Job name (with --replicator)")->capture_default_str();
  app.add_option("--node-rank", f.job.node_rank, "This node's rank (with --replicator)");
  app.add_option("--nodes", f.job.nodes, "Number of nodes (with --replicator)");
  app.add_option("--peers-per-node", f.job.peers_per_node, "Peer copies (with --replicator)")
      ->capture_default_str();
  app.add_option("--redundancy", f.job.redundancy,
                 "The peer tier the yaml asks for: copies, xor(N), rs(K,M) (with --replicator)");
  app.add_option("--assume-data-parallelism", f.job.assume_data_parallelism,
                 "Identical data-parallel replicas (with --replicator)");
  app.add_option("--backup-interval-steps", f.job.backup_interval_steps,
                 "Ask the agent for a backup every K steps (with --replicator)");
  app.add_option("--backup-interval-minutes", f.job.backup_interval_minutes,
                 "Ask the agent for a backup every M minutes (with --replicator)");
  app.add_option("--poison", f.poison,
                 "Exit 1 after restoring a step this file names (\"next\": the next one "
                 "restored); for crash-loop tests");
  CLI11_PARSE(app, argc, argv);
  f.job.style = f.replicator;
  return Run(f);
}
