// Copyright 2026 The Strata Authors.
//
// CudaStager (include/strata/cuda.h) against the hardware's limit, measured
// in the same run on the same GPU: a state of --tensors device buffers
// (--size-mib in all) is
//
//   pinned D2H / H2D   copied device<->host into one page-locked buffer with
//                      cudaMemcpyAsync, one call per buffer (the limit)
//   pageable D2H       the same into ordinary memory (what a naive copy pays)
//   blocking save      CudaStager::Save(kBlocking): until the copies are done
//   committed          the same, then Checkpointer::Wait(): until the step is
//                      checksummed and committed on the RAM disk
//   overlapped save    CudaStager::Save(kOverlapped): until it returns
//   step cost          what an overlapped save adds to a training step whose
//                      "forward/backward" (device-to-device copies on the
//                      trainer's stream, sized to outlast the D2H copy) is
//                      followed by OrderAfterStaging and an "update" (memset)
//   restore            CudaStager::RestoreInto from the RAM disk, verified: in
//                      the process that saved, and after a restart (the
//                      first of a checkpointer opened anew, whose step files
//                      nobody page-locked)
//   page-locking       cudaHostRegister of the newest step's data files,
//                      mapped shared and already in the RAM disk's pages
//                      (nothing read or written): what a restarted job
//                      would pay to copy straight from them rather than
//                      through page-locked bounce chunks
//
// and prints `ratio <name> <value> target <t>` lines with the targets of
// docs/performance.md ("C++ trainers on GPU"). The checkpoint directory is on
// tmpfs (--dir, default /dev/shm/strata-cuda-bench-<pid>, removed at exit).
// Without a CUDA runtime or device it says so and exits 0.
//
// Usage: cuda_bench [--size-mib 4096] [--tensors 64] [--reps 5] [--dir D]
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "engine/cuda_runtime.h"
#include "format/naming.h"
#include "strata/checkpointer.h"
#include "strata/cuda.h"

namespace strata {
namespace {

using bench::Clock;
using bench::kMiB;
using bench::PrintRatio;
using bench::PrintSamples;
using bench::Samples;
using bench::SecondsSince;

struct Args {
  uint64_t size_mib = 4096;
  int tensors = 64;
  int reps = 5;
  std::string dir;
};

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--size-mib") {
      a->size_mib = std::strtoull(v, nullptr, 10);
    } else if (flag == "--tensors") {
      a->tensors = std::atoi(v);
    } else if (flag == "--reps") {
      a->reps = std::atoi(v);
    } else if (flag == "--dir") {
      a->dir = v;
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && a->size_mib > 0 && a->tensors > 0 && a->reps > 0;
}

#define CUDA_OK(call)                                        \
  do {                                                       \
    if (int e = (call); e != 0) Die(rt.Check(e, #call, "")); \
  } while (0)

// The checkpoint directory once made: removed on every exit, a failed
// run's too (a RAM disk keeps what is left behind).
std::string scratch_dir;

void Die(const Status& s) {
  std::fprintf(stderr, "cuda_bench: %s\n", s.ToString().c_str());
  if (!scratch_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_dir, ignored);
  }
  std::exit(1);
}

// Seconds to page-lock the data files of step `step` in `dir`, each mapped
// shared (as the engine maps a slot), `reps` times; each is unlocked and
// unmapped after its timing.
Samples PageLockStepFiles(const cuda::Runtime& rt, const std::string& dir, int64_t step, int reps) {
  std::vector<std::pair<void*, size_t>> maps;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/" + StepDirName(step))) {
    const size_t n = e.is_regular_file() ? e.file_size() : 0;
    if (e.path().filename() == kManifestFileName || n == 0) continue;
    const int fd = ::open(e.path().c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) Die(ErrnoToStatus(errno, "opening " + e.path().string()));
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) Die(ErrnoToStatus(errno, "mapping " + e.path().string()));
    maps.emplace_back(p, n);
  }
  Samples locked;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    for (auto [p, n] : maps) CUDA_OK(rt.cudaHostRegister(p, n, cuda::kHostRegisterPortable));
    locked.Add(SecondsSince(start));
    for (auto [p, n] : maps) CUDA_OK(rt.cudaHostUnregister(p));
  }
  for (auto [p, n] : maps) ::munmap(p, n);
  return locked;
}

// Median seconds of `reps` runs of `op` after one warm-up; `before` runs
// untimed ahead of each.
template <typename Op, typename Before>
Samples Time(int reps, Op op, Before before) {
  Samples s;
  for (int i = 0; i <= reps; ++i) {
    before();
    const auto start = Clock::now();
    op();
    if (i > 0) s.Add(SecondsSince(start));
  }
  return s;
}

