// Copyright 2026 The Strata Authors.
//
// Engine benchmarks. Each one times a Strata operation and the plain system
// operation it should be compared with, in the same run on the same machine,
// prints both (median of --reps repetitions, after a warm-up) and then
//
//   ratio <name> <value> target <t>
//
//   stall         time Save() blocks the caller (async) / one memcpy of the
//                 same bytes into warm memory; lower is better
//   local_commit  bytes / (Save() + Wait()) on tmpfs, default options, steady
//                 state / throughput of /bin/cp of an equal file on the same
//                 tmpfs; higher is better
//   restore       verified RestoreInto() throughput / single-thread read() of
//                 the step's data files; higher is better
//   checksum      XXH3-64 throughput / memcpy throughput; reported only
//
// The state is 8 float32 tensors of varied sizes in one arena (so the memcpy
// baseline is a single call). Scratch space is <tmpfs>/strata-bench-<pid>,
// removed at exit. Baseline and Strata repetitions alternate, so drift in
// machine load affects both alike.
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.h"
#include "format/naming.h"
#include "strata/catalog.h"
#include "strata/checkpointer.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/thread_pool.h"

extern char** environ;

namespace strata {
namespace {

using bench::Clock;
using bench::kMiB;
using bench::PrintRatio;
using bench::PrintSamples;
using bench::Samples;
using bench::SecondsSince;

constexpr uint64_t kTmpfsMagic = 0x01021994;

struct Config {
  uint64_t bytes = 0;
  int reps = 0;
  std::string scratch;  // created by main, removed at exit
};

// An anonymous mapping advised to use huge pages and faulted in: the
// treatment the library gives its staging memory, so a copy into it measures
// bandwidth, not page faults.
class WarmBuffer {
 public:
  explicit WarmBuffer(size_t size) : size_(size) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "engine_bench: mmap of %zu bytes: %s\n", size, std::strerror(errno));
      std::exit(1);
    }
    ::madvise(p, size, MADV_HUGEPAGE);
    data_ = static_cast<std::byte*>(p);
    std::memset(data_, 0, size);
  }
  ~WarmBuffer() { ::munmap(data_, size_); }
  WarmBuffer(const WarmBuffer&) = delete;
  WarmBuffer& operator=(const WarmBuffer&) = delete;

  std::byte* data() const { return data_; }

 private:
  std::byte* data_;
  size_t size_;
};

// A model-like state: 8 float32 tensors, rows of 4 KiB, sized by these
// percentages of the total; the last one takes the remainder.
struct TensorSpec {
  const char* name;
  int percent;
};
constexpr TensorSpec kTensors[] = {
    {"embed.weight", 24},      {"layers.0.attn.qkv", 18}, {"layers.0.mlp.up", 14},
    {"layers.0.mlp.down", 12}, {"layers.1.attn.qkv", 10}, {"layers.1.mlp.up", 9},
    {"layers.1.mlp.down", 8},  {"lm_head.weight", 5},
};
constexpr int64_t kRowFloats = 1024;
constexpr uint64_t kRowBytes = kRowFloats * 4;

// Fills `p` with splitmix64 output: incompressible, and no zero pages.
void FillPseudoRandom(std::byte* p, uint64_t n) {
  uint64_t x = 0;
  for (uint64_t off = 0; off + 8 <= n; off += 8) {
    uint64_t z = (x += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    z ^= z >> 31;
    std::memcpy(p + off, &z, 8);
  }
}

class Model {
 public:
  // REQUIRES: bytes is a multiple of kRowBytes and at least 100 rows.
  explicit Model(uint64_t bytes) : bytes_(bytes), arena_(bytes) {
    FillPseudoRandom(arena_.data(), bytes);
    const uint64_t rows = bytes / kRowBytes;
    uint64_t used = 0;  // rows
    for (size_t i = 0; i < std::size(kTensors); ++i) {
      bool last = i + 1 == std::size(kTensors);
      uint64_t r = last ? rows - used : rows * static_cast<uint64_t>(kTensors[i].percent) / 100;
      items_.push_back({kTensors[i].name,
                        DType::kFloat32,
                        {static_cast<int64_t>(r), kRowFloats},
                        arena_.data() + used * kRowBytes,
                        r * kRowBytes});
      used += r;
    }
  }

  uint64_t bytes() const { return bytes_; }
  const std::byte* data() const { return arena_.data(); }
  const std::vector<Item>& items() const { return items_; }

  // Buffers for restoring this model into `base` (bytes() long), same layout.
  std::vector<MutableItem> Into(std::byte* base) const {
    std::vector<MutableItem> out;
    for (const Item& it : items_) {
      auto offset = static_cast<const std::byte*>(it.data) - arena_.data();
      out.push_back({it.name, it.dtype, it.shape, base + offset, it.size});
    }
    return out;
  }

 private:
  uint64_t bytes_;
  WarmBuffer arena_;
  std::vector<Item> items_;
};

CheckpointerOptions BenchOptions() {
  CheckpointerOptions o;
  o.preemption_signals = {};  // a benchmark installs no SIGTERM handler
  return o;
}

// One async save, waited for (outside any timed region of the caller).
Status SaveAndWait(Checkpointer* ckpt, int64_t step, const Model& model) {
  STRATA_RETURN_IF_ERROR(ckpt->Save(step, model.items()).status());
  return ckpt->Wait();
}

// --- stall ---

Status BenchStall(const Config& cfg, const Model& model) {
  std::printf("\n[stall] training thread blocked in async Save() vs one memcpy\n");
  WarmBuffer dst(cfg.bytes);
  STRATA_ASSIGN_OR_RETURN(auto ckpt,
                          Checkpointer::Open(JoinPath(cfg.scratch, "stall"), BenchOptions()));
  int64_t step = 0;
  // The first save allocates the staging memory; steady state starts after.
  for (int i = 0; i < 2; ++i) STRATA_RETURN_IF_ERROR(SaveAndWait(ckpt.get(), ++step, model));
  std::memcpy(dst.data(), model.data(), cfg.bytes);

  Samples copy, save;
  for (int r = 0; r < cfg.reps; ++r) {
    Clock::time_point t0 = Clock::now();
    std::memcpy(dst.data(), model.data(), cfg.bytes);
    copy.Add(SecondsSince(t0));
    t0 = Clock::now();
    auto saved = ckpt->Save(++step, model.items());
    save.Add(SecondsSince(t0));
    STRATA_RETURN_IF_ERROR(saved.status());
    STRATA_RETURN_IF_ERROR(ckpt->Wait());
  }
  PrintSamples("baseline: memcpy (1 thread)", copy, cfg.bytes);
  PrintSamples("strata: Save() blocked (async)", save, cfg.bytes);
  PrintRatio("stall", save.Median() / copy.Median(), "1.2", true);
  return Status::Ok();
}

// --- local_commit ---

Status WriteWholeFile(const std::string& path, const std::byte* data, uint64_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + path);
  for (uint64_t off = 0; off < n;) {
    ssize_t w = ::write(fd, data + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoToStatus(err, "write " + path);
    }
    off += static_cast<uint64_t>(w);
  }
  return ::close(fd) == 0 ? Status::Ok() : ErrnoToStatus(errno, "close " + path);
}

// Runs the real /bin/cp as a child process and waits for it.
Status RunCp(const std::string& from, const std::string& to) {
  std::string prog = "/bin/cp";
  std::vector<char*> argv = {prog.data(), const_cast<char*>(from.c_str()),
                             const_cast<char*>(to.c_str()), nullptr};
  pid_t pid;
  int err = ::posix_spawn(&pid, prog.c_str(), nullptr, nullptr, argv.data(), environ);
  if (err != 0) return ErrnoToStatus(err, "spawn " + prog);
  int wstatus;
  while (::waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, "wait for " + prog);
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return InternalError(prog + " " + from + " " + to + " failed (wait status " +
                         std::to_string(wstatus) + ")");
  }
  return Status::Ok();
}

Status RemovePath(const std::string& path) {
  return ::unlink(path.c_str()) == 0 ? Status::Ok() : ErrnoToStatus(errno, "unlink " + path);
}