int Run(const Args& args) {
  auto loaded = cuda::Runtime::Load();
  if (!loaded.ok()) {
    std::printf("cuda_bench: %s; nothing to measure here\n", loaded.status().ToString().c_str());
    return 0;
  }
  const cuda::Runtime& rt = **loaded;
  int devices = 0;
  if (int e = rt.cudaGetDeviceCount(&devices); e != 0 || devices == 0) {
    std::printf("cuda_bench: no CUDA device (%s); nothing to measure here\n",
                rt.Check(e, "cudaGetDeviceCount", "").ToString().c_str());
    return 0;
  }
  const uint64_t per = (args.size_mib * kMiB / args.tensors + 255) & ~uint64_t{255};
  const uint64_t total = per * args.tensors;
  std::printf("cuda_bench: %d tensors of %.1f MiB (%.2f GB) on device 0, %d reps\n", args.tensors,
              static_cast<double>(per) / kMiB, static_cast<double>(total) / 1e9, args.reps);
  CUDA_OK(rt.cudaSetDevice(0));
  cuda::Stream stream = nullptr;
  CUDA_OK(rt.cudaStreamCreateWithFlags(&stream, cuda::kStreamNonBlocking));
  std::vector<void*> state(args.tensors);
  for (int i = 0; i < args.tensors; ++i) {
    CUDA_OK(rt.cudaMalloc(&state[i], per));
    CUDA_OK(rt.cudaMemsetAsync(state[i], i * 37 + 1, per, stream));
  }
  // The trainer's "forward/backward": device-to-device copies of the state.
  void* scratch = nullptr;
  CUDA_OK(rt.cudaMalloc(&scratch, per));
  void* pinned = nullptr;
  CUDA_OK(rt.cudaHostAlloc(&pinned, total, cuda::kHostAllocPortable));
  std::vector<std::byte> pageable(total);
  CUDA_OK(rt.cudaStreamSynchronize(stream));

  auto copy_all = [&](std::byte* host, int kind) {
    for (int i = 0; i < args.tensors; ++i) {
      std::byte* h = host + uint64_t(i) * per;
      if (kind == cuda::kMemcpyDeviceToHost) {
        CUDA_OK(rt.cudaMemcpyAsync(h, state[i], per, kind, stream));
      } else {
        CUDA_OK(rt.cudaMemcpyAsync(state[i], h, per, kind, stream));
      }
    }
    CUDA_OK(rt.cudaStreamSynchronize(stream));
  };
  auto none = [] {};
  auto* pin = static_cast<std::byte*>(pinned);
  Samples d2h = Time(
      args.reps, [&] { copy_all(pin, cuda::kMemcpyDeviceToHost); }, none);
  Samples h2d = Time(
      args.reps, [&] { copy_all(pin, cuda::kMemcpyHostToDevice); }, none);
  Samples slow = Time(
      1, [&] { copy_all(pageable.data(), cuda::kMemcpyDeviceToHost); }, none);
  std::printf("\n[limits]\n");
  PrintSamples("pinned D2H copy of the state", d2h, total);
  PrintSamples("pinned H2D copy of the state", h2d, total);
  PrintSamples("pageable D2H copy of the state", slow, total);

  const std::string dir =
      args.dir.empty() ? "/dev/shm/strata-cuda-bench-" + std::to_string(::getpid()) : args.dir;
  std::filesystem::remove_all(dir);
  scratch_dir = dir;
  CheckpointerOptions options;
  options.preemption_signals = {};
  options.max_to_keep = 2;
  auto ckpt = Checkpointer::Open(dir, options);
  if (!ckpt.ok()) Die(ckpt.status());
  auto opened = CudaStager::Open(ckpt->get());
  if (!opened.ok()) Die(opened.status());
  CudaStager& stager = **opened;
  std::vector<DeviceItem> items;
  std::vector<MutableDeviceItem> into;
  for (int i = 0; i < args.tensors; ++i) {
    const std::string name = "t" + std::to_string(i);
    const std::vector<int64_t> shape = {static_cast<int64_t>(per / 4)};
    items.push_back({name, DType::kFloat32, shape, state[i], per, 0, stream});
    into.push_back({name, DType::kFloat32, shape, state[i], per, 0, stream});
  }
  int64_t step = 0;
  auto save = [&](DeviceSaveMode mode) {
    auto r = stager.Save(++step, items, mode);
    if (!r.ok()) Die(r.status());
  };
  auto settle = [&] {
    if (Status s = stager.WaitStaged(); !s.ok()) Die(s);
    if (Status s = (*ckpt)->Wait(); !s.ok()) Die(s);
  };
  Samples blocking = Time(
      args.reps, [&] { save(DeviceSaveMode::kBlocking); }, settle);
  Samples committed = Time(
      args.reps,
      [&] {
        save(DeviceSaveMode::kBlocking);
        if (Status s = (*ckpt)->Wait(); !s.ok()) Die(s);
      },
      settle);
  Samples overlapped = Time(
      args.reps, [&] { save(DeviceSaveMode::kOverlapped); }, settle);
  settle();

  // A training step: "forward/backward" sized to outlast the D2H copy,
  // then the "update" ordered after the staging copies.
  const double d2h_s = d2h.Median();
  int passes = 1;
  auto forward_backward = [&](int n) {
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < args.tensors; ++i) {
        CUDA_OK(rt.cudaMemcpyAsync(scratch, state[i], per, 3 /* DeviceToDevice */, stream));
      }
    }
  };
  auto update = [&] {
    for (int i = 0; i < args.tensors; ++i) CUDA_OK(rt.cudaMemsetAsync(state[i], 7, 256, stream));
  };
  for (;; passes *= 2) {
    const auto start = Clock::now();
    forward_backward(passes);
    CUDA_OK(rt.cudaStreamSynchronize(stream));
    if (SecondsSince(start) >= 1.1 * d2h_s || passes >= 1 << 12) break;
  }
  auto train_step = [&](bool with_save) {
    if (with_save) save(DeviceSaveMode::kOverlapped);
    forward_backward(passes);
    if (Status s = stager.OrderAfterStaging(stream, 0); !s.ok()) Die(s);
    update();
    CUDA_OK(rt.cudaStreamSynchronize(stream));
  };
  Samples plain = Time(
      args.reps, [&] { train_step(false); }, settle);
  Samples saving = Time(
      args.reps, [&] { train_step(true); }, settle);
  settle();
  Samples restore = Time(
      args.reps,
      [&] {
        auto r = stager.RestoreInto(into);
        if (!r.ok()) Die(r.status());
      },
      none);

  // The bench also proves the restore right: the buffers hold the newest
  // step's bytes as its files do.
  copy_all(pin, cuda::kMemcpyDeviceToHost);
  auto newest = RestoreStep(dir, step);
  if (!newest.ok()) Die(newest.status());
  for (int i = 0; i < args.tensors; ++i) {
    const RestoredItem* item = newest->Find("t" + std::to_string(i));
    if (item == nullptr || item->data.size() != per ||
        std::memcmp(item->data.data(), pin + uint64_t(i) * per, per) != 0) {
      Die(DataLossError("restored tensor t" + std::to_string(i) + " differs from step " +
                        std::to_string(step) + " in " + dir));
    }
  }

  const CudaStagerStatus held = stager.status();

  // The restore of a restarted job: the first of a checkpointer opened anew
  // over the directory, whose step files nobody page-locked.
  Samples restarted;
  for (int r = 0; r < args.reps; ++r) {
    opened->reset();
    ckpt->reset();
    ckpt = Checkpointer::Open(dir, options);
    if (!ckpt.ok()) Die(ckpt.status());
    CudaStagerOptions fresh;
    fresh.reserve_after_restore = false;  // nothing page-locked beside the timed restores
    opened = CudaStager::Open(ckpt->get(), fresh);
    if (!opened.ok()) Die(opened.status());
    const auto start = Clock::now();
    auto restored = (*opened)->RestoreInto(into);
    if (!restored.ok()) Die(restored.status());
    restarted.Add(SecondsSince(start));
  }

  const Samples page_lock = PageLockStepFiles(rt, dir, step, args.reps);

  std::printf("\n[strata]\n");
  PrintSamples("blocking save (returns)", blocking, total);
  PrintSamples("blocking save, committed", committed, total);
  PrintSamples("overlapped save (returns)", overlapped, 0);
  PrintSamples("training step", plain, 0);
  PrintSamples("training step with an overlapped save", saving, 0);
  PrintSamples("restore into the device buffers", restore, total);
  PrintSamples("restore after a restart", restarted, total);
  PrintSamples("page-locking the newest step's files", page_lock, total);
  const double cost = std::max(0.0, saving.Median() - plain.Median());
  std::printf("  staging memory %.0f MiB, pinned=%d\n",
              static_cast<double>(held.staging_bytes) / kMiB, held.staging_pinned ? 1 : 0);
  std::printf("\n");
  PrintRatio("cuda_save_blocking_vs_pinned_d2h", blocking.Median() / d2h_s, "1.25", true);
  PrintRatio("cuda_save_committed_vs_pinned_d2h", committed.Median() / d2h_s, "2.0", true);
  PrintRatio("cuda_save_overlapped_vs_pinned_d2h", overlapped.Median() / d2h_s, "0.2", true);
  PrintRatio("cuda_overlapped_step_cost_vs_pinned_d2h", cost / d2h_s, "0.2", true);
  PrintRatio("cuda_restore_vs_pinned_h2d", restore.Median() / h2d.Median(), "2.0", true);
  PrintRatio("cuda_restore_after_restart_vs_pinned_h2d", restarted.Median() / h2d.Median(), "2.0",
             true);
  PrintRatio("cuda_pageable_d2h_vs_pinned_d2h", slow.Median() / d2h_s, "");
  PrintRatio("cuda_page_lock_step_files_vs_pinned_h2d", page_lock.Median() / h2d.Median(), "");
  opened->reset();
  ckpt->reset();
  std::filesystem::remove_all(dir);
  for (void* p : state) rt.cudaFree(p);
  rt.cudaFree(scratch);
  rt.cudaFreeHost(pinned);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::Args args;
  if (!strata::Parse(argc, argv, &args)) {
    std::fprintf(stderr, "usage: cuda_bench [--size-mib N] [--tensors N] [--reps N] [--dir D]\n");
    return 2;
  }
  return strata::Run(args);
}