Status BenchLocalCommit(const Config& cfg, const Model& model) {
  std::printf(
      "\n[local_commit] Save()+Wait() to committed on tmpfs vs /bin/cp of the same bytes\n");
  const std::string src = JoinPath(cfg.scratch, "cp-src.bin");
  const std::string dst = JoinPath(cfg.scratch, "cp-dst.bin");
  STRATA_RETURN_IF_ERROR(WriteWholeFile(src, model.data(), cfg.bytes));
  STRATA_ASSIGN_OR_RETURN(auto ckpt,
                          Checkpointer::Open(JoinPath(cfg.scratch, "commit"), BenchOptions()));
  int64_t step = 0;
  // max_to_keep (2) committed steps, then one more: from here on every save
  // recycles the files of the step it retires.
  for (int i = 0; i < 3; ++i) STRATA_RETURN_IF_ERROR(SaveAndWait(ckpt.get(), ++step, model));
  STRATA_RETURN_IF_ERROR(RunCp(src, dst));
  STRATA_RETURN_IF_ERROR(RemovePath(dst));

  Samples cp, commit, snapshot;
  for (int r = 0; r < cfg.reps; ++r) {
    Clock::time_point t0 = Clock::now();
    STRATA_RETURN_IF_ERROR(RunCp(src, dst));
    cp.Add(SecondsSince(t0));
    STRATA_RETURN_IF_ERROR(RemovePath(dst));
    t0 = Clock::now();
    auto saved = ckpt->Save(++step, model.items());
    snapshot.Add(SecondsSince(t0));
    Status waited = ckpt->Wait();
    commit.Add(SecondsSince(t0));
    STRATA_RETURN_IF_ERROR(saved.status());
    STRATA_RETURN_IF_ERROR(waited);
  }
  STRATA_RETURN_IF_ERROR(RemovePath(src));
  PrintSamples("baseline: /bin/cp (new file)", cp, cfg.bytes);
  PrintSamples("strata: Save()+Wait() (committed)", commit, cfg.bytes);
  PrintSamples("  of which Save() (snapshot)", snapshot, cfg.bytes);
  PrintRatio("local_commit", cp.Median() / commit.Median(), "1.5", false);
  return Status::Ok();
}

// --- restore ---

// Reads `paths` one after another into `dst` with read(), single thread.
Status ReadFiles(const std::vector<std::string>& paths, std::byte* dst) {
  for (const std::string& path : paths) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "open " + path);
    for (;;) {
      ssize_t n = ::read(fd, dst, 1ull << 30);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::close(fd);
        return ErrnoToStatus(err, "read " + path);
      }
      if (n == 0) break;
      dst += n;
    }
    ::close(fd);
  }
  return Status::Ok();
}

Status BenchRestore(const Config& cfg, const Model& model) {
  std::printf("\n[restore] verified RestoreInto() from tmpfs vs read() of the data files\n");
  const std::string dir = JoinPath(cfg.scratch, "restore");
  STRATA_ASSIGN_OR_RETURN(auto ckpt, Checkpointer::Open(dir, BenchOptions()));
  STRATA_RETURN_IF_ERROR(SaveAndWait(ckpt.get(), 1, model));
  STRATA_ASSIGN_OR_RETURN(StepInfo info, ReadStepInfo(dir, 1));
  const std::string step_dir = JoinPath(dir, StepDirName(1));
  std::vector<std::string> paths;
  for (const FileInfo& f : info.files) paths.push_back(JoinPath(step_dir, f.name));

  WarmBuffer buf(cfg.bytes);
  std::vector<MutableItem> into = model.Into(buf.data());
  STRATA_RETURN_IF_ERROR(ReadFiles(paths, buf.data()));
  STRATA_RETURN_IF_ERROR(ckpt->RestoreInto(into).status());

  Samples read, restore;
  for (int r = 0; r < cfg.reps; ++r) {
    Clock::time_point t0 = Clock::now();
    STRATA_RETURN_IF_ERROR(ReadFiles(paths, buf.data()));
    read.Add(SecondsSince(t0));
    t0 = Clock::now();
    auto restored = ckpt->RestoreInto(into);
    restore.Add(SecondsSince(t0));
    STRATA_RETURN_IF_ERROR(restored.status());
  }
  if (std::memcmp(buf.data(), model.data(), cfg.bytes) != 0) {
    return InternalError("restored state differs from the saved one");
  }
  std::printf("  step has %zu data files\n", info.files.size());
  PrintSamples("baseline: read() (1 thread)", read, cfg.bytes);
  PrintSamples("strata: RestoreInto() (verified)", restore, cfg.bytes);
  PrintRatio("restore", read.Median() / restore.Median(), "0.7", false);
  return Status::Ok();
}

// --- checksum ---

Status BenchChecksum(const Config& cfg, const Model& model) {
  std::printf("\n[checksum] XXH3-64 vs memcpy, one thread\n");
  WarmBuffer dst(cfg.bytes);
  volatile uint64_t sink = Xxh3(model.data(), cfg.bytes);
  std::memcpy(dst.data(), model.data(), cfg.bytes);

  Samples copy, hash;
  for (int r = 0; r < cfg.reps; ++r) {
    Clock::time_point t0 = Clock::now();
    std::memcpy(dst.data(), model.data(), cfg.bytes);
    copy.Add(SecondsSince(t0));
    t0 = Clock::now();
    sink = Xxh3(model.data(), cfg.bytes);
    hash.Add(SecondsSince(t0));
  }
  (void)sink;
  PrintSamples("baseline: memcpy", copy, cfg.bytes);
  PrintSamples("strata: Xxh3()", hash, cfg.bytes);
  PrintRatio("checksum", copy.Median() / hash.Median(), "", false);
  return Status::Ok();
}

struct Benchmark {
  const char* name;
  Status (*run)(const Config&, const Model&);
};
constexpr Benchmark kBenchmarks[] = {
    {"stall", BenchStall},
    {"local_commit", BenchLocalCommit},
    {"restore", BenchRestore},
    {"checksum", BenchChecksum},
};

std::string g_scratch;  // removed at exit when non-empty

void RemoveScratch() {
  if (g_scratch.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(g_scratch, ec);
}

bool OnTmpfs(const std::string& path) {
  struct statfs fs;
  return ::statfs(path.c_str(), &fs) == 0 && static_cast<uint64_t>(fs.f_type) == kTmpfsMagic;
}

// Runs the benchmarks named in `only` (all if empty); 0 if none failed.
int RunBenchmarks(const Config& cfg, const std::vector<std::string>& only) {
  std::error_code ec;
  std::filesystem::create_directories(cfg.scratch, ec);
  if (ec) {
    std::fprintf(stderr, "engine_bench: create %s: %s\n", cfg.scratch.c_str(),
                 ec.message().c_str());
    return 1;
  }
  g_scratch = cfg.scratch;
  std::atexit(RemoveScratch);
  Model model(cfg.bytes);
  std::printf(
      "engine_bench: state %llu MiB in %zu float32 tensors, %d reps (median, min, max), "
      "%d io threads, scratch %s%s\n",
      static_cast<unsigned long long>(cfg.bytes / kMiB), model.items().size(), cfg.reps,
      ThreadPool::DefaultThreads(), cfg.scratch.c_str(),
      OnTmpfs(cfg.scratch) ? " (tmpfs)" : " (NOT tmpfs)");
  std::fflush(stdout);
  int failed = 0;
  for (const Benchmark& b : kBenchmarks) {
    if (!only.empty() && std::find(only.begin(), only.end(), b.name) == only.end()) continue;
    Status s = b.run(cfg, model);
    if (!s.ok()) {
      std::fprintf(stderr, "engine_bench: %s: %s\n", b.name, s.message().c_str());
      ++failed;
    }
    std::filesystem::remove_all(cfg.scratch, ec);  // each benchmark starts from an empty scratch
    std::filesystem::create_directories(cfg.scratch, ec);
  }
  return failed == 0 ? 0 : 1;
}

int Main(int argc, char** argv) {
  CLI::App app("engine_bench: Strata engine throughput against plain system baselines");
  uint64_t size_mib = 512;
  int reps = 9;
  std::string tmpfs = "/dev/shm";
  std::vector<std::string> only;
  app.add_option("--size-mib", size_mib, "State size in MiB")
      ->envname("STRATA_BENCH_SIZE_MIB")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  app.add_option("--reps", reps, "Timed repetitions (the median is reported)")
      ->envname("STRATA_BENCH_REPS")
      ->capture_default_str()
      ->check(CLI::Range(5, 1000));
  app.add_option("--tmpfs", tmpfs, "Directory on a RAM file system for scratch files")
      ->envname("STRATA_BENCH_TMPFS")
      ->capture_default_str();
  app.add_option("benchmarks", only,
                 "Benchmarks to run (default all): stall local_commit restore checksum");
  CLI11_PARSE(app, argc, argv);
  for (const std::string& name : only) {
    if (std::none_of(std::begin(kBenchmarks), std::end(kBenchmarks),
                     [&](const Benchmark& b) { return name == b.name; })) {
      std::fprintf(stderr, "engine_bench: unknown benchmark \"%s\"\n", name.c_str());
      return 2;
    }
  }

  Config cfg;
  cfg.bytes = size_mib * kMiB;
  cfg.reps = reps;
  cfg.scratch = JoinPath(tmpfs, "strata-bench-" + std::to_string(::getpid()));
  return RunBenchmarks(cfg, only);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
